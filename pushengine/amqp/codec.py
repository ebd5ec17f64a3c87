"""AMQP 0-9-1 frame and field-table codec, used in place of txamqp's own.

txamqp 0.8.2 has three gaps that matter for a feed that must never stop:

- its field-table codec knows only the types ``S``, ``I``, ``F`` and ``t``
  when decoding (``S`` and ``I`` when encoding): a message whose ``headers``
  hold a 64-bit integer, an array, a float... (``x-death`` headers, or any
  publisher that sets such headers) raises while its frame is parsed, the
  connection drops, the message is redelivered and drops it again, forever;
- it decodes body frames "opportunistically" to ``str``, and when a body
  spans several frames and one of them is not valid UTF-8 on its own (a
  multi-byte character cut at a frame boundary), the text gathered so far
  is thrown away;
- it cannot send booleans or nested tables, which the client-properties
  ``capabilities`` table needs (consumer cancel notification).

``decode_frame`` and ``encode_frame`` produce and take txamqp's own
``Frame``/``Method``/``Header``/``Body`` objects, so the rest of txamqp is
unchanged.  Bodies always decode to ``bytes``.  Table types follow
RabbitMQ's reading of the 0-9-1 errata.
"""
from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any

from txamqp.connection import Body, Frame, Header, Heartbeat, Method

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 206
FRAME_END_BYTE = bytes([FRAME_END])

_FRAME_TYPES = {
    Frame.METHOD: FRAME_METHOD,
    Frame.HEADER: FRAME_HEADER,
    Frame.BODY: FRAME_BODY,
    Frame.HEARTBEAT: FRAME_HEARTBEAT,
}

_frame_head = struct.Struct("!BHI")
_u8 = struct.Struct("!B")
_u16 = struct.Struct("!H")
_u32 = struct.Struct("!I")
_u64 = struct.Struct("!Q")
_i8 = struct.Struct("!b")
_i16 = struct.Struct("!h")
_i32 = struct.Struct("!i")
_i64 = struct.Struct("!q")
_f32 = struct.Struct("!f")
_f64 = struct.Struct("!d")
_method_id = struct.Struct("!HH")
_header_head = struct.Struct("!HHQ")


class FrameError(ValueError):
    """Bytes that are not a well-formed AMQP frame."""


def _text(raw: bytes) -> str | bytes:
    """Short and long strings in methods and tables: text when UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


class Reader:
    """Decodes AMQP fields from a buffer, left to right."""

    __slots__ = ("data", "pos", "_bits", "_bit_index")

    def __init__(self, data: bytes | memoryview, pos: int = 0):
        self.data = data
        self.pos = pos
        self._bits = 0
        self._bit_index = 8

    def _take(self, st: struct.Struct) -> Any:
        self._bit_index = 8
        value, = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return value

    def _take_many(self, st: struct.Struct) -> tuple:
        self._bit_index = 8
        values = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return values

    def raw(self, n: int) -> bytes:
        self._bit_index = 8
        end = self.pos + n
        if end > len(self.data):
            raise FrameError("field runs past the end of the frame")
        value = bytes(self.data[self.pos:end])
        self.pos = end
        return value

    def octet(self) -> int:
        return self._take(_u8)

    def short(self) -> int:
        return self._take(_u16)

    def long(self) -> int:
        return self._take(_u32)

    def longlong(self) -> int:
        return self._take(_u64)

    timestamp = longlong

    def bit(self) -> bool:
        if self._bit_index >= 8:
            self._bits = self._take(_u8)
            self._bit_index = 0
        value = bool(self._bits >> self._bit_index & 1)
        self._bit_index += 1
        return value

    def shortstr(self) -> str | bytes:
        return _text(self.raw(self.octet()))

    def longstr(self) -> str | bytes:
        return _text(self.raw(self.long()))

    def longbytes(self) -> bytes:
        return self.raw(self.long())

    def table(self) -> dict:
        size = self.long()
        end = self.pos + size
        result = {}
        while self.pos < end:
            key = self.shortstr()
            result[key] = self.value()
        if self.pos != end:
            raise FrameError("field table size mismatch")
        return result

    def array(self) -> list:
        size = self.long()
        end = self.pos + size
        items = []
        while self.pos < end:
            items.append(self.value())
        if self.pos != end:
            raise FrameError("field array size mismatch")
        return items

    def value(self) -> Any:
        kind = self.raw(1)
        decode = _VALUE_DECODERS.get(kind)
        if decode is None:
            raise FrameError(f"unknown field value type {kind!r}")
        return decode(self)

    def decode(self, field_type: str) -> Any:
        return getattr(self, field_type)()


def _decimal(r: Reader) -> Decimal:
    scale = r.octet()
    value = r._take(_i32)
    return Decimal(value).scaleb(-scale)


_VALUE_DECODERS = {
    b"t": lambda r: r.octet() != 0,
    b"b": lambda r: r._take(_i8),
    b"B": lambda r: r._take(_u8),
    b"s": lambda r: r._take(_i16),
    b"u": lambda r: r._take(_u16),
    b"I": lambda r: r._take(_i32),
    b"i": lambda r: r._take(_u32),
    b"l": lambda r: r._take(_i64),
    b"L": lambda r: r._take(_u64),
    b"f": lambda r: r._take(_f32),
    b"d": lambda r: r._take(_f64),
    b"D": _decimal,
    b"S": Reader.longstr,
    b"x": Reader.longbytes,
    b"A": Reader.array,
    b"T": lambda r: r._take(_u64),
    b"F": Reader.table,
    b"V": lambda r: None,
}


class Writer:
    """Encodes AMQP fields into a growing buffer."""

    __slots__ = ("parts", "_bits", "_bit_index")

    def __init__(self):
        self.parts: list[bytes] = []
        self._bits = 0
        self._bit_index = 0

    def _flush_bits(self) -> None:
        if self._bit_index:
            self.parts.append(_u8.pack(self._bits))
            self._bits = 0
            self._bit_index = 0

    def _put(self, data: bytes) -> None:
        if self._bit_index:
            self._flush_bits()
        self.parts.append(data)

    def getvalue(self) -> bytes:
        self._flush_bits()
        return b"".join(self.parts)

    def octet(self, v: int) -> None:
        self._put(_u8.pack(v))

    def short(self, v: int) -> None:
        self._put(_u16.pack(v))

    def long(self, v: int) -> None:
        self._put(_u32.pack(v))

    def longlong(self, v: int) -> None:
        self._put(_u64.pack(v))

    timestamp = longlong

    def bit(self, v: object) -> None:
        if self._bit_index >= 8:
            self._flush_bits()
        if v:
            self._bits |= 1 << self._bit_index
        self._bit_index += 1

    def shortstr(self, v: str | bytes) -> None:
        raw = v.encode("utf-8") if isinstance(v, str) else bytes(v)
        if len(raw) > 255:
            raise ValueError("short string longer than 255 bytes")
        self._put(_u8.pack(len(raw)) + raw)

    def longstr(self, v: str | bytes | dict) -> None:
        if isinstance(v, dict):
            self.table(v)
            return
        raw = v.encode("utf-8") if isinstance(v, str) else bytes(v)
        self._put(_u32.pack(len(raw)))
        self._put(raw)

    def table(self, v: dict | None) -> None:
        inner = Writer()
        for key, value in (v or {}).items():
            inner.shortstr(key)
            inner.value(value)
        body = inner.getvalue()
        self._put(_u32.pack(len(body)))
        self._put(body)

    def value(self, v: object) -> None:
        if isinstance(v, bool):
            self._put(b"t" + _u8.pack(1 if v else 0))
        elif isinstance(v, int):
            if -2**31 <= v < 2**31:
                self._put(b"I" + _i32.pack(v))
            else:
                self._put(b"l" + _i64.pack(v))
        elif isinstance(v, float):
            self._put(b"d" + _f64.pack(v))
        elif isinstance(v, str):
            self._put(b"S")
            self.longstr(v)
        elif isinstance(v, (bytes, bytearray, memoryview)):
            self._put(b"x")
            self.longstr(bytes(v))
        elif isinstance(v, dict):
            self._put(b"F")
            self.table(v)
        elif isinstance(v, (list, tuple)):
            inner = Writer()
            for item in v:
                inner.value(item)
            body = inner.getvalue()
            self._put(b"A" + _u32.pack(len(body)))
            self._put(body)
        elif isinstance(v, Decimal):
            sign, digits, exponent = v.as_tuple()
            if not isinstance(exponent, int):       # NaN or infinity
                raise TypeError(f"cannot encode the decimal {v} in an AMQP table")
            scale = max(0, -exponent)
            self._put(b"D" + _u8.pack(scale) + _i32.pack(int(v.scaleb(scale))))
        elif v is None:
            self._put(b"V")
        else:
            raise TypeError(f"cannot encode {type(v).__name__} in an AMQP table")

    def encode(self, field_type: str, v: object) -> None:
        getattr(self, field_type)(v)


_method_decoders: dict = {}


def decode_frame(spec, data: bytes) -> Frame:
    """Decode one whole frame (header, payload and frame-end octet)."""
    frame_type, channel, size = _frame_head.unpack_from(data, 0)
    if len(data) != 8 + size or data[7 + size] != FRAME_END:
        raise FrameError("frame does not end with the frame-end octet")
    if frame_type == FRAME_BODY:
        return Frame(channel, Body(data[7:7 + size]))
    reader = Reader(memoryview(data)[:7 + size], 7)
    if frame_type == FRAME_METHOD:
        class_id, method_id = reader._take_many(_method_id)
        try:
            method = spec.classes.byid[class_id].methods.byid[method_id]
        except KeyError:
            raise FrameError(f"unknown method {class_id}.{method_id}") from None
        decoders = _method_decoders.get(method)
        if decoders is None:
            decoders = _method_decoders[method] = tuple(
                getattr(Reader, f.type) for f in method.fields)
        return Frame(channel, Method(method, *[decode(reader) for decode in decoders]))
    if frame_type == FRAME_HEADER:
        class_id, weight, body_size = reader._take_many(_header_head)
        klass = spec.classes.byid[class_id]
        present: list[bool] = []
        while True:
            flags = reader.short()
            present.extend(bool(flags >> i & 1) for i in range(15, 0, -1))
            if not flags & 1:
                break
        properties = {}
        for flag, field in zip(present, klass.fields):
            if flag:
                properties[field.name] = reader.decode(field.type)
        return Frame(channel, Header(klass, weight, body_size, **properties))
    if frame_type == FRAME_HEARTBEAT:
        return Frame(channel, Heartbeat())
    raise FrameError(f"unknown frame type {frame_type}")


def _payload(frame: Frame) -> tuple[int, bytes]:
    payload = frame.payload
    if payload.type == Frame.BODY:
        content = payload.content
        if isinstance(content, str):
            content = content.encode("utf-8")
        return FRAME_BODY, bytes(content)
    w = Writer()
    if payload.type == Frame.METHOD:
        method = payload.method
        w._put(_method_id.pack(method.klass.id, method.id))
        for field, arg in zip(method.fields, payload.args):
            w.encode(field.type, arg)
        return FRAME_METHOD, w.getvalue()
    if payload.type == Frame.HEADER:
        klass = payload.klass
        w._put(_header_head.pack(klass.id, payload.weight, payload.size))
        fields = list(klass.fields)
        props = payload.properties
        flag_words = []
        # 15 property flags per 16-bit word; bit 0 says "another word follows".
        for start in range(0, max(len(fields), 1), 15):
            word = 0
            for i, field in enumerate(fields[start:start + 15]):
                if props.get(field.name) is not None:
                    word |= 1 << (15 - i)
            if start + 15 < len(fields):
                word |= 1
            flag_words.append(word)
        # Drop trailing "continue" words that carry no flags.
        while len(flag_words) > 1 and flag_words[-1] == 0:
            flag_words.pop()
            flag_words[-1] &= ~1
        for word in flag_words:
            w.short(word)
        for field in fields:
            value = props.get(field.name)
            if value is not None:
                w.encode(field.type, value)
        return FRAME_HEADER, w.getvalue()
    if payload.type == Frame.HEARTBEAT:
        return FRAME_HEARTBEAT, b""
    raise FrameError(f"cannot encode a {payload.type} frame")


def encode_frame(spec, frame: Frame) -> bytes:
    """Encode a txamqp ``Frame`` into wire bytes."""
    frame_type, body = _payload(frame)
    return b"".join((_frame_head.pack(frame_type, frame.channel, len(body)),
                     body, FRAME_END_BYTE))
