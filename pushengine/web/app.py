"""The HTTP routes: JSON-RPC, publish, health, metrics, static files.

Every answer is JSON (or Prometheus text, or a static file): unknown paths,
wrong methods, oversized bodies and internal errors all get a JSON body, never
an HTML page or a traceback.
"""
from __future__ import annotations

import json
from typing import Any

from klein import Klein
from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET
from werkzeug.exceptions import MethodNotAllowed, NotFound
from werkzeug.routing import RequestRedirect

from pushengine.metrics import prometheus as metrics
from pushengine.api.auth import ApiKeys
from pushengine.core.limits import retry_after
from pushengine.api.rpc import Dispatcher, RpcAnswer
from pushengine.api.publishing import Publisher
from pushengine.web.guard import Guard
from pushengine.web.clients import ClientAddresses
from pushengine.web.static import StaticFiles, static_root

log = Logger()
JSON = b"application/json"


def _json(request, code: int, value: Any) -> bytes:
    request.setResponseCode(code)
    request.setHeader(b"content-type", JSON)
    return json.dumps(value, separators=(",", ":")).encode()


def _redirect(request, url: bytes) -> bytes:
    """A relative redirect with an empty body (and so no content type to
    mistake). One leading slash only: ``//host/path`` would leave the site."""
    request.redirect(b"/" + url.lstrip(b"/"))
    request.setHeader(b"content-length", b"0")
    return b""


class WebApp:
    app = Klein()

    def __init__(self, dispatcher: Dispatcher, feed: Any, engine: Any,
                 metrics_registry: Any, health: Any, api_keys: ApiKeys | None = None,
                 publish_key: str | None = None, cors_origin: str | None = None,
                 id_fields: dict[str, str] | None = None,
                 clients: ClientAddresses | None = None,
                 streams: dict[bytes, Resource] | None = None) -> None:
        """``streams``: the streaming transports' resources by path
        (``/api/events``, ``/api/ws``), served beside the routes."""
        self.dispatcher = dispatcher
        self.feed = feed
        self.engine = engine
        self.metrics_registry = metrics_registry
        self.health_report = health
        self.api_keys = api_keys or ApiKeys()
        self.publish_key = publish_key
        self.cors_origin = cors_origin
        self.id_fields = id_fields or {}
        self.clients = clients or ClientAddresses()
        self.guard = Guard(self.api_keys, cors_origin, self.clients)
        self.publisher = Publisher(feed, self.id_fields, publish_key)
        self.streams = streams or {}
        root = static_root()
        self.js = StaticFiles(str(root / "js"))
        self.examples = StaticFiles(str(root / "examples"))
        self.examples.indexNames = ["index.html"]
        # the admin page (pushengine.web.admin), set by the node with --admin-key
        self.admin: Any = None

    def resource(self):
        return Root(self, self.app.resource())

    # -- shared checks ---------------------------------------------------------
    def _cors(self, request) -> None:
        self.guard.cors(request)

    def _body(self, request) -> bytes | None:
        if getattr(request, "body_too_large", False):
            return None
        request.content.seek(0)
        return request.content.read()

    # -- JSON-RPC ----------------------------------------------------------------
    @app.route("/api/jsonrpc", methods=["POST"])
    def jsonrpc(self, request):
        self._cors(request)
        request.setHeader(b"cache-control", b"no-store")
        if not self.guard.key_allowed(request):
            return _json(request, 403, {"jsonrpc": "2.0", "id": None, "error": {
                "code": 1003, "message": "a valid API key is required (apikey or X-Api-Key)"}})
        body = self._body(request)
        if body is None:
            return _json(request, 413, {"jsonrpc": "2.0", "id": None, "error": {
                "code": -32600, "message": "the request body is too large"}})
        result = self.dispatcher.handle(body, self.guard.caller(request))

        def answer(answer: RpcAnswer) -> bytes:
            request.setHeader(b"content-type", JSON)
            request.setResponseCode(answer.status)
            if answer.retry_after is not None:
                request.setHeader(b"retry-after", b"%d" % retry_after(answer.retry_after))
            return answer.body or b""
        if isinstance(result, Deferred):
            return result.addCallback(answer)
        return answer(result)

    @app.route("/api/jsonrpc", methods=["OPTIONS"])
    @app.route("/api/publish", methods=["OPTIONS"])
    def preflight(self, request):
        self._cors(request)
        request.setResponseCode(204)
        return b""

    # -- publish -----------------------------------------------------------------
    @app.route("/api/publish", methods=["POST"])
    def publish(self, request):
        self._cors(request)
        caller = self.guard.caller(request)
        refused = self.publisher.refusal(caller)
        answer = refused if refused is not None else \
            self.publisher.handle(self._body(request), caller)

        def write(answer) -> bytes:
            status, body, headers = answer
            for name, value in headers.items():
                request.setHeader(name.encode(), value.encode())
            return _json(request, status, body)
        if isinstance(answer, Deferred):
            return answer.addCallback(write)
        return write(answer)

    # -- operations --------------------------------------------------------------
    @app.route("/health", methods=["GET", "HEAD"])
    def health(self, request):
        report = self.health_report()
        request.setHeader(b"cache-control", b"no-store")
        return _json(request, 200 if report.get("status") == "ok" else 503, report)

    @app.route("/metrics", methods=["GET"])
    def metrics(self, request):
        request.setHeader(b"content-type", metrics.CONTENT_TYPE.encode())
        return metrics.render(self.metrics_registry)

    # -- static files ------------------------------------------------------------
    @app.route("/static/js/", branch=True, methods=["GET", "HEAD"])
    def static_js(self, request):
        return self.js

    @app.route("/examples/", branch=True, methods=["GET", "HEAD"])
    def static_examples(self, request):
        return self.examples

    @app.route("/admin/", branch=True, methods=["GET", "HEAD"])
    def admin_page(self, request):
        """The admin page, or 404 when the node runs without --admin-key."""
        if self.admin is None:
            return _json(request, 404, {"error": "not found"})
        return self.admin.serve(request)

    @app.route("/", methods=["GET", "HEAD"])
    def root(self, request):
        return _redirect(request, b"/examples/")

    @app.route("/favicon.ico", methods=["GET", "HEAD"])
    def favicon(self, request):
        request.setResponseCode(204)
        return b""

    # -- errors as JSON ------------------------------------------------------------
    @app.handle_errors(RequestRedirect)
    def redirected(self, request, failure):
        # werkzeug builds an absolute URL from the Host header (which may
        # hold anything, "/" included) and drops the query: keep what follows
        # its scheme and host, and the request's own query
        from urllib.parse import urlsplit

        from klein.interfaces import IKleinRequest
        url = failure.value.new_url
        mapper = IKleinRequest(request).mapper
        prefix = f"{mapper.url_scheme}://{mapper.get_host(None)}"
        path = url[len(prefix):] if url.startswith(prefix) else urlsplit(url).path
        path = path.partition("?")[0].partition("#")[0] or "/"
        query = request.uri.partition(b"?")[2]
        return _redirect(request, path.encode("ascii", "replace")
                         + (b"?" + query if query else b""))

    @app.handle_errors(NotFound)
    def not_found(self, request, failure):
        return _json(request, 404, {"error": "not found"})

    @app.handle_errors(MethodNotAllowed)
    def not_allowed(self, request, failure):
        allowed = getattr(failure.value, "valid_methods", None) or []
        if allowed:
            request.setHeader(b"allow", ", ".join(allowed).encode())
        return _json(request, 405, {"jsonrpc": "2.0", "id": None, "error": {
            "code": -32600, "message": "method not allowed: use POST"}}
            if request.path.startswith(b"/api/") else {"error": "method not allowed"})

    @app.handle_errors(Exception)
    def internal(self, request, failure):
        log.failure("unhandled error answering {path}", failure, path=request.path)
        return _json(request, 500, {"error": "internal error"})


class Root(Resource):
    """The site's root: ``POST /api/jsonrpc`` (every poll) goes straight to the
    handler; every other request is routed by klein."""

    def __init__(self, web: WebApp, routed: Resource) -> None:
        super().__init__()
        self.web = web
        self.routed = routed

    def getChildWithDefault(self, path: bytes, request) -> Resource:
        if request.method == b"POST" and request.path == b"/api/jsonrpc":
            return _RpcResource(self.web)
        stream = self.web.streams.get(request.path)
        if stream is not None:
            return stream
        segments = getattr(self.web, "segments", None)    # SPEC 15
        if segments is not None and (request.path == b"/api/segments"
                                     or request.path.startswith(b"/api/segments/")):
            return segments
        # give the whole path back to klein, which routes on it
        request.postpath.insert(0, request.prepath.pop())
        return self.routed

    def render(self, request):
        return self.routed.render(request)


class _RpcResource(Resource):
    isLeaf = True

    def __init__(self, web: WebApp) -> None:
        super().__init__()
        self.web = web

    def render_POST(self, request):
        try:
            result = self.web.jsonrpc(request)
        except Exception:
            log.failure("unhandled error answering /api/jsonrpc")
            return _json(request, 500, {"error": "internal error"})
        if isinstance(result, bytes):
            return result
        finished = []
        request.notifyFinish().addBoth(finished.append)
        request.notifyFinish().addErrback(lambda _: result.cancel())

        def write(body: bytes) -> None:
            if not finished:
                request.write(body)
                request.finish()

        def failed(f) -> None:
            if f.check(CancelledError):
                return
            log.failure("unhandled error answering /api/jsonrpc", f)
            if not finished:
                request.write(_json(request, 500, {"error": "internal error"}))
                request.finish()
        result.addCallbacks(write, failed)
        return NOT_DONE_YET
