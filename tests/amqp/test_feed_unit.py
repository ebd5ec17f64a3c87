"""AmqpFeed without a broker: message handling, stats, back-off wiring."""
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import globalLogPublisher
from twisted.python.failure import Failure

from pushengine.amqp import AmqpFeed, NotConnected
from pushengine.amqp.feed import _Session, message_time
from pushengine.amqp.publisher import message_properties
from pushengine.core.changes import Change
from pushengine.core.interfaces import ChangeFeed

from pushengine.amqp.spec import load_spec
from tests.amqp.conftest import RecordingSink

SPEC = load_spec()


class FakeContent:
    def __init__(self, body, properties=None):
        self.body = body
        self.properties = properties or {}


class FakeMessage:
    def __init__(self, body, tag=1, properties=None, redelivered=False):
        self.content = FakeContent(body, properties)
        self.delivery_tag = tag
        self.redelivered = redelivered


@pytest.fixture
def logged():
    events = []
    globalLogPublisher.addObserver(events.append)
    yield events
    globalLogPublisher.removeObserver(events.append)


def texts(events, level=None):
    from twisted.logger import formatEvent

    return [formatEvent(e) for e in events
            if e.get("log_namespace", "").startswith("pushengine.amqp")
            and (level is None or e["log_level"].name == level)]


def feed_with_sink(clock=None):
    feed = AmqpFeed(clock or MemoryReactorClock(), "amqp://guest:guest@127.0.0.1:1/",
                    node_id="n1")
    sink = RecordingSink()
    feed._sink = sink
    return feed, sink


def test_satisfies_the_changefeed_protocol():
    feed, _ = feed_with_sink()
    assert isinstance(feed, ChangeFeed)
    assert feed.queue == "pushengine.node.n1"


def test_one_change_str_or_bytes_body():
    feed, sink = feed_with_sink()
    feed.handle_message(FakeMessage('{"type":"Stream","action":"insert","obj":{"id":1}}'))
    feed.handle_message(FakeMessage(b'{"type":"Stream","action":"delete","obj":{"id":2}}'))
    assert [(c.id, c.action) for c in sink.changes] == [(1, "upsert"), (2, "delete")]
    assert feed.stats()["changes_applied"] == 2


def test_batch_in_order_as_one_call():
    feed, sink = feed_with_sink()
    body = "[" + ",".join(
        f'{{"type":"Stream","action":"upsert","obj":{{"id":{i}}}}}' for i in range(5)) + "]"
    feed.handle_message(FakeMessage(body))
    assert [[c.id for c in b] for b in sink.batches] == [[0, 1, 2, 3, 4]]


@pytest.mark.parametrize("body", [
    b"not json", b"\xff\xfe{}", b'{"action":"upsert","obj":{"id":1}}',
    b'{"type":"Stream","action":"upsert","obj":{}}',
    b'{"type":"Stream","action":"frobnicate","obj":{"id":1}}',
    b'{"type":7,"action":"upsert","obj":{"id":1}}',
    b'{"type":"Stream","action":"upsert","obj":[1]}',
    b'{"type":"Stream","action":"upsert","obj":{"id":true}}',
    b"[1, 2]", b"null",
])
def test_malformed_messages_are_counted_logged_once_without_traceback(body, logged):
    feed, sink = feed_with_sink()
    feed.handle_message(FakeMessage(body, tag=9))
    stats = feed.stats()
    assert stats["malformed_messages"] == 1 and stats["messages_received"] == 1
    assert sink.changes == []
    warnings = texts(logged, "warn")
    assert len(warnings) == 1 and "message 9" in warnings[0]
    assert not any(e.get("log_failure") for e in logged)


def test_good_changes_of_a_partly_bad_batch_are_applied():
    feed, sink = feed_with_sink()
    feed.handle_message(FakeMessage(
        b'[{"type":"S","action":"upsert","obj":{"id":1}}, {"type":"S"},'
        b' {"type":"S","action":"delete","obj":{"id":3}}]'))
    assert sink.ids == [1, 3]
    stats = feed.stats()
    assert stats["malformed_messages"] == 1 and stats["malformed_changes"] == 1
    assert stats["changes_applied"] == 2


def test_a_failing_sink_is_counted_and_the_feed_goes_on(logged):
    feed, sink = feed_with_sink()
    sink.fail_on = {1}
    feed.handle_message(FakeMessage(b'{"type":"S","action":"upsert","obj":{"id":1}}'))
    feed.handle_message(FakeMessage(b'{"type":"S","action":"upsert","obj":{"id":2}}'))
    assert sink.ids == [2]
    assert feed.stats()["sink_errors"] == 1
    assert any("sink failed" in t for t in texts(logged))


def test_feed_lag_from_the_message_time():
    clock = MemoryReactorClock()
    clock.advance(1_700_000_010.5)
    feed, _ = feed_with_sink(clock)
    assert "feed_lag_seconds" not in feed.stats()
    feed.handle_message(FakeMessage(b"[]", properties=message_properties(1_700_000_010.25)))
    assert feed.stats()["feed_lag_seconds"] == pytest.approx(0.25)
    feed.handle_message(FakeMessage(b"[]", properties={"timestamp": 1_700_000_000}))
    assert feed.stats()["feed_lag_seconds"] == pytest.approx(10.5)


def test_message_time_prefers_milliseconds():
    assert message_time({"timestamp": 5, "headers": {"timestamp_ms": "5250"}}) == 5.25
    assert message_time({"timestamp": 5, "headers": {"timestamp_ms": 5250}}) == 5.25
    assert message_time({"headers": {"timestamp_ms": "soon"}}) is None
    assert message_time({}) is None


def test_health_and_stats_while_stopped():
    feed, _ = feed_with_sink()
    assert feed.health() == {
        "up": False, "state": "stopped", "broker": "amqp://guest@127.0.0.1:1/",
        "exchange": "pushengine.changes", "node_id": "n1", "queue": "pushengine.node.n1",
        "routing": "fanout", "format": "json"}
    stats = feed.stats()
    assert stats["connected"] == 0 and stats["reconnects"] == 0
    assert all(isinstance(v, (int, float)) for v in stats.values())


def test_publish_when_not_connected_fails_clearly():
    feed, _ = feed_with_sink()
    errors = []
    feed.publish([Change("S", "upsert", 1, {"id": 1})]).addErrback(errors.append)
    assert errors[0].check(NotConnected)
    assert "not connected" in str(errors[0].value)
    results = []
    feed.publish([]).addCallback(results.append)
    assert results == [0]


def test_retries_follow_the_policy_and_are_logged_once(logged):
    reactor = MemoryReactorClock()
    attempts = []

    def policy(attempt):
        attempts.append(attempt)
        return 2.0

    feed = AmqpFeed(reactor, "amqp://guest:guest@127.0.0.1:5672/", node_id="n",
                    retry_policy=policy)
    feed.start(RecordingSink())
    for expected in range(1, 4):
        host, port, factory, timeout, bind = reactor.tcpClients[-1]
        assert (host, port) == ("127.0.0.1", 5672)
        factory.clientConnectionFailed(reactor.connectors[-1],
                                       Failure(ConnectionRefusedError()))
        reactor.advance(0.3)  # HostnameEndpoint gives up on its only address
        assert attempts == list(range(1, expected + 1))
        reactor.advance(1.9)
        assert len(reactor.tcpClients) == expected  # still waiting
        reactor.advance(0.2)
        assert len(reactor.tcpClients) == expected + 1  # retried
    assert feed.health()["state"] == "connecting"
    warnings = texts(logged, "warn")
    assert len(warnings) == 1 and "cannot connect" in warnings[0]
    assert not any("Scheduling retry" in str(e.get("log_format")) for e in logged)
    feed.stop()
    assert feed.health()["state"] == "stopped"


def test_default_retry_policy_is_capped_exponential_with_jitter():
    from pushengine.amqp.feed import default_retry_policy

    policy = default_retry_policy()
    delays = [policy(n) for n in range(1, 30)]
    assert 1.5 <= delays[0] <= 2.5
    assert all(d <= 31.0 for d in delays) and delays[-1] >= 30.0
    assert len({round(policy(5), 6) for _ in range(20)}) > 1  # jitter


class FakeChannel:
    closed = False
    id = 1


def ack_frames(data: bytes) -> list[tuple[int, bool]]:
    """The basic.ack frames in bytes a client wrote: (delivery tag, multiple)."""
    from pushengine.amqp.codec import decode_frame

    acks, pos = [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos + 3:pos + 7], "big")
        frame = decode_frame(SPEC, data[pos:pos + 8 + size])
        pos += 8 + size
        payload = frame.payload
        if getattr(payload, "method", None) is not None and payload.method.name == "ack":
            acks.append(tuple(payload.args))
    return acks


def consuming_session(sink, clock=None, started=True, **feed_args):
    """A feed's session on a FeedClient over a StringTransport, consuming
    tag "ctag" on channel 1."""
    from twisted.internet.testing import StringTransport

    from pushengine.amqp.connection import FeedClient

    clock = clock or MemoryReactorClock()
    feed = AmqpFeed(clock, "amqp://h/", node_id="n", **feed_args)
    feed._sink = sink
    client = FeedClient("/", heartbeat=0, clock=clock, connection_name="test")
    transport = StringTransport()
    client.makeConnection(transport)
    transport.clear()
    session = _Session(feed, client, FakeChannel(), None)
    client.consumers["ctag"] = session
    if started:
        session.start()
    return feed, session, client, transport


def deliveries(*messages, chunk=1000):
    """Wire bytes of basic.deliver messages (tag, body, properties, redelivered)."""
    from txamqp.connection import Body, Frame, Header, Method

    from pushengine.amqp.codec import encode_frame

    basic = SPEC.classes.byname["basic"]
    deliver = basic.methods.byname["deliver"]
    out = []
    for tag, body, properties, redelivered in messages:
        frames = [Frame(1, Method(deliver, "ctag", tag, redelivered, "ex", "")),
                  Frame(1, Header(basic, 0, len(body), **properties))]
        frames += [Frame(1, Body(body[i:i + chunk])) for i in range(0, len(body), chunk)]
        out += [encode_frame(SPEC, f) for f in frames]
    return b"".join(out)


ONE_CHANGE = b'{"type":"S","action":"upsert","obj":{"id":%d}}'


def test_the_messages_of_one_read_are_applied_together_then_acked_once():
    """One apply_changes for every message of a read, then one basic.ack
    (multiple) for the last tag, and not a byte of ack before the apply."""
    written_at_apply = []

    class Sink(RecordingSink):
        def apply_changes(self, changes):
            written_at_apply.append(transport.value())
            super().apply_changes(changes)
    sink = Sink()
    feed, session, client, transport = consuming_session(sink)
    client.dataReceived(deliveries(*[(tag, ONE_CHANGE % tag, message_properties(0), False)
                                     for tag in range(1, 6)]))
    assert sink.batches == [[Change("S", "upsert", i, {"id": i}) for i in range(1, 6)]]
    assert written_at_apply == [b""]
    assert ack_frames(transport.value()) == [(5, True)]
    assert (feed.messages_received, feed.changes_applied, feed.batches, feed.acks) == \
        (5, 5, 1, 1)
    transport.clear()
    client.dataReceived(deliveries((6, ONE_CHANGE % 6, {}, False)))
    assert sink.ids == [1, 2, 3, 4, 5, 6]
    assert ack_frames(transport.value()) == [(6, True)]
    assert feed.stats()["acks"] == 2 and feed.stats()["batches"] == 2


def test_a_message_split_over_reads_is_applied_once_whole():
    sink = RecordingSink()
    feed, session, client, transport = consuming_session(sink)
    data = deliveries((1, ONE_CHANGE % 1, message_properties(0), False),
                      (2, ONE_CHANGE % 2, message_properties(0), False), chunk=7)
    cut = len(data) - 20
    client.dataReceived(data[:cut])
    assert sink.ids == [1] and ack_frames(transport.value()) == [(1, True)]
    client.dataReceived(data[cut:])
    assert sink.ids == [1, 2] and ack_frames(transport.value()) == [(1, True), (2, True)]


def test_a_failing_sink_costs_the_batch_which_is_logged_counted_and_acked(logged):
    """Today's policy for a sink that raises: logged, counted, acked (the
    engine isolates a failing change itself; this is a bug's path)."""
    sink = RecordingSink()
    sink.fail_on = {2}
    feed, session, client, transport = consuming_session(sink)
    client.dataReceived(deliveries(*[(tag, ONE_CHANGE % tag, {}, False)
                                     for tag in range(1, 4)]))
    assert feed.sink_errors == 1 and feed.changes_applied == 0
    assert ack_frames(transport.value()) == [(3, True)]
    assert any("messages 1 to 3" in t for t in texts(logged, "critical"))
    client.dataReceived(deliveries((4, ONE_CHANGE % 4, {}, False)))
    assert sink.ids == [4]


def test_deliveries_before_start_wait_for_it_and_stop_does_not_ack_them():
    """The deliveries that come with basic.consume's reply are held until the
    session is up (the gap is reported first); held ones are never acked."""
    sink = RecordingSink()
    feed, session, client, transport = consuming_session(sink, started=False)
    client.dataReceived(deliveries((1, ONE_CHANGE % 1, {}, False),
                                   (2, ONE_CHANGE % 2, {}, False)))
    assert sink.ids == [] and transport.value() == b""
    session.flush_acks()
    assert transport.value() == b""
    session.start()
    assert sink.batches == [[Change("S", "upsert", 1, {"id": 1}),
                             Change("S", "upsert", 2, {"id": 2})]]
    assert ack_frames(transport.value()) == [(2, True)]


def test_redeliveries_and_copies_within_one_batch_are_dropped():
    sink = RecordingSink()
    feed, session, client, transport = consuming_session(sink)
    copy = {"message-id": "c", "headers": {"copies": "2"}}
    client.dataReceived(deliveries(
        (1, ONE_CHANGE % 1, {"message-id": "a"}, False),
        (2, ONE_CHANGE % 1, {"message-id": "a"}, True),     # a redelivery of 1
        (3, ONE_CHANGE % 3, copy, False),
        (4, ONE_CHANGE % 3, copy, False),                   # its second copy
        (5, ONE_CHANGE % 5, {"message-id": "b"}, True)))    # never applied: applied
    assert sink.ids == [1, 3, 5]
    assert feed.redeliveries_dropped == 1 and feed.duplicate_copies == 1
    assert ack_frames(transport.value()) == [(5, True)]


def test_deliveries_to_another_consumer_tag_take_txamqp_path():
    sink = RecordingSink()
    feed, session, client, transport = consuming_session(sink)
    client.consumers.clear()
    client.consumers["other"] = session
    client.channel(1)
    queue = client.queues["ctag"] = __import__("txamqp.queue", fromlist=["x"]) \
        .TimeoutDeferredQueue(clock=feed.reactor)
    client.dataReceived(deliveries((1, ONE_CHANGE % 1, {}, False)))
    assert sink.ids == [] and len(queue.pending) == 1


def test_argument_checks():
    with pytest.raises(ValueError):
        AmqpFeed(MemoryReactorClock(), "amqp://h/", prefetch=0)
    with pytest.raises(ValueError):
        AmqpFeed(MemoryReactorClock(), "amqp://h/", prefetch=65536)
    with pytest.raises(ValueError):
        AmqpFeed(MemoryReactorClock(), "http://h/")


def test_as_service_starts_and_stops_the_feed():
    from twisted.application.service import MultiService

    reactor = MemoryReactorClock()
    feed = AmqpFeed(reactor, "amqp://h/", node_id="n")
    parent = MultiService()
    feed.as_service(RecordingSink()).setServiceParent(parent)
    parent.startService()
    assert feed.service.running and feed.health()["state"] == "connecting"
    assert len(reactor.tcpClients) == 1
    done = []
    parent.stopService().addCallback(done.append)
    assert done and feed.health()["state"] == "stopped"


@given(st.one_of(st.text(max_size=40), st.binary(max_size=20),
                 st.sampled_from(["²", "١٢٣", "1" * 5000, " 5250", "+5250", "5_250", "5250"])))
def test_a_timestamp_header_is_ascii_digits_or_ignored(value):
    """SPEC 18, numbers in headers: a ``timestamp_ms`` header is read only
    when it is ASCII digits of bounded length; anything else is counted and
    ignored (the ``timestamp`` property is used), never an exception, and the
    message's changes are applied as usual."""
    clock = MemoryReactorClock()
    clock.advance(10.0)
    feed, sink = feed_with_sink(clock)
    props = {"timestamp": 4, "headers": {"timestamp_ms": value}}
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    strict = re.fullmatch(r"[0-9]{1,15}", text) is not None and int(text) > 0
    assert message_time(props) == (int(text) / 1000.0 if strict else 4.0)
    feed.handle_message(FakeMessage(b'{"type":"S","action":"upsert","obj":{"id":2}}',
                                    properties=props))
    assert sink.ids == [2]
    assert feed.stats()["bad_headers"] == (0 if strict else 1)


ONE = '{"type": "Stream", "action": "upsert", "obj": {"id": 1, "n": %d}}'


def test_a_redelivered_message_applied_before_is_dropped():
    """The broker delivers again what was not acked when the connection
    dropped; what this process applied already is not applied twice."""
    feed, sink = feed_with_sink()
    feed.handle_message(FakeMessage(ONE % 1, 1, {"message-id": "a"}))
    feed.handle_message(FakeMessage(ONE % 2, 2, {"message-id": "b"}))
    feed.handle_message(FakeMessage(ONE % 1, 1, {"message-id": "a"}, redelivered=True))
    feed.handle_message(FakeMessage(ONE % 2, 2, {"message-id": "b"}, redelivered=True))
    feed.handle_message(FakeMessage(ONE % 3, 3, {"message-id": "c"}, redelivered=True))
    assert [c.obj["n"] for batch in sink.batches for c in batch] == [1, 2, 3]
    assert feed.redeliveries_dropped == 2
    assert feed.stats()["redeliveries_dropped"] == 2


def test_without_a_message_id_or_not_redelivered_a_message_is_applied():
    """No id: nothing to know it by. The same id again, not redelivered and
    not a copy: a backend that reuses ids; applying is the safe side."""
    feed, sink = feed_with_sink()
    feed.handle_message(FakeMessage(ONE % 1, 1))
    feed.handle_message(FakeMessage(ONE % 1, 1, redelivered=True))
    feed.handle_message(FakeMessage(ONE % 2, 2, {"message-id": "x"}))
    feed.handle_message(FakeMessage(ONE % 3, 3, {"message-id": "x"}))
    assert [c.obj["n"] for batch in sink.batches for c in batch] == [1, 1, 2, 3]
    assert feed.redeliveries_dropped == 0


def test_the_ids_remembered_are_bounded():
    from pushengine.amqp import feed as feed_module

    feed, sink = feed_with_sink()
    for i in range(feed_module.SEEN_MESSAGES + 5):
        feed.handle_message(FakeMessage(ONE % i, i + 1, {"message-id": f"m{i}"}))
    assert len(feed._applied) == feed_module.SEEN_MESSAGES
    # the oldest id was forgotten: its redelivery is applied (the safe side)
    feed.handle_message(FakeMessage(ONE % 0, 1, {"message-id": "m0"}, redelivered=True))
    feed.handle_message(FakeMessage(ONE % 9, 1, {"message-id": "m9"}, redelivered=True))
    assert feed.redeliveries_dropped == 1


def test_every_message_the_package_publishes_has_its_own_id():
    from pushengine.amqp.publisher import copy_properties, message_properties

    ids = {message_properties(0.0)["message-id"] for _ in range(1000)}
    assert len(ids) == 1000
    assert copy_properties(0.0, "same", 2)["message-id"] == "same"


# WAL positions (a relay's pushengine-lsn, pushengine-xid, pushengine-part)

def wal(lsn, xid, part=0, **more):
    from pushengine.core.positions import Position

    return {"headers": {**Position(lsn, xid, part).headers(), **more}}


TWO = b'[{"type":"S","action":"upsert","obj":{"id":%d}},' \
      b'{"type":"S","action":"delete","obj":{"id":%d}}]'


def test_the_changes_of_a_message_with_a_position_carry_its_transaction():
    feed, sink = feed_with_sink()
    feed.handle_message(FakeMessage(TWO % (1, 2), 1, wal(0x16B374D848, 771)))
    feed.handle_message(FakeMessage(ONE_CHANGE % 3, 2))                    # no position
    feed.handle_message(FakeMessage(ONE_CHANGE % 4, 3, {"headers": {"timestamp_ms": "5"}}))
    assert [(c.id, c.xid) for c in sink.changes] == [(1, 771), (2, 771), (3, None),
                                                     (4, None)]
    assert sink.changes[0] == Change("S", "upsert", 1, {"id": 1}, xid=771)
    assert feed.stats()["wal_copies_dropped"] == 0 and feed.stats()["bad_headers"] == 0


def test_messages_at_or_below_the_last_position_are_copies_and_dropped():
    """A relay that restarts sends its last messages again: the watermark
    (commit LSN, part) drops them, whatever their message ids."""
    feed, sink = feed_with_sink()
    for tag, (lsn, part, n) in enumerate([(100, 0, 1), (100, 1, 2), (200, 0, 3),
                                          (100, 1, 2),      # again, after a restart
                                          (200, 0, 3),
                                          (200, 1, 4), (150, 0, 9), (300, 0, 5)], 1):
        feed.handle_message(FakeMessage(ONE_CHANGE % n, tag,
                                        {**wal(lsn, lsn // 10, part), "message-id": f"m{tag}"}))
    assert [(c.id, c.xid) for c in sink.changes] == [(1, 10), (2, 10), (3, 20), (4, 20),
                                                     (5, 30)]
    assert feed.wal_copies_dropped == 3 and feed.stats()["wal_copies_dropped"] == 3
    assert feed.redeliveries_dropped == 0 and feed.malformed_messages == 0


@pytest.mark.parametrize("headers", [
    {"pushengine-lsn": "not an lsn", "pushengine-xid": "5"},
    {"pushengine-lsn": "0/10"},                                     # no xid
    {"pushengine-lsn": "0/10", "pushengine-xid": "-1"},
    {"pushengine-lsn": "0/10", "pushengine-xid": str(2 ** 64)},
    {"pushengine-lsn": "123456789/0", "pushengine-xid": "5"},
    {"pushengine-lsn": "0/10", "pushengine-xid": "5", "pushengine-part": "x"},
    {"pushengine-lsn": b"\xff", "pushengine-xid": 5},
])
def test_a_malformed_position_is_applied_as_without_one(headers):
    feed, sink = feed_with_sink()
    feed.handle_message(FakeMessage(ONE_CHANGE % 1, 1, wal(0x100, 7)))
    feed.handle_message(FakeMessage(ONE_CHANGE % 2, 2, {"headers": headers}))
    feed.handle_message(FakeMessage(ONE_CHANGE % 3, 3, {"headers": headers}))
    assert [(c.id, c.xid) for c in sink.changes] == [(1, 7), (2, None), (3, None)]
    assert feed.stats()["bad_headers"] == 2 and feed.wal_copies_dropped == 0


def test_positions_read_from_the_wire_in_a_batch():
    """The headers come through the delivery path's short-string reader; one
    batch holds new messages and copies."""
    sink = RecordingSink()
    feed, session, client, transport = consuming_session(sink)
    props = lambda lsn, part: {**message_properties(0), **wal(lsn, 42, part,  # noqa: E731
                                                              timestamp_ms="1000")}
    client.dataReceived(deliveries(
        (1, ONE_CHANGE % 1, props(0x16B374D848, 0), False),
        (2, ONE_CHANGE % 2, props(0x16B374D848, 1), False),
        (3, ONE_CHANGE % 2, props(0x16B374D848, 1), False),
        (4, ONE_CHANGE % 3, props(0x16B374D900, 0), False)))
    assert [(c.id, c.xid) for c in sink.changes] == [(1, 42), (2, 42), (3, 42)]
    assert len(sink.batches) == 1 and feed.wal_copies_dropped == 1
    assert ack_frames(transport.value()) == [(4, True)]


def test_a_relay_gap_message_applies_what_came_before_then_reads_the_views_again():
    """The relay says its WAL stream has a gap (a TRUNCATE): the changes
    before it are applied first, then the sink re-reads its views."""
    from pushengine.amqp.delivery import Delivery
    from pushengine.core.positions import GAP_HEADER, Position

    calls = []

    class Sink:
        def apply_changes(self, changes):
            calls.append(("apply", [c.id for c in changes]))

        def feed_gap(self):
            calls.append(("gap",))

    feed = AmqpFeed(MemoryReactorClock(), "amqp://guest:guest@127.0.0.1:5672/")
    feed._sink = Sink()     # as start() would, without connecting
    body = b'{"type":"Stream","action":"upsert","obj":{"id":1}}'
    feed.apply_deliveries([
        Delivery(1, False, "m1", Position(100, 7, 0).headers(), None, body),
        Delivery(2, False, "m2", {GAP_HEADER: "1"}, None, b"[]"),
        Delivery(3, False, "m3", Position(200, 8, 0).headers(), None,
                 body.replace(b'"id":1', b'"id":2')),
    ])
    assert calls == [("apply", [1]), ("gap",), ("apply", [2])]
    assert feed.stats()["gaps"] == 1
