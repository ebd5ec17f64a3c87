"""AMQP feed throughput: changes per second from RabbitMQ into the sink.

For each mode (one change per message, batches of 100) the node's queue is
filled first (published with confirms, so the publish rate is measured
too), then the feed starts consuming and the clock runs until the sink has
every change: that is the ingest rate of one process, broker to sink.

    python bench/amqp_ingest.py [--amqp URL] [--changes 20000]

Needs a RabbitMQ broker (default amqp://guest:guest@127.0.0.1:5672/); uses
a throw-away exchange and queue and deletes them at the end.

``--stock-receive`` puts txamqp's own receive path back into FeedClient
(Deferreds, a lock and inlineCallbacks per frame) for comparison: profiled,
that path was the bottleneck of a single-change consumer, which is why
FeedClient replaces it.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import deferLater, react

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pushengine.amqp import AmqpFeed  # noqa: E402
from pushengine.amqp.feed import DEFAULT_PREFETCH  # noqa: E402
from pushengine.amqp.publisher import connect_publisher, publish_all  # noqa: E402
from pushengine.core.changes import Change, encode_changes  # noqa: E402


class CountingSink:
    """Counts changes; notes when the first and the last arrived."""

    def __init__(self):
        self.count = 0
        self.gaps = 0
        self.first_at = None
        self.first_count = 0
        self.last_at = None

    def apply_changes(self, changes):
        now = time.perf_counter()
        if self.first_at is None:
            self.first_at = now
            self.first_count = len(changes)
        self.count += len(changes)
        self.last_at = now

    def feed_gap(self):
        self.gaps += 1


def make_bodies(total: int, batch: int) -> list[bytes]:
    bodies = []
    for start in range(0, total, batch):
        changes = [Change("Stream", "upsert", i,
                          {"id": i, "title": f"stream {i}", "live": True,
                           "public": True, "created_at": 1700000000 + i,
                           "user_id": i % 1000})
                   for i in range(start, min(total, start + batch))]
        bodies.append(encode_changes(changes))
    return bodies


@inlineCallbacks
def wait_until(reactor, predicate, timeout: float, step: float = 0.005):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the benchmark timed out")
        yield deferLater(reactor, step, lambda: None)


@inlineCallbacks
def run_mode(reactor, url: str, total: int, batch: int, prefetch: int):
    tag = uuid.uuid4().hex[:8]
    exchange = f"bench.{tag}"
    sink = CountingSink()
    feed = AmqpFeed(reactor, url, exchange=exchange, node_id=f"bench-{tag}",
                    prefetch=prefetch, queue_ttl=600)
    publisher = None
    try:
        # Create the queue, then stop consuming while it is filled.
        feed.start(sink)
        yield wait_until(reactor, lambda: feed.state == "connected", 30)
        yield feed.stop()

        bodies = make_bodies(total, batch)
        publisher = yield connect_publisher(reactor, url, exchange)
        started = time.perf_counter()
        results = yield publish_all(publisher, bodies)
        publish_seconds = time.perf_counter() - started
        if not all(ok for ok, _ in results):
            raise RuntimeError("some messages were not confirmed")

        started = time.perf_counter()
        cpu_started = time.process_time()
        feed.start(sink)
        yield wait_until(reactor, lambda: sink.count >= total, 300, step=0.001)
        ingest_cpu = time.process_time() - cpu_started
        ingest_cpu /= time.perf_counter() - started
        # From the first change to the last: the connection set-up is not ingest.
        ingest_seconds = sink.last_at - sink.first_at
        ingested = total - sink.first_count
    finally:
        # The queue and exchange are for this run only.
        yield feed.stop()
        if publisher is None:
            publisher = yield connect_publisher(reactor, url, exchange)
        channel = yield publisher.client.open_channel()
        yield channel.queue_delete(queue=feed.queue)
        yield channel.exchange_delete(exchange=exchange)
        yield publisher.close()
    return {
        "batch": batch,
        "messages": len(bodies),
        "changes": total,
        "publish_msgs": len(bodies) / publish_seconds,
        "publish_changes": total / publish_seconds,
        "ingest_msgs": ingested / batch / ingest_seconds,
        "ingest_changes": ingested / ingest_seconds,
        "ingest_cpu": ingest_cpu,
    }


def use_stock_receive_path():
    """Undo FeedClient's receive-path replacements (benchmark only)."""
    from txamqp.protocol import AMQClient, FrameReceiver

    from pushengine.amqp.connection import FeedClient

    # sending keeps our codec: txamqp's cannot encode the nested table of
    # the client properties
    for name in ("process_frame", "reschedule_check_heartbeat", "check_heartbeat"):
        setattr(FeedClient, name, getattr(AMQClient, name))
    FeedClient.dataReceived = FrameReceiver.dataReceived


@inlineCallbacks
def main(reactor, args):
    if args.stock_receive:
        use_stock_receive_path()
    rows = []
    for batch in args.batches:
        row = yield run_mode(reactor, args.amqp, args.changes, batch, args.prefetch)
        rows.append(row)
    print(f"{'changes/msg':>11} {'messages':>9} {'changes':>8} "
          f"{'publish msg/s':>14} {'ingest msg/s':>13} {'ingest changes/s':>17} "
          f"{'CPU':>5}")
    for r in rows:
        print(f"{r['batch']:>11} {r['messages']:>9} {r['changes']:>8} "
              f"{r['publish_msgs']:>14,.0f} {r['ingest_msgs']:>13,.0f} "
              f"{r['ingest_changes']:>17,.0f} {r['ingest_cpu']:>5.0%}")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--amqp", default=os.environ.get(
        "PUSHENGINE_AMQP", "amqp://guest:guest@127.0.0.1:5672/"))
    parser.add_argument("--changes", type=int, default=20000)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 100])
    parser.add_argument("--prefetch", type=int, default=DEFAULT_PREFETCH)
    parser.add_argument("--stock-receive", action="store_true",
                        help="use txamqp's own receive path, for comparison")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse_args()
    react(lambda reactor: main(reactor, arguments))
