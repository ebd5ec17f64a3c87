"""The edge's HTTP policy, written once for both fronts and the streams.

What every request meets before a route answers it, and how the edge says
no, for the fast front (``fastpath.py``), the twisted.web renderer
(``app.py``), the SSE and WebSocket resources and the segment uploads:

- **CORS**: with ``--cors-origin`` the API's answers and preflights carry the
  ``Access-Control-*`` headers (``cors_headers``).
- **API keys**: where keys are configured, ``?apikey=KEY`` or the
  ``X-Api-Key`` header (the query's key first, as a browser's EventSource can
  send no header).
- **The Origin rule**: with ``--cors-origin`` set, a page of another origin
  may not open a stream (a WebSocket is not subject to CORS: the server must
  check); ``*`` lets every origin in, as it does for CORS. A request without
  an ``Origin`` is no page's.
- **Who the caller is**: the client's address through ``--trusted-proxies``
  (``clients.py``), whether it is loopback, its Bearer token, whether a page
  sent it, and, when the node exports traces (``traces``), the W3C
  ``traceparent`` header the dispatcher and the publisher continue.
- **The body limits**: ``--max-body``, and ``--max-segment-body`` for a
  segment upload (``POST /api/segments/NAME``).
- **The error shapes**: a JSON-RPC error for ``/api/jsonrpc``
  (``rpc_error``), ``{"error": {"code", "message"}}`` for streams and
  segment uploads (``stream_error``), ``{"error": "..."}`` for every other
  path (``path_error``); and a whole answer that closes the connection
  (``closing_answer``) for what is refused before a route is reached.

The per-client call rate is not judged here: it counts the calls of a
JSON-RPC batch, which only the dispatcher reads, and applies on a
WebSocket's messages as well (``api/rpc.py``, ``admit``).
"""
from __future__ import annotations

import json
import time
from email.utils import formatdate
from typing import Mapping, Protocol, Sequence

from twisted.internet.interfaces import IAddress
from twisted.web.http import parse_qs
from twisted.web.http_headers import Headers as HttpHeaders

from pushengine.api.auth import ApiKeys
from pushengine.api.caller import Caller
from pushengine.core.errors import NotAuthorized
from pushengine.core.strictjson import JsonValue
from pushengine.web.clients import CALLER_HEADERS, ClientAddresses

JSON = b"application/json"
RPC_PATH = b"/api/jsonrpc"
KEY_HEADER = b"x-api-key"
SEGMENT_UPLOADS = b"/api/segments/"
TRACEPARENT = b"traceparent"
MAX_TRACEPARENT = 512    # a longer traceparent header is not read (version 00: 55 bytes)
KEY_REQUIRED = "a valid API key is required (apikey or X-Api-Key)"
FOREIGN_ORIGIN = "this origin may not open a stream"
REASONS = {200: b"OK", 204: b"No Content", 400: b"Bad Request", 401: b"Unauthorized",
           403: b"Forbidden", 404: b"Not Found", 405: b"Method Not Allowed",
           408: b"Request Timeout", 413: b"Request Entity Too Large", 426: b"Upgrade Required",
           429: b"Too Many Requests", 500: b"Internal Server Error",
           503: b"Service Unavailable"}
Headers = Sequence[tuple[bytes, bytes]]


class WebRequest(Protocol):
    """What the policy reads and writes of a twisted.web request."""

    uri: bytes

    def getClientAddress(self) -> IAddress: ...

    def getHeader(self, key: bytes) -> bytes | None: ...

    def setHeader(self, name: bytes, value: bytes) -> None: ...

    def setResponseCode(self, code: int, message: bytes | None = None) -> None: ...

    @property
    def requestHeaders(self) -> HttpHeaders: ...


# -- the error shapes --------------------------------------------------------------

def json_bytes(value: JsonValue) -> bytes:
    """Compact JSON as UTF-8 bytes."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def rpc_error(code: int, message: str) -> bytes:
    """A JSON-RPC error for the whole request (no call's id to echo)."""
    return json_bytes({"jsonrpc": "2.0", "id": None,
                       "error": {"code": code, "message": message}})


def stream_error(code: int | str, message: str) -> bytes:
    """The error body of a stream (SPEC section 10) and of a segment upload."""
    return json_bytes({"error": {"code": code, "message": message}})


def path_error(message: str) -> bytes:
    """The error body of every other path."""
    return json_bytes({"error": message})


def error_body(path: bytes, message: str) -> bytes:
    """A request refused as a whole (-32600 for a JSON-RPC request)."""
    return rpc_error(-32600, message) if path == RPC_PATH else path_error(message)


INTERNAL_ERROR = path_error("internal error")


class _DateLine:
    """The ``Date`` header line (RFC 9110 section 6.6.1) of every answer,
    formatted once per second."""

    __slots__ = ("second", "line")

    def __init__(self) -> None:
        self.second = -1
        self.line = b""

    def __call__(self) -> bytes:
        now = time.time()
        second = int(now)
        if second != self.second:
            self.line = b"Date: %s\r\n" % formatdate(second, usegmt=True).encode("ascii")
            self.second = second
        return self.line


date_line = _DateLine()


def websocket_upgrade(upgrade: Sequence[bytes] | None) -> bool:
    """Whether the values of a request's ``Upgrade`` header ask for a
    WebSocket: any other upgrade is an ordinary request."""
    if not upgrade:
        return False
    return any(token.strip().lower() == b"websocket"
               for value in upgrade for token in value.split(b","))


# CONNECT asks for a tunnel, which this server never opens: 405 and the
# connection closed (its body, if any, is never read), on both fronts
CONNECT_REFUSED = "method not allowed: CONNECT opens no tunnel here"
# the methods a CONNECT target (an authority, no resource of ours) allows: none
NO_METHODS: Headers = ((b"Allow", b""),)
BAD_TARGET = "bad request target"
_SCHEMES = (b"http://", b"https://")


def origin_form(target: bytes) -> tuple[bytes, bytes | None] | None:
    """A request target as the routes read it: ``(target, host)``.

    The absolute form (RFC 9112 section 3.2.2), ``http://host:8080/health?x``,
    is served as its origin form, ``/health?x``, and its authority replaces
    the ``Host`` header (``host``); any other target comes back as it is,
    with ``host`` None. None: an absolute form that names no host, or names
    user information (``http://user@host/``), which is no target to serve."""
    if target[:1] == b"/" or (target[:7].lower() not in _SCHEMES
                              and target[:8].lower() not in _SCHEMES):
        return target, None
    rest = target.partition(b"://")[2]
    end = len(rest)
    for mark in (b"/", b"?"):
        at = rest.find(mark)
        if at != -1 and at < end:
            end = at
    host, path = rest[:end], rest[end:]
    if not host or b"@" in host or b"#" in path:
        return None
    if path[:1] != b"/":
        path = b"/" + path
    return path, host


def status_line(status: int) -> bytes:
    return b"HTTP/1.1 %d %s\r\n" % (status, REASONS.get(status, b"Unknown"))


def closing_answer(status: int, body: bytes, headers: Headers = ()) -> bytes:
    """A whole JSON answer that closes the connection: what is answered
    before a route is reached (a malformed request, slow headers, a body
    above the limit, a refused upload)."""
    extra = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    return (status_line(status) + date_line() + b"Content-Type: application/json\r\n" + extra
            + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)


def too_large_message(limit: int) -> str:
    return f"the request body is too large (at most {limit} bytes)"


def too_large(path: bytes, limit: int) -> bytes:
    """The 413 answer, given from the Content-Length before the body is read."""
    return closing_answer(413, error_body(path, too_large_message(limit)))


def first(request: WebRequest, name: bytes) -> bytes | None:
    """A twisted.web request's first value of a header (as the fast front reads it)."""
    values = request.requestHeaders.getRawHeaders(name)
    return values[0] if values else None


def query_of(uri: bytes) -> bytes:
    return uri.partition(b"?")[2]


# lingering close: after an answer that refuses a body still arriving (413,
# or 401/403 before an upload body), the connection stops writing and reads
# and drops what comes for this long or this many bytes, then closes, so
# that the client is not reset before it reads the answer (nginx's
# lingering_timeout is 5 s)
LINGER_SECONDS = 2.0
LINGER_BYTES = 1 << 20
BODY_RATE = 64 * 1024       # bytes per second a large body must keep up at least
TOO_MANY_CONNECTIONS = "too many connections from this client"


class ConnectionCount:
    """The open connections of each client address, at most ``limit``
    each (0: no limit)."""

    def __init__(self, limit: int = 0) -> None:
        self.limit = limit
        self.open: dict[str, int] = {}

    def admit(self, address: str) -> bool:
        count = self.open.get(address, 0)
        if self.limit and count >= self.limit:
            return False
        self.open[address] = count + 1
        return True

    def release(self, address: str) -> None:
        count = self.open.get(address, 0) - 1
        if count > 0:
            self.open[address] = count
        else:
            self.open.pop(address, None)


class HttpPolicy:
    """The checks and limits of the edge (see the module docstring)."""

    def __init__(self, api_keys: ApiKeys | None = None, cors_origin: str | None = None,
                 clients: ClientAddresses | None = None, max_body: int = 1 << 20,
                 max_segment_body: int | None = None, body_timeout: float | None = None,
                 max_client_connections: int = 0, traces: bool = False) -> None:
        """``traces``: the node exports traces, so a request's ``traceparent``
        goes with its caller (without them it is not read at all)."""
        self.api_keys = api_keys or ApiKeys()
        self.traces = traces
        if traces:
            # a request with a traceparent has a caller of its own
            self.caller_headers = CALLER_HEADERS | {TRACEPARENT}
        self.body_timeout = body_timeout or None
        self.connections = ConnectionCount(max_client_connections)
        self.cors_origin = cors_origin or None
        self.clients = clients or ClientAddresses()
        self.max_body = max_body
        self.max_segment_body = max_segment_body
        self.cors_headers: tuple[tuple[bytes, bytes], ...] = () if not self.cors_origin else (
            (b"Access-Control-Allow-Origin", self.cors_origin.encode()),
            (b"Access-Control-Allow-Methods", b"POST, GET, OPTIONS"),
            (b"Access-Control-Allow-Headers",
             b"content-type, x-api-key, authorization, last-event-id"),
            (b"Access-Control-Max-Age", b"600"))
        self._origin = self.cors_origin.encode("latin-1", "replace") \
            if self.cors_origin and self.cors_origin != "*" else None
        self.key_refused = rpc_error(NotAuthorized.code, KEY_REQUIRED)

    # -- API keys and origins -------------------------------------------------------
    def key_allowed(self, query: bytes, header: bytes | None) -> bool:
        """The key presented in the query (``apikey``) or else in the
        ``X-Api-Key`` header (``KEY_HEADER``), where keys are configured."""
        if not self.api_keys.required:
            return True
        presented = None
        if b"apikey" in query or b"%" in query:
            presented = (parse_qs(query, keep_blank_values=True).get(b"apikey") or [None])[0]
        presented = presented or header
        return self.api_keys.allows(presented.decode("utf-8", "replace") if presented else None)

    def origin_allowed(self, origin: bytes | None) -> bool:
        """The Origin rule (the module docstring)."""
        return self._origin is None or origin is None or origin == self._origin

    # -- callers ------------------------------------------------------------------------
    # a request with none of these headers (forwarding, a token, an Origin)
    # has the caller of every other such request from the same peer
    caller_headers = CALLER_HEADERS

    def caller(self, peer: str, headers: Mapping[bytes, list[bytes]]) -> Caller:
        """The caller of a request with ``headers`` (lower-case names) from
        the TCP peer ``peer``."""
        caller = self.clients.caller(peer, headers.get)
        if self.traces:
            return _with_traceparent(caller, headers.get(TRACEPARENT))
        return caller

    # -- limits -------------------------------------------------------------------------
    def upload(self, method: bytes, path: bytes) -> bool:
        """A segment upload, whose body has its own limit and is streamed."""
        return self.max_segment_body is not None and method == b"POST" \
            and path.startswith(SEGMENT_UPLOADS)

    def body_deadline(self, length: int | None) -> float | None:
        """Seconds a request body of ``length`` declared bytes (None:
        chunked, up to the body limit) has to arrive whole after its headers:
        ``--body-timeout``, plus one second per ``BODY_RATE`` bytes past the
        first ``BODY_RATE`` (a large segment upload on a slow link); None
        without a body timeout."""
        if self.body_timeout is None:
            return None
        size = self.max_body if length is None else length
        return self.body_timeout + max(0, size - BODY_RATE) / BODY_RATE

    # -- connections per client --------------------------------------------------------
    def admit_peer(self, peer: str) -> tuple[bool, str | None]:
        """(admitted, the address counted) of a new connection from the TCP
        peer ``peer``. A trusted proxy's connection is counted under its
        first request's client (``admit_client``), not here."""
        address, trusted = self.clients.peer_address(peer)
        if trusted or not self.connections.limit:
            return True, None
        return self.connections.admit(address), address

    def admit_client(self, address: str) -> bool:
        """Count a trusted proxy's connection under the client it relays."""
        return self.connections.admit(address)

    def release(self, address: str | None) -> None:
        """A counted connection closed."""
        if address is not None:
            self.connections.release(address)

    def body_limit(self, method: bytes, path: bytes) -> int:
        if self.max_segment_body is not None and self.upload(method, path):
            return max(self.max_segment_body, self.max_body)
        return self.max_body

    # -- twisted.web requests --------------------------------------------------------
    def cors(self, request: WebRequest) -> None:
        for name, value in self.cors_headers:
            request.setHeader(name, value)

    def request_caller(self, request: WebRequest, channel: object = None) -> Caller:
        """The caller of a twisted.web request; ``channel``: the connection
        that carries a session's events itself (a WebSocket)."""
        host = getattr(request.getClientAddress(), "host", None) or ""
        caller = self.clients.caller(host, request.requestHeaders.getRawHeaders)
        if self.traces:
            caller = _with_traceparent(caller,
                                       request.requestHeaders.getRawHeaders(TRACEPARENT))
        if channel is None:
            return caller
        return Caller(caller.address, caller.loopback, caller.bearer, caller.from_page,
                      channel, caller.traceparent)

    def request_key_allowed(self, request: WebRequest) -> bool:
        return self.key_allowed(query_of(request.uri), first(request, KEY_HEADER))

    def stream_refusal(self, query: bytes, key: bytes | None,
                       origin: bytes | None) -> tuple[int, int, str] | None:
        """Why a stream (SSE, WebSocket) may not open, as (status, code,
        message): the key (in ``query`` or the ``key`` header) or the
        ``origin`` is wrong; None when it may. Both fronts ask this, so that
        each answers the same refusal (``stream_error``)."""
        if not self.key_allowed(query, key):
            return 403, NotAuthorized.code, KEY_REQUIRED
        if not self.origin_allowed(origin):
            return 403, NotAuthorized.code, FOREIGN_ORIGIN
        return None

    def refuse_stream(self, request: WebRequest) -> bytes | None:
        """The answer to a stream that may not open on a twisted.web
        request (``stream_refusal``); None when it may."""
        refused = self.stream_refusal(query_of(request.uri), first(request, KEY_HEADER),
                                      first(request, b"origin"))
        if refused is None:
            return None
        return self.stream_answer(request, *refused)

    def channel_caller(self, peer: str, headers: Mapping[bytes, list[bytes]],
                       channel: object) -> Caller:
        """The caller of a request read by the fast front (``caller``) whose
        connection carries a session's events itself (a WebSocket)."""
        caller = self.caller(peer, headers)
        return Caller(caller.address, caller.loopback, caller.bearer, caller.from_page,
                      channel, caller.traceparent)

    @staticmethod
    def stream_answer(request: WebRequest, status: int, code: int | str,
                      message: str) -> bytes:
        """A stream's error answer on a twisted.web request."""
        request.setResponseCode(status)
        request.setHeader(b"content-type", JSON)
        request.setHeader(b"cache-control", b"no-store")
        return stream_error(code, message)

    @staticmethod
    def path_answer(request: WebRequest, status: int, body: bytes) -> bytes:
        """A JSON answer of another path on a twisted.web request."""
        request.setResponseCode(status)
        request.setHeader(b"content-type", JSON)
        return body


def _with_traceparent(caller: Caller, values: Sequence[bytes] | None) -> Caller:
    """``caller`` with the request's one ``traceparent`` header, if it has
    exactly one of at most ``MAX_TRACEPARENT`` bytes (its syntax is the
    tracer's to judge: a bad one is ignored there)."""
    if not values or len(values) != 1 or len(values[0]) > MAX_TRACEPARENT:
        return caller
    return Caller(caller.address, caller.loopback, caller.bearer, caller.from_page,
                  caller.channel, values[0].decode("latin-1"))
