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
(``events.py``); per socket only the seq framing and the frame header are new.
"""
from __future__ import annotations

import json
import struct
from typing import Any, Sequence

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET
from wsproto import ConnectionType
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection, BytesMessage, CloseConnection, Ping, Pong, TextMessage)
from wsproto.handshake import H11Handshake
from wsproto.utilities import RemoteProtocolError

from pushengine.api.rpc import Dispatcher, RpcAnswer
from pushengine.core.events import DROPPED, Fragment, utf8
from pushengine.web.policy import HttpPolicy
from pushengine.web.timing import Clock
from pushengine.transports.heartbeat import Heartbeat
from pushengine.transports.producer import StreamProducer

log = Logger()
PING_INTERVAL = 30.0
TOO_BIG, UNSUPPORTED, GOING_AWAY, NORMAL = 1009, 1003, 1001, 1000


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


class WsConnection(StreamProducer):
    """One WebSocket: calls in, answers and events out; the delivery of the
    session it carries."""

    def __init__(self, conn: Any, dispatcher: Any, sessions: Any, clock: Any,
                 max_message: int, request: Any, heartbeat: Heartbeat | None = None) -> None:
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
        self.parts: list[str] = []
        self.size = 0
        self.heartbeat = heartbeat
        self.last_write = 0.0           # when the last ping went (events do not count)

    # -- the connection ----------------------------------------------------------
    def makeConnection(self, transport: Any) -> None:
        self.transport = transport
        if self.heartbeat is not None:
            self.last_write = self.clock.seconds()
            self.heartbeat.add(self)

    def dataReceived(self, data: bytes) -> None:
        try:
            self.conn.receive_data(data)
            for event in self.conn.events():
                self._event(event)
                if self.closed:
                    return
        except RemoteProtocolError as e:
            self._close(1002, f"protocol error: {e}"[:120])
        except Exception:
            log.failure("a WebSocket message failed")
            self._close(1011, "internal error")

    def _event(self, event: Any) -> None:
        if isinstance(event, TextMessage):
            self.size += len(event.data)
            if self.size > self.max_message:
                self._close(TOO_BIG, f"a message may hold at most {self.max_message} bytes")
                return
            self.parts.append(event.data)
            if event.message_finished:
                text, self.parts, self.size = "".join(self.parts), [], 0
                self._call(text)
        elif isinstance(event, BytesMessage):
            # a binary message's parts are refused as they come: nothing is kept
            if event.message_finished:
                self._send_json({"jsonrpc": "2.0", "id": None, "error": {
                    "code": -32600, "message": "binary frames are not accepted: "
                                               "send JSON-RPC in text frames"}})
        elif isinstance(event, Ping):
            self.transport.write(self.conn.send(event.response()))
        elif isinstance(event, CloseConnection):
            if self.conn.state not in (ConnectionState.CLOSED, ConnectionState.LOCAL_CLOSING):
                self.transport.write(self.conn.send(event.response()))
            self.closed = True
            self.transport.loseConnection()
        elif isinstance(event, Pong):
            pass

    def _call(self, text: str) -> None:
        try:
            body = text.encode("utf-8")
        except UnicodeEncodeError:   # pragma: no cover - wsproto checks UTF-8
            body = b"\xff"
        answer = self.dispatcher.handle(body, self.caller)
        if isinstance(answer, Deferred):
            answer.addCallback(self._answer)
            answer.addErrback(lambda f: log.failure("a WebSocket call failed", f))
        else:
            self._answer(answer)

    def _answer(self, answer: RpcAnswer) -> None:
        self._send(answer.body)

    def _send(self, body: bytes | None) -> None:
        if body is not None and not self.closed:
            self.transport.write(text_frame(body))

    def _send_json(self, value: Any) -> None:
        self._send(json.dumps(value, separators=(",", ":")).encode())

    def ping(self, now: float) -> None:
        """A ping frame every interval keeps the socket alive through proxies."""
        self.last_write = now
        if not self.closed:
            self.transport.write(self.conn.send(Ping(b"")))

    def _close(self, code: int, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.transport.write(self.conn.send(CloseConnection(code, reason)))
        except Exception:
            pass
        self.transport.loseConnection()

    def connectionLost(self, reason: Any = None) -> None:
        self.closed = True
        if self.heartbeat is not None:
            self.heartbeat.discard(self)
        if self.session is not None:
            self.sessions.detach(self.session, self)
            self.session = None
        try:
            self.request.unregisterProducer()
        except Exception:
            pass

    # -- the session it carries ------------------------------------------------------
    def switch_to(self, session: Any) -> None:
        """This socket now carries ``session`` (after create or attach)."""
        old = self.session
        self.session = session
        if old is not None and old is not session:
            self.sessions.detach(old, self)
        self.sessions.resume_writing(session, self)

    # -- Delivery ------------------------------------------------------------------------
    def write(self, first: int, fragments: Sequence[Fragment]) -> None:
        if not self.closed:
            self.transport.write(events_frame(first, fragments))

    def writable(self) -> bool:
        return not self.paused and not self.closed and self.transport is not None

    def notify(self, session: Any) -> None:
        """Events wait in ``session``'s log: write them if the client reads
        (``writable``, inlined: this is the fan-out's path)."""
        if not self.paused and not self.closed and self.transport is not None:
            self.sessions.events_out += session.log.write(self.write)

    def close(self) -> None:
        """Another delivery took the session: this socket ends."""
        self.session = None
        self._close(NORMAL, "the session is delivered elsewhere now")



class WebSocketResource(Resource):
    """``GET /api/ws``: the upgrade to a WebSocket carrying JSON-RPC."""

    isLeaf = True

    def __init__(self, dispatcher: Dispatcher, sessions: Any, policy: HttpPolicy,
                 clock: Clock, max_message: int) -> None:
        """``policy``: the key and the Origin rule of the HTTP API, checked
        before the upgrade, and who the caller is."""
        super().__init__()
        self.dispatcher = dispatcher
        self.sessions = sessions
        self.policy = policy
        self.clock = clock
        self.max_message = max_message
        self.heartbeat = Heartbeat(clock, PING_INTERVAL)

    def render_GET(self, request: Any) -> bytes | int:
        refused = self.policy.refuse_stream(request)
        if refused is not None:
            return refused
        handshake = H11Handshake(ConnectionType.SERVER)
        headers = [(name, value) for name, values in request.requestHeaders.getAllRawHeaders()
                   for value in values]
        try:
            handshake.initiate_upgrade_connection(headers, request.path)
        except UnicodeError:            # wsproto decodes header values as ASCII
            return self.policy.stream_answer(request, 400, -32600, "bad request headers")
        except RemoteProtocolError:
            request.setHeader(b"upgrade", b"websocket")
            return self.policy.stream_answer(
                request, 426, -32600, "a WebSocket upgrade is required (Upgrade: websocket)")
        accept = handshake.send(AcceptConnection())
        ws = WsConnection(handshake.connection, self.dispatcher, self.sessions, self.clock,
                          self.max_message, request, self.heartbeat)
        ws.caller = self.policy.request_caller(request, ws)
        channel = request.channel
        transport = channel.transport
        channel._protocolUpgradeForWebsockets(ws)
        transport.write(accept)
        request.registerProducer(ws, True)
        return NOT_DONE_YET
