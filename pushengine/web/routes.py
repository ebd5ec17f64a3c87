"""The one route table of the edge, which both HTTP fronts read.

A ``Route`` names a path (a prefix with ``branch``), its methods, and what
answers it:

- a *call* (``Route.call``): a POST the fast front answers itself from the
  bytes it parsed, and twisted.web from its request: the same function, fed
  an ``HttpCall`` and the caller, answering an ``HttpAnswer`` (or a Deferred
  of one). ``POST /api/jsonrpc`` and ``POST /api/publish`` are calls. A call
  marked ``replies`` is also given a ``Reply`` by the fast front: one that
  waits then answers a ``ReplyingCall`` and writes its answer itself.
- a *page* (``Route.page``): a klein handler, ``request`` → bytes, a
  Resource or a Deferred, served by twisted.web only (the fast front hands
  such requests on, whole). ``Route.resource`` makes one of a Resource: the
  streams, the segment uploads, static files.

- a *stream* (``Route.stream``, beside a Resource's page): a GET the fast
  front hands, connection and all, to the transport (SSE, the WebSocket
  upgrade), which then writes its head and messages straight to the socket
  (``StreamHandler``); twisted.web still serves the same route through the
  Resource.

``shape`` says which error body the path's refusals carry (``policy.py``).
Both fronts take the calls from ``RouteTable.calls`` (method and path →
call); twisted.web routes the pages with klein (``app.py``), so that a
request reaches the same answer on either front and no route exists on one
front only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import (
    TYPE_CHECKING, Any, Callable, Iterable, Literal, Protocol, Sequence, Union, cast)

from pushengine.api.caller import Caller

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred
    from twisted.web.iweb import IRequest
    from twisted.web.resource import Resource

Shape = Literal["rpc", "stream", "plain"]


class HttpCall(Protocol):
    """A request as a call sees it, on either front."""

    @property
    def query(self) -> bytes:
        """What follows the ``?`` of the request's URL."""

    def header(self, name: bytes) -> bytes | None:
        """The first value of the header ``name`` (lower case), or None."""

    def content(self) -> bytes | None:
        """The body, or None when it was too large to be kept."""


class HttpAnswer:
    """A call's answer: a status, a JSON body, the headers of this answer
    beside the ones every API answer gets (CORS, ``Cache-Control``)."""

    __slots__ = ("status", "body", "headers")

    def __init__(self, status: int, body: bytes = b"",
                 headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        self.status = status
        self.body = body
        self.headers = headers

    def __repr__(self) -> str:
        return f"HttpAnswer({self.status}, {self.body!r}, {self.headers!r})"


Answer = Union[HttpAnswer, "Deferred[HttpAnswer]"]
CallHandler = Callable[[HttpCall, Caller], Answer]
# writes a call's answer on the connection the call came on
Reply = Callable[[HttpAnswer], None]


class ReplyingCall(Protocol):
    """A call that waits and, when it is done, writes its answer itself with
    the ``Reply`` it was given (a parked poll woken by a change: the poll
    calls the reply, no Deferred is fired per answer). ``cancel``: the
    client went away, nothing is written (a parked poll drops its waiter)."""

    def cancel(self) -> None: ...


ReplyingAnswer = Union[HttpAnswer, ReplyingCall]
# a call that may be given a Reply (``Route.replies``): with one, it answers
# at once or with a ReplyingCall, never a Deferred
ReplyingHandler = Callable[[HttpCall, Caller, Reply], ReplyingAnswer]


class StreamRequest(HttpCall, Protocol):
    """A request as a stream route sees it on the fast front."""

    url: bytes
    path: bytes
    version: str
    headers: dict[bytes, list[bytes]]   # lower-case names, every value


class StreamLink(Protocol):
    """The connection a stream route may take over (the fast front's)."""

    peer: str                           # the TCP peer's address

    def take(self, protocol: Any) -> Any:
        """Hand the connection to ``protocol`` for good: what the client
        sends goes to its ``dataReceived``, the end of the connection to its
        ``connectionLost``. Returns the transport, written to directly from
        then on (with ``write_now``); the front forgets its request state."""

    def write_now(self, transport: Any, data: bytes) -> None:
        """Write to a transport taken over, sending at once when nothing
        waits in its buffer (what the front does with its own answers)."""


# None: the stream took the connection; an answer: refused (the front writes it)
StreamAnswer = Union[HttpAnswer, None, "Deferred[HttpAnswer | None]"]
StreamHandler = Callable[[StreamRequest, Caller, StreamLink], StreamAnswer]
Page = Callable[[Any], Any]


@dataclass(frozen=True)
class Route:
    path: str
    methods: tuple[str, ...] | None     # None: any method (the resource answers each)
    call: CallHandler | None = None
    page: Page | None = None
    branch: bool = False                # every path below ``path`` too
    shape: Shape = "plain"
    stream: StreamHandler | None = None  # a GET the fast front hands to a transport
    # the call also takes a Reply as a third argument (``ReplyingHandler``)
    replies: bool = False
    # its GET with ``Upgrade: websocket`` is the WebSocket handshake: the
    # one request a front lets leave HTTP (any other Upgrade is ignored)
    websocket: bool = False

    @classmethod
    def post(cls, path: str, call: CallHandler, shape: Shape = "plain",
             replies: bool = False) -> Route:
        """A call, answered by both fronts; ``replies``: the fast front gives
        it a Reply, and a call that waits writes its answer with it."""
        return cls(path, ("POST",), call=call, shape=shape, replies=replies)

    @classmethod
    def get(cls, path: str, page: Page, methods: tuple[str, ...] = ("GET", "HEAD"),
            branch: bool = False, shape: Shape = "plain") -> Route:
        """A page, answered by twisted.web."""
        return cls(path, methods, page=page, branch=branch, shape=shape)

    @classmethod
    def resource(cls, path: str, resource: Resource,
                 methods: tuple[str, ...] | None = None, branch: bool = False,
                 shape: Shape = "plain", stream: StreamHandler | None = None,
                 websocket: bool = False) -> Route:
        """A Resource that renders the path (its own methods with ``methods``
        None); ``stream``: what the fast front calls for a GET of it instead;
        ``websocket``: that GET may be a WebSocket handshake."""
        def serve(request: IRequest) -> Resource:
            return resource
        serve.__name__ = f"resource of {path}"
        return cls(path, methods, page=serve, branch=branch, shape=shape, stream=stream,
                   websocket=websocket)

    @property
    def target(self) -> bytes:
        return self.path.encode("ascii")


class RouteTable:
    """Every route of the edge, in the order they are matched."""

    def __init__(self, routes: Iterable[Route]) -> None:
        self.routes = tuple(routes)
        self._exact = {r.target: r.shape for r in self.routes if not r.branch}
        self._branches = [(r.target, r.shape) for r in self.routes if r.branch]

    def calls(self) -> dict[tuple[bytes, bytes], CallHandler]:
        """What the fast front answers itself: (method, path) → call."""
        return {(method.encode("ascii"), route.target): route.call
                for route in self.routes if route.call is not None
                for method in route.methods or ()}

    def replying(self) -> dict[tuple[bytes, bytes], ReplyingHandler]:
        """The calls that take a Reply (``Route.replies``): (method, path) → call."""
        return {(method.encode("ascii"), route.target): cast(ReplyingHandler, route.call)
                for route in self.routes if route.call is not None and route.replies
                for method in route.methods or ()}

    def streams(self) -> dict[tuple[bytes, bytes], StreamHandler]:
        """What the fast front hands to a transport: (GET, path) → handler."""
        return {(b"GET", route.target): route.stream
                for route in self.routes if route.stream is not None and not route.branch}

    def websockets(self) -> frozenset[tuple[bytes, bytes]]:
        """The requests that may upgrade to a WebSocket: (GET, path) of the
        stream routes that take one. An ``Upgrade`` on any other request is
        not one: the request is an ordinary request, its body read once."""
        return frozenset((b"GET", route.target) for route in self.routes
                         if route.websocket and route.stream is not None and not route.branch)

    def _matching(self, path: bytes) -> list[Route]:
        exact = [r for r in self.routes if not r.branch and r.target == path]
        return exact or [r for r in self.routes if r.branch and path.startswith(r.target)]

    def methods(self, path: bytes) -> list[str]:
        """The methods of the routes of ``path`` (``Allow``) in the table's
        order, HEAD with GET."""
        found: list[str] = []
        for route in self._matching(path):
            for method in route.methods or ():
                for one in (method, "HEAD") if method == "GET" else (method,):
                    if one not in found:
                        found.append(one)
        return found

    def shape(self, path: bytes) -> Shape:
        """The error body of refusals on ``path`` (plain where no route is)."""
        shape = self._exact.get(path)
        if shape is not None:
            return shape
        for prefix, shape in self._branches:
            if path.startswith(prefix):
                return shape
        return "plain"
