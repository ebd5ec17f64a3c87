"""The rules of ``POST /api/publish``, free of any transport (SPEC sections 2, 12).

With ``--publish-key`` a request must carry ``Authorization: Bearer <key>``;
without one, only loopback clients may publish, and never a web page (a
request with an ``Origin``). The body is decoded by the one strict decoder;
a body with any bad change publishes nothing and names every bad change.
``Publisher.handle`` answers a ``PublishAnswer`` (status, JSON value,
headers) or a Deferred of it; the edge serves it on both HTTP fronts.

With a tracer (``core.tracing``) a request is a ``publish`` span, the child
of the caller's ``traceparent``, with the changes' number
(``pushengine.changes``) and the answer's status
(``http.response.status_code``); it is the current span while the feed
takes the changes, so that the in-process feed's application of them
(``changes.apply``) is its child.
"""
from __future__ import annotations

import hmac
from typing import Any, NamedTuple

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.api.caller import Caller
from pushengine.core.changes import MalformedChange, changes_from_json, decode_json
from pushengine.core.interfaces import ChangeFeed, FeedUnavailable
from pushengine.core.tracing import Span, Tracer, active

log = Logger()


class PublishAnswer(NamedTuple):
    """An HTTP status, the JSON value of the body, and the answer's headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str]


class Publisher:
    def __init__(self, feed: ChangeFeed, id_fields: dict[str, str] | None = None,
                 publish_key: str | None = None, tracer: Tracer | None = None) -> None:
        self.feed = feed
        self.tracer = active(tracer)
        self.id_fields = id_fields or {}
        self.publish_key = publish_key

    def refusal(self, caller: Caller) -> PublishAnswer | None:
        """Who may publish, judged before the body is read."""
        if self.publish_key:
            if caller.bearer is None or not hmac.compare_digest(
                    caller.bearer.encode("utf-8", "surrogateescape"),
                    self.publish_key.encode("utf-8", "surrogateescape")):
                return PublishAnswer(
                    401, {"error": "publishing needs Authorization: Bearer <publish key>"},
                    {"www-authenticate": "Bearer"})
            return None
        if caller.from_page:
            # a web page in a visitor's browser on this machine must not
            # publish through it: browsers send Origin with such requests
            return PublishAnswer(403, {"error": "no publish key is configured: "
                                                "requests from web pages are refused"}, {})
        if not caller.loopback:
            return PublishAnswer(403, {"error": "no publish key is configured: "
                                                "only loopback clients may publish"}, {})
        return None

    def handle(self, body: bytes | None,
               caller: Caller) -> PublishAnswer | Deferred[PublishAnswer]:
        tracer = self.tracer
        if tracer is None:
            return self._handle(body, caller)
        span = tracer.start("publish", {"http.route": "/api/publish"}, caller.traceparent,
                            kind="server")
        previous = tracer.enter(span)
        try:
            answer = self._handle(body, caller, span)
        finally:
            tracer.leave(previous)
        if isinstance(answer, PublishAnswer):
            return self._traced(answer, span)
        return answer.addCallback(self._traced, span)

    def _traced(self, answer: PublishAnswer, span: Span) -> PublishAnswer:
        """The span of a request answered ``answer`` ends."""
        if span.is_recording():
            span.set_attribute("http.response.status_code", answer.status)
            if answer.status >= 400:
                assert self.tracer is not None
                error = answer.body.get("error")
                self.tracer.failed(span, error if isinstance(error, str) else "refused")
        span.end()
        return answer

    def _handle(self, body: bytes | None, caller: Caller,
                span: Span | None = None) -> PublishAnswer | Deferred[PublishAnswer]:
        refused = self.refusal(caller)
        if refused is not None:
            return refused
        if body is None:
            return PublishAnswer(413, {"error": "the request body is too large"}, {})
        try:
            data, checked = decode_json(body)
        except MalformedChange as e:
            return PublishAnswer(400, {"error": str(e)}, {})
        changes, errors = changes_from_json(data, self.id_fields, checked)
        if errors:
            return PublishAnswer(400, {"error": "malformed change", "details": errors[:20]}, {})
        if not changes:
            return PublishAnswer(400, {"error": "no changes in the body"}, {})
        if span is not None:
            span.set_attribute("pushengine.changes", len(changes))
        d = maybeDeferred(self.feed.publish, changes)

        def published(count: int) -> PublishAnswer:
            return PublishAnswer(200, {"accepted": count}, {})

        def failed(f: Failure) -> PublishAnswer:
            if f.check(FeedUnavailable):
                log.warn("publishing {n} changes refused: {why}", n=len(changes),
                         why=f.getErrorMessage())
            else:
                log.failure("publishing {n} changes failed", f, n=len(changes))
            return PublishAnswer(503, {"error": "the change feed is not available; retry"},
                                 {"retry-after": "1"})
        return d.addCallbacks(published, failed)
