"""The lean basic.deliver reader, against frames made by the general codec."""
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from txamqp.connection import Body, Frame, Header, Method

from pushengine.amqp.codec import FrameError, decode_frame, encode_frame
from pushengine.amqp.connection import FeedClient
from pushengine.amqp.delivery import Delivery, ack_frame, read_deliver, read_header
from pushengine.amqp.spec import load_spec

SPEC = load_spec()
BASIC = SPEC.classes.byname["basic"]
DELIVER = BASIC.methods.byname["deliver"]


class Collect:
    """A consumer that records deliveries and the reads that ended."""

    def __init__(self):
        self.deliveries: list[Delivery] = []
        self.reads = 0

    def deliver(self, delivery):
        self.deliveries.append(delivery)

    def deliveries_done(self):
        self.reads += 1


def client_with(consumer, tag="ctag"):
    client = FeedClient("/", heartbeat=0, clock=Clock(), connection_name="test")
    transport = StringTransport()
    client.makeConnection(transport)
    client.consumers[tag] = consumer
    return client, transport


def frames_of(tag, body, frame_max, properties=None, redelivered=False, channel=1,
              consumer="ctag"):
    """The wire bytes of one delivery, its body cut in frames of at most
    ``frame_max`` bytes (as the broker does: frame_max less 8 of framing)."""
    frames = [Frame(channel, Method(DELIVER, consumer, tag, redelivered, "ex", "key")),
              Frame(channel, Header(BASIC, 0, len(body), **(properties or {})))]
    frames += [Frame(channel, Body(body[i:i + frame_max]))
               for i in range(0, len(body), frame_max)]
    return b"".join(encode_frame(SPEC, f) for f in frames)


def feed_in_reads(client, data, cuts):
    """Give ``data`` to the client in reads cut at ``cuts``."""
    points = sorted({c % (len(data) + 1) for c in cuts}) + [len(data)]
    start = 0
    for point in points:
        if point > start:
            client.dataReceived(data[start:point])
            start = point


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=3000), frame_max=st.integers(1, 4096),
       cuts=st.lists(st.integers(0, 10_000), max_size=6), tag=st.integers(1, 2**64 - 1),
       redelivered=st.booleans())
def test_any_body_over_frames_of_any_size_and_reads_decodes_to_the_same_bytes(
        body, frame_max, cuts, tag, redelivered):
    consumer = Collect()
    client, _ = client_with(consumer)
    data = frames_of(tag, body, frame_max, {"message-id": "m"}, redelivered)
    feed_in_reads(client, data, cuts)
    delivery, = consumer.deliveries
    assert delivery.body == body and isinstance(delivery.body, bytes)
    assert (delivery.delivery_tag, delivery.redelivered) == (tag, redelivered)
    assert delivery.message_id == "m"
    assert consumer.reads >= 1


header_values = st.recursive(
    st.one_of(st.booleans(), st.integers(-2**63, 2**63 - 1), st.text(max_size=20),
              st.binary(max_size=10).filter(lambda b: not _utf8(b)),
              st.floats(allow_nan=False), st.none()),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12)


def _utf8(raw):
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


@settings(max_examples=200, deadline=None)
@given(headers=st.dictionaries(st.text(max_size=12), header_values, max_size=6),
       message_id=st.one_of(st.none(), st.text(min_size=1, max_size=40)),
       timestamp=st.one_of(st.none(), st.integers(0, 2**64 - 1)),
       others=st.fixed_dictionaries({}, optional={
           "content-type": st.text(max_size=20), "delivery-mode": st.integers(1, 2),
           "priority": st.integers(0, 9), "correlation-id": st.text(max_size=10),
           "reply-to": st.text(max_size=10), "type": st.text(max_size=10),
           "app-id": st.text(max_size=10)}))
def test_properties_round_trip(headers, message_id, timestamp, others):
    properties = dict(others)
    if headers:
        properties["headers"] = headers
    if message_id is not None:
        properties["message-id"] = message_id
    if timestamp is not None:
        properties["timestamp"] = timestamp
    header = encode_frame(SPEC, Frame(1, Header(BASIC, 0, 7, **properties)))
    delivery = Delivery(1, False)
    assert read_header(header[7:-1], delivery) == 7
    assert delivery.headers == (headers or None)
    assert delivery.message_id == message_id
    assert delivery.timestamp == timestamp
    # what the general codec reads from the same bytes
    general = decode_frame(SPEC, header).payload.properties
    assert general.get("headers") == delivery.headers
    assert general.get("message-id") == delivery.message_id


def test_deliver_method_fields():
    data = encode_frame(SPEC, Frame(1, Method(DELIVER, "a-tag", 2**40, True, "ex", "k")))
    assert read_deliver(data[7:-1]) == ("a-tag", 2**40, True)


def test_decimal_and_nested_headers():
    headers = {"d": Decimal("1.25"), "t": {"x": [1, "a", None]}}
    header = encode_frame(SPEC, Frame(1, Header(BASIC, 0, 0, headers=headers)))
    delivery = Delivery(1, False)
    read_header(header[7:-1], delivery)
    assert delivery.headers == headers


def test_deliveries_of_one_read_are_one_batch_and_other_frames_keep_their_path():
    consumer = Collect()
    client, _ = client_with(consumer)
    listener = []

    class Listener:
        def confirmed(self, channel, tag, multiple, ack):
            listener.append(("confirmed", tag))
    client.listener = Listener()
    client.channel(1)
    client.channel(2)
    confirm = encode_frame(SPEC, Frame(2, Method(BASIC.methods.byname["ack"], 9, False)))
    data = (frames_of(1, b"one", 100) + confirm + frames_of(2, b"", 100)
            + frames_of(3, b"three", 2))
    client.dataReceived(data)
    assert [d.body for d in consumer.deliveries] == [b"one", b"", b"three"]
    assert consumer.reads == 1
    assert listener == [("confirmed", 9)]


def test_deliveries_on_two_channels_interleaved():
    consumer = Collect()
    client, _ = client_with(consumer)
    one = frames_of(1, b"aaaa", 2, channel=1)
    two = frames_of(1, b"bbbb", 2, channel=2)
    split_one, split_two = one.index(b"aa") - 7, two.index(b"bb") - 7
    client.dataReceived(one[:split_one] + two[:split_two] + one[split_one:]
                        + two[split_two:])
    assert sorted(d.body for d in consumer.deliveries) == [b"aaaa", b"bbbb"]


@pytest.mark.parametrize("bad", [
    lambda d: d[:-1] + b"\x00",                                 # no frame-end octet
    lambda d: d.replace(b"\x03\x00\x01", b"\x01\x00\x01", 1),   # a method among bodies
])
def test_malformed_content_drops_the_connection(bad):
    consumer = Collect()
    client, transport = client_with(consumer)
    client.dataReceived(bad(frames_of(1, b"body", 2)))
    assert consumer.deliveries == [] and transport.disconnecting


def test_a_body_longer_than_its_header_says_is_refused():
    delivery = Delivery(1, False)
    from pushengine.amqp.delivery import Incoming

    incoming = Incoming(None, delivery)
    header = encode_frame(SPEC, Frame(1, Header(BASIC, 0, 2)))
    assert not incoming.add(2, header[7:-1])
    with pytest.raises(FrameError):
        incoming.add(3, b"abc")


def test_ack_frame_is_what_the_codec_writes():
    expected = encode_frame(SPEC, Frame(3, Method(BASIC.methods.byname["ack"], 77, True)))
    assert ack_frame(3, 77, True) == expected


def test_a_delivery_on_txamqps_path_reaches_its_consumer_as_a_batch_of_one():
    """Deliveries that go through txamqp (its own frame receiver, as the
    ingest benchmark's --stock-receive puts back) still reach the consumer."""
    from txamqp.content import Content
    from txamqp.message import Message

    consumer = Collect()
    client, _ = client_with(consumer)
    message = Message(DELIVER, ("ctag", 7, True, "ex", "key"),
                      Content("é body", [], {"message-id": "m", "headers": {"a": "b"},
                                              "timestamp": 5}))
    client.delegate.basic_deliver(None, message)
    delivery, = consumer.deliveries
    assert (delivery.delivery_tag, delivery.redelivered, delivery.message_id) == (7, True, "m")
    assert delivery.headers == {"a": "b"} and delivery.timestamp == 5
    assert delivery.body == "é body".encode() and consumer.reads == 1


def test_a_long_delivery_arriving_slowly_counts_as_traffic_for_the_heartbeat():
    """Frames of a delivery still incomplete are traffic: a large body that
    takes longer than the heartbeat limit to arrive does not drop the link."""
    clock = Clock()
    consumer = Collect()
    client = FeedClient("/", heartbeat=2, clock=clock, connection_name="test")
    transport = StringTransport()
    client.makeConnection(transport)
    client.consumers["ctag"] = consumer
    client.started.fire()
    data = frames_of(1, b"x" * 400, 10)
    for i in range(0, len(data), 20):
        client.dataReceived(data[i:i + 20])
        clock.advance(0.5)          # 20 s in all, 6 s is the limit
    assert not transport.disconnected
    assert [d.body for d in consumer.deliveries] == [b"x" * 400]
