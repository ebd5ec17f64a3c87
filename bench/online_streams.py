"""CPU of one online period's counting of held streams.

Streams do not poll: the node counts the sessions they hold online once per
``--online-period``. Per-stream counting (one ``OnlineCounter.touch`` per
stream per run of the timer: a Deferred and a memcached operation per
session and view key) is measured against the one pass of
``OnlineCounter.touch_many`` (one ``incr`` of N per view key), both in the
same run, in process CPU seconds (``time.process_time``) per period.

    python bench/online_streams.py [--sessions 20000] [--keys 10] [--periods 5]
                                   [--memcache 127.0.0.1:11211]

A period has ``period / tick`` runs of the timer (60 s / 10 s: 6): per-stream
counting touches every stream at the first run and checks every stream at
the others; the pass runs at the first and does nothing at the others.
Without ``--memcache`` the counters live in the in-process cache
(pushengine/memcache/memory.py); with it, in that memcached.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable

from twisted.internet.defer import Deferred, DeferredList, inlineCallbacks
from twisted.internet.task import Clock, deferLater, react

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pushengine.memcache import InMemoryCache  # noqa: E402
from pushengine.memcache.online import OnlineCounter  # noqa: E402

PERIOD = 60.0
TICK = 10.0


def held(sessions: int, keys: int) -> list[tuple[str, list[str]]]:
    return [(f"session-{i:06d}", [f"Stream.public_live(limit={i % keys})"])
            for i in range(sessions)]


def per_stream(online: OnlineCounter, streams: list) -> list[Deferred]:
    """One run of the timer as it was: every stream touched."""
    out = []
    for sid, keys in streams:
        if not online.counted(sid, keys):
            out.append(online.touch(sid, keys))
    return out


def one_pass(online: OnlineCounter, streams: list) -> list[Deferred]:
    """One run of the timer now: a pass at the first run of the period."""
    if online.streams_due():
        return [online.touch_many(iter(streams))]
    return []


@inlineCallbacks
def measure(clock: Any, cache: Any, streams: list, periods: int,
            run: Callable[[OnlineCounter, list], list[Deferred]],
            advance: Callable[[float], None]) -> Any:
    """CPU seconds per period of ``run`` at every tick, waiting for the cache."""
    online = OnlineCounter(cache, clock, period=PERIOD, prefix=f"bench{id(run)}")
    spent = 0.0
    for _ in range(periods):
        for _ in range(int(PERIOD / TICK)):
            start = time.process_time()
            yield DeferredList(run(online, streams))
            spent += time.process_time() - start
            advance(TICK)
    return spent / periods


@inlineCallbacks
def main(reactor: Any, args: argparse.Namespace) -> Any:
    streams = held(args.sessions, args.keys)
    if args.memcache:
        from pushengine.memcache import MemcacheClient
        # the real clock: memcached's expiries are real; periods are simulated
        # by moving the counter's clock only
        clock = Clock()
        clock.advance(time.time())
        cache = MemcacheClient(reactor, [args.memcache], timeout=10)
        cache.startService()
        yield deferLater(reactor, 0.5, lambda: None)  # connected
        yield cache.flush_all()
        where = f"memcached {args.memcache}"
    else:
        clock = Clock()
        clock.advance(1_700_000_000)
        cache = InMemoryCache(clock)
        where = "the in-process cache"
    print(f"{args.sessions} held streams over {args.keys} view keys, {where}, "
          f"period {PERIOD:.0f} s, timer every {TICK:.0f} s:")
    results = {}
    for name, run in (("per stream", per_stream), ("one pass", one_pass)):
        results[name] = yield measure(clock, cache, streams, args.periods, run, clock.advance)
        print(f"  {name:10s} {results[name] * 1000:8.1f} ms CPU per period "
              f"({results[name] / PERIOD * 100:.3f} % of a core)")
    print(f"  ratio      ×{results['per stream'] / results['one pass']:.0f}")
    if args.memcache:
        print(f"  memcached client: {cache.counters}")
        cache.stopService()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=20000)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--periods", type=int, default=3)
    parser.add_argument("--memcache", default=None, help="host:port of a memcached")
    react(main, [parser.parse_args()])
