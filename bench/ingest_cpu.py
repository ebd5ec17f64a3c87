"""CPU per change of the ingest paths, in process, with 100,000 per-user views.

    python bench/ingest_cpu.py [--users 100000] [--changes 20000] [--repeat 3]

Two paths into the same engine (one ``UserStreamView`` per user, one
session each, changes spread over the users):

- ``amqp``: the node's queue on the real broker is filled with one change
  per message, then the feed consumes it; the CPU of this process from the
  first change applied to the last, divided by the changes (the broker's
  own CPU is not counted: it is another process);
- ``http publish``: ``POST /api/publish`` bodies of one change and of 100
  changes handed to the publishing rules (decoding, validation, the
  in-process feed, routing), without the HTTP parsing of the front.

``changes per CPU-second`` is 1,000,000 / µs per change: the rate one core
could sustain; the AMQP runs also print their wall-clock rate, the first
change applied to the last (the broker shares the machine).  ``--profile FILE`` writes a cProfile of the AMQP runs.

Needs RabbitMQ (default amqp://guest:guest@127.0.0.1:5672/); uses a
throw-away exchange and queue and deletes them at the end.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import random
import sys
import time
import uuid

from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import deferLater, react

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pushengine.amqp import AmqpFeed  # noqa: E402
from pushengine.amqp.publisher import connect_publisher, publish_all  # noqa: E402
from pushengine.api.caller import Caller  # noqa: E402
from pushengine.api.publishing import Publisher  # noqa: E402
from pushengine.app.engine import build_engine  # noqa: E402
from pushengine.core.changes import Change, encode_changes  # noqa: E402
from pushengine.core.sessions import SessionSettings  # noqa: E402
from pushengine.feeds.memory import MemoryFeed  # noqa: E402
from pushengine.stores.memory import MemoryStore  # noqa: E402
from pushengine.views.spec import load_catalog  # noqa: E402


def new_engine(reactor, users: int):
    catalog = load_catalog()
    engine = build_engine(reactor, catalog, MemoryStore(catalog.id_fields),
                          SessionSettings(max_queue=10_000_000))
    for u in range(users):
        session = engine.sessions.create()
        engine.sessions.subscribe(
            session, catalog.views["UserStreamView"].bind({"user_id": u}, None, None))
    return engine


def stream(i: int, user: int) -> dict:
    return {"id": i, "title": f"stream {i}", "user_id": user, "live": True,
            "public": True, "created_at": f"2026-11-30T{i % 24:02d}:00:00Z",
            "viewers": i % 100}


def changes_for(first: int, count: int, users: int, seed: int) -> list[Change]:
    rng = random.Random(seed)
    return [Change("Stream", "upsert", i, stream(i, rng.randrange(users)))
            for i in range(first, first + count)]


class TimedSink:
    """The engine, with the CPU time of the first and the last change."""

    def __init__(self, engine):
        self.engine = engine
        self.count = 0
        self.cpu_first = self.cpu_last = 0.0
        self.wall_first = self.wall_last = 0.0
        self.first_count = 0

    def apply_changes(self, changes):
        if self.count == 0:
            self.cpu_first = time.process_time()
            self.wall_first = time.perf_counter()
            self.first_count = len(changes)
        self.engine.apply_changes(changes)
        self.count += len(changes)
        self.cpu_last = time.process_time()
        self.wall_last = time.perf_counter()

    def feed_gap(self):
        pass


@inlineCallbacks
def wait_until(reactor, predicate, timeout: float, step: float = 0.005):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the benchmark timed out")
        yield deferLater(reactor, step, lambda: None)


@inlineCallbacks
def amqp_run(reactor, url, engine, changes, users, first, prefetch, profiler):
    """µs of CPU per change, one change per message, broker to engine."""
    tag = uuid.uuid4().hex[:8]
    exchange = f"bench.{tag}"
    sink = TimedSink(engine)
    feed = AmqpFeed(reactor, url, exchange=exchange, node_id=f"bench-{tag}",
                    prefetch=prefetch, queue_ttl=600)
    publisher = None
    try:
        feed.start(sink)
        yield wait_until(reactor, lambda: feed.state == "connected", 30)
        yield feed.stop()
        bodies = [encode_changes([c]) for c in changes_for(first, changes, users, first)]
        publisher = yield connect_publisher(reactor, url, exchange)
        results = yield publish_all(publisher, bodies)
        if not all(ok for ok, _ in results):
            raise RuntimeError("some messages were not confirmed")
        gc.collect()
        started = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        feed.start(sink)
        yield wait_until(reactor, lambda: sink.count >= changes, 300, step=0.002)
        if profiler is not None:
            profiler.disable()
        wall = time.perf_counter() - started
    finally:
        yield feed.stop()
        if publisher is None:
            publisher = yield connect_publisher(reactor, url, exchange)
        channel = yield publisher.client.open_channel()
        yield channel.queue_delete(queue=feed.queue)
        yield channel.exchange_delete(exchange=exchange)
        yield publisher.close()
    measured = sink.count - sink.first_count
    return {"us": (sink.cpu_last - sink.cpu_first) / measured * 1e6,
            "wall_rate": measured / (sink.wall_last - sink.wall_first),
            "setup_and_drain": wall}


def http_run(engine, changes, users, first, per_body):
    """µs of CPU per change through the publishing rules (no HTTP parsing)."""
    feed = MemoryFeed()
    feed.start(engine)
    publisher = Publisher(feed, engine.catalog.id_fields)
    caller = Caller("127.0.0.1", loopback=True)
    batch = changes_for(first, changes, users, first)
    bodies = [encode_changes(batch[i:i + per_body]) for i in range(0, changes, per_body)]
    gc.collect()
    started = time.process_time()
    for body in bodies:
        answer = publisher.handle(body, caller)
        if getattr(answer, "status", 200) != 200:
            raise RuntimeError(f"publish refused: {answer}")
    return {"us": (time.process_time() - started) / changes * 1e6}


@inlineCallbacks
def main(reactor, args):
    t0 = time.perf_counter()
    engine = new_engine(reactor, args.users)
    print(f"{args.users:,} per-user views set up in {time.perf_counter() - t0:.1f} s")
    profiler = cProfile.Profile() if args.profile else None
    rows = {"amqp, 1 change/message": [], "http publish, 1 change/body": [],
            "http publish, 100 changes/body": []}
    first = 0
    rates: list[float] = []
    for _ in range(args.repeat):
        r = yield amqp_run(reactor, args.amqp, engine, args.changes, args.users, first,
                           args.prefetch, profiler)
        rows["amqp, 1 change/message"].append(r["us"])
        rates.append(r["wall_rate"])
        first += args.changes
        rows["http publish, 1 change/body"].append(
            http_run(engine, args.changes, args.users, first, 1)["us"])
        first += args.changes
        rows["http publish, 100 changes/body"].append(
            http_run(engine, args.changes, args.users, first, 100)["us"])
        first += args.changes
    print(f"{'path':<32} {'µs/change (best)':>17} {'all runs':>26} {'changes/CPU-s':>14}")
    for name, values in rows.items():
        best = min(values)
        print(f"{name:<32} {best:>17.1f} {' '.join(f'{v:.1f}' for v in values):>26} "
              f"{1e6 / best:>14,.0f}")
    print("amqp changes/s (wall, first change applied to last): "
          + " ".join(f"{r:,.0f}" for r in rates))
    if profiler is not None:
        profiler.dump_stats(args.profile)
    out = os.environ.get("BENCH_JSON")
    if out:
        with open(out, "w") as f:
            json.dump(rows, f, indent=2)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--amqp", default=os.environ.get(
        "PUSHENGINE_AMQP", "amqp://guest:guest@127.0.0.1:5672/"))
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--changes", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--prefetch", type=int, default=2000)
    parser.add_argument("--profile", metavar="FILE", help="cProfile of the AMQP runs")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse_args()
    react(lambda reactor: main(reactor, arguments))
