"""The frame and field-table codec that replaces txamqp's."""
from decimal import Decimal

import pytest
from txamqp.connection import Body, Frame, Header, Heartbeat, Method
from txamqp.protocol import FrameReceiver

from pushengine.amqp.codec import (
    FrameError, Reader, Writer, decode_frame, encode_frame)
from pushengine.amqp.spec import load_spec

SPEC = load_spec()


def method(name, *args):
    klass, _, meth = name.partition(".")
    m = SPEC.classes.byname[klass].methods.byname[meth]
    return Method(m, *args)


def txamqp_pack(frame):
    return FrameReceiver(SPEC)._pack_frame(frame)


def txamqp_unpack(data):
    return FrameReceiver(SPEC)._unpack_frame(data)


def test_table_round_trip_of_every_type():
    table = {
        "bool": True, "false": False, "small": -5, "int32": 2**31 - 1,
        "int64": 2**40, "negative64": -2**40, "float": 1.5, "text": "héllo",
        "bytes": b"\xff\x00", "nested": {"a": [1, "two", {"three": 3.0}]},
        "array": [], "void": None, "decimal": Decimal("12.34"),
    }
    w = Writer()
    w.table(table)
    r = Reader(w.getvalue())
    assert r.table() == table


@pytest.mark.parametrize("kind, raw, value", [
    (b"b", b"\xff", -1), (b"B", b"\xff", 255), (b"s", b"\xff\xfe", -2),
    (b"u", b"\xff\xfe", 65534), (b"i", b"\xff\xff\xff\xff", 2**32 - 1),
    (b"L", b"\x00" * 7 + b"\x07", 7), (b"T", b"\x00" * 7 + b"\x09", 9),
    (b"f", b"\x3f\xc0\x00\x00", 1.5),
])
def test_decodes_types_we_never_send(kind, raw, value):
    entry = b"\x01k" + kind + raw
    data = len(entry).to_bytes(4, "big") + entry
    assert Reader(data).table() == {"k": value}


def test_unknown_field_type_is_a_frame_error():
    entry = b"\x01k" + b"?" + b"\x00"
    with pytest.raises(FrameError):
        Reader(len(entry).to_bytes(4, "big") + entry).table()


@pytest.mark.parametrize("frame", [
    Frame(1, method("basic.publish", 0, "ex", "key", False, False)),
    Frame(1, method("queue.declare", 0, "q", False, True, False, False, False,
                    {"x-expires": 60000, "name": "n"})),
    Frame(1, method("basic.consume", 0, "q", "tag", False, False, True, False, {})),
    Frame(1, method("basic.ack", 12345678901, True)),
    Frame(0, method("connection.tune-ok", 2047, 131072, 10)),
    Frame(1, Header(SPEC.classes.byname["basic"], 0, 42,
                    **{"content-type": "application/json", "delivery-mode": 2,
                       "timestamp": 1700000000, "headers": {"a": "b", "n": 7}})),
    Frame(1, Header(SPEC.classes.byname["basic"], 0, 0)),
    Frame(1, Body(b"some body")),
    Frame(0, Heartbeat()),
])
def test_frames_match_txamqp_encoding(frame):
    data = encode_frame(SPEC, frame)
    assert data == txamqp_pack(frame)
    decoded = decode_frame(SPEC, data)
    again = txamqp_unpack(data)
    assert type(decoded.payload) is type(again.payload)
    assert decoded.channel == again.channel
    if isinstance(decoded.payload, Method):
        assert decoded.payload.method is again.payload.method
        assert decoded.payload.args == again.payload.args
    elif isinstance(decoded.payload, Header):
        assert decoded.payload.properties == again.payload.properties
        assert decoded.payload.size == again.payload.size


def test_body_frames_stay_bytes():
    data = encode_frame(SPEC, Frame(1, Body("valid utf-8 é".encode())))
    assert decode_frame(SPEC, data).payload.content == "valid utf-8 é".encode()


def test_header_with_rich_headers_decodes():
    props = {"headers": {"x-death": [{"count": 2**33, "reason": "expired"}],
                         "ratio": 0.5, "flag": True}}
    data = encode_frame(SPEC, Frame(1, Header(SPEC.classes.byname["basic"], 0, 1, **props)))
    assert decode_frame(SPEC, data).payload.properties == props


def test_bad_frame_end_is_refused():
    data = bytearray(encode_frame(SPEC, Frame(0, Heartbeat())))
    data[-1] = 0
    with pytest.raises(FrameError):
        decode_frame(SPEC, bytes(data))


def test_unknown_method_is_refused():
    payload = (99).to_bytes(2, "big") + (1).to_bytes(2, "big")
    data = b"\x01\x00\x01" + len(payload).to_bytes(4, "big") + payload + b"\xce"
    with pytest.raises(FrameError):
        decode_frame(SPEC, data)
