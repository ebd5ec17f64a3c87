"""The hot path of a consumer: ``basic.deliver`` frames read with ``struct``.

A delivered message is three kinds of frames: the ``basic.deliver`` method,
a content header (body size and properties) and zero or more body frames of
at most ``frame_max`` bytes each.  The general codec (``codec``) turns them
into txamqp's ``Frame``/``Method``/``Header`` objects, then ``Message`` and
``Content``; for one small change per message that bookkeeping cost more
than applying the change.  Here the three are read straight from the
payload bytes into a ``Delivery``, which keeps only what the feed uses.
Everything else (the handshake, replies, confirms, heartbeats) still goes
through the codec and txamqp.
"""
from __future__ import annotations

import struct
from typing import Any

from pushengine.amqp.codec import FrameError, Reader

BASIC_CLASS = 60
DELIVER_METHOD = 60
# a method frame's payload starts with these four bytes for basic.deliver
DELIVER_PREFIX = struct.pack("!HH", BASIC_CLASS, DELIVER_METHOD)

_u8 = struct.Struct("!B")
_u32 = struct.Struct("!I")
_u64 = struct.Struct("!Q")
_header_head = struct.Struct("!HHQH")
_ack_frame = struct.Struct("!BHIHHQBB")
FRAME_METHOD = 1
FRAME_END = 206
ACK_METHOD = 80

# basic's content properties in flag order (0-9-1): (name, field type)
PROPERTIES = (
    ("content-type", "shortstr"), ("content-encoding", "shortstr"),
    ("headers", "table"), ("delivery-mode", "octet"), ("priority", "octet"),
    ("correlation-id", "shortstr"), ("reply-to", "shortstr"),
    ("expiration", "shortstr"), ("message-id", "shortstr"),
    ("timestamp", "timestamp"), ("type", "shortstr"), ("user-id", "shortstr"),
    ("app-id", "shortstr"), ("cluster-id", "shortstr"),
)
# what to do with each property present, in flag order: skip a short
# string, skip an octet, or keep the headers, the message id, the timestamp
_SHORTSTR, _OCTET, _HEADERS, _MESSAGE_ID, _TIMESTAMP = range(5)
_KEPT = {"headers": _HEADERS, "message-id": _MESSAGE_ID, "timestamp": _TIMESTAMP}
_KINDS = tuple(_KEPT.get(name, _SHORTSTR if kind == "shortstr" else _OCTET)
               for name, kind in PROPERTIES)


class Delivery:
    """One delivered message: what the feed needs of it, nothing more."""

    __slots__ = ("delivery_tag", "redelivered", "message_id", "headers", "timestamp",
                 "body")

    def __init__(self, delivery_tag: int, redelivered: bool, message_id: str | None = None,
                 headers: dict[str, Any] | None = None, timestamp: int | None = None,
                 body: bytes = b"") -> None:
        self.delivery_tag = delivery_tag
        self.redelivered = redelivered
        self.message_id = message_id
        self.headers = headers
        self.timestamp = timestamp
        self.body = body

    def __repr__(self) -> str:
        return (f"Delivery(tag={self.delivery_tag}, redelivered={self.redelivered}, "
                f"message_id={self.message_id!r}, {len(self.body)} bytes)")


def as_delivery(message: Any) -> Delivery:
    """A ``Delivery`` from a message as txamqp gives it (``delivery_tag``,
    ``redelivered``, ``content.properties``, ``content.body``)."""
    properties = message.content.properties
    body = message.content.body
    message_id = properties.get("message-id")
    headers = properties.get("headers")
    timestamp = properties.get("timestamp")
    return Delivery(
        message.delivery_tag, bool(message.redelivered),
        message_id if isinstance(message_id, str) and message_id else None,
        headers if isinstance(headers, dict) else None,
        timestamp if isinstance(timestamp, int) else None,
        body.encode("utf-8") if isinstance(body, str) else bytes(body))


def read_deliver(payload: bytes) -> tuple[str, int, bool]:
    """A ``basic.deliver`` method payload (from its class and method ids on):
    (consumer tag, delivery tag, redelivered).  The exchange and routing key
    that follow are not needed."""
    size = payload[4]
    end = 5 + size
    if end + 9 > len(payload):
        raise FrameError("basic.deliver runs past the end of its frame")
    tag = payload[5:end].decode("utf-8", "replace")
    delivery_tag, = _u64.unpack_from(payload, end)
    return tag, delivery_tag, bool(payload[end + 8] & 1)


def read_header(payload: bytes, delivery: Delivery) -> int:
    """Fill ``delivery`` from a content header payload; answer the body size.

    Properties are read in flag order; only the message id, the headers
    table and the timestamp are kept.  Short strings and octets are skipped
    by their length; a headers table of short text values (what this
    package's publishers send) is read inline, any other by the codec.
    """
    if len(payload) < 14:
        raise FrameError("content header shorter than its fixed part")
    _class_id, _weight, body_size, flags = _header_head.unpack_from(payload, 0)
    if flags & 1:
        raise FrameError("more than one word of property flags in a basic header")
    pos = 14
    bit = 0x8000
    for kind in _KINDS:
        if not flags & ((bit << 1) - 1):
            break                   # no property left
        if flags & bit:
            if kind == _SHORTSTR:
                pos += 1 + payload[pos]
            elif kind == _OCTET:
                pos += 1
            elif kind == _MESSAGE_ID:
                end = pos + 1 + payload[pos]
                raw = payload[pos + 1:end]
                try:
                    delivery.message_id = raw.decode("utf-8") or None
                except UnicodeDecodeError:
                    delivery.message_id = None
                pos = end
            elif kind == _TIMESTAMP:
                delivery.timestamp, = _u64.unpack_from(payload, pos)
                pos += 8
            else:
                size, = _u32.unpack_from(payload, pos)
                end = pos + 4 + size
                if end > len(payload):
                    raise FrameError("headers table runs past the end of its frame")
                headers = _text_table(payload, pos + 4, end)
                if headers is None:
                    reader = Reader(payload, pos)
                    headers = reader.table()
                delivery.headers = headers
                pos = end
        bit >>= 1
    if pos > len(payload):
        raise FrameError("content header runs past the end of its frame")
    return int(body_size)


def _text_table(payload: bytes, pos: int, end: int) -> dict[str, Any] | None:
    """A field table whose values are all ``S`` strings, or None for any
    other (the codec reads those)."""
    table: dict[str, Any] = {}
    while pos < end:
        key_end = pos + 1 + payload[pos]
        if key_end + 5 > end or payload[key_end] != 0x53:      # b"S"
            return None
        key = payload[pos + 1:key_end]
        size, = _u32.unpack_from(payload, key_end + 1)
        pos = key_end + 5 + size
        if pos > end:
            return None
        try:
            table[key.decode("utf-8")] = payload[key_end + 5:pos].decode("utf-8")
        except UnicodeDecodeError:
            return None
    return table if pos == end else None


def ack_frame(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    """The bytes of ``basic.ack`` (a method with no reply: nothing to wait for)."""
    return _ack_frame.pack(FRAME_METHOD, channel, 13, BASIC_CLASS, ACK_METHOD,
                           delivery_tag, 1 if multiple else 0, FRAME_END)


class Incoming:
    """A delivery whose header or body frames are still to come."""

    __slots__ = ("consumer", "delivery", "size", "received", "parts")

    def __init__(self, consumer: Any, delivery: Delivery) -> None:
        self.consumer = consumer
        self.delivery = delivery
        self.size = -1
        self.received = 0
        self.parts: list[bytes] = []

    def add(self, frame_type: int, payload: bytes) -> bool:
        """Take the next frame (type 2 header, 3 body); True once whole."""
        if self.size < 0:
            if frame_type != 2:
                raise FrameError(f"frame type {frame_type} where basic.deliver's "
                                 "content header should be")
            self.size = read_header(payload, self.delivery)
        elif frame_type == 3:
            self.parts.append(payload)
            self.received += len(payload)
            if self.received > self.size:
                raise FrameError("body frames longer than the content header says")
        else:
            raise FrameError(f"frame type {frame_type} inside a delivered body")
        if self.received < self.size:
            return False
        parts = self.parts
        self.delivery.body = parts[0] if len(parts) == 1 else b"".join(parts)
        return True
