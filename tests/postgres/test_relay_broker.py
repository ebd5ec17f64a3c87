"""The relay (pushengine/app/cdc.py's CdcService) in-process against the
private PostgreSQL cluster and the local RabbitMQ: committed rows become
messages in commit order with their positions; the slot moves only behind
the broker's confirms; a stop and a start lose nothing; a second relay on
the slot waits and takes over. Each test uses its own database, slot,
exchange and queues, and removes them."""
from __future__ import annotations

import json
import uuid

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from pushengine.amqp.publisher import COPIES_HEADER, connect_publisher
from pushengine.app.cdc import CdcService, Options
from pushengine.core.changes import decode_changes
from pushengine.core.positions import Position, Watermark
from tests.amqp.conftest import BROKER_URL, fast_retry
from tests.deferreds import eventually
from tests.postgres.conftest import execute
from tests.postgres.wal_support import STREAMS, drop_slots, slot_confirmed, transaction
from tests.services import require_service

pytestmark = [pytest.mark.service,
              pytest.mark.filterwarnings(
                  "ignore:twisted.internet.defer.returnValue:DeprecationWarning")]

VIEWS = """\
types:
  Stream: {id: id, table: streams, route: [user_id]}
views:
  UserStreams:
    type: Stream
    method: stream.subscribe_user
    params: [user_id]
    where: {user_id: $user_id}
    order: -id
    limit: {default: 10, max: 50}
"""
FAST_READER = {"status_interval": 0.3, "retry": 0.2}


class Collector:
    """A consumer (``FeedClient.consumers``) that keeps every delivery."""

    def __init__(self) -> None:
        self.deliveries: list = []

    def deliver(self, delivery) -> None:
        self.deliveries.append(delivery)

    def deliveries_done(self) -> None:
        pass

    @property
    def positions(self) -> list[Position]:
        return [Position.from_headers(d.headers) for d in self.deliveries]

    def changes(self, fresh_only: bool = False) -> list:
        """The changes received, in order; ``fresh_only``: as a node applies
        them (a copy at or below the last position is dropped)."""
        watermark = Watermark()
        out = []
        for d in self.deliveries:
            if fresh_only and not watermark.admit(Position.from_headers(d.headers)):
                continue
            changes, errors = decode_changes(d.body)
            assert not errors
            out += changes
        return out


class Broker:
    """A throw-away exchange and queues on the local RabbitMQ."""

    def __init__(self, exchange_type: str = "fanout") -> None:
        self.exchange = f"test.cdc.{uuid.uuid4().hex[:10]}"
        self.exchange_type = exchange_type
        self.queues: list[str] = []
        self.admin = None

    async def queue(self, key: str = "") -> Collector:
        if self.admin is None:
            self.admin = await connect_publisher(reactor, BROKER_URL, self.exchange,
                                                 exchange_type=self.exchange_type)
        client = self.admin.client
        channel = await client.open_channel()
        name = f"{self.exchange}.q{len(self.queues)}"
        await channel.queue_declare(queue=name, durable=False, auto_delete=False)
        self.queues.append(name)
        await channel.queue_bind(queue=name, exchange=self.exchange, routing_key=key)
        collector = Collector()
        tag = f"c.{name}"
        client.consumers[tag] = collector
        await channel.basic_consume(queue=name, consumer_tag=tag, no_ack=True)
        return collector

    async def cleanup(self) -> None:
        if self.admin is None:
            return
        channel = await self.admin.client.open_channel()
        for name in self.queues:
            await channel.queue_delete(queue=name)
        await channel.exchange_delete(exchange=self.exchange)
        await self.admin.close()


@pytest_twisted.async_yield_fixture
async def broker():
    require_service("RabbitMQ", "127.0.0.1", 5672)
    made: list[Broker] = []

    def make(exchange_type: str = "fanout") -> Broker:
        made.append(Broker(exchange_type))
        return made[-1]

    yield make
    for b in made:
        await b.cleanup()


@pytest_twisted.async_yield_fixture
async def relays(pg_url, tmp_path):
    """``relays(broker, slot=..., routing=...)``: a started CdcService on the
    test's database; all stopped after the test, the slots dropped."""
    views = tmp_path / "views.yaml"
    views.write_text(VIEWS)
    made: list[CdcService] = []
    fatal: list[str] = []

    def make(b: Broker, slot: str = "relay", routing: str = "fanout", start: bool = True,
             **kwargs) -> CdcService:
        options = Options(environ={})
        options.parseOptions([pg_url, "--amqp", BROKER_URL, "--amqp-exchange", b.exchange,
                              "--amqp-routing", routing, "--views", str(views),
                              "--slot", slot])
        service = CdcService(reactor, options, options.catalog, fatal.append,
                             reader_options=FAST_READER,
                             link_options={"retry_policy": fast_retry()}, **kwargs)
        made.append(service)
        if start:
            service.startService()
        return service

    yield make
    for service in made:
        if service.running:
            await service.stopService()
    assert not fatal
    drop_slots(pg_url)


async def running(service: CdcService) -> None:
    await eventually(lambda: service.health()["up"], 15, "the relay up")


def rows(changes) -> list:
    return [(c.action, c.obj) for c in changes]


@pytest_twisted.ensureDeferred
async def test_commits_arrive_in_commit_order_with_their_positions(pg_url, broker, relays):
    execute(pg_url, *STREAMS)
    b = broker()
    queue = await b.queue()
    service = relays(b)
    await running(service)
    first = transaction(pg_url, "INSERT INTO streams (id, title, user_id) VALUES (1, 'a', 7)",
                        "INSERT INTO streams (id, title, tags) VALUES (2, 'b', '{x,y}')")
    # a transaction that began first and commits last comes last
    import psycopg2
    early = psycopg2.connect(pg_url)
    with early.cursor() as cur:
        cur.execute("INSERT INTO streams (id, title) VALUES (3, 'early')")
        cur.execute("SELECT pg_current_xact_id()::text::bigint")
        early_xid = cur.fetchone()[0]
    second = transaction(pg_url, "UPDATE streams SET title = 'c' WHERE id = 1")
    early.commit()
    early.close()
    third = transaction(pg_url, "DELETE FROM streams WHERE id = 2")
    await eventually(lambda: len(queue.deliveries) == 4, what="four messages")
    positions = queue.positions
    assert [p.xid for p in positions] == [first, second, early_xid, third]
    assert [p.part for p in positions] == [0, 0, 0, 0]
    assert [p.lsn for p in positions] == sorted({p.lsn for p in positions})
    assert rows(queue.changes()) == [
        ("upsert", {"id": 1, "title": "a", "user_id": 7, "tags": None}),
        ("upsert", {"id": 2, "title": "b", "user_id": None, "tags": ["x", "y"]}),
        ("upsert", {"id": 1, "title": "c", "user_id": 7, "tags": None}),
        ("upsert", {"id": 3, "title": "early", "user_id": None, "tags": None}),
        ("delete", {"id": 2, "title": "b", "user_id": None, "tags": ["x", "y"]}),
    ]
    body = json.loads(queue.deliveries[0].body)
    assert body[0] == {"type": "Stream", "action": "upsert",
                       "obj": {"id": 1, "title": "a", "user_id": 7, "tags": None}}
    assert queue.deliveries[0].message_id
    stats = service.figures()["relay"]
    assert (stats["transactions"], stats["messages"], stats["changes"]) == (4, 4, 5)
    await eventually(lambda: slot_confirmed(pg_url, "relay") >= service.relay.confirmed_lsn,
                     what="the slot confirmed")


@pytest_twisted.ensureDeferred
async def test_a_large_transaction_comes_in_parts(pg_url, broker, relays):
    execute(pg_url, *STREAMS)
    b = broker()
    queue = await b.queue()
    service = relays(b)
    await running(service)
    xid = transaction(pg_url, "INSERT INTO streams (id) SELECT g FROM generate_series(1, 1201) g")
    await eventually(lambda: len(queue.deliveries) == 3, what="three parts")
    assert [(p.xid, p.part) for p in queue.positions] == [(xid, 0), (xid, 1), (xid, 2)]
    assert [c.id for c in queue.changes()] == list(range(1, 1202))


@pytest_twisted.ensureDeferred
async def test_the_slot_moves_only_after_the_broker_confirmed(pg_url, broker, relays):
    execute(pg_url, *STREAMS)
    b = broker()
    queue = await b.queue()
    service = relays(b)
    # hold the broker's confirms back from the relay
    held: list[tuple[Deferred, Deferred]] = []
    publish = service.relay._publish

    def gated(body, keys, headers):
        answer: Deferred = Deferred()
        held.append((publish(body, keys, headers), answer))
        return answer

    service.relay._publish = gated
    await running(service)
    start = slot_confirmed(pg_url, "relay")
    transaction(pg_url, "INSERT INTO streams (id) VALUES (1)")
    transaction(pg_url, "INSERT INTO streams (id) VALUES (2)")
    await eventually(lambda: len(queue.deliveries) == 2, what="both messages at the broker")
    reader = service.reader
    end = reader.received_lsn
    # two status messages after the reader had both: the slot still stands
    sent = reader.status_messages
    await eventually(lambda: reader.status_messages >= sent + 2, what="status messages")
    assert slot_confirmed(pg_url, "relay") < end
    # the broker's confirm of the first only: the slot moves to its end, not further
    confirmed_first, answer = held[0]
    await confirmed_first
    answer.callback(None)
    first_end = service.relay.confirmed_lsn
    assert start < first_end < end
    await eventually(lambda: slot_confirmed(pg_url, "relay") >= first_end, what="first end")
    sent = reader.status_messages
    await eventually(lambda: reader.status_messages >= sent + 2, what="status messages")
    assert slot_confirmed(pg_url, "relay") < end
    confirmed_second, answer = held[1]
    await confirmed_second
    answer.callback(None)
    await eventually(lambda: slot_confirmed(pg_url, "relay") >= end, what="the slot at the end")


@pytest_twisted.ensureDeferred
async def test_a_relay_stopped_and_started_again_loses_nothing(pg_url, broker, relays):
    execute(pg_url, *STREAMS)
    b = broker()
    queue = await b.queue()
    first = relays(b, drain_timeout=0.5)
    # the first relay never hears the broker's confirms: it stops with
    # everything unconfirmed, and the slot stays where it was
    first.relay._publish = lambda body, keys, headers: (
        first.link.publish(body, keys, headers).addCallback(lambda _: Deferred()))
    await running(first)
    for i in range(1, 6):
        transaction(pg_url, f"INSERT INTO streams (id, title) VALUES ({i}, 'v1')")
    transaction(pg_url, "UPDATE streams SET title = 'v2' WHERE id <= 3")
    await eventually(lambda: len(queue.deliveries) == 6, what="six messages")
    await first.stopService()
    transaction(pg_url, "INSERT INTO streams (id) VALUES (6)")     # while no relay runs
    second = relays(b)
    await running(second)
    transaction(pg_url, "INSERT INTO streams (id) VALUES (7)")
    await eventually(lambda: [c.id for c in queue.changes()][-1:] == [7], what="row 7")
    # every change at least once; as a node applies them, each once, in order
    fresh = [(c.id, c.obj["title"]) for c in queue.changes(fresh_only=True)]
    assert fresh == [(1, "v1"), (2, "v1"), (3, "v1"), (4, "v1"), (5, "v1"),
                     (1, "v2"), (2, "v2"), (3, "v2"), (6, None), (7, None)]
    assert len(queue.deliveries) == 6 + 6 + 2      # the first six sent again
    await eventually(lambda: slot_confirmed(pg_url, "relay") >= second.relay.confirmed_lsn,
                     what="the slot confirmed")


@pytest_twisted.ensureDeferred
async def test_a_second_relay_on_the_slot_waits_and_takes_over(pg_url, broker, relays):
    execute(pg_url, *STREAMS)
    b = broker()
    queue = await b.queue()
    first = relays(b)
    await running(first)
    second = relays(b)
    await eventually(lambda: second.reader.health()["waiting"], 15, "the second one waiting")
    assert not second.health()["up"] and second.health()["broker"]["up"]
    transaction(pg_url, "INSERT INTO streams (id) VALUES (1)")
    await eventually(lambda: len(queue.deliveries) == 1, what="the first row")
    await first.stopService()
    await running(second)
    assert not second.reader.health()["waiting"]
    transaction(pg_url, "INSERT INTO streams (id) VALUES (2)")
    await eventually(lambda: [c.id for c in queue.changes(fresh_only=True)] == [1, 2],
                     what="the second row through the second relay")
    assert second.figures()["relay"]["changes"] >= 1


@pytest_twisted.ensureDeferred
async def test_interest_mode_routes_by_the_views_routing_fields(pg_url, broker, relays):
    execute(pg_url, *STREAMS)
    b = broker("topic")
    user1 = await b.queue("Stream.n1")
    user2 = await b.queue("Stream.n2")
    everything = await b.queue("Stream.#")
    service = relays(b, routing="interest")
    await running(service)
    transaction(pg_url, "INSERT INTO streams (id, user_id) VALUES (1, 1)",
                "INSERT INTO streams (id, user_id) VALUES (2, 2)",
                "INSERT INTO streams (id, user_id) VALUES (3, 1)")
    transaction(pg_url, "UPDATE streams SET user_id = 2 WHERE id = 1")    # it moves
    await eventually(lambda: len(everything.deliveries) == 4, what="every message")
    # the first transaction: a message per user; the move: one under both keys
    assert [c.id for c in user1.changes()] == [1, 3, 1]
    assert [c.id for c in user2.changes()] == [2, 1]
    moved = user1.deliveries[-1]
    assert moved.headers[COPIES_HEADER] == "2"
    assert moved.message_id == user2.deliveries[-1].message_id
    assert user1.positions[-1] == user2.positions[-1]
    # a node bound to every key applies the transaction's changes once, in order
    assert [(c.id, c.obj["user_id"]) for c in everything.changes(fresh_only=True)] == [
        (1, 1), (3, 1), (2, 2), (1, 2)]
    assert [p.part for p in everything.positions] == [0, 1, 0, 0]


@pytest_twisted.ensureDeferred
async def test_a_relay_stopped_cleanly_sends_nothing_twice(pg_url, broker, relays):
    execute(pg_url, *STREAMS)
    b = broker()
    queue = await b.queue()
    first = relays(b)
    await running(first)
    for i in range(1, 4):
        transaction(pg_url, f"INSERT INTO streams (id) VALUES ({i})")
    await eventually(lambda: len(queue.deliveries) == 3, what="three messages")
    await first.stopService()
    assert slot_confirmed(pg_url, "relay") >= first.relay.confirmed_lsn
    second = relays(b)
    await running(second)
    transaction(pg_url, "INSERT INTO streams (id) VALUES (4)")
    await eventually(lambda: len(queue.deliveries) >= 4, what="the fourth row")
    assert [c.id for c in queue.changes()] == [1, 2, 3, 4]
    assert second.figures()["relay"]["transactions"] == 1
