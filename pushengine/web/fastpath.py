"""A lean HTTP/1.1 channel for the calls that matter (SPEC sections 3, 12).

Every poll is one HTTP request and answer, and twisted.web's fixed cost per
answer (a Request object, header objects, producers, klein) bounded how fast
the engine could answer them. This channel parses requests with httptools
(node's llhttp parser) and answers ``POST /api/jsonrpc`` and
``POST /api/publish`` itself, each answer one piece of bytes; answers to
what a turn of the reactor read leave together at its end (``outbox.py``),
what a change causes leaves at once (``FastChannel.send``). Every
other request — static files, /health, /metrics, SSE, the WebSocket upgrade,
OPTIONS — is handed, whole, to a twisted.web channel of the same site that
lives behind this one for the connection's life; its answer goes straight to
the client. HTTP stays whole on both paths: keep-alive and pipelining (answers
in request order), Content-Length and chunked bodies, 413 from the
Content-Length before a body byte is read, 400 on malformed requests (JSON),
``Expect: 100-continue``, the header deadline and the idle timeout, the
client's address through trusted proxies, CORS and API keys.
"""
from __future__ import annotations

import json
from collections import deque
from typing import Any

import httptools
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.web.http import HTTPChannel

from pushengine.core.limits import retry_after
from pushengine.api.rpc import RpcAnswer
from pushengine.web.clients import CALLER_HEADERS
from pushengine.web.outbox import Outbox
from pushengine.web.sendnow import send_now

log = Logger()

MAX_URL = 16 * 1024
MAX_HEAD = 16 * 1024
MAX_HEADERS = 500
MAX_WAITING = 16          # parsed requests queued behind one being answered
_REASONS = {200: b"OK", 204: b"No Content", 400: b"Bad Request", 401: b"Unauthorized",
            403: b"Forbidden", 408: b"Request Timeout", 413: b"Request Entity Too Large",
            429: b"Too Many Requests", 500: b"Internal Server Error",
            503: b"Service Unavailable"}


def _status_line(status: int) -> bytes:
    return b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown"))


class _Request:
    __slots__ = ("method", "url", "path", "headers", "body", "size", "too_large",
                 "keep_alive", "upgrade", "head_size", "version", "count", "streamed")

    def __init__(self) -> None:
        self.method = b""
        self.url = b""
        self.path = b""
        self.headers: dict[bytes, list[bytes]] = {}
        self.body: list[bytes] = []
        self.size = 0
        self.too_large = False
        self.keep_alive = True
        self.upgrade = False
        self.head_size = 0
        self.count = 0
        self.version = "1.1"
        self.streamed = False           # a segment upload: its body goes on as it comes

    def header(self, name: bytes) -> bytes | None:
        values = self.headers.get(name)
        return values[0] if values else None

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

    def raw(self) -> bytes:
        """The request as bytes for the twisted.web channel behind (the body
        de-chunked, with its Content-Length)."""
        lines = [b"%s %s HTTP/%s" % (self.method, self.url, self.version.encode())]
        for name, values in self.headers.items():
            if name in (b"content-length", b"transfer-encoding"):
                continue
            for value in values:
                lines.append(name + b": " + value)
        body = b"".join(self.body)
        if body or self.method in (b"POST", b"PUT", b"PATCH"):
            lines.append(b"content-length: %d" % len(body))
        return b"\r\n".join(lines) + b"\r\n\r\n" + body


class _Relay:
    """The transport of the twisted.web channel behind a FastChannel: what it
    writes goes to the client; closing closes the client's connection."""

    def __init__(self, front: "FastChannel") -> None:
        self.front = front
        self.disconnecting = False

    def write(self, data: bytes) -> None:
        self.front.send(data)

    def writeSequence(self, data) -> None:
        self.front.send(b"".join(data))

    def loseConnection(self) -> None:
        self.disconnecting = True
        self.front.factory.outbox.close(self.front.transport)

    def abortConnection(self) -> None:
        self.front.factory.outbox.abort(self.front.transport)

    def getPeer(self):
        return self.front.transport.getPeer()

    def getHost(self):
        return self.front.transport.getHost()

    def registerProducer(self, producer, streaming) -> None:
        self.front.transport.registerProducer(producer, streaming)

    def unregisterProducer(self) -> None:
        self.front.transport.unregisterProducer()

    def pauseProducing(self) -> None:
        self.front.transport.pauseProducing()

    def resumeProducing(self) -> None:
        self.front.transport.resumeProducing()

    def stopProducing(self) -> None:
        self.front.transport.stopProducing()


class FastChannel(Protocol):
    """One client connection (see the module docstring)."""

    def __init__(self, factory: "FastSite") -> None:
        self.factory = factory
        self.parser = httptools.HttpRequestParser(self)
        self.request: _Request | None = None
        self.waiting: deque[_Request] = deque()
        self.busy = False               # an answer is being made
        self.answering: Deferred | None = None
        self.behind: HTTPChannel | None = None
        self.upgraded = False
        self.closing = False
        self.refused: _Refused | None = None   # why a parser callback stopped the parser
        # the two deadlines' timers outlive their deadlines: disarming only
        # clears the flag, arming again resets the same timer (a reset to a
        # later time costs the reactor nothing; a cancel and a new timer cost
        # two heap operations among every connection's timers)
        self.header_timer: Any = None
        self.header_armed = False
        self.idle_timer: Any = None
        self.idle_armed = False
        self.peer = ""
        self.plain_caller: Any = None    # the Caller of requests without caller headers
        self.reading = False             # in dataReceived: answers wait for the turn's end

    # -- connection ------------------------------------------------------------
    def connectionMade(self) -> None:
        self.peer = getattr(self.transport.getPeer(), "host", "") or ""
        no_delay = getattr(self.transport, "setTcpNoDelay", None)
        if no_delay is not None:
            # a push server's messages are small and must leave at once: with
            # Nagle's algorithm a message written while the previous one is
            # unacknowledged waits for the client's delayed ACK (40 ms)
            no_delay(True)
        self._arm_header_deadline()

    def dataReceived(self, data: bytes) -> None:
        if self.upgraded:
            self.reading = True
            try:
                self.behind.dataReceived(data)
            finally:
                self.reading = False
            return
        if self.closing:
            return
        self.idle_armed = False         # bytes arrived: the idle timer fires for nothing
        self.reading = True             # answers wait for the turn's end (send)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as e:
            self._upgrade(data[e.args[0]:])
        except httptools.HttpParserCallbackError:
            refused, self.refused = self.refused, None
            if refused is not None:
                self._fail(refused.status, refused.message, refused.rpc)
            elif not self.closing:
                log.failure("a request failed to parse")
                self._fail(400, "bad request")
        except httptools.HttpParserError:
            self._fail(400, "bad request")
        finally:
            self.reading = False
        self._headers_on_the_clock()

    def _headers_on_the_clock(self) -> None:
        """A request whose headers are not complete has the header deadline
        running: from its first byte (this call's bytes, or an earlier
        call's), or, behind an answer being made, from that answer's end
        (``_done``). A request read whole in one call never needs the timer."""
        r = self.request
        if r is not None and not r.method and not self.header_armed and not self.busy \
                and not self.closing and not self.upgraded:
            self._arm_header_deadline()

    def connectionLost(self, reason: Any = None) -> None:
        self.closing = True
        self._cancel_timers()
        self.factory.outbox.forget(self.transport)
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
        self.request = _Request()

    def on_url(self, url: bytes) -> None:
        r = self.request
        r.url += url
        if len(r.url) > MAX_URL:
            raise self._refuse(400, "the request line is too long")

    def on_header(self, name: bytes, value: bytes) -> None:
        r = self.request
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
        parser = self.parser
        self.header_armed = False       # the headers came: the deadline fires for nothing
        r.method = parser.get_method()
        r.version = parser.get_http_version()
        r.keep_alive = parser.should_keep_alive()
        headers = r.headers
        # only an Upgrade header (or CONNECT) makes an upgrade
        r.upgrade = (b"upgrade" in headers or r.method == b"CONNECT") and parser.should_upgrade()
        r.path = r.url.split(b"?", 1)[0] if b"?" in r.url else r.url
        length = headers.get(b"content-length")
        if length is not None:
            length = length[0]
        limit = self.factory.max_body
        segment = self.factory.max_segment_body
        if segment is not None and r.method == b"POST" \
                and r.path.startswith(b"/api/segments/") and length is not None \
                and length.isdigit() and not self.busy and not self.waiting:
            # a segment upload (SPEC 15, up to 1 GiB): never buffered here;
            # twisted.web behind spools it to a file as it arrives
            limit = max(segment, limit)
            if int(length) <= limit:
                r.streamed = True
                self.busy = True
                # twisted.web behind answers any Expect: 100-continue itself,
                # after the upload guard judged the headers (a refused upload
                # gets its final answer, never a 100 Continue)
                self._behind().dataReceived(r.head(int(length)))
                return
        if length is not None and length.isdigit() and int(length) > limit:
            # answered before a byte of the body is read; the connection closes
            raise self._refuse(413, f"the request body is too large (at most {limit} bytes)",
                           rpc=r.path == b"/api/jsonrpc")
        expect = headers.get(b"expect")
        if expect is not None and expect[0].lower() == b"100-continue" and not self.busy \
                and not self.waiting:
            self.send(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        r = self.request
        if r.streamed:
            self.behind.dataReceived(body)
            return
        r.size += len(body)
        if r.size > self.factory.max_body:
            raise self._refuse(413, f"the request body is too large "
                                f"(at most {self.factory.max_body} bytes)",
                           rpc=r.path == b"/api/jsonrpc")
        r.body.append(body)

    def on_message_complete(self) -> None:
        r, self.request = self.request, None
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
                self._write(r, 500, b'{"error":"internal error"}')

    def _serve(self, r: _Request) -> None:
        route = self.factory.routes.get((r.method, r.path))
        if route is None:
            self._hand_on(r)
            return
        result = route(self, r)
        if type(result) is tuple:       # answered at once (Deferred's isinstance is slow)
            self._write(r, *result)
        elif isinstance(result, Deferred):
            self.answering = result
            result.addCallbacks(self._answered, self._failed, callbackArgs=(r,),
                                errbackArgs=(r,))
        else:
            self._answered(result, r)

    def _answered(self, answer: tuple, r: _Request) -> None:
        self.answering = None
        if self.closing:
            return
        status, body, headers = answer
        self._write(r, status, body, headers)

    def _failed(self, failure: Any, r: _Request) -> None:
        self.answering = None
        if failure.check(CancelledError) or self.closing:
            return
        log.failure("answering {path} failed", failure, path=r.path)
        self._write(r, 500, b'{"error":"internal error"}')

    def _write(self, r: _Request, status: int, body: bytes,
               headers: list[tuple[bytes, bytes]] | None = None) -> None:
        if status == 200 and not headers and r.keep_alive and not self.closing:
            # the common answer (a poll's): its head is made once per site
            factory = self.factory
            self.send(factory.ok_head + b"%d" % len(body) + factory.ok_tail + body)
            self._done(False)
            return
        parts = [_status_line(status)]
        if status != 204:
            parts.append(b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body))
        parts.append(b"Cache-Control: no-store\r\n")
        for name, value in self.factory.cors_headers:
            parts.append(name + b": " + value + b"\r\n")
        for name, value in headers or ():
            parts.append(name + b": " + value + b"\r\n")
        close = not r.keep_alive or self.closing
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

    # -- what twisted.web answers ----------------------------------------------------
    def _behind(self) -> HTTPChannel:
        if self.behind is None:
            site = self.factory.site
            channel = HTTPChannel()
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

            def request_done(request) -> None:
                done(request)
                if not self.upgraded and not self.closing:
                    self._done()
            channel.requestDone = request_done
            self.behind = channel
        return self.behind

    def _hand_on(self, r: _Request) -> None:
        self._behind().dataReceived(r.raw())

    def _upgrade(self, rest: bytes) -> None:
        """An Upgrade request (the WebSocket): twisted.web takes the
        connection over for good, with whatever bytes followed the request."""
        r = self.waiting.pop() if self.waiting else None
        if r is None or self.busy or self.waiting:
            self._fail(400, "an upgrade must not be pipelined")
            return
        self.upgraded = True
        self._cancel_timers()
        self._behind().dataReceived(r.raw())
        if rest:
            self.behind.dataReceived(rest)

    def _refuse(self, status: int, message: str, rpc: bool = False) -> "_Refused":
        """The exception a parser callback raises to refuse the request; the
        parser wraps it, so the reason is kept here too."""
        self.refused = _Refused(status, message, rpc)
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
        for timer in (self.header_timer, self.idle_timer):
            if timer is not None and timer.active():
                timer.cancel()
        self.header_timer = self.idle_timer = None

    def _fail(self, status: int, message: str, rpc: bool = False) -> None:
        """Answer an error and close (the request stream is out of step)."""
        if self.closing:
            return
        self.closing = True
        self._cancel_timers()
        if rpc:
            body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
        else:
            body = {"error": message}
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send(_status_line(status) + b"Content-Type: application/json\r\n"
                  b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(data), data))
        self.factory.outbox.close(self.transport)


def _rearm(timer: Any, clock: Any, delay: float, call: Any) -> Any:
    """``timer`` moved to ``delay`` seconds from now, or a new one when it
    has fired."""
    if timer is not None and timer.active():
        timer.reset(delay)
        return timer
    return clock.callLater(delay, call)


class _Refused(Exception):
    """Raised in a parser callback: answer this error and close."""

    def __init__(self, status: int, message: str, rpc: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.rpc = rpc


class FastSite:
    """The protocol factory: the fast routes in front of a twisted.web Site."""

    def __init__(self, site: Any, web: Any, clock: Any, max_body: int,
                 header_timeout: float | None, idle_timeout: float | None,
                 max_segment_body: int | None = None) -> None:
        self.site = site
        self.max_segment_body = max_segment_body
        self.web = web
        self.clock = clock
        self.max_body = max_body
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.outbox = Outbox(clock)
        origin = web.guard.cors_origin
        self.cors_headers = [] if not origin else [
            (b"Access-Control-Allow-Origin", origin.encode()),
            (b"Access-Control-Allow-Methods", b"POST, GET, OPTIONS"),
            (b"Access-Control-Allow-Headers",
             b"content-type, x-api-key, authorization, last-event-id"),
            (b"Access-Control-Max-Age", b"600")]
        # a 200 JSON answer on a kept-alive connection: head, length, tail, body
        self.ok_head = (_status_line(200) + b"Content-Type: application/json\r\n"
                        b"Content-Length: ")
        self.ok_tail = b"\r\nCache-Control: no-store\r\n" + b"".join(
            name + b": " + value + b"\r\n" for name, value in self.cors_headers) + b"\r\n"
        self.routes = {(b"POST", b"/api/jsonrpc"): self.jsonrpc,
                       (b"POST", b"/api/publish"): self.publish}

    # the factory interface twisted's listening ports use
    def doStart(self) -> None:
        self.site.doStart()

    def doStop(self) -> None:
        self.site.doStop()

    def buildProtocol(self, addr: Any) -> FastChannel:
        return FastChannel(self)

    def _caller(self, channel: FastChannel, r: _Request) -> Any:
        """Who sent ``r``. A request without any header that could change the
        answer (forwarding, a Bearer token, an Origin) is the connection's
        plain caller, found once per connection."""
        headers = r.headers
        if not CALLER_HEADERS.isdisjoint(headers):
            return self.web.guard.clients.caller_of(channel.peer, headers)
        caller = channel.plain_caller
        if caller is None:
            caller = channel.plain_caller = self.web.guard.clients.caller_of(
                channel.peer, headers)
        return caller

    def _key_allowed(self, r: _Request) -> bool:
        keys = self.web.guard.api_keys
        if not keys.required:
            return True
        presented = r.header(b"x-api-key")
        if presented is None and b"apikey=" in r.url:
            from urllib.parse import parse_qs
            query = r.url.partition(b"?")[2]
            presented = (parse_qs(query).get(b"apikey") or [None])[0]
        return keys.allows(presented.decode("utf-8", "replace") if presented else None)

    def jsonrpc(self, channel: FastChannel, r: _Request) -> Any:
        if self.web.guard.api_keys.required and not self._key_allowed(r):
            return 403, (b'{"jsonrpc":"2.0","id":null,"error":{"code":1003,"message":'
                         b'"a valid API key is required (apikey or X-Api-Key)"}}'), None
        body = r.body[0] if len(r.body) == 1 else b"".join(r.body)
        result = self.web.dispatcher.handle(body, self._caller(channel, r))
        if type(result) is not RpcAnswer:
            return result.addCallback(_rpc_answer)
        return _rpc_answer(result)

    def publish(self, channel: FastChannel, r: _Request) -> Any:
        answer = self.web.publisher.handle(b"".join(r.body), self._caller(channel, r))
        if isinstance(answer, Deferred):
            return answer.addCallback(_publish_answer)
        return _publish_answer(answer)


def _rpc_answer(answer: RpcAnswer) -> tuple:
    if answer.retry_after is not None:
        return answer.status, answer.body, [(b"Retry-After",
                                             b"%d" % retry_after(answer.retry_after))]
    return answer.status, answer.body or b"", None


def _publish_answer(answer: tuple) -> tuple:
    status, body, headers = answer
    return (status, json.dumps(body, separators=(",", ":")).encode(),
            [(k.title().encode(), v.encode()) for k, v in headers.items()])
