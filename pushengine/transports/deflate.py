"""permessage-deflate (RFC 7692) for the WebSocket, with fan-out encoded once.

An ``events`` notification is the same for every socket of a view except its
``seq`` numbers: ``{"jsonrpc":"2.0","method":"events","params":[{"seq":N,``
then the event's shared fragment (``core.events.Fragment``), then ``]}``. A
deflate stream may be made of pieces that never refer to each other: each
compressed piece here comes from a fresh raw-deflate compressor ended with a
sync flush (byte-aligned, no final block), so no piece refers to bytes before
it and the pieces concatenate into one valid stream whatever the receiver's
window holds. The shared piece of an event is compressed once, the first time
a socket with compression writes it, and kept on the fragment
(``Fragment.deflated``, one entry per window size). What is per socket — the
``seq`` and the separators — goes as a stored (uncompressed) block: four
bytes of length and the text, no compressor at all. A message ends as RFC
7692 section 7.2.1 says: the last ``00 00 ff ff`` is left off and the
receiver puts it back.

The server always answers ``server_no_context_takeover`` (it never refers to
earlier messages; an RFC 7692 server may say so unasked) and honours the
client's ``server_max_window_bits`` (9 to 15; an offer of 8 is declined, as
zlib cannot make raw deflate with a window of 256 bytes). Messages from the
client are inflated with a bound: a message that inflates past the largest
message (``--max-body``) closes the socket with 1009 before more is made.
"""
from __future__ import annotations

import struct
import zlib
from typing import Sequence

from wsproto.extensions import PerMessageDeflate
from wsproto.frame_protocol import CloseReason, FrameDecoder, FrameProtocol

from pushengine.core.events import DROPPED, Fragment

LEVEL = 6
TAIL = b"\x00\x00\xff\xff"
EVENTS_HEAD = b'{"jsonrpc":"2.0","method":"events","params":['
# an answer shorter than this goes uncompressed (RSV1 clear): a fresh
# compressor costs more than the few bytes it would save
SMALLEST = 64


def deflate_piece(data: bytes, wbits: int = 15) -> bytes:
    """``data`` compressed on its own, the sync flush's ``00 00 ff ff`` left
    off: the stream then stands inside an empty stored block's header, so
    that a stored block's length (``stored``) or the receiver's tail follows."""
    c = zlib.compressobj(LEVEL, zlib.DEFLATED, -wbits)
    out = c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
    return out[:-4]


def stored(data: bytes) -> bytes:
    """The rest of a stored block after ``deflate_piece``: its length, the
    length's complement and the bytes as they are (at most 65,535)."""
    n = len(data)
    return struct.pack("<HH", n, n ^ 0xFFFF) + data


class Deflater:
    """The compressed messages of one window size (shared by every socket
    that negotiated it)."""

    _made: dict[int, "Deflater"] = {}

    def __init__(self, wbits: int) -> None:
        self.wbits = wbits
        self.head = deflate_piece(EVENTS_HEAD + b'{"seq":', wbits)

    @classmethod
    def of(cls, wbits: int) -> "Deflater":
        made = cls._made.get(wbits)
        if made is None:
            made = cls._made[wbits] = cls(wbits)
        return made

    def piece(self, fragment: Fragment) -> bytes:
        """The fragment compressed once for every socket (kept on it)."""
        cache = fragment.deflated
        if cache is None:
            cache = fragment.deflated = {}
        out = cache.get(self.wbits)
        if out is None:
            out = cache[self.wbits] = deflate_piece(fragment.utf8, self.wbits)
        return out

    def events(self, first: int, fragments: Sequence[Fragment]) -> bytes | None:
        """The compressed ``events`` notification (None when every event was
        dropped: the caller sends the plain message)."""
        parts: list[bytes] = []
        for seq, fragment in enumerate(fragments, first):
            if fragment is DROPPED:
                continue
            if parts:
                parts.append(stored(b',{"seq":%d,' % seq))
            else:
                parts.append(self.head)
                parts.append(stored(b"%d," % seq))
            parts.append(self.piece(fragment))
        if not parts:
            return None
        # the closing, then the header of the empty stored block whose
        # length (00 00 ff ff) the receiver appends
        parts.append(stored(b"]}") + b"\x00")
        return b"".join(parts)

    def message(self, body: bytes) -> bytes:
        """Any other message, compressed on its own."""
        return deflate_piece(body, self.wbits)


def frame(payload: bytes, compressed: bool) -> bytes:
    """One final, unmasked text frame; RSV1 set when ``payload`` is deflated."""
    first = 0xC1 if compressed else 0x81
    n = len(payload)
    if n < 126:
        return bytes((first, n)) + payload
    if n < 65536:
        return struct.pack("!BBH", first, 126, n) + payload
    return struct.pack("!BBQ", first, 127, n) + payload


def _bits(value: str) -> int | None:
    value = value.strip().strip('"')
    if not value.isascii() or not value.isdigit() or len(value) > 2:
        return None
    return int(value)


class ServerDeflate(PerMessageDeflate):
    """wsproto's extension, with the server's answer chosen here and the
    client's messages inflated within ``max_message`` bytes."""

    def __init__(self, max_message: int) -> None:
        super().__init__()
        self.max_message = max_message
        self.room = max_message
        self.server_no_context_takeover = True

    def accept(self, offer: str) -> bool | None | str:
        if self._enabled:             # the first acceptable offer wins
            return None
        params = [p.strip() for p in offer.split(";")[1:]]
        answer = ["server_no_context_takeover"]
        server_bits = 15
        seen: set[str] = set()
        for param in params:
            name, _, value = param.partition("=")
            name = name.strip().lower()
            if name in seen:
                return None           # RFC 7692 5.1: a parameter twice declines
            seen.add(name)
            if name == "server_no_context_takeover" and not value:
                continue
            if name == "client_no_context_takeover" and not value:
                self.client_no_context_takeover = True
                answer.append("client_no_context_takeover")
            elif name == "server_max_window_bits":
                bits = _bits(value)
                if bits is None or not 9 <= bits <= 15:
                    return None
                server_bits = bits
                answer.append(f"server_max_window_bits={bits}")
            elif name == "client_max_window_bits":
                # the client may use any window: the server inflates with 15
                if value and (_bits(value) is None or not 8 <= (_bits(value) or 0) <= 15):
                    return None
            else:
                return None
        self.server_max_window_bits = server_bits
        self.client_max_window_bits = 15
        self._enabled = True
        return "; ".join(answer)

    @property
    def deflater(self) -> Deflater:
        return Deflater.of(self.server_max_window_bits)

    def frame_inbound_payload_data(self, proto: FrameDecoder | FrameProtocol,
                                   data: bytes) -> bytes | CloseReason:
        if not self._inbound_compressed or not self._inbound_is_compressible:
            return data
        assert self._decompressor is not None
        try:
            out = self._decompressor.decompress(bytes(data), self.room + 1)
        except zlib.error:
            return CloseReason.INVALID_FRAME_PAYLOAD_DATA
        if len(out) > self.room or self._decompressor.unconsumed_tail:
            return CloseReason.MESSAGE_TOO_BIG
        self.room -= len(out)
        return out

    def frame_inbound_complete(self, proto: FrameDecoder | FrameProtocol,
                               fin: bool) -> bytes | CloseReason | None:
        if not fin:
            return None
        room, self.room = self.room, self.max_message
        if not self._inbound_is_compressible or not self._inbound_compressed:
            self._inbound_compressed = None
            return None
        assert self._decompressor is not None
        try:
            data = self._decompressor.decompress(TAIL, room + 1)
        except zlib.error:
            return CloseReason.INVALID_FRAME_PAYLOAD_DATA
        if len(data) > room or self._decompressor.unconsumed_tail:
            return CloseReason.MESSAGE_TOO_BIG
        if self.client_no_context_takeover:
            self._decompressor = None
        self._inbound_compressed = None
        return data
