"""``/api/segments``: upload, list and delete audience segments (SPEC 15).

- ``POST /api/segments/NAME[?hashed=md5|sha256]``: the body is the contact
  file. twisted.web has spooled it to a temporary file by the time this runs
  (the HTTP fronts stream it there, up to ``--max-segment-body``); it is read
  from that file in chunks, in a thread of the reactor's pool, so that a file
  of 1 GiB neither sits in memory nor stops the reactor. 200 with the counts;
  400 with ``{"error": {"code", "message", "line", ...}}`` otherwise, and the
  segment unchanged.
- ``GET /api/segments``: every segment with its counts.
- ``DELETE /api/segments/NAME``: 200 ``{"deleted": true}``, 404 when absent.

Who may: as for ``/api/publish`` (Bearer publish key, or without one loopback
clients only, never a request with an Origin). An upload is judged as soon
as its headers are in (``upload_request_factory``): a refused one is
answered 401/403 before any of its body is spooled, its body is read and
dropped, and the connection closes.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Protocol

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.interfaces import IReactorThreads, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from pushengine.api.publishing import PublishAnswer, Publisher
from pushengine.core.strictjson import JsonValue
from pushengine.segments.parse import HASHES, Counts, DigestSink, SegmentError, read_segment
from pushengine.segments.store import SegmentsUnavailable, valid_name
from pushengine.web.policy import SEGMENT_UPLOADS, HttpPolicy, closing_answer, json_bytes
from pushengine.web.request import LimitedRequest

log = Logger()
MAX_UPLOADS = 2          # uploads a node works on at once
# a status and the JSON value of the body
Answer = tuple[int, JsonValue]


class Upload(DigestSink, Protocol):
    """A segment being uploaded: the reader adds its digests, then it is
    committed (swapped in whole, with its counts) or dropped."""

    def commit(self, meta: dict[str, Any]) -> Deferred[Any]: ...

    def abort(self) -> Deferred[Any]: ...


class Segments(Protocol):
    """What the resource uses of a segment store (in memory or in Redis)."""

    def begin(self, name: str) -> Upload: ...

    def list(self) -> Deferred[Any]: ...

    def delete(self, name: str) -> Deferred[Any]: ...


def _answer(request: Request, status: int, value: JsonValue) -> bytes:
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"application/json")
    request.setHeader(b"cache-control", b"no-store")
    return json_bytes(value)


if TYPE_CHECKING:
    _GuardBase = LimitedRequest     # what the guard is mixed into
else:
    _GuardBase = object


class UploadGuard(_GuardBase):
    """Mixed into the site's LimitedRequest: a ``POST /api/segments/NAME``
    whose caller may not upload is answered once its headers are in, before
    twisted.web spools a byte of its (up to 1 GiB) body. The answer says
    ``Connection: close``; the body that follows is read and dropped (as
    LimitedRequest does for a 413) and the connection is closed after it."""

    segments: SegmentsResource

    def gotLength(self, length: int | None) -> None:
        channel = self.channel
        if not self.body_too_large and channel is not None \
                and getattr(channel, "_command", b"") == b"POST" \
                and getattr(channel, "_path", b"").startswith(SEGMENT_UPLOADS):
            try:
                refused = self.segments.refusal(self)
            except Exception:
                log.failure("judging a segment upload failed")
                refused = PublishAnswer(500, {"error": {"code": "internal",
                                                        "message": "internal error"}}, {})
            if refused is not None:
                self._refuse_early(refused)
                length = 0
        super().gotLength(length)

    def _refuse_early(self, refused: PublishAnswer) -> None:
        self.body_too_large = True      # LimitedRequest: drop the body, then close
        self.requestHeaders.removeHeader(b"expect")   # a final answer: no 100 Continue
        transport = self.channel.transport
        if transport is None:
            return
        headers = [(b"Cache-Control", b"no-store")] + [
            (k.encode("latin-1").title(), v.encode("latin-1"))
            for k, v in refused.headers.items()]
        transport.write(closing_answer(refused.status, json_bytes(refused.body), headers))


class SegmentsResource(Resource):
    isLeaf = True

    def __init__(self, store: Any, policy: HttpPolicy, publisher: Publisher,
                 reactor: IReactorThreads | IReactorTime,
                 minimum: int = 100) -> None:
        """``policy`` and ``publisher``: who may use /api/segments is who may
        publish (``Publisher.refusal``) as the edge knows the caller.
        ``store``: a ``Segments`` (the stores' base class does not declare
        the methods); ``reactor``: its thread pool reads uploads (a test's
        Clock has none: they are read in this thread)."""
        super().__init__()
        self.store: Segments = store
        self.policy = policy
        self.publisher = publisher
        self.reactor = reactor
        self.minimum = minimum
        self.uploads = 0
        self.counters = {"uploads": 0, "refused": 0, "rows": 0}

    def _name(self, request: Request) -> str | None:
        path = request.path.decode("utf-8", "replace")
        return path[len("/api/segments/"):] if path.startswith("/api/segments/") else None

    def refusal(self, request: Request) -> PublishAnswer | None:
        """None when the caller may use /api/segments, else the answer."""
        refused = self.publisher.refusal(self.policy.request_caller(request))
        if refused is None:
            return None
        status, body, headers = refused
        return PublishAnswer(status, {"error": {"code": "not_authorized",
                                                "message": body.get("error", "refused")}},
                             headers)

    def _refused(self, request: Request) -> bytes | None:
        refused = self.refusal(request)
        if refused is None:
            return None
        status, body, headers = refused
        for name, value in headers.items():
            request.setHeader(name.encode(), value.encode())
        return _answer(request, status, body)

    def request_factory(self, base: type[LimitedRequest]) -> type[LimitedRequest]:
        """``base`` (the site's request class) judging uploads early."""
        return type("SegmentGuardedRequest", (UploadGuard, base), {"segments": self})

    def render(self, request: Request) -> bytes | int:
        method = request.method
        if request.path.rstrip(b"/") == b"/api/segments":
            if method not in (b"GET", b"HEAD"):
                request.setHeader(b"allow", b"GET")
                return _answer(request, 405, {"error": {"code": "method", "message":
                                                       "GET /api/segments lists them"}})
            return self._respond(request, self._list)
        name = self._name(request)
        if method not in (b"POST", b"DELETE"):
            request.setHeader(b"allow", b"POST, DELETE")
            return _answer(request, 405, {"error": {"code": "method", "message":
                                                   "POST uploads a segment, DELETE removes it"}})
        if name is None or not valid_name(name):
            return _answer(request, 400, {"error": {"code": "bad_request", "message":
                           "a segment name is 1 to 64 letters, digits, '_', '.' or '-'"}})
        return self._respond(request, self._upload if method == b"POST" else self._delete, name)

    def _respond(self, request: Request, work: Callable[..., Answer | Deferred[Answer]],
                 *args: str) -> bytes | int:
        refused = self._refused(request)
        if refused is not None:
            return refused
        d = maybeDeferred(work, request, *args)
        finished: list[object] = []
        request.notifyFinish().addBoth(finished.append)

        def write(answer: Answer) -> None:
            if not finished:
                request.write(_answer(request, *answer))
                request.finish()

        def failed(f: Failure) -> None:
            if f.check(SegmentsUnavailable):
                answer: Answer = (503, {"error": {"code": "unavailable",
                                          "message": f.getErrorMessage()}})
            else:
                log.failure("answering {path} failed", f, path=request.path)
                answer = (500, {"error": {"code": "internal", "message": "internal error"}})
            write(answer)
        d.addCallbacks(write, failed)
        return NOT_DONE_YET

    def _list(self, request: Request) -> Deferred[Answer]:
        return self.store.list().addCallback(lambda items: (200, {"segments": items}))

    def _delete(self, request: Request, name: str) -> Deferred[Answer]:
        def done(found: bool) -> Answer:
            if not found:
                return 404, {"error": {"code": "not_found", "message": f"no segment {name}"}}
            return 200, {"deleted": True, "name": name}
        return self.store.delete(name).addCallback(done)

    def _upload(self, request: Request, name: str) -> Answer | Deferred[Answer]:
        if getattr(request, "body_too_large", False):
            return 413, {"error": {"code": "too_large", "message": "the file is too large"}}
        hashed = (request.args.get(b"hashed") or [None])[0]
        if hashed is not None:
            hashed = hashed.decode("ascii", "replace")
            if hashed not in HASHES:
                return 400, {"error": {"code": "bad_request",
                                       "message": "hashed must be md5 or sha256"}}
        if self.uploads >= MAX_UPLOADS:
            return 429, {"error": {"code": "busy", "message": "too many uploads at once; "
                                   "try again later"}}
        self.uploads += 1
        upload = self.store.begin(name)
        content = request.content
        assert content is not None      # twisted.web spooled the body before render
        content.seek(0)
        started = time.monotonic()

        def read() -> Counts:
            return read_segment(content, upload, hashed=hashed, minimum=self.minimum)

        if IReactorThreads.providedBy(self.reactor):
            from twisted.internet.threads import deferToThreadPool
            d = deferToThreadPool(self.reactor, self.reactor.getThreadPool(), read)
        else:
            d = maybeDeferred(read)     # a test reactor (Clock): in this thread

        def good(counts: Counts) -> Deferred[Answer]:
            seconds = time.monotonic() - started
            meta = dict(counts.as_dict(), hashed=hashed or "sha256",
                        updated=round(time.time(), 3))
            self.counters["uploads"] += 1
            self.counters["rows"] += counts.rows
            log.info("segment {name}: {valid} entries from {rows} rows in {s:.1f} s",
                     name=name, valid=counts.valid, rows=counts.rows, s=seconds)
            return upload.commit(meta).addCallback(
                lambda _: (200, dict(meta, name=name, seconds=round(seconds, 3))))

        def bad(f: Failure) -> Answer | Failure:
            self.counters["refused"] += 1
            upload.abort()
            if isinstance(f.value, SegmentError):
                return f.value.status, f.value.as_json()
            return f

        def done(result: Answer | Failure) -> Answer | Failure:
            self.uploads -= 1
            return result
        return d.addCallbacks(good, bad).addBoth(done)
