"""The HTTP connection: two deadlines, and JSON for what never reaches a route.

twisted.web's ``HTTPChannel`` has one timer, the idle timeout of
``TimeoutMixin``, and it restarts that timer on every byte received: a client
that sends one header line every few seconds (slowloris) keeps its connection,
and a slot of the node, forever. ``DeadlineChannel`` adds a second timer that
bytes do not move:

- the *header deadline* (``--header-timeout``): a request's line and headers
  must be complete within it, counted from the connection's start for the
  first request, and for each later request on a keep-alive connection from
  the end of the previous response when bytes of the next request were already
  waiting (pipelined), else from the first byte of that next request. When it
  passes the connection gets a 408 with a JSON body and is closed.
- the *idle timeout* (``--idle-timeout``): twisted.web's own timer, which
  closes a connection that sends nothing for that long. twisted.web stops it
  while a request is being answered and starts it again when the response
  ends, so it bounds the wait between requests (and a stalled body upload).

Neither timer runs while a request is answered: a parked long-poll, whose
headers are complete and whose answer waits up to ``--max-timeout``, is cut by
neither.

The channel also answers what twisted.web refuses before any resource sees it
(a malformed request line, a bad header, too many or too long headers) with a
JSON 400 instead of a bare status line, and ``guard_urls`` wraps the site's
root so that a URL that is not percent-encoded UTF-8, or a ``Host`` that is
no host name, gets a JSON 400 instead of klein's text answer (or twisted.web's
HTML 500 page) and a logged traceback.

When the node shuts down (SPEC 21) the connections (``connections.py``)
tell each channel to finish up: one between requests closes at once, one
answering closes once its answer is done (twisted.web closes a connection
that is not persistent after its answer).

The clock is the one the ``Site`` was given (``Site(reactor=...)``), through
the ``callLater`` that ``HTTPFactory.buildProtocol`` puts on each channel.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from twisted.internet.interfaces import IDelayedCall
from twisted.internet.protocol import connectionDone
from twisted.python.failure import Failure
from twisted.web.http import HTTPChannel
from twisted.web.resource import Resource
from twisted.web.server import Request

from pushengine.core.numbers import parse_decimal
from pushengine.web.connections import OpenConnections
from pushengine.web.policy import (
    BAD_TARGET, CONNECT_REFUSED, LINGER_SECONDS, NO_METHODS, TOO_MANY_CONNECTIONS, Headers,
    HttpPolicy, closing_answer, origin_form, path_error)
from pushengine.web.static import JsonError

# the longest Content-Length read (a 19-digit number still fits 63 bits)
LENGTH_DIGITS = 18
BAD_REQUEST = path_error("bad request")
HEADERS_TOO_SLOW = path_error("the request headers did not arrive in time")
BODY_TOO_SLOW = path_error("the request body did not arrive in time")


def _cancel(call: IDelayedCall | None) -> None:
    if call is not None and call.active():
        call.cancel()


class DeadlineChannel(HTTPChannel):
    """An ``HTTPChannel`` whose requests must finish their headers in time."""

    headerTimeout: float | None = 10.0
    policy: HttpPolicy | None = None
    _headerCall: IDelayedCall | None = None
    _bodyCall: IDelayedCall | None = None
    _counted: str | None = None         # the client address this connection counts under
    _proxied = False                    # from a trusted proxy: counted at its first request
    _refused = False
    # between requests of a keep-alive connection, before a byte of the next
    _betweenRequests = False
    # the front's connections (the graceful shutdown), and whether this one
    # was told to finish up
    connections: OpenConnections | None = None
    _finishing = False

    # -- the header deadline -----------------------------------------------------
    def _startHeaderDeadline(self) -> None:
        self._cancelHeaderDeadline()
        if self.headerTimeout is not None:
            self._headerCall = self.callLater(self.headerTimeout, self._headersTooSlow)

    def _cancelHeaderDeadline(self) -> None:
        call, self._headerCall = self._headerCall, None
        _cancel(call)

    def _headersTooSlow(self) -> None:
        self._headerCall = None
        self._closeWith(408, HEADERS_TOO_SLOW)

    # -- the body deadline (--body-timeout) -------------------------------------
    def _cancelBodyDeadline(self) -> None:
        call, self._bodyCall = self._bodyCall, None
        _cancel(call)

    def _bodyTooSlow(self) -> None:
        self._bodyCall = None
        if self.requests and getattr(self.requests[-1], "body_too_large", False):
            self.loseConnection()       # the lingering close of a 413 ends
            return
        self._closeWith(408, BODY_TOO_SLOW)

    def _closeWith(self, status: int, body: bytes, headers: Headers = ()) -> None:
        """Answer a JSON error and close, whatever the request's state."""
        transport = self.transport
        if transport is None or getattr(transport, "disconnecting", False):
            return
        transport.write(closing_answer(status, body, headers))
        # like twisted.web's idle timeout: a client that does not read its
        # answer does not hold the connection beyond abortTimeout either
        if self.abortTimeout is not None and self._abortingCall is None:
            self._abortingCall = self.callLater(self.abortTimeout, self.forceAbortClient)
        self.loseConnection()

    # -- HTTPChannel -------------------------------------------------------------
    def connectionMade(self) -> None:
        transport: Any = self.transport
        if self.policy is not None:
            peer = getattr(transport.getPeer(), "host", "") or ""
            admitted, counted = self.policy.admit_peer(peer)
            if not admitted:
                # past --max-client-connections: refused at once, nothing read
                self._refused = True
                transport.write(closing_answer(429, path_error(TOO_MANY_CONNECTIONS)))
                transport.loseConnection()
                return
            self._counted = counted
            self._proxied = counted is None and bool(self.policy.connections.limit)
        super().connectionMade()
        self._startHeaderDeadline()
        if self.connections is not None:
            self.connections.add(self)

    def dataReceived(self, data: bytes) -> None:
        if self._refused:
            return
        if self._betweenRequests and data:
            # the next request starts: its headers are now on the clock
            self._betweenRequests = False
            self._startHeaderDeadline()
        super().dataReceived(data)
        if self._transferDecoder is not None and self._bodyCall is None \
                and self.policy is not None and self.length != 0:
            # a body still to come after these bytes: its deadline runs from
            # now (a request read whole in one call never needs the timer)
            deadline = self.policy.body_deadline(self.length)
            if self.requests and getattr(self.requests[-1], "body_too_large", False):
                deadline = LINGER_SECONDS   # answered 413: drop the rest for a moment
            if deadline is not None:
                self._bodyCall = self.callLater(deadline, self._bodyTooSlow)

    def allHeadersReceived(self) -> None:
        self._cancelHeaderDeadline()
        if not self._servable():
            self._refused = True         # nothing more is read or answered
            return
        if self._proxied and self.policy is not None and self.requests:
            # a trusted proxy's connection counts under the client it relays
            self._proxied = False
            request = self.requests[-1]
            transport: Any = self.transport
            host = getattr(transport.getPeer(), "host", "") or ""
            headers = request.requestHeaders
            address = self.policy.clients.caller(host, headers.getRawHeaders).address
            if self.policy.admit_client(address):
                self._counted = address
            else:
                self._refused = True     # nothing more is read or answered
                self._closeWith(429, path_error(TOO_MANY_CONNECTIONS))
        super().allHeadersReceived()

    def _servable(self) -> bool:
        """The request line as the fast front reads it (``policy.py``): CONNECT
        is 405 and closes the connection, its body unread; the absolute form
        (``GET http://host/health``) is served as the origin form, its
        authority the ``Host``; an absolute form without a host is a 400."""
        if getattr(self, "_command", None) == b"CONNECT":
            self._closeWith(405, path_error(CONNECT_REFUSED), NO_METHODS)
            return False
        path = getattr(self, "_path", b"/")
        if path[:1] != b"/":
            target = origin_form(path)
            if target is None:
                self._closeWith(400, path_error(BAD_TARGET))
                return False
            self._path, host = target
            if host is not None and self.requests:
                self.requests[-1].requestHeaders.setRawHeaders(b"host", [host])
        return True

    def allContentReceived(self) -> None:
        if self._bodyCall is not None:
            self._cancelBodyDeadline()
        if self._refused:
            return
        super().allContentReceived()

    def _maybeChooseTransferDecoder(self, header: bytes, data: bytes) -> bool:
        """A Content-Length of ASCII digits only, of bounded length
        (twisted.web's ``int`` raises past 4,300 digits)."""
        if header == b"Content-Length" and parse_decimal(data, LENGTH_DIGITS) is None:
            return self._failChooseTransferDecoder()
        return super()._maybeChooseTransferDecoder(header, data)  # type: ignore[no-any-return]

    def requestDone(self, request: Request) -> None:
        if self.persistent and self.requests and request is self.requests[0]:
            # bytes of the next request may wait in the channel's buffer (read
            # while this one was answered) or in LineReceiver's (when this one
            # was answered before its dataReceived call returned)
            if any(self._dataBuffer) or self._buffer:
                # the next request was pipelined: its clock starts now
                self._startHeaderDeadline()
            else:
                self._betweenRequests = True
        super().requestDone(request)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self.connections is not None:
            self.connections.discard(self)
        self._cancelHeaderDeadline()
        self._cancelBodyDeadline()
        self._betweenRequests = False
        if self.policy is not None:
            counted, self._counted = self._counted, None
            self.policy.release(counted)
        if self._refused and not self.requests:
            return
        super().connectionLost(reason)

    # -- the node shuts down (SPEC 21) ------------------------------------------------
    def finish_up(self) -> None:
        """Close now if between requests, else once the answer being made
        is done (the connection is no longer persistent)."""
        self._finishing = True
        if not self.requests:
            self.loseConnection()
            return
        self.persistent = False
        for request in self.requests:
            if not request.startedWriting:      # its answer says so
                request.responseHeaders.setRawHeaders(b"connection", [b"close"])

    def abort(self) -> None:
        transport: Any = self.transport
        if transport is not None:
            transport.abortConnection()

    def checkPersistence(self, request: Request, version: bytes) -> bool:
        """A request read while the node shuts down is the connection's
        last: its answer says ``Connection: close``."""
        if self._finishing:
            request.responseHeaders.setRawHeaders(b"connection", [b"close"])
            return False
        return bool(super().checkPersistence(request, version))

    def _protocolUpgradeForWebsockets(self, protocol: Any) -> None:
        """A WebSocket takes the connection over: its end is the socket's
        business (``transports/websocket.py``), not this channel's."""
        if self.connections is not None:
            self.connections.discard(self)
        super()._protocolUpgradeForWebsockets(protocol)

    # -- JSON for what twisted.web refuses itself -----------------------------------
    def _respondToBadRequestAndDisconnect(self) -> None:
        self._cancelHeaderDeadline()
        self._cancelBodyDeadline()
        if self.transport is not None:
            self.transport.write(closing_answer(400, BAD_REQUEST))
        self.loseConnection()

    def lineLengthExceeded(self, line: bytes) -> None:
        """A request or header line longer than ``MAX_LENGTH`` (LineReceiver
        would just drop the connection)."""
        self._respondToBadRequestAndDisconnect()


def deadline_protocol(header_timeout: float | None, policy: HttpPolicy | None = None,
                      connections: OpenConnections | None = None
                      ) -> Callable[[], DeadlineChannel]:
    """What a ``Site``'s ``protocol`` attribute builds its connections with.

    ``HTTPFactory.buildProtocol`` then gives each channel the site's clock
    (``callLater``) and idle timeout (``timeOut``); ``Site.buildProtocol``
    its request factory. (Plain HTTP/1.1: twisted.web's default wrapper only
    adds HTTP/2 over TLS, which needs the ``h2`` package, not installed.)
    """
    def build() -> DeadlineChannel:
        channel = DeadlineChannel()
        channel.headerTimeout = header_timeout
        channel.policy = policy
        channel.connections = connections
        return channel
    return build


_BAD_ESCAPE = re.compile(rb"%(?![0-9A-Fa-f]{2})")


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _host_name(name: bytes) -> bool:
    """What klein and werkzeug do with the request's host name without
    failing: decode it as UTF-8 and encode it as IDNA (``..``, an empty label
    or one above 63 characters fail: werkzeug's ``BadHost`` escapes klein's
    error handlers and becomes twisted.web's HTML 500 page)."""
    try:
        name.decode("utf-8").lower().partition(":")[0].encode("idna")
    except UnicodeError:
        return False
    return True


class _UrlGuard(Resource):
    """Renders every request with ``inner`` unless its path holds a bad
    percent-escape or is not UTF-8 once decoded, or its ``Host`` is no host
    name: those get a JSON 400 (klein would log a traceback for some and
    answer them in plain text or HTML). A leaf: ``inner`` routes the whole
    path itself."""

    isLeaf = True
    bad_url = JsonError(400, "bad URL: a path that is not percent-encoded UTF-8")
    bad_host = JsonError(400, "bad Host header")

    def __init__(self, inner: Resource) -> None:
        super().__init__()
        self.inner = inner
        self._good_hosts: dict[bytes, bool] = {}

    def _refusal(self, request: Request) -> JsonError | None:
        path = request.path
        if _BAD_ESCAPE.search(path) or not all(_utf8(s) for s in request.postpath or ()):
            return self.bad_url
        host = request.getRequestHostname()
        known = self._good_hosts.get(host)
        if known is None:
            known = _host_name(host)
            if len(self._good_hosts) >= 256:     # a bounded memo of names seen
                self._good_hosts.clear()
            self._good_hosts[host] = known
        return None if known else self.bad_host

    def render(self, request: Request) -> Any:
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal.render(request)
        return self.inner.render(request)


def guard_urls(resource: Resource) -> Resource:
    """The site's root: ``resource`` behind the URL and Host checks."""
    return _UrlGuard(resource)
