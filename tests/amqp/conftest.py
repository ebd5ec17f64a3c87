"""Helpers for the AMQP feed tests: a recording sink, a throw-away exchange
per test, and rabbitmqctl (tests/deferreds.py says how they are written)."""
from __future__ import annotations

import os
import random
import shutil
import uuid

import pytest
import pytest_twisted
from twisted.application.internet import backoffPolicy
from twisted.internet.utils import getProcessOutputAndValue

from pushengine.amqp import AmqpFeed
from pushengine.amqp.publisher import connect_publisher
from tests.deferreds import eventually
from tests.services import require_program, require_service

BROKER_HOST = "127.0.0.1"
BROKER_PORT = 5672
BROKER_URL = f"amqp://guest:guest@{BROKER_HOST}:{BROKER_PORT}/"


def pytest_collection_modifyitems(config, items):
    # txamqp 0.8.2 still calls defer.returnValue (deprecated in Twisted 24.7).
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.filterwarnings(
                "ignore:twisted.internet.defer.returnValue:DeprecationWarning"))


class RecordingSink:
    """A ChangeSink that keeps what it was given; can be told to fail."""

    def __init__(self):
        self.batches: list[list] = []
        self.gaps = 0
        self.fail_on: set = set()

    def apply_changes(self, changes):
        changes = list(changes)
        if any(c.id in self.fail_on for c in changes):
            raise RuntimeError("sink failure for the test")
        self.batches.append(changes)

    def feed_gap(self):
        self.gaps += 1

    @property
    def changes(self) -> list:
        return [c for batch in self.batches for c in batch]

    @property
    def ids(self) -> list:
        return [c.id for c in self.changes]


def fast_retry():
    """Back-off for tests: 0.1 s growing to 0.5 s, with a little jitter."""
    return backoffPolicy(initialDelay=0.1, maxDelay=0.5, factor=1.5,
                         jitter=lambda: random.random() * 0.05)


async def rabbitmqctl(*args: str):
    """Run rabbitmqctl without blocking the reactor; return its stdout."""
    out, err, code = await getProcessOutputAndValue(
        shutil.which("rabbitmqctl"), ("-q",) + args, env=dict(os.environ))
    if code != 0:
        raise AssertionError(f"rabbitmqctl {' '.join(args)} failed ({code}): "
                             f"{(err or out).decode(errors='replace').strip()}")
    return out.decode()


async def connection_pid(client):
    """The broker's id for the connection of ``client`` (a FeedClient)."""
    port = client.transport.getHost().port
    listing = await rabbitmqctl("list_connections", "pid", "name", "--no-table-headers")
    for line in listing.splitlines():
        pid, _, name = line.partition("\t")
        if name.startswith(f"127.0.0.1:{port} ->"):
            return pid
    raise AssertionError(f"no broker connection from port {port}: {listing!r}")


class AmqpEnv:
    """A throw-away exchange for one test, its feeds and publishers, all
    removed at the end."""

    def __init__(self, url: str):
        self.url = url
        self.tag = uuid.uuid4().hex[:10]
        self.exchange = f"test.{self.tag}"
        self.exchange_type = "fanout"     # "topic" for the interest mode
        self.feeds: list[AmqpFeed] = []
        self.publishers = []

    def node(self, name: str = "a") -> str:
        return f"test-{self.tag}-{name}"

    def feed(self, node: str = "a", **kwargs) -> AmqpFeed:
        from twisted.internet import reactor

        kwargs.setdefault("retry_policy", fast_retry())
        kwargs.setdefault("queue_ttl", 120)
        feed = AmqpFeed(reactor, self.url, exchange=self.exchange,
                        node_id=self.node(node), **kwargs)
        self.feeds.append(feed)
        return feed

    async def started(self, node: str = "a", sink=None, **kwargs):
        """A feed that is connected and consuming."""
        feed = self.feed(node, **kwargs)
        feed.start(sink if sink is not None else RecordingSink())
        await eventually(lambda: feed.state == "connected", 10, f"feed {node} to connect")
        return feed

    async def publisher(self):
        from twisted.internet import reactor

        publisher = await connect_publisher(reactor, self.url, self.exchange,
                                            exchange_type=self.exchange_type)
        self.publishers.append(publisher)
        return publisher

    async def cleanup(self):
        for feed in self.feeds:
            try:
                await feed.stop()
            except Exception:
                pass
        from twisted.internet import reactor

        try:
            admin = await connect_publisher(reactor, self.url, self.exchange,
                                            exchange_type=self.exchange_type)
        except Exception:
            return  # the broker is gone: nothing to clean
        try:
            for feed in self.feeds:
                channel = await admin.client.open_channel()
                await channel.queue_delete(queue=feed.queue)
            channel = await admin.client.open_channel()
            await channel.exchange_delete(exchange=self.exchange)
        finally:
            for publisher in self.publishers + [admin]:
                try:
                    await publisher.close()
                except Exception:
                    pass


@pytest.fixture
def broker_url():
    require_service("RabbitMQ", BROKER_HOST, BROKER_PORT)
    return BROKER_URL


@pytest.fixture
def need_rabbitmqctl(broker_url):
    require_program("rabbitmqctl")


@pytest_twisted.async_yield_fixture
async def amqp(broker_url):
    env = AmqpEnv(broker_url)
    yield env
    await env.cleanup()
