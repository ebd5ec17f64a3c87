"""The relay's broker link (pushengine/amqp/link.py) without a broker: the
bytes of a publish written at once are the frames txamqp's path writes."""
from __future__ import annotations

import pytest
from txamqp.connection import Body, Frame, Header, Method

from pushengine.amqp.codec import decode_frame, encode_frame
from pushengine.amqp.link import publish_frames
from pushengine.amqp.publisher import copy_properties, message_properties
from pushengine.amqp.spec import load_spec


def frames_of(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos + 3:pos + 7], "big")
        out.append(data[pos:pos + 8 + size])
        pos += 8 + size
    return out


@pytest.mark.parametrize("properties", [
    message_properties(1_700_000_000.5, "m.1"),
    {**copy_properties(1_700_000_000.5, "m.2", 2),
     "headers": {"copies": "2", "pushengine-lsn": "16/B374D848", "pushengine-xid": "7",
                 "pushengine-part": "3", "timestamp_ms": "1700000000500"}},
    {"content-type": "application/json"},
    {},
])
@pytest.mark.parametrize("body_size", [0, 10, 4088, 4089, 10_000])
def test_publish_frames_are_the_codecs_frames(properties, body_size):
    spec = load_spec()
    body = bytes(i % 251 for i in range(body_size))
    data = publish_frames(5, "pushengine.changes", "Stream.n42", body, properties, 4096)
    basic = spec.classes.byname["basic"]
    method = basic.methods.byname["publish"]
    expected = [encode_frame(spec, Frame(5, Method(method, 0, "pushengine.changes",
                                                   "Stream.n42", False, False))),
                encode_frame(spec, Frame(5, Header(basic, 0, len(body), **properties)))]
    expected += [encode_frame(spec, Frame(5, Body(body[i:i + 4088])))
                 for i in range(0, len(body), 4088)]
    assert frames_of(data) == expected
    assert all(len(f) <= 4096 for f in frames_of(data))
    header = decode_frame(spec, frames_of(data)[1]).payload
    assert header.size == body_size
    assert {k: v for k, v in header.properties.items() if v is not None} == properties


def test_a_key_longer_than_a_short_string_is_refused():
    with pytest.raises(ValueError):
        publish_frames(1, "x", "k" * 256, b"", {}, 4096)


class FakeTransport:
    def __init__(self):
        self.written = []

    def write(self, data):
        self.written.append(data)


class FakeClient:
    MAX_LENGTH = 4096

    def __init__(self):
        self.transport = FakeTransport()


class FakeChannel:
    id = 3
    closed = False


def test_the_broker_answers_the_frame_publisher_in_order():
    from pushengine.amqp.link import _FramePublisher
    from pushengine.amqp.publisher import NotConnected, PublishFailed
    from tests.deferreds import failed, fired, pending

    client, channel = FakeClient(), FakeChannel()
    publisher = _FramePublisher(channel, "x", client)
    sent = [publisher.publish(b"[]", message_properties(1.0), "k") for _ in range(5)]
    assert len(client.transport.written) == 5 and publisher.unconfirmed == 5
    publisher.confirmed(3, multiple=True, ack=True)
    assert [d.called for d in sent] == [True, True, True, False, False]
    publisher.confirmed(5, multiple=False, ack=False)
    failed(sent[4], PublishFailed)
    assert pending(sent[3])
    publisher.confirmed(9, multiple=True, ack=True)       # more than was sent
    assert fired(sent[3]) is None and publisher.unconfirmed == 0
    channel.closed = True
    failed(publisher.publish(b"[]", {}, "k"), NotConnected)
