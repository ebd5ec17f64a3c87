"""WebSocket: ``GET /api/ws``, JSON-RPC 2.0 both ways (SPEC section 10).

The client sends calls in text frames (every method of the API, batches too)
and gets their answers; the server pushes the session's events as
notifications ``{"jsonrpc": "2.0", "method": "events", "params": [event, ...]}``.
The socket carries a session's events after ``session.create`` on it, or
after ``session.attach(sid, last_seq)`` (a reconnect: every event after
``last_seq`` once, or one reset per view when that is older than the replay
buffer). ``session.get_events`` is refused on a socket (-32601).

Library: wsproto (the sans-IO WebSocket implementation Twisted's own
``twisted.web.websocket`` is built on) does the opening handshake and parses
every frame the client sends; the upgrade of the twisted.web connection uses
the same hook ``twisted.web.websocket`` uses (``HTTPChannel.
_protocolUpgradeForWebsockets``, private: Twisted is pinned to the releases
that have it). What Twisted's own resource does not offer and a push server
needs: a bound on an incoming message while it arrives (``--max-body``; the
stock one buffers any size), producer-driven backpressure, and a cheap path
for the server's own frames: an event notification is one unmasked text frame
whose header is three bytes of arithmetic, built here instead of through
wsproto's per-call machinery. The events' JSON is encoded once per view
(``events.py``), and the frame of one batch once for every socket at the same
seq position (``SharedFrames``): a socket at another position frames its own.
On the fast front an event frame is sent straight away when nothing waits in
the socket's buffer (``sendnow.py``). The other cheap path is the client's
answer to the heartbeat's ping: a read that is one empty pong and nothing
else, while wsproto holds no part of a frame, only notes the pong
(``WsConnection.dataReceived``; wsproto's frame decoder is private, so
wsproto is pinned to the releases that have it, and any other shape of it
leaves every read to wsproto).

The handshake answers the subprotocol ``pushengine.jsonrpc`` when offered,
refuses another ``Sec-WebSocket-Version`` with 426 naming 13, and negotiates
permessage-deflate (``deflate.py``: each event's shared piece compressed once).
What one connection may cost is bounded (``WsConnection``; docs/websocket.md).

When the node shuts down (SPEC 21, ``WebSocketResource.close_all``) each
socket answers the calls it is answering (calls that arrive meanwhile too),
writes what waits for its session, then sends a close frame with code 1001
(going away) and closes the TCP connection once the client's close frame
comes back (at most ``CLOSE_LINGER`` seconds later): closing at once could
reset the connection under bytes the client has not read. Nothing is
answered after the close frame, so a call still pending on the client when
1001 arrives was not run: the client may send it again elsewhere. The
client reconnects at once and attaches its session with the last seq it
received (behind a balancer the next node answers; with ``--redis`` the
session resumes there).

On the fast front the upgrade does not go through twisted.web: the front
hands the connection over (``WebSocketResource.stream``), the same checks and
handshake run on the request it parsed, and the socket answers
``WsConnection`` directly (``WsConnection.take``).
"""
from __future__ import annotations

import json
import struct
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import h11
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET
from wsproto import ConnectionType
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection, BytesMessage, CloseConnection, Ping, Pong, Request, TextMessage)
from wsproto.handshake import H11Handshake
from wsproto.utilities import RemoteProtocolError

from pushengine.api.rpc import Dispatcher, RpcAnswer
from pushengine.core.events import DROPPED, Fragment, utf8
from pushengine.web.policy import KEY_HEADER, HttpPolicy, stream_error
from pushengine.web.routes import HttpAnswer, StreamAnswer, StreamLink, StreamRequest
from pushengine.web.timing import Clock
from pushengine.transports.deflate import SMALLEST, Deflater, ServerDeflate, frame
from pushengine.transports.closing import SHUTTING_DOWN, Departures
from pushengine.transports.heartbeat import Heartbeat
from pushengine.transports.producer import StreamProducer

log = Logger()
PING_INTERVAL = 30.0              # --ws-ping: a ping frame after 30 s of silence
PING_FRAME = b"\x89\x00"          # a server's ping, empty: FIN, opcode 9, unmasked
# close codes (RFC 6455 section 7.4.1)
NORMAL, GOING_AWAY, PROTOCOL_ERROR = 1000, 1001, 1002
INVALID_PAYLOAD, POLICY, TOO_BIG, INTERNAL = 1007, 1008, 1009, 1011
#: every close this transport sends: its code and the one reason sent with
#: it. A reason is never made from an error's text: wsproto reports a frame
#: it cannot read with its parser's words ("'utf-8' codec can't decode byte
#: 0xed in position 0..."), which no client should read (``WsConnection._close``)
CLOSE_REASONS: Mapping[int, str] = MappingProxyType({
    NORMAL: "the session is delivered elsewhere now",
    GOING_AWAY: "idle: no session and no pong",
    PROTOCOL_ERROR: "protocol error",
    INVALID_PAYLOAD: "invalid frame payload: text must be UTF-8",
    POLICY: "calls keep coming over the call rate",
    TOO_BIG: "the message is too big",
    INTERNAL: "internal error",
})
# the other close reasons a socket may send: the shutdown's (SPEC 21)
CLOSE_TEXTS = frozenset({SHUTTING_DOWN})
SUBPROTOCOL = "pushengine.jsonrpc"
NO_UPGRADE = "a WebSocket upgrade is required (Upgrade: websocket)"
# one connection's input per reactor turn: at most this many messages or
# bytes, the rest on a later turn (reading paused meanwhile)
SLICE_MESSAGES = 32
SLICE_BYTES = 64 * 1024
# calls refused for the rate in a row before the socket is closed
REFUSALS = 64
# seconds a socket that sent its close frame waits for the client's before
# it closes the connection anyway
CLOSE_LINGER = 2.0


def text_frame(payload: bytes) -> bytes:
    """One final, unmasked text frame (RFC 6455 section 5.2) holding ``payload``."""
    n = len(payload)
    if n < 126:
        return bytes((0x81, n)) + payload
    if n < 65536:
        return struct.pack("!BBH", 0x81, 126, n) + payload
    return struct.pack("!BBQ", 0x81, 127, n) + payload


EVENTS_HEAD = b'{"jsonrpc":"2.0","method":"events","params":['


def events_frame(first: int, fragments: Sequence[Fragment]) -> bytes:
    """The ``events`` notification of queued events numbered from ``first``
    (the fragments' bytes are shared by every socket that carries them)."""
    if len(fragments) == 1 and fragments[0] is not DROPPED:
        return text_frame(b'%b{"seq":%d,%b]}' % (EVENTS_HEAD, first, fragments[0].utf8))
    params = b",".join([b'{"seq":%d,%b' % (seq, utf8(f))
                        for seq, f in enumerate(fragments, first) if f is not DROPPED])
    return text_frame(EVENTS_HEAD + params + b"]}")


class SharedFrames:
    """The frames of the last event batches, each made once and written to
    every socket at the same position.

    Sockets of one view created together number its events alike: the same
    fragments from the same ``first`` seq make the same bytes, so the frame
    is built once per batch and kind (plain, or permessage-deflate of one
    window size: the server never keeps a compression context between
    messages, so compressed bytes are the same for every socket of that
    size) and written as it is by all of them. Keyed by the fragments'
    values (equal text, equal bytes). A few batches are kept, oldest out
    first, within ``max_batches`` and ``max_bytes`` (and the last one-event
    frame, looked up first: no key to build); a larger frame is not kept."""

    __slots__ = ("_frames", "_bytes", "max_batches", "max_bytes", "made", "reused",
                 "_last_kind", "_last_first", "_last_one", "_last")

    def __init__(self, max_batches: int = 16, max_bytes: int = 1 << 20) -> None:
        self._frames: dict[tuple[Any, ...], bytes] = {}
        self._bytes = 0
        self.max_batches = max_batches
        self.max_bytes = max_bytes
        self.made = 0                   # frames built
        self.reused = 0                 # frames written again from the cache
        # the last one-event frame made or found: the next socket of a
        # fan-out most often wants it again
        self._last_kind: Deflater | None = None
        self._last_first = 0
        self._last_one: Fragment | None = None
        self._last = b""

    def __len__(self) -> int:
        return len(self._frames)

    @property
    def size(self) -> int:
        """The bytes of the frames kept."""
        return self._bytes

    def frame(self, deflater: Deflater | None, first: int,
              fragments: Sequence[Fragment]) -> bytes:
        """The ``events`` frame of ``fragments`` numbered from ``first``, as
        a socket with ``deflater`` (None: no compression) sends it."""
        one: Fragment | None = None
        if len(fragments) == 1:
            one = fragments[0]
            if one is self._last_one and first == self._last_first \
                    and deflater is self._last_kind:
                self.reused += 1
                return self._last
            key: tuple[Any, ...] = (deflater.wbits if deflater is not None else 0, first, one)
        else:
            key = (deflater.wbits if deflater is not None else 0, first, *fragments)
        frames = self._frames
        made = frames.get(key)
        if made is not None:
            self.reused += 1
            if one is not None:
                self._last_kind, self._last_first, self._last_one = deflater, first, one
                self._last = made
            return made
        made = any_events_frame(deflater, first, fragments)
        self.made += 1
        size = len(made)
        if size <= self.max_bytes:
            self._bytes += size
            frames[key] = made
            while len(frames) > self.max_batches or self._bytes > self.max_bytes:
                self._bytes -= len(frames.pop(next(iter(frames))))
            if one is not None:
                self._last_kind, self._last_first, self._last_one = deflater, first, one
                self._last = made
        return made


def any_events_frame(deflater: Deflater | None, first: int,
                     fragments: Sequence[Fragment]) -> bytes:
    """The ``events`` frame as a socket with ``deflater`` sends it:
    compressed, or plain without one (or when the compressor kept nothing)."""
    if deflater is not None:
        payload = deflater.events(first, fragments)
        if payload is not None:
            return frame(payload, True)
    return events_frame(first, fragments)


def _write(transport: Any, data: bytes) -> None:
    transport.write(data)


def _between_frames(conn: Any) -> bool:
    """wsproto's decoder holds no part of a frame and the connection is
    open: bytes that make a whole frame can be read without it. False
    whenever wsproto's private layout is not the one known here."""
    try:
        decoder = conn._proto._frame_decoder
        return (decoder.header is None and not decoder.buffer.buffer
                and conn.state is ConnectionState.OPEN)
    except AttributeError:
        return False


class WsConnection(StreamProducer):
    """One WebSocket: calls in, answers and events out; the delivery of the
    session it carries.

    Budgets: the client's input is handled in slices (``SLICE_MESSAGES``,
    ``SLICE_BYTES``) per reactor turn, reading paused until the next; while
    the socket's unsent bytes are above the transport's bound (the one that
    pauses events, SPEC 10) nothing more is read, so pongs and answers to a
    client that does not read wait in the client's own socket, not here.
    Events wait while a call is being answered: ``session.attach``'s answer
    comes before the events it replays."""

    __slots__ = ("conn", "dispatcher", "clock", "max_message", "request",
                 "caller", "transport", "closed", "parts", "size",
                 "heartbeat", "last_write", "deflater", "idle_timeout", "last_pong",
                 "answering", "refusals", "reading", "later", "frames", "send",
                 "departures", "leaving", "__weakref__")
    transport_name = "websocket"    # the label of /metrics' delivery times

    def __init__(self, conn: Any, dispatcher: Any, sessions: Any, clock: Any,
                 max_message: int, request: Any, heartbeat: Heartbeat | None = None,
                 deflate: ServerDeflate | None = None, idle_timeout: float | None = None,
                 frames: SharedFrames | None = None,
                 departures: Departures | None = None) -> None:
        self.conn = conn
        self.dispatcher = dispatcher
        self.sessions = sessions
        self.clock = clock
        self.max_message = max_message
        self.request = request
        self.caller: Any = None
        self.transport: Any = None
        self.session: Any = None
        self.paused = False
        self.closed = False
        self.parts: list[bytes] = []
        self.size = 0
        self.heartbeat = heartbeat
        self.last_write = 0.0           # when the last ping went (events do not count)
        self.deflater = deflate.deflater if deflate is not None else None
        self.idle_timeout = idle_timeout
        self.last_pong = 0.0
        self.answering = 0              # calls whose answer has not gone yet
        self.refusals = 0               # calls refused for the rate, in a row
        self.reading = True
        self.later: Any = None          # the next slice of input
        # the event frames shared with every socket at the same position
        # (None: this socket frames its own)
        self.frames = frames
        self.send = _write              # how events reach the transport
        # the sockets of the resource told to go away (SPEC 21), and why this
        # one was (None: it was not)
        self.departures = departures
        self.leaving: str | None = None

    # -- the connection ----------------------------------------------------------
    def take(self, link: StreamLink, accept: bytes) -> None:
        """The fast front's connection, handed over after the handshake: the
        socket calls this object from now on, ``accept`` (the 101 answer)
        goes first."""
        transport = link.take(self)
        link.write_now(transport, accept)
        self.send = link.write_now      # events: sent at once when nothing waits
        self.makeConnection(transport)
        transport.registerProducer(self, True)

    def makeConnection(self, transport: Any) -> None:
        self.transport = transport
        self.last_pong = self.clock.seconds()
        if self.heartbeat is not None:
            self.last_write = self.clock.seconds()
            self.heartbeat.add(self)

    def dataReceived(self, data: bytes) -> None:
        if self.closed:                 # our close frame went: only the client's counts
            self._after_close(data)
            return
        # the client's answer to a ping, alone in its read: a masked empty
        # pong (0x8A 0x80 and the mask); thousands of idle sockets send one
        # each per ping interval, and wsproto's event machinery costs more
        # than the rest of the read
        if len(data) == 6 and data[0] == 0x8A and data[1] == 0x80 \
                and self.later is None and _between_frames(self.conn):
            self.last_pong = self.clock.seconds()
            return
        try:
            self.conn.receive_data(data)
        except RemoteProtocolError:   # pragma: no cover - after a close
            self._close(PROTOCOL_ERROR)
            return
        if self.later is None:
            self._slice()

    def _slice(self) -> None:
        """Handle what the client sent, at most one slice of it."""
        self.later = None
        if self.closed or self.paused:
            return
        handled = size = 0
        try:
            for event in self.conn.events():
                self._event(event)
                if self.closed:
                    return
                handled += 1
                size += len(getattr(event, "data", b"")) + 6
                if self.paused:     # the client does not read: nor do we
                    self._read(False)
                    return
                if handled >= SLICE_MESSAGES or size >= SLICE_BYTES:
                    self._read(False)
                    self.later = self.clock.callLater(0, self._slice)
                    return
        except RemoteProtocolError:
            self._close(PROTOCOL_ERROR)
            return
        except Exception:
            log.failure("a WebSocket message failed")
            self._close(INTERNAL)
            return
        self._read(True)

    def _read(self, on: bool) -> None:
        if on != self.reading and self.transport is not None and not self.closed:
            self.reading = on
            if on:
                self.transport.resumeProducing()
            else:
                self.transport.pauseProducing()

    def _event(self, event: Any) -> None:
        if isinstance(event, TextMessage):
            data = event.data.encode("utf-8")
            self.size += len(data)
            if self.size > self.max_message:
                self._close(TOO_BIG)
                return
            self.parts.append(data)
            if event.message_finished:
                body = data if len(self.parts) == 1 else b"".join(self.parts)
                self.parts, self.size = [], 0
                self._call(body)
        elif isinstance(event, BytesMessage):
            # a binary message's parts are refused as they come: nothing is kept
            if event.message_finished:
                if self._over_rate():
                    return
                self._send_json({"jsonrpc": "2.0", "id": None, "error": {
                    "code": -32600, "message": "binary frames are not accepted: "
                                               "send JSON-RPC in text frames"}})
        elif isinstance(event, Ping):
            self.transport.write(self.conn.send(event.response()))
        elif isinstance(event, CloseConnection):
            if self.conn.state is ConnectionState.OPEN:
                # not the client's close frame: wsproto reports a frame it
                # could not read (not UTF-8, a bad opcode, an extension's
                # refusal) as a close whose reason is its parser's message
                self._close(event.code if event.code in CLOSE_REASONS else PROTOCOL_ERROR)
                return
            if self.conn.state is ConnectionState.REMOTE_CLOSING:
                # the client's close: its code echoed, none of its text
                self.transport.write(self.conn.send(CloseConnection(event.code)))
            self.closed = True
            self.transport.loseConnection()
        elif isinstance(event, Pong):
            self.last_pong = self.clock.seconds()

    def _over_rate(self) -> bool:
        """A message the dispatcher does not count (a binary one) counts
        here: True when refused (answered 1007, or closed)."""
        admit = getattr(self.dispatcher, "admit", None)
        if admit is None:
            return False
        wait = admit(self.caller, 1)
        if wait <= 0:
            self.refusals = 0
            return False
        self._refused()
        if not self.closed:
            self._send_json({"jsonrpc": "2.0", "id": None, "error": {
                "code": 1007, "message": "rate limited", "data": {"retry_after": wait}}})
        return True

    def _refused(self) -> None:
        self.refusals += 1
        if self.refusals > REFUSALS:
            self._close(POLICY)

    def _call(self, body: bytes) -> None:
        self.answering += 1
        answer = self.dispatcher.handle(body, self.caller)
        if isinstance(answer, Deferred):
            answer.addCallback(self._answer)
            answer.addErrback(self._failed)
        else:
            self._answer(answer)

    def _failed(self, failure: Any) -> None:
        log.failure("a WebSocket call failed", failure)
        self._answered()

    def _answer(self, answer: RpcAnswer) -> None:
        if answer.status == 429:
            self._refused()
        else:
            self.refusals = 0
        self._send(answer.body)
        self._answered()

    def _answered(self) -> None:
        """The answer went: the events that waited for it follow (or, on a
        socket told to go away, the close frame after them)."""
        self.answering -= 1
        if self.answering or self.closed:
            return
        if self.leaving is not None:
            self._leave(self.leaving)
        elif self.session is not None:
            self.sessions.resume_writing(self.session, self)

    def _send(self, body: bytes | None) -> None:
        if body is None or self.closed:
            return
        if self.deflater is not None and len(body) >= SMALLEST:
            self.transport.write(frame(self.deflater.message(body), True))
        else:
            self.transport.write(text_frame(body))

    def _send_json(self, value: Any) -> None:
        self._send(json.dumps(value, separators=(",", ":")).encode())

    def ping(self, now: float) -> None:
        """A ping frame every interval keeps the socket alive through
        proxies; a socket with no session whose client answered no ping for
        ``idle_timeout`` seconds is closed."""
        self.last_write = now
        if self.closed:
            return
        if self.idle_timeout and self.session is None \
                and now - self.last_pong >= self.idle_timeout:
            self._close(GOING_AWAY)
            return
        # the same two bytes wsproto frames for Ping(b""), sent as events are
        # (at once on the fast front): thousands of idle sockets get one each
        self.send(self.transport, PING_FRAME)

    def _close(self, code: int, reason: str | None = None, linger: bool = False) -> None:
        """Send a close frame and close the connection. Its reason is
        ``CLOSE_REASONS[code]``, or one of ``CLOSE_TEXTS`` (the shutdown's):
        never any other text. ``linger``: close once the client's close
        frame came back, or ``CLOSE_LINGER`` seconds later."""
        if self.closed:
            return
        self.closed = True
        try:
            text = CLOSE_REASONS[code] if reason is None or reason not in CLOSE_TEXTS \
                else reason
            self.transport.write(self.conn.send(CloseConnection(code, text)))
        except Exception:
            pass
        if not linger:
            self.transport.loseConnection()
            return
        later, self.later = self.later, None
        if later is not None and later.active():
            later.cancel()
        if not self.reading:            # the client's close frame must be read
            self.reading = True
            self.transport.resumeProducing()
        self.later = self.clock.callLater(CLOSE_LINGER, self._lose)

    def _after_close(self, data: bytes) -> None:
        """Bytes after our close frame: the connection closes when they
        hold the client's close frame (anything else is dropped)."""
        try:
            self.conn.receive_data(data)
            done = any(isinstance(e, CloseConnection) for e in self.conn.events())
        except Exception:
            done = True
        if done or self.conn.state is ConnectionState.CLOSED:
            self._lose()

    def _lose(self) -> None:
        later, self.later = self.later, None
        if later is not None and later.active():
            later.cancel()
        if self.transport is not None:
            self.transport.loseConnection()

    # -- the node shuts down (SPEC 21) -------------------------------------------------
    def go_away(self, reason: str = SHUTTING_DOWN) -> None:
        """Close with 1001 (going away) once the calls being answered are
        answered and what waits for the session is written."""
        if self.closed or self.leaving is not None:
            return
        self.leaving = reason
        if self.departures is not None:
            self.departures.leave(self)
        if self.heartbeat is not None:
            self.heartbeat.discard(self)
        if not self.answering:
            self._leave(reason)

    def _leave(self, reason: str) -> None:
        session = self.session
        if session is not None:
            # what waits goes first, even to a client that reads slowly (at
            # most --max-queue events); the session stays for its resume
            if self.transport is not None:
                self.sessions.events_out += session.log.write(self.write)
            self.session = None
            self.sessions.detach(session, self)
        if self.transport is not None:
            self._close(GOING_AWAY, reason, linger=True)

    def abort(self) -> None:
        """Cut the connection (the shutdown's deadline passed)."""
        self.closed = True
        if self.transport is not None:
            self.transport.abortConnection()

    def connectionLost(self, reason: Any = None) -> None:
        self.closed = True
        if self.later is not None and self.later.active():
            self.later.cancel()
        self.later = None
        if self.heartbeat is not None:
            self.heartbeat.discard(self)
        if self.departures is not None:
            self.departures.gone(self)
        if self.session is not None:
            self.sessions.detach(self.session, self)
            self.session = None
        try:
            (self.request or self.transport).unregisterProducer()
        except Exception:
            pass
        # the caller names this socket and the transport's protocol is this
        # socket: both cycles go now, so the socket is freed at once instead
        # of at the collector's next full pass (thousands of them held)
        self.caller = self.transport = self.request = None

    # -- IPushProducer: the socket's unsent bytes ------------------------------------
    def pauseProducing(self) -> None:
        """Unsent bytes passed the bound: no events, and no reading."""
        self.paused = True
        self._read(False)

    def resumeProducing(self) -> None:
        if self.paused:
            self.paused = False
            if self.session is not None and not self.answering:
                self.sessions.resume_writing(self.session, self)
            if not self.closed and self.later is None:
                self.later = self.clock.callLater(0, self._slice)

    # -- the session it carries ------------------------------------------------------
    def switch_to(self, session: Any) -> None:
        """This socket now carries ``session`` (after create or attach); its
        events follow the call's answer."""
        old = self.session
        self.session = session
        if old is not None and old is not session:
            self.sessions.detach(old, self)
        if not self.answering:
            self.sessions.resume_writing(session, self)

    # -- Delivery ------------------------------------------------------------------------
    def write(self, first: int, fragments: Sequence[Fragment]) -> None:
        if self.closed:
            return
        frames = self.frames
        if frames is not None:
            self.send(self.transport, frames.frame(self.deflater, first, fragments))
            return
        self.send(self.transport, any_events_frame(self.deflater, first, fragments))

    def writable(self) -> bool:
        return not self.paused and not self.closed and not self.answering \
            and self.transport is not None

    def notify(self, session: Any) -> None:
        """Events wait in ``session``'s log: write them if the client reads
        (``writable``, inlined: this is the fan-out's path)."""
        if not self.paused and not self.closed and not self.answering \
                and self.transport is not None:
            self.sessions.events_out += session.log.write(self.write)

    def close(self) -> None:
        """Another delivery took the session: this socket ends."""
        self.session = None
        self._close(NORMAL)


class WebSocketResource(Resource):
    """``GET /api/ws``: the upgrade to a WebSocket carrying JSON-RPC."""

    isLeaf = True

    def __init__(self, dispatcher: Dispatcher, sessions: Any, policy: HttpPolicy,
                 clock: Clock, max_message: int, idle_timeout: float | None = None,
                 ping_interval: float = PING_INTERVAL) -> None:
        """``policy``: the key and the Origin rule of the HTTP API, checked
        before the upgrade, and who the caller is."""
        super().__init__()
        self.dispatcher = dispatcher
        self.sessions = sessions
        self.policy = policy
        self.clock = clock
        self.max_message = max_message
        self.idle_timeout = idle_timeout
        self.frames = SharedFrames()
        self.departures = Departures()
        # a socket with no session must answer a ping within the idle
        # timeout: pinged at least twice in it
        self.heartbeat = Heartbeat(clock, min(ping_interval, idle_timeout / 2)
                                   if idle_timeout else ping_interval)

    def close_all(self, reason: str = SHUTTING_DOWN) -> Deferred[None]:
        """The node shuts down (SPEC 21): every socket closes with 1001
        after its calls' answers and its session's events
        (``WsConnection.go_away``), and one that opens from now on too.
        Fires once every socket's connection is gone."""
        departures = self.departures
        departures.closing = True
        sockets = [s for s in self.heartbeat.members() if isinstance(s, WsConnection)]
        if sockets:
            log.info("closing {count} WebSockets: {reason}", count=len(sockets), reason=reason)
        for ws in sockets:
            try:
                ws.go_away(reason)
            except Exception:
                log.failure("closing a WebSocket failed")
        return departures.all_gone()

    def abort_all(self) -> None:
        """Cut the sockets still open (the shutdown's deadline passed)."""
        self.departures.abort_all()

    def _upgrade_required(self, request: Any, message: str) -> bytes:
        request.setHeader(b"upgrade", b"websocket")
        request.setHeader(b"sec-websocket-version", b"13")
        body = self.policy.stream_answer(request, 426, -32600, message)
        request.setResponseCode(426, b"Upgrade Required")
        return body

    def handshake(self, headers: list[tuple[bytes, bytes]], path: bytes
                  ) -> tuple[bytes, Any, ServerDeflate | None] | tuple[int, str]:
        """The opening handshake of a request with ``headers``, on either
        front: (the 101 answer, wsproto's connection, the deflate
        negotiated or None), or (status, message) of a refusal."""
        versions = [value for name, value in headers if name.lower() == b"sec-websocket-version"]
        if versions and versions != [b"13"]:
            return 426, "this server speaks WebSocket version 13 (Sec-WebSocket-Version: 13)"
        handshake = H11Handshake(ConnectionType.SERVER)
        try:
            handshake.initiate_upgrade_connection(headers, path)
            offer = next((e for e in handshake.events() if isinstance(e, Request)), None)
        except (UnicodeError, h11.ProtocolError):
            # wsproto decodes header values as ASCII; h11 refuses what HTTP
            # forbids (two Host headers)
            return 400, "bad request headers"
        except RemoteProtocolError:
            offer = None
        if offer is None:
            return 426, NO_UPGRADE
        subprotocol = SUBPROTOCOL if SUBPROTOCOL in offer.subprotocols else None
        deflate = ServerDeflate(self.max_message)
        try:
            accept = handshake.send(AcceptConnection(subprotocol=subprotocol,
                                                     extensions=[deflate]))
        except (RemoteProtocolError, ValueError):
            deflate = ServerDeflate(self.max_message)      # an offer it could not parse
            handshake = H11Handshake(ConnectionType.SERVER)
            handshake.initiate_upgrade_connection(headers, path)
            accept = handshake.send(AcceptConnection(subprotocol=subprotocol))
        return accept, handshake.connection, deflate if deflate.enabled() else None

    def _connection(self, conn: Any, deflate: ServerDeflate | None,
                    request: Any) -> WsConnection:
        return WsConnection(conn, self.dispatcher, self.sessions, self.clock,
                            self.max_message, request, self.heartbeat, deflate,
                            self.idle_timeout, self.frames, self.departures)

    # -- the fast front: the raw connection ----------------------------------------
    def stream(self, r: StreamRequest, caller: Any, link: StreamLink) -> StreamAnswer:
        """``GET /api/ws`` on the fast front: refused as on twisted.web, or
        the socket takes the connection after the handshake (None)."""
        refused = self.policy.stream_refusal(r.query, r.header(KEY_HEADER), r.header(b"origin"))
        if refused is not None:
            status, code, message = refused
            return HttpAnswer(status, stream_error(code, message))
        done = self.handshake([(name, value) for name, values in r.headers.items()
                               for value in values], r.path)
        if len(done) == 2:
            status, message = done
            if status == 426:
                return HttpAnswer(426, stream_error(-32600, message),
                                  ((b"Upgrade", b"websocket"), (b"Sec-WebSocket-Version", b"13")))
            return HttpAnswer(status, stream_error(-32600, message))
        accept, conn, deflate = done
        ws = self._connection(conn, deflate, None)
        ws.caller = self.policy.channel_caller(link.peer, r.headers, ws)
        ws.take(link, accept)
        if self.departures.closing:     # opened while the node shuts down
            ws.go_away()
        return None

    # -- twisted.web ---------------------------------------------------------------------
    def render_HEAD(self, request: Any) -> bytes:
        """The head of a GET that does not upgrade: only a GET opens a
        WebSocket (RFC 6455 section 4.1), so a HEAD, Upgrade headers or
        not, is refused as a GET without them is (426), or as any stream
        is (403). Both fronts answer it here (the fast front hands a HEAD on)."""
        body = self.policy.refuse_stream(request)
        if body is None:
            body = self._upgrade_required(request, NO_UPGRADE)
        request.setHeader(b"content-length", b"%d" % len(body))
        return b""

    def render_GET(self, request: Any) -> bytes | int:
        refused = self.policy.refuse_stream(request)
        if refused is not None:
            return refused
        headers = [(name, value) for name, values in request.requestHeaders.getAllRawHeaders()
                   for value in values]
        done = self.handshake(headers, request.path)
        if len(done) == 2:
            status, message = done
            if status == 426:
                return self._upgrade_required(request, message)
            return self.policy.stream_answer(request, status, -32600, message)
        accept, conn, deflate = done
        ws = self._connection(conn, deflate, request)
        ws.caller = self.policy.request_caller(request, ws)
        channel = request.channel
        transport = channel.transport
        channel._protocolUpgradeForWebsockets(ws)
        transport.write(accept)
        request.registerProducer(ws, True)
        if self.departures.closing:     # opened while the node shuts down
            ws.go_away()
        return NOT_DONE_YET
