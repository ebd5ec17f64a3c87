"""AmqpFeed against the real RabbitMQ on 127.0.0.1:5672 (guest/guest)."""
import os
import sys

import pytest
import pytest_twisted
from twisted.internet.utils import getProcessOutputAndValue

from pushengine.amqp import NotConnected
from pushengine.amqp.publisher import message_properties, publish_all
from pushengine.core.changes import Change, encode_changes
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater

from tests.amqp.conftest import RecordingSink, connection_pid, rabbitmqctl
from tests.deferreds import eventually
from tests.services import free_port

pytestmark = pytest.mark.service

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_cli(*args):
    """Run pushengine-publish in a child process; fire with (out, err, code)."""
    return getProcessOutputAndValue(
        sys.executable, ("-m", "pushengine.tools.publish_cli") + args,
        env=dict(os.environ), path=ROOT)


def stream(i, **fields):
    return Change("Stream", "upsert", i, {"id": i, **fields})


@pytest_twisted.ensureDeferred
async def test_publish_reaches_the_sink(amqp):
    sink = RecordingSink()
    feed = await amqp.started(sink=sink)
    health = feed.health()
    assert health["up"] and health["state"] == "connected"
    assert health["queue"] == f"pushengine.node.{amqp.node('a')}"
    count = await feed.publish([stream(1, title="cat")])
    assert count == 1
    await eventually(lambda: sink.ids == [1], what="the change")
    assert sink.changes[0].obj == {"id": 1, "title": "cat"}
    stats = feed.stats()
    assert stats["connected"] == 1 and stats["messages_received"] == 1
    assert stats["changes_applied"] == 1 and stats["changes_published"] == 1
    assert 0 <= stats["feed_lag_seconds"] < 5


@pytest_twisted.ensureDeferred
async def test_every_node_receives_every_change(amqp):
    a, b = RecordingSink(), RecordingSink()
    feed_a = await amqp.started("a", sink=a)
    await amqp.started("b", sink=b)
    for i in range(10):
        await feed_a.publish([stream(i)])
    await eventually(lambda: len(a.ids) == 10 and len(b.ids) == 10, what="both nodes")
    assert a.ids == b.ids == list(range(10))


@pytest_twisted.ensureDeferred
async def test_a_batch_is_applied_in_order(amqp):
    sink = RecordingSink()
    feed = await amqp.started(sink=sink)
    batch = [stream(5), Change("Stream", "delete", 5, {"id": 5}), stream(5, v=2),
             stream(1), stream(3)]
    count = await feed.publish(batch)
    assert count == 5
    await eventually(lambda: len(sink.changes) == 5, what="the batch")
    assert sink.batches == [batch]


@pytest_twisted.ensureDeferred
async def test_malformed_messages_among_good_ones(amqp):
    sink = RecordingSink()
    feed = await amqp.started(sink=sink)
    publisher = await amqp.publisher()
    props = message_properties(0)
    bodies = [
        encode_changes([stream(1)]),
        b"this is not json",
        b"\xff\xfe\x00 not utf-8",
        b'{"action": "upsert", "obj": {"id": 2}}',              # no type
        b'{"type": "Stream", "action": "upsert", "obj": {}}',   # no id
        b'{"type": "Stream", "action": "explode", "obj": {"id": 3}}',
        b'{"type": ["Stream"], "action": "upsert", "obj": {"id": 4}}',
        b'{"type": "Stream", "action": "upsert", "obj": "id=5"}',
        b'[{"type": "Stream", "action": "upsert", "obj": {"id": 6}}, 17,'
        b' {"type": "Stream", "action": "delete", "obj": {"id": 7}}]',
        encode_changes([stream(8)]),
    ]
    for body in bodies:
        await publisher.publisher.publish(body, props)
    await eventually(lambda: feed.stats()["messages_received"] == len(bodies),
                     what="every message")
    assert sink.ids == [1, 6, 7, 8]
    stats = feed.stats()
    assert stats["malformed_messages"] == 8
    assert stats["malformed_changes"] == 8
    assert stats["changes_applied"] == 4
    # Everything was acked: nothing comes back after a reconnection. A
    # message published now comes after anything the broker would give again.
    await feed.stop()
    feed.start(sink)
    await eventually(lambda: feed.state == "connected", what="the reconnection")
    await feed.publish([stream(9)])
    await eventually(lambda: 9 in sink.ids, what="the change after the reconnection")
    assert feed.stats()["messages_received"] == len(bodies) + 1
    assert sink.ids == [1, 6, 7, 8, 9]


@pytest_twisted.ensureDeferred
async def test_headers_txamqp_cannot_decode_do_not_stop_the_feed(amqp):
    sink = RecordingSink()
    feed = await amqp.started(sink=sink)
    publisher = await amqp.publisher()
    props = dict(message_properties(0))
    props["headers"] = {"x-death": [{"count": 2**40, "reason": "expired"}],
                        "ratio": 0.25, "flag": True, "blob": b"\x00\xff", "none": None}
    await publisher.publisher.publish(encode_changes([stream(1)]), props)
    await feed.publish([stream(2)])
    await eventually(lambda: sink.ids == [1, 2], what="both changes")
    assert feed.stats()["reconnects"] == 0


@pytest_twisted.ensureDeferred
async def test_a_failing_sink_does_not_stop_the_consumer(amqp):
    sink = RecordingSink()
    sink.fail_on = {2}
    feed = await amqp.started(sink=sink)
    for i in (1, 2, 3):
        await feed.publish([stream(i)])
    await eventually(lambda: sink.ids == [1, 3], what="the changes around the failure")
    assert feed.stats()["sink_errors"] == 1


@pytest_twisted.ensureDeferred
async def test_large_message_spanning_many_frames(amqp):
    sink = RecordingSink()
    feed = await amqp.started(sink=sink)
    big = [stream(i, title="é" * 1000 + "猫" * 333) for i in range(300)]  # ~1 MB
    count = await feed.publish(big)
    assert count == 300
    await eventually(lambda: len(sink.ids) == 300, what="the big batch")
    assert sink.changes == big


@pytest_twisted.ensureDeferred
async def test_connection_closed_by_the_broker_loses_nothing(amqp, need_rabbitmqctl):
    sink = RecordingSink()
    feed = await amqp.started(sink=sink)
    publisher = await amqp.publisher()
    first_client = feed.client
    pid = await connection_pid(first_client)
    closing = Deferred.fromCoroutine(
        rabbitmqctl("close_connection", pid, "test: closed by the broker"))
    # keeps publishing before, while and after the feed is away: until it is
    # back on a new connection (and at least 200 changes)
    sent = 0
    while sent < 200 or not (feed.state == "connected" and feed.client is not first_client):
        assert sent < 20_000, "the feed did not come back"
        await publisher.publisher.publish(encode_changes([stream(sent)]), message_properties(0))
        sent += 1
    await closing
    await eventually(lambda: len(set(sink.ids)) == sent, what="every change")
    assert sorted(set(sink.ids)) == list(range(sent))
    assert feed.stats()["reconnects"] >= 1
    assert sink.gaps == 0  # the queue was kept: nothing was missed
    count = await feed.publish([stream(100_000)])
    assert count == 1
    await eventually(lambda: 100_000 in sink.ids, what="a change after the reconnection")


@pytest_twisted.ensureDeferred
async def test_messages_applied_but_not_acked_are_not_applied_again(
        amqp, need_rabbitmqctl, monkeypatch):
    """The connection drops after the changes were applied and before their
    ack: the broker delivers them again (``redelivered``), and the node,
    knowing their message ids, does not apply them a second time."""
    from pushengine.amqp import feed as feed_module

    monkeypatch.setattr(feed_module._Session, "flush_acks", lambda session: None)
    sink = RecordingSink()
    feed = await amqp.started(sink=sink)
    publisher = await amqp.publisher()
    for i in range(20):
        await publisher.publisher.publish(encode_changes([stream(i)]), message_properties(0))
    await eventually(lambda: len(sink.ids) == 20, what="every change once")
    first_client = feed.client
    await rabbitmqctl("close_connection", await connection_pid(first_client), "test")
    await eventually(lambda: feed.redeliveries_dropped == 20, what="the redeliveries")
    assert feed.client is not first_client
    assert sink.ids == list(range(20))
    await publisher.publisher.publish(encode_changes([stream(20)]), message_properties(0))
    await eventually(lambda: sink.ids[-1:] == [20], what="a new change")
    assert sink.ids == list(range(21))


@pytest_twisted.ensureDeferred
async def test_a_backlog_is_applied_once_in_batches_each_acked_once(amqp, need_rabbitmqctl):
    """N one-change messages waiting in the queue: each applied once, in
    order, in fewer batches than messages, one ack per batch, and nothing
    left unacked on the broker."""
    sink = RecordingSink()
    feed = await amqp.started(sink=sink)
    await feed.stop()
    publisher = await amqp.publisher()
    total = 500
    results = await publish_all(publisher, [encode_changes([stream(i)]) for i in range(total)])
    assert all(ok for ok, _ in results)
    feed.start(sink)
    await eventually(lambda: len(sink.ids) == total, what="every change")
    assert sink.ids == list(range(total))
    stats = feed.stats()
    assert stats["messages_received"] == stats["changes_applied"] == total
    assert 1 <= stats["batches"] < total and stats["acks"] == stats["batches"]
    assert len(sink.batches) == stats["batches"]

    async def unacked():
        listing = await rabbitmqctl("list_queues", "name", "messages_unacknowledged",
                                    "messages_ready", "--no-table-headers")
        line, = [ln for ln in listing.splitlines() if ln.startswith(feed.queue + "\t")]
        return line.split("\t")[1:]
    for _ in range(50):         # the broker's figures lag a little
        if await unacked() == ["0", "0"]:
            break
        await deferLater(reactor, 0.1, lambda: None)
    assert await unacked() == ["0", "0"]


@pytest_twisted.ensureDeferred
async def test_publish_while_reconnecting_fails_clearly(amqp, need_rabbitmqctl):
    feed = await amqp.started()
    pid = await connection_pid(feed.client)
    await rabbitmqctl("close_connection", pid, "test")
    await eventually(lambda: feed.state != "connected", what="the feed to notice")
    assert feed.health()["up"] is False
    with pytest.raises(NotConnected):
        await feed.publish([stream(1)])
    await eventually(lambda: feed.state == "connected", what="the reconnection")


@pytest_twisted.ensureDeferred
async def test_queue_lost_means_a_feed_gap(amqp):
    sink = RecordingSink()
    feed = await amqp.started(sink=sink)
    assert sink.gaps == 0  # not on the first connection
    publisher = await amqp.publisher()
    channel = await publisher.client.open_channel()
    first_client = feed.client
    await channel.queue_delete(queue=feed.queue)  # the broker cancels our consumer
    await eventually(lambda: feed.state == "connected" and feed.client is not first_client,
                     what="the reconnection")
    assert sink.gaps == 1
    assert feed.stats()["gaps"] == 1
    await feed.publish([stream(1)])
    await eventually(lambda: sink.ids == [1], what="changes after the gap")


@pytest_twisted.ensureDeferred
async def test_changes_wait_in_the_queue_while_the_node_is_down(amqp):
    sink = RecordingSink()
    feed = await amqp.started(sink=sink)
    await feed.stop()
    publisher = await amqp.publisher()
    for i in range(5):
        await publisher.publisher.publish(encode_changes([stream(i)]), message_properties(0))
    feed.start(sink)
    await eventually(lambda: sink.ids == list(range(5)), what="the changes kept while down")
    assert sink.gaps == 0


@pytest_twisted.ensureDeferred
async def test_a_second_process_with_the_same_node_id_is_refused(amqp):
    first = RecordingSink()
    feed = await amqp.started("same", sink=first)
    twin = amqp.feed("same")
    twin.start(RecordingSink())
    await eventually(lambda: twin.stats()["connect_failures"] >= 2,
                     what="the twin to be refused")
    assert twin.health()["state"] == "connecting"
    await twin.stop()
    await feed.publish([stream(1)])
    await eventually(lambda: first.ids == [1], what="the first node to go on")


@pytest_twisted.ensureDeferred
async def test_queue_layout(amqp, need_rabbitmqctl):
    feed = await amqp.started(queue_ttl=90)
    listing = await rabbitmqctl("list_queues", "name", "durable", "auto_delete",
                                "exclusive", "arguments", "--no-table-headers")
    line, = [ln for ln in listing.splitlines() if ln.startswith(feed.queue + "\t")]
    assert line.split("\t")[1:4] == ["true", "false", "false"]
    assert '"x-expires",90000' in line


@pytest_twisted.ensureDeferred
async def test_broker_restart(amqp, need_rabbitmqctl):
    """stop_app/start_app: the feed reconnects, the durable queue kept the
    changes published before the restart, no gap, new changes flow."""
    sink = RecordingSink()
    feed = await amqp.started(sink=sink)
    publisher = await amqp.publisher()
    await feed.stop()
    for i in range(3):  # waiting in the queue across the restart
        await publisher.publisher.publish(encode_changes([stream(i)]), message_properties(0))
    feed.start(sink)
    await eventually(lambda: sink.ids == [0, 1, 2], what="the first changes")
    await feed.stop()
    for i in range(3, 6):
        await publisher.publisher.publish(encode_changes([stream(i)]), message_properties(0))
    feed.start(sink)
    await eventually(lambda: feed.state == "connected", what="the feed")
    try:
        await rabbitmqctl("stop_app")
        await eventually(lambda: feed.state != "connected", 20, "the feed to notice")
        assert not feed.health()["up"]
    finally:
        await rabbitmqctl("start_app")
        await rabbitmqctl("await_startup")
    await eventually(lambda: feed.state == "connected", 30, "the reconnection")
    count = await feed.publish([stream(100)])
    assert count == 1
    await eventually(lambda: 100 in sink.ids, 10, "a change after the restart")
    assert set(range(6)) <= set(sink.ids)
    assert sink.gaps == 0
    assert feed.stats()["reconnects"] >= 1


@pytest_twisted.ensureDeferred
async def test_publish_cli(amqp):
    sink = RecordingSink()
    await amqp.started(sink=sink)
    change = '{"type": "Stream", "action": "insert", "obj": {"id": 1}}'
    batch = ('[{"type": "Stream", "action": "update", "obj": {"id": 2}},'
             ' {"type": "Stream", "action": "delete", "obj": {"id": 3}}]')
    out, err, code = await run_cli("--amqp", amqp.url, "--exchange", amqp.exchange,
                                   change, batch)
    assert code == 0, err
    assert out.decode().startswith("3 change(s) in 2 message(s) confirmed")
    await eventually(lambda: sink.ids == [1, 2, 3], what="the published changes")


@pytest_twisted.ensureDeferred
async def test_publish_cli_errors(broker_url):
    out, err, code = await run_cli("--amqp", broker_url, "{not json")
    assert code == 2 and b"argument 1: the body is not JSON" in err
    url = f"amqp://guest:guest@127.0.0.1:{free_port()}/"
    out, err, code = await run_cli(
        "--amqp", url, '{"type": "S", "action": "upsert", "obj": {"id": 1}}')
    assert code == 1 and b"cannot publish to" in err and b"refused" in err


@pytest_twisted.ensureDeferred
async def test_existing_queue_with_another_ttl_is_used_as_it_is(amqp):
    old = await amqp.started(queue_ttl=120)
    await old.stop()
    publisher = await amqp.publisher()
    await publisher.publisher.publish(encode_changes([stream(1)]), message_properties(0))
    sink = RecordingSink()
    await amqp.started(sink=sink, queue_ttl=60)
    await eventually(lambda: sink.ids == [1], what="the change kept in the old queue")
    assert sink.gaps == 0


@pytest_twisted.ensureDeferred
async def test_publish_cli_reads_json_lines_from_stdin(amqp):
    from twisted.internet import reactor
    from twisted.internet.protocol import ProcessProtocol

    sink = RecordingSink()
    await amqp.started(sink=sink)
    lines = ('{"type": "Stream", "action": "upsert", "obj": {"id": 1}}\n\n'
             '[{"type": "Stream", "action": "upsert", "obj": {"id": 2}}]\n').encode()

    class Collect(ProcessProtocol):
        def __init__(self):
            from twisted.internet.defer import Deferred

            self.out, self.done = b"", Deferred()

        def connectionMade(self):
            self.transport.write(lines)
            self.transport.closeStdin()

        def outReceived(self, data):
            self.out += data

        def processEnded(self, reason):
            self.done.callback(reason.value.exitCode)

    proto = Collect()
    reactor.spawnProcess(proto, sys.executable,
                         [sys.executable, "-m", "pushengine.tools.publish_cli", "--amqp", amqp.url,
                          "--exchange", amqp.exchange], env=dict(os.environ), path=ROOT)
    code = await proto.done
    assert code == 0
    assert proto.out.decode().startswith("2 change(s) in 2 message(s)")
    await eventually(lambda: sink.ids == [1, 2], what="the published lines")


@pytest_twisted.ensureDeferred
async def test_wal_positions_stamp_transactions_and_drop_a_relays_copies(amqp):
    """A relay's messages carry their WAL position in headers: their changes
    get the transaction id, and what a restarted relay sends again is
    dropped."""
    from pushengine.core.positions import Position

    sink = RecordingSink()
    feed = await amqp.started(sink=sink)
    publisher = await amqp.publisher()
    sent = [(1, Position(0x16B374D848, 900, 0)), (2, Position(0x16B374D848, 900, 1)),
            (2, Position(0x16B374D848, 900, 1)),           # the relay restarted
            (3, Position(0x16B374D900, 901, 0))]
    for n, position in sent:
        props = message_properties(0)
        props["headers"] = {**props["headers"], **position.headers()}
        await publisher.publisher.publish(encode_changes([stream(n)]), props)
    await eventually(lambda: feed.stats()["messages_received"] == 4, what="every message")
    assert [(c.id, c.xid) for c in sink.changes] == [(1, 900), (2, 900), (3, 901)]
    assert feed.stats()["wal_copies_dropped"] == 1


DEBEZIUM_EVENT = b"""{"schema": {"type": "struct", "name": "app.public.streams.Envelope",
 "optional": false, "fields": [
  {"type": "struct", "optional": true, "field": "before", "name": "app.public.streams.Value",
   "fields": [{"type": "int32", "optional": false, "field": "id"},
              {"type": "string", "optional": true, "field": "title"},
              {"type": "int64", "optional": true, "field": "starts_at",
               "name": "io.debezium.time.MicroTimestamp", "version": 1}]},
  {"type": "struct", "optional": true, "field": "after", "name": "app.public.streams.Value",
   "fields": [{"type": "int32", "optional": false, "field": "id"},
              {"type": "string", "optional": true, "field": "title"},
              {"type": "int64", "optional": true, "field": "starts_at",
               "name": "io.debezium.time.MicroTimestamp", "version": 1}]},
  {"type": "struct", "optional": false, "field": "source",
   "name": "io.debezium.connector.postgresql.Source", "fields": []},
  {"type": "string", "optional": false, "field": "op"},
  {"type": "int64", "optional": true, "field": "ts_ms"}]},
 "payload": {"before": null,
  "after": {"id": 11, "title": "cat", "starts_at": 1709288130123456},
  "source": {"version": "2.7.3.Final", "connector": "postgresql", "name": "app",
   "ts_ms": 1709288130100, "snapshot": "false", "db": "appdb",
   "sequence": "[\\"24023000\\",\\"24023128\\"]", "schema": "public", "table": "streams",
   "txId": 771, "lsn": 24023128, "xmin": null},
  "op": "c", "ts_ms": 1709288130200}}"""


@pytest_twisted.ensureDeferred
async def test_a_debezium_event_published_to_the_exchange_is_applied(amqp):
    """As Debezium Server's RabbitMQ sink publishes: the event as the body,
    persistent, no message id, a routing key of its own."""
    from pushengine.views.spec import Table

    sink = RecordingSink()
    feed = await amqp.started(sink=sink, format="debezium",
                              tables={"Stream": Table("streams", "public")})
    publisher = await amqp.publisher()
    properties = {"delivery-mode": 2, "headers": {}}
    await publisher.publisher.publish(b"default", properties,
                                      routing_key="app.public.streams")    # a tombstone
    await publisher.publisher.publish(DEBEZIUM_EVENT, properties,
                                      routing_key="app.public.streams")
    await feed.publish([stream(12)])       # the engine's own messages still pass
    await eventually(lambda: len(sink.changes) == 2, what="both changes")
    assert sink.changes == [
        Change("Stream", "upsert", 11, {"id": 11, "title": "cat",
                                        "starts_at": "2024-03-01T10:15:30.123456Z"},
               xid=771),
        stream(12)]
    stats = feed.stats()
    assert stats["ignored_events"] == 1 and stats["malformed_messages"] == 0
