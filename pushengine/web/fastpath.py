"""A lean HTTP/1.1 channel for the calls that matter (SPEC sections 3, 12).

Every poll is one HTTP request and answer, and twisted.web's fixed cost per
answer (a Request object, header objects, producers, klein) bounded how fast
the engine could answer them. This channel parses requests with httptools
(node's llhttp parser) and answers the calls of the route table
(``routes.py``: ``POST /api/jsonrpc`` and ``POST /api/publish``) itself,
with the functions twisted.web runs for them, each answer one piece of
bytes; answers to what a turn of the reactor read leave together at its end
(``outbox.py``), what a change causes leaves at once (``FastChannel.send``). Every
other request — static files, /health, /metrics, OPTIONS, a HEAD of a stream
route — is handed, whole,
to a twisted.web channel of the same site that lives behind this one for the
connection's life; its answer goes straight to the client. A stream route's
GET (``Route.stream``: SSE, the WebSocket upgrade) is handed to its transport
with the connection itself (``FastChannel.take``): the transport writes its
head and messages straight to the socket, and the channel lets go of its
parser and request state (on a TCP connection the transport becomes the
socket's protocol, and the channel is freed). When the node shuts down (SPEC 21) the site's ``connections``
(``connections.py``) tell each channel to finish up (``finish_up``): one
between requests closes at once, one answering closes after its answer
(and those of requests already read), which says ``Connection: close``.
HTTP stays whole on both paths: keep-alive and pipelining (answers
in request order), Content-Length and chunked bodies, 413 from the
Content-Length before a body byte is read, 400 on malformed requests (JSON),
``Expect: 100-continue``, the header deadline and the idle timeout; the
client's address, CORS, the body limits and the error answers are the edge's
policy (``policy.py``), as on twisted.web.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable, Iterable, Sequence

import httptools
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.server import Site

from pushengine.api.caller import Caller
from pushengine.core.numbers import parse_decimal
from pushengine.web.channel import DeadlineChannel
from pushengine.web.connections import OpenConnections
from pushengine.web.outbox import Outbox
from pushengine.web.policy import (
    BAD_TARGET, CONNECT_REFUSED, INTERNAL_ERROR, LINGER_BYTES, LINGER_SECONDS, NO_METHODS,
    SEGMENT_UPLOADS, TOO_MANY_CONNECTIONS, Headers as HeaderPairs, HttpPolicy, closing_answer,
    date_line, error_body, origin_form, path_error, status_line, too_large_message,
    websocket_upgrade)
from pushengine.web.routes import (
    CallHandler, HttpAnswer, ReplyingCall, ReplyingHandler, RouteTable, StreamHandler)
from pushengine.web.sendnow import send_now
from pushengine.web.timing import Clock, Timer

log = Logger()

MAX_URL = 16 * 1024
MAX_HEAD = 16 * 1024
MAX_HEADERS = 500
MAX_WAITING = 16          # parsed requests queued behind one being answered
HEAD_CAP = 2048           # the longest request head remembered (``FastChannel._remember``)
REMEMBER_CAP = 16 * 1024  # the longest request whose head is remembered, body included
LENGTH_DIGITS = 18        # the longest Content-Length read
# the bytes of a chunked body's framing (size lines, extensions, trailers)
# beyond its data: CHUNK_LINE per chunk (twisted.web's longest chunk-size
# line) and FRAMING_SLACK in all
CHUNK_LINE = 1024
FRAMING_SLACK = 4096
FRAMING_SLICE = 4096      # a chunked body in progress is parsed in slices this long
Headers = Sequence[tuple[bytes, bytes]]


class _Request:
    """A parsed request; to a call (``routes.HttpCall``) its query, headers
    and body."""

    __slots__ = ("method", "url", "path", "headers", "parts", "size", "too_large",
                 "keep_alive", "upgrade", "head_size", "version", "count", "streamed",
                 "length", "body", "chunks", "framing", "ordinary")

    def __init__(self) -> None:
        self.method = b""
        self.url = b""
        self.path = b""
        self.headers: dict[bytes, list[bytes]] = {}
        self.parts: list[bytes] = []
        self.size = 0
        self.too_large = False
        self.keep_alive = True
        self.upgrade = False
        self.head_size = 0
        self.count = 0
        self.version = "1.1"
        self.streamed = False           # a segment upload: its body goes on as it comes
        self.length: int | None = None  # the Content-Length (None: none, or chunked)
        self.body = False               # a body follows the headers
        self.chunks = 0                 # chunk headers read
        self.framing = 0                # bytes of a chunked body that are not data
        # an Upgrade that is no WebSocket handshake: read again as an ordinary
        # request (``FastChannel._ordinary``)
        self.ordinary = False

    def header(self, name: bytes) -> bytes | None:
        values = self.headers.get(name)
        return values[0] if values else None

    def again(self, body: bytes) -> _Request:
        """A request as this one parsed, with ``body`` (a head read again:
        ``FastChannel._remember``). The headers are shared: no call changes them."""
        r = _new_request(_Request)
        r.method, r.url, r.path, r.headers = self.method, self.url, self.path, self.headers
        r.parts = [body] if body else []
        r.size = len(body)
        r.too_large = r.upgrade = r.streamed = r.ordinary = False
        r.keep_alive = self.keep_alive
        r.head_size, r.count, r.version = self.head_size, self.count, self.version
        r.length, r.body = self.length, self.body
        r.chunks = r.framing = 0
        return r

    @property
    def query(self) -> bytes:
        return self.url.partition(b"?")[2]

    def content(self) -> bytes:
        parts = self.parts
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def head(self, length: int) -> bytes:
        """The request line and headers for the channel behind, the body to
        follow (a streamed segment upload; an ``Expect`` goes on: the channel
        behind answers it once the headers are judged)."""
        lines = [b"%s %s HTTP/%s" % (self.method, self.url, self.version.encode())]
        for name, values in self.headers.items():
            if name not in (b"content-length", b"transfer-encoding"):
                lines.extend(name + b": " + value for value in values)
        lines.append(b"content-length: %d" % length)
        return b"\r\n".join(lines) + b"\r\n\r\n"

    def plain_head(self) -> bytes:
        """The request line and headers as they came, less ``Upgrade``: the
        head of the ordinary request an Upgrade that is no WebSocket
        handshake is (its body, what follows, is read after it)."""
        lines = [b"%s %s HTTP/%s" % (self.method, self.url, self.version.encode())]
        for name, values in self.headers.items():
            if name != b"upgrade":
                lines.extend(name + b": " + value for value in values)
        return b"\r\n".join(lines) + b"\r\n\r\n"

    def raw(self) -> bytes:
        """The request as bytes for the twisted.web channel behind (the body
        de-chunked, with its Content-Length)."""
        lines = [b"%s %s HTTP/%s" % (self.method, self.url, self.version.encode())]
        for name, values in self.headers.items():
            if name in (b"content-length", b"transfer-encoding") \
                    or (name == b"upgrade" and not self.upgrade):
                continue
            for value in values:
                lines.append(name + b": " + value)
        body = b"".join(self.parts)
        if body or self.method in (b"POST", b"PUT", b"PATCH"):
            lines.append(b"content-length: %d" % len(body))
        return b"\r\n".join(lines) + b"\r\n\r\n" + body


_new_request = object.__new__


class _Relay:
    """The transport of the twisted.web channel behind a FastChannel: what it
    writes goes to the client; closing closes the client's connection."""

    def __init__(self, front: FastChannel) -> None:
        self.front = front
        self.disconnecting = False

    def write(self, data: bytes) -> None:
        front = self.front
        front.send(data)
        r = front.request
        if r is not None and r.streamed and not data.startswith(b"HTTP/1.1 1"):
            # a final answer before the upload's body ended: it was refused
            # (401, 403, 413); the rest of the body is read and dropped
            front._linger()

    def writeSequence(self, data: Iterable[bytes]) -> None:
        self.front.send(b"".join(data))

    def loseConnection(self) -> None:
        self.disconnecting = True
        front = self.front
        r = front.request
        if r is not None and r.streamed:
            front._linger()             # refused before the upload's body ended
        else:
            front.factory.outbox.close(front.transport)

    def abortConnection(self) -> None:
        self.front.factory.outbox.abort(self.front.transport)

    def getPeer(self) -> Any:
        return self.front.transport.getPeer()

    def getHost(self) -> Any:
        return self.front.transport.getHost()

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        self.front.transport.registerProducer(producer, streaming)

    def unregisterProducer(self) -> None:
        self.front.transport.unregisterProducer()

    def pauseProducing(self) -> None:
        self.front.behind_paused = True
        self.front._reading()

    def resumeProducing(self) -> None:
        self.front.behind_paused = False
        self.front._reading()

    def stopProducing(self) -> None:
        self.front.transport.stopProducing()


class FastChannel(Protocol):
    """One client connection (see the module docstring)."""

    transport: Any                      # a TCP connection (or a test's transport)

    def __init__(self, factory: FastSite) -> None:
        self.factory = factory
        self.parser: Any = httptools.HttpRequestParser(self)
        self.request: _Request | None = None
        self.waiting: deque[_Request] = deque()
        self.busy = False               # an answer is being made
        self.answering: Deferred[HttpAnswer] | Deferred[HttpAnswer | None] \
            | ReplyingCall | None = None
        self.behind: Any = None           # the twisted.web HTTPChannel, once needed
        self.closing = False
        self.refused: _Refused | None = None   # why a parser callback stopped the parser
        # the two deadlines' timers outlive their deadlines: disarming only
        # clears the flag, arming again resets the same timer (a reset to a
        # later time costs the reactor nothing; a cancel and a new timer cost
        # two heap operations among every connection's timers)
        self.header_timer: Timer | None = None
        self.header_armed = False
        self.idle_timer: Timer | None = None
        self.idle_armed = False
        self.peer = ""
        self.plain_caller: Caller | None = None   # of requests without caller headers
        self.reading = False             # in dataReceived: answers wait for the turn's end
        self.body_timer: Timer | None = None
        self.counted: str | None = None  # the client address this connection counts under
        self.proxied = False             # from a trusted proxy: counted at its first request
        self.websocket = False           # the request just read upgrades to a WebSocket
        # the head of an Upgrade that is no WebSocket handshake, to read again
        # as an ordinary request (``_ordinary``)
        self.plain: bytes | None = None
        self.paused = False              # reading stopped behind an answer being made
        self.behind_paused = False       # twisted.web behind asked to stop reading
        self.lingering = False           # answered and closing: reading and dropping
        self.lingered = 0
        self.linger_timer: Timer | None = None
        self.stream: Any = None          # the transport's protocol that took the connection
        # the last request head read whole, and what it parsed to (``_remember``)
        self.head: bytes | None = None
        self.parsed: _Request | None = None
        self.whole = 0                   # its head's length and its Content-Length
        self.completed = 0               # requests completed in this call's bytes
        self.last: _Request | None = None
        self.replying: _Request | None = None  # the request a ReplyingCall answers
        self.draining = False            # the node shuts down: close after the answers

    # -- connection ------------------------------------------------------------
    def connectionMade(self) -> None:
        self.peer = getattr(self.transport.getPeer(), "host", "") or ""
        policy = self.factory.policy
        admitted, counted = policy.admit_peer(self.peer)
        if not admitted:
            # past --max-client-connections: refused at once, nothing read
            self.closing = True
            self.transport.write(closing_answer(429, path_error(TOO_MANY_CONNECTIONS)))
            self.transport.loseConnection()
            return
        self.counted = counted
        self.proxied = counted is None and bool(policy.connections.limit)
        self.factory.connections.add(self)
        no_delay = getattr(self.transport, "setTcpNoDelay", None)
        if no_delay is not None:
            # a push server's messages are small and must leave at once: with
            # Nagle's algorithm a message written while the previous one is
            # unacknowledged waits for the client's delayed ACK (40 ms)
            no_delay(True)
        self._arm_header_deadline()

    def dataReceived(self, data: bytes) -> None:
        if self.stream is not None:     # a stream took the connection (``take``)
            self.stream.dataReceived(data)
            return
        if self.lingering:
            self.lingered += len(data)
            if self.lingered > LINGER_BYTES:
                self._end_linger()
            return
        if self.closing:
            return
        self.idle_armed = False         # bytes arrived: the idle timer fires for nothing
        self.reading = True             # answers wait for the turn's end (send)
        try:
            r = self.request
            if r is None:
                head = self.head
                if head is not None and len(data) == self.whole and data.startswith(head) \
                        and not self.busy and not self.waiting:
                    self._again(data[len(head):])
                else:
                    self.completed = 0
                    self._feed(data)
                    if self.completed == 1 and self.request is None and not self.closing \
                            and len(data) <= REMEMBER_CAP:
                        self._remember(data)
                    self.last = None
            else:
                if r.body and r.length is None and not r.streamed and r.method:
                    data = self._chunked_body(r, data)
                if data and not self.closing:
                    self._feed(data)
        finally:
            self.reading = False
        if self.stream is not None:
            return
        r = self.request
        if r is None:
            # every request read was whole (the common case): no deadline
            # to start, and reading changes only when one of these holds
            if self.paused or self.busy or self.behind_paused:
                self._reading()
            return
        self._headers_on_the_clock()
        if r.body and self.body_timer is None and not self.closing:
            # a body still to come after this turn's bytes: its deadline runs
            # from now (a request read whole in one call never needs the timer)
            deadline = self.factory.policy.body_deadline(r.length)
            if deadline is not None:
                self.body_timer = self.factory.clock.callLater(deadline, self._body_too_slow)
        self._reading()

    def _remember(self, data: bytes) -> None:
        """``data`` was one whole request (``last``), read from its first
        byte: keep its head and what it parsed to, so that the same head
        again (a keep-alive client polling again sends the same method,
        path and headers) is not parsed again (``_again``). Only a plain
        call's head is kept: HTTP/1.1 kept alive, a Content-Length, no
        Expect, no upgrade, within ``HEAD_CAP``; a head that differs by a
        byte, another length, pipelined requests and anything malformed
        go through the parser as before."""
        r = self.last
        if r is None or not self.factory.reuse_heads or r.length is None \
                or not r.keep_alive or r.version != "1.1" or r.upgrade or r.streamed \
                or b"expect" in r.headers or b"transfer-encoding" in r.headers \
                or (r.method, r.path) not in self.factory.calls:
            return
        end = data.find(b"\r\n\r\n", 0, HEAD_CAP) + 4
        if end < 4 or end + r.length != len(data):
            return
        self.head = data[:end]
        self.parsed = r
        self.whole = len(data)

    def _again(self, body: bytes) -> None:
        """The remembered head again, whole, with its body: the request the
        parser made of that head (``_remember``), what its callbacks would do
        for it done here. Its Content-Length passed the body limit when the
        head was first read, and the parser stands between two requests."""
        parsed = self.parsed
        assert parsed is not None
        self.header_armed = False
        self.waiting.append(parsed.again(body))
        self._next()

    def _chunked_body(self, r: _Request, data: bytes) -> bytes:
        """Feed what continues ``r``'s chunked body in slices, each of which
        either is all ``r``'s (its bytes that are not data count as framing:
        chunk-size lines, extensions, trailers; JSON 400 past the bound) or
        ends it; answer what follows ``r``."""
        while data and self.request is r and not self.closing:
            piece, data = data[:FRAMING_SLICE], data[FRAMING_SLICE:]
            size = r.size
            self._feed(piece)
            if self.request is r and not self.closing:
                r.framing += len(piece) - (r.size - size)
                if r.framing > FRAMING_SLACK + CHUNK_LINE * r.chunks:
                    self._fail(400, "the chunked body's framing is too long (chunk sizes, "
                                    "extensions, trailers)", r.path)
        return data

    def _feed(self, data: bytes) -> None:
        """Parse ``data``: requests are answered as they complete."""
        try:
            while True:
                try:
                    self.parser.feed_data(data)
                except httptools.HttpParserUpgrade as e:
                    rest = data[e.args[0]:]
                    if self.websocket:
                        self._upgrade(rest)
                        break
                    if self.stream is not None:
                        break
                    # any other upgrade is an ordinary request (``_ordinary``):
                    # a new parser reads its head again, without Upgrade, then
                    # its body and what follows, once
                    self.parser = httptools.HttpRequestParser(self)
                    plain, self.plain = self.plain, None
                    if plain is not None:
                        rest = plain + rest
                    if self.closing or not rest:
                        break
                    data = rest
                    continue
                break
        except httptools.HttpParserCallbackError:
            refused, self.refused = self.refused, None
            if refused is not None:
                self._fail(refused.status, refused.message, refused.path,
                           linger=refused.status == 413, headers=refused.headers)
            elif not self.closing:
                log.failure("a request failed to parse")
                self._fail(400, "bad request")
        except httptools.HttpParserError:
            self._fail(400, "bad request")

    def _reading(self) -> None:
        """Reading stops while an answer is being made and a request behind
        it has begun (pipelined behind a parked poll or a stream: its bytes
        stay in the socket, not in memory here), or while twisted.web behind
        asks; it goes on once neither holds."""
        if self.stream is not None:
            return
        r = self.request
        hold = self.busy and (bool(self.waiting) or (r is not None and not r.streamed))
        pause = (hold or self.behind_paused) and not self.closing
        if pause != self.paused and self.transport is not None:
            self.paused = pause
            if pause:
                self.transport.pauseProducing()
            else:
                self.transport.resumeProducing()

    def _headers_on_the_clock(self) -> None:
        """A request whose headers are not complete has the header deadline
        running: from its first byte (this call's bytes, or an earlier
        call's), or, behind an answer being made, from that answer's end
        (``_done``). A request read whole in one call never needs the timer."""
        r = self.request
        if r is not None and not r.method and not self.header_armed and not self.busy \
                and not self.closing:
            self._arm_header_deadline()

    def connectionLost(self, reason: Any = None) -> None:
        self.closing = True
        counted, self.counted = self.counted, None
        self.factory.policy.release(counted)
        self.factory.connections.discard(self)
        stream, self.stream = self.stream, None
        if stream is not None:
            stream.connectionLost(reason)
            return
        self._cancel_timers()
        self.factory.outbox.forget(self.transport)
        self.replying = None
        if self.answering is not None:
            d, self.answering = self.answering, None
            d.cancel()                  # a parked poll drops its waiter
        if self.behind is not None:
            try:
                self.behind.connectionLost(reason)
            except Exception:
                log.failure("closing the channel behind failed")

    # -- parser callbacks --------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.stream is not None:     # bytes after a stream's request: not read
            raise self._refuse(400, "a stream must not be pipelined")
        self.request = _Request()

    def on_chunk_header(self) -> None:
        r = self.request
        if r is not None:
            r.chunks += 1

    def on_url(self, url: bytes) -> None:
        r = self.request
        assert r is not None            # (every callback comes after on_message_begin)
        r.url += url
        if len(r.url) > MAX_URL:
            raise self._refuse(400, "the request line is too long")

    def on_header(self, name: bytes, value: bytes) -> None:
        r = self.request
        assert r is not None
        r.head_size += len(name) + len(value) + 4
        r.count += 1
        if r.head_size > MAX_HEAD or r.count > MAX_HEADERS:
            raise self._refuse(400, "the request headers are too large")
        name = name.lower()
        values = r.headers.get(name)
        if values is None:
            r.headers[name] = [value]
        else:
            values.append(value)

    def on_headers_complete(self) -> None:
        r = self.request
        assert r is not None
        parser = self.parser
        self.header_armed = False       # the headers came: the deadline fires for nothing
        r.method = parser.get_method()
        r.version = parser.get_http_version()
        if r.version not in ("1.1", "1.0"):
            # HTTP/0.9 has no headers to answer with, HTTP/2 its own framing
            raise self._refuse(400, "bad request: HTTP/1.0 or HTTP/1.1 only")
        if r.method == b"CONNECT":
            # a tunnel is never opened: 405, and the connection closes
            # without its body being read
            raise self._refuse(405, CONNECT_REFUSED, headers=NO_METHODS)
        r.keep_alive = parser.should_keep_alive()
        headers = r.headers
        if r.url[:1] != b"/":
            # the absolute form (``GET http://host/health``) is served as the
            # origin form, its authority the Host (RFC 9112 section 3.2.2)
            target = origin_form(r.url)
            if target is None:
                raise self._refuse(400, BAD_TARGET)
            r.url, host = target
            if host is not None:
                headers[b"host"] = [host]
        r.path = r.url.split(b"?", 1)[0] if b"?" in r.url else r.url
        self.websocket = False
        if parser.should_upgrade():
            # llhttp reads no body after an upgrade's headers. Only the
            # WebSocket handshake of a route that takes one hands the
            # connection on: any other Upgrade is an ordinary request
            if r.method == b"GET" and websocket_upgrade(headers.get(b"upgrade")) \
                    and (r.method, r.path) in self.factory.websockets:
                r.upgrade = self.websocket = True
            else:
                self._ordinary(r)
                return
        lengths = headers.get(b"content-length")
        policy = self.factory.policy
        if self.proxied:
            # a trusted proxy's connection counts under the client it relays
            self.proxied = False
            address = policy.caller(self.peer, headers).address
            if not policy.admit_client(address):
                raise self._refuse(429, TOO_MANY_CONNECTIONS)
            self.counted = address
        length: int | None = None
        if lengths is not None:
            length = parse_decimal(lengths[0], LENGTH_DIGITS)
            if length is None or len(lengths) > 1:
                raise self._refuse(400, "bad Content-Length", r.path)
        r.length = length
        r.body = length != 0 and (length is not None or b"transfer-encoding" in headers) \
            and not r.upgrade
        limit = policy.max_body
        if r.path.startswith(SEGMENT_UPLOADS) and policy.upload(r.method, r.path) \
                and length is not None and not self.busy and not self.waiting:
            # a segment upload (SPEC 15, up to 1 GiB): never buffered here;
            # twisted.web behind spools it to a file as it arrives
            limit = policy.body_limit(r.method, r.path)
            if length <= limit:
                r.streamed = True
                self.busy = True
                # twisted.web behind answers any Expect: 100-continue itself,
                # after the upload guard judged the headers (a refused upload
                # gets its final answer, never a 100 Continue)
                self._behind().dataReceived(r.head(length))
                return
        if length is not None and length > limit:
            # answered before a byte of the body is read; the connection closes
            raise self._refuse(413, too_large_message(limit), r.path)
        expect = headers.get(b"expect")
        if expect is not None and expect[0].lower() == b"100-continue" and not self.busy \
                and not self.waiting:
            self.send(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _ordinary(self, r: _Request) -> None:
        """``r`` asks for an upgrade that is no WebSocket handshake: it is an
        ordinary request. llhttp ends it at its headers, so a new parser reads
        its head again without the ``Upgrade`` header (``plain_head``), then
        its body and what follows, each once: before, the body was the next
        request's bytes. What the head says (the body's limits and deadline,
        the caller's count) is judged on that second reading."""
        r.ordinary = True
        self.plain = r.plain_head()

    def on_body(self, body: bytes) -> None:
        r = self.request
        assert r is not None
        if r.streamed:
            self.behind.dataReceived(body)
            return
        r.size += len(body)
        limit = self.factory.policy.max_body
        if r.size > limit:
            raise self._refuse(413, too_large_message(limit), r.path)
        r.parts.append(body)

    def on_message_complete(self) -> None:
        r, self.request = self.request, None
        assert r is not None
        if r.ordinary:
            return                      # read again, whole (``_ordinary``)
        self.completed += 1
        self.last = r
        if self.body_timer is not None:
            self._cancel_body_timer()
        if r.streamed:
            return                      # handed on as it came; answered from behind
        if r.upgrade:
            self.waiting.append(r)      # handed on after the parser stops (_upgrade)
            return
        if len(self.waiting) >= MAX_WAITING:
            raise self._refuse(400, "too many requests pipelined")
        self.waiting.append(r)
        if not self.busy:
            self._next()

    # -- answering --------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        """Write to the client, in order. What answers bytes just read goes
        out at the end of the reactor turn (the client finds all its answers
        at once: ``outbox.py``); what anything else causes — a change waking
        a parked poll, a stream's events — goes now: fanning out to
        thousands of clients, each should have its answer as soon as it is
        made, while the others are still being made."""
        outbox = self.factory.outbox
        if self.reading:
            outbox.write(self.transport, data)
        else:
            outbox.flush_one(self.transport)
            send_now(self.transport, data)

    def _next(self) -> None:
        while self.waiting and not self.busy and not self.closing:
            r = self.waiting.popleft()
            self.busy = True
            try:
                self._serve(r)
            except Exception:
                log.failure("answering {path} failed", path=r.path)
                self._write(r, 500, INTERNAL_ERROR)

    def _serve(self, r: _Request) -> None:
        factory = self.factory
        key = (r.method, r.path)
        replying = factory.replying.get(key)
        if replying is not None:
            # a call that waits writes its answer itself (``_reply``),
            # possibly before it returns
            self.replying = r
            answer = replying(r, factory.caller(self, r), self._reply)
            if type(answer) is HttpAnswer:
                self.replying = None
                self._write(r, answer.status, answer.body, answer.headers)
            elif self.replying is r:
                self.answering = answer
            return
        call = factory.calls.get(key)
        if call is None:
            stream = self.factory.streams.get((r.method, r.path))
            if stream is not None:
                self._stream(r, stream)
            else:
                self._hand_on(r)
            return
        result = call(r, self.factory.caller(self, r))
        if type(result) is HttpAnswer:  # answered at once (Deferred's isinstance is slow)
            self._write(r, result.status, result.body, result.headers)
            return
        self.answering = result
        result.addCallbacks(self._answered, self._failed, callbackArgs=(r,),
                            errbackArgs=(r,))

    def _stream(self, r: _Request, handler: StreamHandler) -> None:
        """A stream route: its transport takes the connection (``take``), or
        answers a refusal, written as a call's answer is."""
        result = handler(r, self.factory.caller(self, r), self)
        if result is None:
            return                      # taken
        if type(result) is HttpAnswer:
            self._write(r, result.status, result.body, result.headers)
            return
        assert isinstance(result, Deferred)
        self.answering = result
        result.addCallbacks(self._streamed, self._failed, callbackArgs=(r,),
                            errbackArgs=(r,))

    def _streamed(self, answer: HttpAnswer | None, r: _Request) -> None:
        self.answering = None
        if answer is not None and not self.closing and self.stream is None:
            try:
                self._write(r, answer.status, answer.body, answer.headers)
            except Exception:
                self._lost(Failure(), r)

    # -- a stream takes the connection (routes.StreamLink) ------------------------------
    write_now = staticmethod(send_now)

    def take(self, protocol: Any) -> Any:
        """Hand the connection to ``protocol`` for good (see the module
        docstring): what this channel queued goes first, its timers stop,
        its parser, requests and any twisted.web channel behind go. Returns
        the transport."""
        transport = self.transport
        self.factory.outbox.flush_one(transport)
        self._cancel_timers()
        self.closing = True
        self.factory.connections.discard(self)     # the stream's to end now
        self.stream = protocol
        self.parser = None
        self.request = None
        self.waiting.clear()
        self.plain_caller = None
        self.answering = self.replying = None
        behind, self.behind = self.behind, None
        if behind is not None:
            # an earlier request was twisted.web's: its channel, idle, goes
            transport.unregisterProducer()
            try:
                behind.connectionLost(Failure(ConnectionDone("the connection became a stream")))
            except Exception:
                log.failure("closing the channel behind failed")
        if self.paused:
            self.paused = False
            transport.resumeProducing()
        if getattr(transport, "protocol", None) is self:
            # the socket calls the stream from now on: this channel is freed
            counted, self.counted = self.counted, None
            transport.protocol = protocol if counted is None \
                else _Counted(protocol, self.factory.policy, counted)
        return transport

    def _reply(self, answer: HttpAnswer) -> None:
        """A ``ReplyingCall``'s answer: written at once."""
        r, self.replying = self.replying, None
        if r is None:
            self.answering = None
            return
        self._answered(answer, r)

    def _answered(self, answer: HttpAnswer, r: _Request) -> None:
        self.answering = None
        if self.closing:
            return
        try:
            self._write(r, answer.status, answer.body, answer.headers)
        except Exception:
            self._lost(Failure(), r)

    def _failed(self, failure: Any, r: _Request) -> None:
        self.answering = None
        if failure.check(CancelledError) or self.closing:
            return
        log.failure("answering {path} failed", failure, path=r.path)
        self._write(r, 500, INTERNAL_ERROR)

    def _lost(self, failure: Failure, r: _Request) -> None:
        """Writing an answer that came later failed: the connection cannot go on."""
        log.failure("writing the answer to {path} failed", failure, path=r.path)
        self.factory.outbox.abort(self.transport)

    def _write(self, r: _Request, status: int, body: bytes, headers: Headers = ()) -> None:
        if status == 200 and not headers and r.keep_alive and not self.closing \
                and not self.draining:
            # the common answer (a poll's): its head is made once per site,
            # its Date once per second
            factory = self.factory
            self.send(factory.ok_head + b"%d" % len(body) + factory.ok_tail + body)
            self._done(False)
            return
        parts = [status_line(status), date_line()]
        if status != 204:
            parts.append(b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body))
        parts.append(b"Cache-Control: no-store\r\n")
        for name, value in self.factory.policy.cors_headers:
            parts.append(name + b": " + value + b"\r\n")
        for name, value in headers:
            parts.append(name + b": " + value + b"\r\n")
        close = not r.keep_alive or self.closing or self._last_answer()
        if close:
            parts.append(b"Connection: close\r\n")
        parts.append(b"\r\n")
        if status != 204:
            parts.append(body)
        self.send(b"".join(parts))
        self._done(close)

    def _done(self, close: bool = False) -> None:
        """The answer in progress is complete."""
        self.busy = False
        if self.draining and not close:
            close = self._last_answer()
        if self.paused and not close:
            self._reading()
        if close:
            self.closing = True
            self.factory.outbox.close(self.transport)
            return
        if self.waiting:
            self._next()
        elif self.request is None:
            self._arm_idle()
        else:
            self._headers_on_the_clock()   # a pipelined request, partly read
        if self.paused or self.busy:
            self._reading()

    # -- the node shuts down (SPEC 21) ------------------------------------------------
    def finish_up(self) -> None:
        """Close now if between requests, else after the answers to the
        requests read (the last says ``Connection: close``)."""
        self.draining = True
        if self.closing or self.stream is not None:
            return
        if not self.busy and not self.waiting and self.request is None:
            self.closing = True
            self._cancel_timers()
            self.factory.outbox.close(self.transport)

    def _last_answer(self) -> bool:
        """Draining, and nothing more was asked: the answer being written
        is the connection's last."""
        return self.draining and not self.waiting and self.request is None

    def abort(self) -> None:
        """Cut the connection now (the shutdown's deadline passed)."""
        self.closing = True
        self.factory.outbox.abort(self.transport)

    # -- what twisted.web answers ----------------------------------------------------
    def _behind(self) -> Any:
        """The twisted.web channel of this connection (made the first time
        a request is handed on), writing through this one (``_Relay``)."""
        if self.behind is None:
            site: Any = self.factory.site
            # twisted.web's own refusals (a bad header it reads) are JSON too
            channel: Any = DeadlineChannel()
            channel.headerTimeout = None
            channel.factory = site
            channel.site = site
            channel.requestFactory = site.requestFactory
            channel.timeOut = None
            channel.callLater = site.reactor.callLater
            channel.makeConnection(_Relay(self))
            channel.setTimeout(None)
            # the socket's buffer filling pauses what twisted.web streams
            # (an SSE answer) as it would on its own connection
            self.transport.registerProducer(channel, True)
            done = channel.requestDone

            def request_done(request: Any) -> None:
                done(request)
                if not self.closing:
                    self._done()
            channel.requestDone = request_done
            self.behind = channel
        return self.behind

    def _hand_on(self, r: _Request) -> None:
        self._behind().dataReceived(r.raw())

    def _upgrade(self, rest: bytes) -> None:
        """The WebSocket handshake of a route that takes one: its
        transport takes the connection (``_stream``), with whatever bytes
        followed the request."""
        r = self.waiting.pop() if self.waiting else None
        handler = self.factory.streams.get((r.method, r.path)) if r is not None else None
        if r is None or handler is None or self.busy or self.waiting:
            self._fail(400, "an upgrade must not be pipelined")
            return
        self.busy = True
        self._cancel_timers()
        r.keep_alive = False            # a refused upgrade closes the connection
        try:
            self._stream(r, handler)
        except Exception:
            log.failure("answering {path} failed", path=r.path)
            self._write(r, 500, INTERNAL_ERROR)
        if self.stream is not None and rest:
            self.stream.dataReceived(rest)

    def _refuse(self, status: int, message: str, path: bytes = b"",
                headers: HeaderPairs = ()) -> _Refused:
        """The exception a parser callback raises to refuse the request; the
        parser wraps it, so the reason is kept here too. ``path``: the
        request's, when its refusal has its path's shape (a 413)."""
        self.refused = _Refused(status, message, path, headers)
        return self.refused

    # -- deadlines -------------------------------------------------------------------------
    def _arm_header_deadline(self) -> None:
        timeout = self.factory.header_timeout
        if timeout and not self.header_armed:
            self.header_armed = True
            self.header_timer = _rearm(self.header_timer, self.factory.clock, timeout,
                                       self._headers_too_slow)

    def _headers_too_slow(self) -> None:
        self.header_timer = None
        if self.header_armed and not self.closing:
            self.header_armed = False
            self._fail(408, "the request headers did not arrive in time")

    def _body_too_slow(self) -> None:
        self.body_timer = None
        r = self.request
        if not self.closing:
            self._fail(408, "the request body did not arrive in time",
                       r.path if r is not None else b"")

    def _cancel_body_timer(self) -> None:
        timer, self.body_timer = self.body_timer, None
        if timer is not None and timer.active():
            timer.cancel()

    def _arm_idle(self) -> None:
        timeout = self.factory.idle_timeout
        if timeout and not self.idle_armed and not self.closing:
            self.idle_armed = True
            self.idle_timer = _rearm(self.idle_timer, self.factory.clock, timeout, self._idle)

    def _idle(self) -> None:
        self.idle_timer = None
        if self.idle_armed and not self.busy and not self.closing:
            self.idle_armed = False
            self.closing = True
            self.factory.outbox.close(self.transport)

    def _cancel_timers(self) -> None:
        """The connection ends: no timer outlives it."""
        self.header_armed = self.idle_armed = False
        for timer in (self.header_timer, self.idle_timer, self.body_timer, self.linger_timer):
            if timer is not None and timer.active():
                timer.cancel()
        self.header_timer = self.idle_timer = self.body_timer = self.linger_timer = None

    def _fail(self, status: int, message: str, path: bytes = b"",
              linger: bool = False, headers: HeaderPairs = ()) -> None:
        """Answer an error and close (the request stream is out of step);
        ``linger``: a body is still arriving (``_linger``)."""
        if self.closing:
            return
        self.closing = True
        self._cancel_timers()
        self.send(closing_answer(status, error_body(path, message), headers))
        if linger:
            self._linger()
        else:
            self.factory.outbox.close(self.transport)

    def _linger(self) -> None:
        """Lingering close: the answer refused a body that is still
        arriving; closing now would make the client's kernel reset the
        connection, and the answer with it, while the client still sends.
        Stop writing (half-close), read and drop for ``LINGER_SECONDS`` or
        ``LINGER_BYTES``, then close."""
        if self.lingering:
            return
        self.closing = self.lingering = True
        self._cancel_timers()
        self.factory.outbox.flush_one(self.transport)
        half_close = getattr(self.transport, "loseWriteConnection", None)
        if half_close is not None:
            half_close()
        if self.paused:
            self.paused = False
            self.transport.resumeProducing()
        self.linger_timer = self.factory.clock.callLater(LINGER_SECONDS, self._end_linger)

    def _end_linger(self) -> None:
        timer, self.linger_timer = self.linger_timer, None
        if timer is not None and timer.active():
            timer.cancel()
        self.lingering = False
        self.factory.outbox.close(self.transport)


class _Counted:
    """The socket's protocol for a stream taken over on a connection
    counted under its client's address (``--max-client-connections``): the
    stream's, which releases the count when the connection ends."""

    __slots__ = ("protocol", "policy", "address")

    def __init__(self, protocol: Any, policy: HttpPolicy, address: str) -> None:
        self.protocol = protocol
        self.policy = policy
        self.address = address

    def dataReceived(self, data: bytes) -> None:
        self.protocol.dataReceived(data)

    def connectionLost(self, reason: Any = None) -> None:
        self.policy.release(self.address)
        self.protocol.connectionLost(reason)


def _rearm(timer: Timer | None, clock: Clock, delay: float,
           call: Callable[[], None]) -> Timer:
    """``timer`` moved to ``delay`` seconds from now, or a new one when it
    has fired."""
    if timer is not None and timer.active():
        timer.reset(delay)
        return timer
    return clock.callLater(delay, call)


class _Refused(Exception):
    """Raised in a parser callback: answer this error and close."""

    def __init__(self, status: int, message: str, path: bytes = b"",
                 headers: HeaderPairs = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.path = path
        self.headers = headers


class FastSite:
    """The protocol factory: the route table's calls in front of a twisted.web
    Site, which answers every other route."""

    def __init__(self, site: Site, routes: RouteTable, policy: HttpPolicy, clock: Clock,
                 header_timeout: float | None, idle_timeout: float | None,
                 connections: OpenConnections | None = None) -> None:
        self.site = site
        self.policy = policy
        # every connection accepted, for the graceful shutdown
        self.connections = connections if connections is not None else OpenConnections()
        self.calls: dict[tuple[bytes, bytes], CallHandler] = routes.calls()
        self.replying: dict[tuple[bytes, bytes], ReplyingHandler] = routes.replying()
        self.streams: dict[tuple[bytes, bytes], StreamHandler] = routes.streams()
        self.websockets = routes.websockets()
        self.clock = clock
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.outbox = Outbox(clock)
        self.reuse_heads = True     # a head read again is not parsed again (_remember)
        # a 200 JSON answer on a kept-alive connection: head, length, tail, body
        self.ok_head = (status_line(200) + b"Content-Type: application/json\r\n"
                        b"Content-Length: ")
        self._tail = b"\r\nCache-Control: no-store\r\n" + b"".join(
            name + b": " + value + b"\r\n" for name, value in policy.cors_headers)
        self.ok_tail = b""
        self._ticking: Timer | None = None
        self._date()

    def _date(self) -> None:
        """The rest of the common answer's head with the current Date: made
        again every second while the site listens (``doStart``), so that an
        answer pays nothing for its Date."""
        self.ok_tail = self._tail + date_line() + b"\r\n"

    def _tick(self) -> None:
        self._date()
        now = time.time()
        self._ticking = self.clock.callLater(1.0 - now % 1.0 + 0.001, self._tick)

    # the factory interface twisted's listening ports use
    def doStart(self) -> None:
        self.site.doStart()
        if self._ticking is None:
            self._tick()

    def doStop(self) -> None:
        self.site.doStop()
        ticking, self._ticking = self._ticking, None
        if ticking is not None and ticking.active():
            ticking.cancel()

    def buildProtocol(self, addr: Any) -> FastChannel:
        return FastChannel(self)

    def caller(self, channel: FastChannel, r: _Request) -> Caller:
        """Who sent ``r``. A request without any header that could change the
        answer (forwarding, a Bearer token, an Origin) is the connection's
        plain caller, found once per connection."""
        headers = r.headers
        if not self.policy.caller_headers.isdisjoint(headers):
            return self.policy.caller(channel.peer, headers)
        caller = channel.plain_caller
        if caller is None:
            caller = channel.plain_caller = self.policy.caller(channel.peer, headers)
        return caller
