"""Benchmark of the engine core, in process (no HTTP).

    python bench/core_routing.py [--users 100000] [--changes 50000]

1. changes routed per second with N per-user views (one session each);
2. changes routed per second with 1,000 shared word views (10 sessions each);
3. get_events answers per second through the JSON-RPC dispatcher with events
   waiting (no HTTP: bench/http_roundtrip.py measures the HTTP cost);
4. memory per idle session subscribed to one view.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from twisted.internet import reactor  # noqa: E402  (never run: a heap of timers)

from pushengine.api.methods import Api  # noqa: E402
from pushengine.api.auth import TokenVerifier  # noqa: E402
from pushengine.core.changes import Change  # noqa: E402
from pushengine.app.engine import build_engine
from pushengine.core.engine import Engine  # noqa: E402
from pushengine.memcache import InMemoryCache  # noqa: E402
from pushengine.memcache.online import OnlineCounter  # noqa: E402
from pushengine.api.rpc import Dispatcher  # noqa: E402
from pushengine.core.sessions import SessionSettings  # noqa: E402
from pushengine.stores.memory import MemoryStore  # noqa: E402
from pushengine.transports.longpoll import LongPolling  # noqa: E402
from pushengine.views.spec import load_catalog  # noqa: E402

WORDS = [f"word{i}" for i in range(1000)]


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def new_engine(**settings) -> Engine:
    catalog = load_catalog()
    return build_engine(reactor, catalog, MemoryStore(catalog.id_fields),
                  SessionSettings(max_queue=10_000_000, **settings))


def subscribe(engine: Engine, view: str, params: dict, limit=None):
    s = engine.sessions.create()
    bound = engine.catalog.views[view].bind(params, None, limit)
    engine.sessions.subscribe(s, bound)
    return s


def stream(i: int, user: int, title: str = "a title") -> dict:
    return {"id": i, "title": title, "user_id": user, "live": True, "public": True,
            "created_at": f"2026-11-30T{i % 24:02d}:00:00Z", "viewers": i % 100}


def route(engine: Engine, batch: list[Change]) -> tuple[float, int]:
    """Apply the changes one message at a time: (seconds taken, events queued)."""
    t0 = time.perf_counter()
    for c in batch:
        engine.apply_changes([c])
    elapsed = time.perf_counter() - t0
    return elapsed, sum(s.log.pending for s in engine.sessions.sessions.values())


def bench_per_user(users: int, changes: int) -> dict:
    engine = new_engine()
    gc.collect()
    before = rss_kib()
    t0 = time.perf_counter()
    for u in range(users):
        subscribe(engine, "UserStreamView", {"user_id": u})
    setup = time.perf_counter() - t0
    gc.collect()
    per_session = (rss_kib() - before) * 1024 / users
    rng = random.Random(1)
    batch = [Change("Stream", "upsert", i, stream(i, rng.randrange(users)))
             for i in range(changes)]
    elapsed, queued = route(engine, batch)
    return {"scenario": f"{users} per-user views", "changes/s": changes / elapsed,
            "events queued": queued, "subscribe/s": users / setup,
            "bytes per idle session+view": per_session}


def bench_shared(views: int, per_view: int, changes: int) -> dict:
    engine = new_engine()
    for w in WORDS[:views]:
        for _ in range(per_view):
            subscribe(engine, "WordStreamView", {"word": w})
    rng = random.Random(2)
    batch = [Change("Stream", "upsert", i,
                    stream(i, 1, " ".join(rng.sample(WORDS[:views], 3))))
             for i in range(changes)]
    elapsed, queued = route(engine, batch)
    return {"scenario": f"{views} word views x {per_view} sessions",
            "changes/s": changes / elapsed, "events queued": queued,
            "events/s": queued / elapsed}


def bench_get_events(rounds: int, waiting: int) -> dict:
    engine = new_engine()
    api = Api(engine, TokenVerifier(None), OnlineCounter(InMemoryCache(reactor), reactor),
              poller=LongPolling(engine.sessions, reactor))
    dispatcher = Dispatcher(api.methods())
    s = subscribe(engine, "PublicLiveStreamView", {}, 50)
    engine.apply_changes([Change("Stream", "upsert", i, stream(i, 1)) for i in range(waiting)])
    body = json.dumps({"jsonrpc": "2.0", "method": "session.get_events",
                       "params": [s.id, 0, 0], "id": 1}).encode()
    size = 0
    t0 = time.perf_counter()
    for _ in range(rounds):
        size = len(dispatcher.handle(body).body)
    elapsed = time.perf_counter() - t0
    return {"scenario": f"get_events, {waiting} events waiting (dispatcher only)",
            "answers/s": rounds / elapsed, "answer bytes": size}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--users", type=int, default=100_000)
    p.add_argument("--changes", type=int, default=50_000)
    p.add_argument("--quick", action="store_true", help="small figures (a smoke run)")
    a = p.parse_args()
    if a.quick:
        a.users, a.changes = 2000, 2000
    results = [bench_per_user(a.users, a.changes),
               bench_shared(min(1000, a.users), 10, a.changes // 5),
               bench_get_events(2000 if a.quick else 20_000, 10)]
    for r in results:
        print(" | ".join(f"{k}: {v:,.0f}" if isinstance(v, float) else f"{k}: {v}"
                         for k, v in r.items()))
    out = os.environ.get("BENCH_JSON")
    if out:
        with open(out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
