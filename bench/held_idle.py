"""The periodic work of a node holding idle streams, per online period.

A node on a Clock (``pushengine.app.service.Node``) holds ``--sessions``
sessions over ``--keys`` view keys, each with a stream attached (a stand-in
delivery that holds its session, as SSE and WebSocket do), with the session
registry in process (``--redis``'s semantics, no Redis) and the online
counters in the in-process cache. Its timer (``Api.touch_streams``, every
``min(10, period / 2)`` s) then runs for ``--periods`` periods; printed: the
process CPU it took per period (``time.process_time``), and the registry
and cache operations per period.

    python bench/held_idle.py [--sessions 20000] [--keys 10] [--periods 3]

Run it against two versions of the engine (a checkout each) to compare
them; the in-process registry and cache make the CPU a lower bound (no
Redis or memcached round trips), the operation counts say what those would
have been.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from twisted.internet.task import Clock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pushengine.app.service import Node  # noqa: E402
from pushengine.app.tap import Options  # noqa: E402
from pushengine.cluster import build_cluster, registry_ttl  # noqa: E402
from pushengine.cluster.memory import MemoryRegistry, SharedTable  # noqa: E402
from pushengine.memcache import InMemoryCache  # noqa: E402

PERIOD = 60.0
TICK = 10.0


class Held:
    """A stream's delivery, idle."""
    holds_session = True

    def notify(self, session: Any) -> None:
        pass

    def close(self) -> None:
        pass


class IdleNode(Node):
    def __init__(self, clock: Clock, sessions: int) -> None:
        self.table = SharedTable(clock)
        o = Options(environ={})
        o.parseOptions(["--node-id", "idle", "--client-rate", "0", "--max-client-sessions", "0",
                        "--online-period", str(PERIOD), "--max-sessions", str(sessions + 10)])
        super().__init__(o, clock)
        self.online.cache = InMemoryCache(clock)

    def _cluster(self) -> Any:
        settings = self.engine.sessions.settings
        ttl = registry_ttl(settings.session_timeout, settings.max_timeout, TICK)
        self.registry = MemoryRegistry(self.table, "idle", ttl)
        self.sources["redis"] = self.registry
        return build_cluster(self.registry, self.engine, self.online, self.reactor, TICK)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=20000)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--periods", type=int, default=3)
    args = parser.parse_args()
    clock = Clock()
    clock.advance(1_700_000_000 - 1_700_000_000 % PERIOD + 5)
    node = IdleNode(clock, args.sessions)
    api = node.api
    for i in range(args.sessions):
        sid = api.session_create()
        sid = getattr(sid, "result", sid)
        api.session_subscribe(sid, "PublicLiveStreamView", {}, 1 + i % args.keys)
        api.stream(sid, Held(), None)
    clock.advance(PERIOD)                      # past the writes of the set-up
    counters = node.registry.counters
    before = dict(counters)
    cache_ops = node.online.cache
    spent = 0.0
    for _ in range(args.periods):
        for _ in range(int(PERIOD / TICK)):
            start = time.process_time()
            api.touch_streams()
            spent += time.process_time() - start
            clock.advance(TICK)
    per = spent / args.periods
    ops = {k: (counters[k] - before[k]) / args.periods for k in ("writes", "refreshes")}
    print(f"{args.sessions} idle streams, {args.keys} view keys: "
          f"{per * 1000:.1f} ms CPU per {PERIOD:.0f} s period "
          f"({per / PERIOD * 100:.3f} % of a core); registry per period: "
          f"{ops['writes']:.0f} writes, {ops['refreshes']:.0f} refreshes; "
          f"{len(cache_ops._items)} cache keys")


if __name__ == "__main__":
    main()
