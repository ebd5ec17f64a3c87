"""The node's HTTP endpoints, and klein rendering the route table for twisted.web.

``WebApp`` answers the node's own routes: ``POST /api/jsonrpc`` and ``POST
/api/publish`` (calls: the fast front answers them with the same functions),
their CORS preflights, ``/health`` and its probes ``/health/live`` and
``/health/ready`` (``health.py``), ``/metrics`` (its renderer passed in),
the static files, ``/`` and ``/favicon.ico``. The node adds the routes of
the streams, the segment uploads and the admin page (``app/service.py``).
``resource()`` is the twisted.web side of the whole table: its calls run as
on the fast front, its pages in one klein app built from it.

Every answer is JSON (or Prometheus text, or a static file): unknown paths,
wrong methods, oversized bodies and internal errors all get a JSON body of
their path's shape (``policy.py``), never an HTML page or a traceback.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, overload
from urllib.parse import urlsplit

from klein import Klein
from klein.interfaces import IKleinRequest
from klein.resource import KleinResource
from twisted.internet.defer import CancelledError
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request
from werkzeug.exceptions import MethodNotAllowed, NotFound
from werkzeug.routing import RequestRedirect

from pushengine.api.caller import Caller
from pushengine.api.publishing import Publisher, PublishAnswer
from pushengine.api.rpc import Dispatcher, RpcAnswer
from pushengine.core.limits import retry_after
from pushengine.web.policy import (
    INTERNAL_ERROR, JSON, KEY_HEADER, HttpPolicy, first, json_bytes, path_error, query_of,
    rpc_error, stream_error)
from pushengine.web.routes import (
    Answer, CallHandler, HttpAnswer, HttpCall, Reply, ReplyingAnswer, Route,
    RouteTable)
from pushengine.web.static import StaticFiles, static_root

log = Logger()
TOO_LARGE = "the request body is too large"
# /metrics: (content type, body) of the node's figures
MetricsRenderer = Callable[[], tuple[bytes, bytes]]
# /health/ready: (ready, why not)
ReadyState = Callable[[], tuple[bool, "str | None"]]
PROBE_OK = b'{"status":"ok"}'


def _redirect(request: IRequest, url: bytes) -> bytes:
    """A relative redirect with an empty body (and so no content type to
    mistake). One leading slash only: ``//host/path`` would leave the site."""
    request.redirect(b"/" + url.lstrip(b"/"))
    request.setHeader(b"content-length", b"0")
    return b""


def rpc_answer(answer: RpcAnswer) -> HttpAnswer:
    """A dispatcher's answer as HTTP says it."""
    if answer.retry_after is not None:
        return HttpAnswer(answer.status, answer.body or b"",
                          ((b"Retry-After", b"%d" % retry_after(answer.retry_after)),))
    return HttpAnswer(answer.status, answer.body or b"")


def publish_answer(answer: PublishAnswer) -> HttpAnswer:
    status, body, headers = answer
    return HttpAnswer(status, json_bytes(body),
                      tuple((k.title().encode(), v.encode()) for k, v in headers.items()))


class WebApp:
    """The node's own routes and the twisted.web rendering of every route."""

    def __init__(self, policy: HttpPolicy, dispatcher: Dispatcher, publisher: Publisher,
                 health: Callable[[], dict[str, Any]], metrics: MetricsRenderer,
                 routes: Iterable[Route] = (), ready: ReadyState | None = None) -> None:
        """``routes``: the node's other routes (streams, segment uploads,
        the admin page), matched after these; ``ready``: whether the node
        is ready for its clients (``health.Readiness.state``; without it,
        ready while ``health`` says ``ok``)."""
        self.policy = policy
        self.dispatcher = dispatcher
        self.publisher = publisher
        self.health_report = health
        self.ready_state: ReadyState = ready or self._ready_from_report
        self.render_metrics = metrics
        root = static_root()
        self.js = StaticFiles(str(root / "js"))
        self.examples = StaticFiles(str(root / "examples"))
        self.examples.indexNames = ["index.html"]
        self.key_refused = HttpAnswer(403, policy.key_refused)
        self.too_large = HttpAnswer(413, rpc_error(-32600, TOO_LARGE))
        self.table = RouteTable([*self.routes(), *routes])
        self._resource = EdgeResource(self.table, policy)

    def routes(self) -> list[Route]:
        return [
            Route.post("/api/jsonrpc", self.jsonrpc, shape="rpc", replies=True),
            Route.get("/api/jsonrpc", self.preflight, ("OPTIONS",), shape="rpc"),
            Route.post("/api/publish", self.publish),
            Route.get("/api/publish", self.preflight, ("OPTIONS",)),
            Route.get("/health", self.health),
            Route.get("/health/live", self.live),
            Route.get("/health/ready", self.ready),
            Route.get("/metrics", self.metrics, ("GET",)),
            Route.get("/static/js/", self.static_js, branch=True),
            Route.get("/examples/", self.static_examples, branch=True),
            Route.get("/", self.root),
            Route.get("/favicon.ico", self.favicon),
        ]

    def resource(self) -> Resource:
        """The twisted.web resource of the whole route table."""
        return self._resource

    # -- calls (both fronts) -------------------------------------------------------
    @overload
    def jsonrpc(self, call: HttpCall, caller: Caller) -> Answer: ...

    @overload
    def jsonrpc(self, call: HttpCall, caller: Caller, reply: Reply) -> ReplyingAnswer: ...

    def jsonrpc(self, call: HttpCall, caller: Caller,
                reply: Reply | None = None) -> Answer | ReplyingAnswer:
        """``reply`` (the fast front's): a call that waits writes its answer
        with it (``ReplyingCall``) instead of answering a Deferred."""
        policy = self.policy
        if policy.api_keys.required and not policy.key_allowed(
                call.query, call.header(KEY_HEADER)):
            return self.key_refused
        body = call.content()
        if body is None:
            return self.too_large
        if reply is None:
            result = self.dispatcher.handle(body, caller)
            if isinstance(result, RpcAnswer):     # (a plain class: no slow isinstance)
                return rpc_answer(result)
            return result.addCallback(rpc_answer)
        answered = self.dispatcher.handle(body, caller,
                                          lambda answer: reply(rpc_answer(answer)))
        if isinstance(answered, RpcAnswer):
            if answered.retry_after is None:    # (rpc_answer, inline: every poll's)
                return HttpAnswer(answered.status, answered.body or b"")
            return rpc_answer(answered)
        return answered         # a ReplyingCall: a parked poll, or a Deferred

    def publish(self, call: HttpCall, caller: Caller) -> Answer:
        answer = self.publisher.handle(call.content(), caller)
        if isinstance(answer, PublishAnswer):
            return publish_answer(answer)
        return answer.addCallback(publish_answer)

    # -- pages (twisted.web) -----------------------------------------------------------
    def preflight(self, request: Request) -> bytes:
        self.policy.cors(request)
        request.setResponseCode(204)
        return b""

    def health(self, request: Request) -> bytes:
        report = self.health_report()
        request.setHeader(b"cache-control", b"no-store")
        return HttpPolicy.path_answer(request, 200 if report.get("status") == "ok" else 503,
                                      json_bytes(report))

    def live(self, request: Request) -> bytes:
        """200 while the process answers HTTP: a liveness probe's."""
        request.setHeader(b"cache-control", b"no-store")
        return HttpPolicy.path_answer(request, 200, PROBE_OK)

    def ready(self, request: Request) -> bytes:
        """200 when the node can serve its clients, else 503 with the
        reason: a readiness probe's and a balancer's."""
        ready, why = self.ready_state()
        request.setHeader(b"cache-control", b"no-store")
        if ready:
            return HttpPolicy.path_answer(request, 200, PROBE_OK)
        return HttpPolicy.path_answer(request, 503, json_bytes(
            {"status": "unavailable", "reason": why or "not ready"}))

    def _ready_from_report(self) -> tuple[bool, str | None]:
        if self.health_report().get("status") == "ok":
            return True, None
        return False, "the change feed is down"

    def metrics(self, request: Request) -> bytes:
        content_type, body = self.render_metrics()
        request.setHeader(b"content-type", content_type)
        return body

    def static_js(self, request: Request) -> Resource:
        return self.js

    def static_examples(self, request: Request) -> Resource:
        return self.examples

    def root(self, request: Request) -> bytes:
        return _redirect(request, b"/examples/")

    def favicon(self, request: Request) -> bytes:
        request.setResponseCode(204)
        return b""


class CallResource(Resource):
    """A call (``Route.call``) on a twisted.web request: the answer with the
    API's headers; a call that waits answers when it fires, or never when
    the client goes away first (the Deferred is cancelled: a parked poll
    drops its waiter)."""

    isLeaf = True

    def __init__(self, call: CallHandler, policy: HttpPolicy) -> None:
        super().__init__()
        self.call = call
        self.policy = policy

    def render(self, request: Request) -> bytes | int:
        try:
            result = self.call(_WebCall(request), self.policy.request_caller(request))
        except Exception:
            log.failure("unhandled error answering {path}", path=request.path)
            return HttpPolicy.path_answer(request, 500, INTERNAL_ERROR)
        if isinstance(result, HttpAnswer):
            return self._head(request, result)
        finished: list[object] = []
        request.notifyFinish().addBoth(finished.append)
        request.notifyFinish().addErrback(lambda _: result.cancel())

        def write(answer: HttpAnswer) -> None:
            if not finished:
                try:
                    request.write(self._head(request, answer))
                    request.finish()
                except Exception:
                    log.failure("writing the answer to {path} failed", path=request.path)

        def failed(f: Failure) -> None:
            if f.check(CancelledError):
                return
            log.failure("unhandled error answering {path}", f, path=request.path)
            if not finished:
                request.write(HttpPolicy.path_answer(request, 500, INTERNAL_ERROR))
                request.finish()
        result.addCallbacks(write, failed)
        return NOT_DONE_YET

    def _head(self, request: Request, answer: HttpAnswer) -> bytes:
        """Set the answer's status and headers; its body."""
        for name, value in self.policy.cors_headers:
            request.setHeader(name, value)
        request.setHeader(b"cache-control", b"no-store")
        if answer.status != 200:
            request.setResponseCode(answer.status)
        request.setHeader(b"content-type", JSON)
        for name, value in answer.headers:
            request.setHeader(name, value)
        return answer.body


class _WebCall:
    """A twisted.web request as an ``HttpCall``."""

    __slots__ = ("request",)

    def __init__(self, request: Request) -> None:
        self.request = request

    @property
    def query(self) -> bytes:
        return query_of(self.request.uri)

    def header(self, name: bytes) -> bytes | None:
        return first(self.request, name)

    def content(self) -> bytes | None:
        request = self.request
        if getattr(request, "body_too_large", False) or request.content is None:
            return None
        request.content.seek(0)
        body: bytes = request.content.read()
        return body


class EdgeResource(Resource):
    """The twisted.web side of the route table: its calls answered as the
    fast front answers them (looked up by method and path, run by a
    ``CallResource``), every other route matched and rendered by klein (one
    klein app made of the table's pages). A call through klein's matching
    and Deferreds would cost twice a poll's whole answer on this front."""

    isLeaf = True

    def __init__(self, table: RouteTable, policy: HttpPolicy) -> None:
        super().__init__()
        self.table = table
        self.calls = {target: CallResource(call, policy)
                      for target, call in table.calls().items()}
        self.klein: KleinResource = KleinPages(table).resource

    def render(self, request: Request) -> Any:
        call = self.calls.get((request.method, request.path))
        if call is not None:
            return call.render(request)
        return self.klein.render(request)


class KleinPages:
    """The table's pages as one klein app (``resource``): klein matches
    them and renders what they answer; its refusals (no such path, a wrong
    method) are JSON of the path's shape."""

    def __init__(self, table: RouteTable) -> None:
        self.table = table
        app = Klein()
        for number, route in enumerate(table.routes):
            if route.page is None:
                continue
            methods = list(route.methods) if route.methods is not None else None
            app.route(route.path, methods=methods, branch=route.branch,
                      endpoint=f"{number} {route.path}")(route.page)
        app.handle_errors(RequestRedirect)(self.redirected)
        app.handle_errors(NotFound)(self.not_found)
        app.handle_errors(MethodNotAllowed)(self.not_allowed)
        app.handle_errors(Exception)(self.internal)
        self.app = app
        self.resource = app.resource()

    def redirected(self, request: IRequest, failure: Failure) -> bytes:
        # werkzeug builds an absolute URL from the Host header (which may
        # hold anything, "/" included) and drops the query: keep what follows
        # its scheme and host, and the request's own query
        url: str = getattr(failure.value, "new_url", "/")
        mapper = IKleinRequest(request).mapper
        prefix = f"{mapper.url_scheme}://{mapper.get_host(None)}"
        path = url[len(prefix):] if url.startswith(prefix) else urlsplit(url).path
        path = path.partition("?")[0].partition("#")[0] or "/"
        query = query_of(request.uri)
        return _redirect(request, path.encode("ascii", "replace")
                         + (b"?" + query if query else b""))

    def not_found(self, request: IRequest, failure: Failure) -> bytes:
        if self.table.methods(request.path):       # a path of calls only
            return self.not_allowed(request, failure)
        return HttpPolicy.path_answer(request, 404, path_error("not found"))

    def not_allowed(self, request: IRequest, failure: Failure) -> bytes:
        allowed = self.table.methods(request.path)
        if allowed:
            request.setHeader(b"allow", ", ".join(allowed).encode())
        shape = self.table.shape(request.path)
        if shape == "rpc":
            body = rpc_error(-32600, "method not allowed: use POST")
        elif shape == "stream":
            body = stream_error(-32600, "method not allowed: use "
                                + " or ".join(m for m in allowed if m != "HEAD"))
        else:
            body = path_error("method not allowed")
        return HttpPolicy.path_answer(request, 405, body)

    def internal(self, request: IRequest, failure: Failure) -> bytes:
        log.failure("unhandled error answering {path}", failure, path=request.path)
        return HttpPolicy.path_answer(request, 500, INTERNAL_ERROR)
