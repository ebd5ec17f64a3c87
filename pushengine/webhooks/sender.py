"""Backend webhooks: a signed POST per session event (SPEC section 16).

With ``--webhook-url`` every session event of this node is POSTed there as
JSON ``{"event", "session", "user", "node", "time"}``:

- ``session.created`` — ``session.create`` answered;
- ``session.authorized`` — the session's user became known
  (``session.authorize``);
- ``session.destroyed`` — the client called ``session.destroy``;
- ``session.expired`` — the session was destroyed for not polling for
  ``--session-timeout`` (a closed SSE stream or WebSocket included: its
  session expires that long after the disconnect).

With ``--webhook-secret`` each POST carries
``X-Pushengine-Signature: sha256=<hex HMAC-SHA256 of the body>``.

How it stays out of the way of delivery:

- the hooks only encode the body and append it to a queue (no I/O, no
  Deferred handed back to the API: ``session.create`` never waits for it);
- the queue is bounded (``max_queue`` events in all); an event that finds it
  full is dropped and counted (``pushengine_webhooks_dropped_total``);
- at most ``concurrency`` POSTs are in flight, each cut after ``timeout``
  seconds;
- events of one session are sent one after the other, in the order they
  happened: a session's next event waits until its previous one was
  accepted (any 2xx answer);
- a POST that fails (no answer, a timeout, a status other than 2xx) is sent
  again after a back-off that doubles from ``backoff`` up to ``max_backoff``
  seconds; while the backend keeps failing, sending pauses for that long
  (every session's events wait: the backend is down for all of them), and
  the first success resets it.

Time comes from the injected clock; the HTTP client is passed in (``treq``,
or ``treq.testing.StubTreq`` in tests).
"""
from __future__ import annotations

import hashlib
import hmac
import json
from collections import deque
from typing import Any, Mapping, Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.core.hooks import SessionHooksBase
from pushengine.core.sessions import Session

log = Logger()

SIGNATURE_HEADER = "X-Pushengine-Signature"
EVENTS = ("session.created", "session.authorized", "session.destroyed", "session.expired")


def sign(secret: str | bytes, body: bytes) -> str:
    """The signature header's value for ``body``: ``sha256=<hex>``."""
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def verify(secret: str | bytes, body: bytes, header: str | None) -> bool:
    """True when ``header`` is the signature of ``body`` (constant time)."""
    if not header:
        return False
    return hmac.compare_digest(sign(secret, body), header)


class Response(Protocol):
    """What the sender reads of an HTTP response: its status."""

    code: int


class HttpClient(Protocol):
    """What the sender needs of ``treq`` (or ``treq.testing.StubTreq``):
    ``post`` fires with a Response, ``content`` with its body (Deferred
    being invariant, treq's own response class would not fit a narrower
    type than Any; and treq's ``content`` takes an ``IResponse``, which the
    sender's Response is not)."""

    def post(self, url: str, *, data: bytes,
             headers: dict[bytes, list[bytes]]) -> Deferred[Any]: ...

    def content(self, response: Any) -> Deferred[bytes]: ...


class BadStatus(Exception):
    """The receiver answered with a status other than 2xx."""


class WebhookSender:
    """The queue and the POSTs. ``send(event, session, user)`` is all the
    hooks call."""

    counter_names = ("sent", "failed", "dropped", "retries")

    def __init__(self, http: HttpClient, url: str, secret: str | None, node_id: str,
                 clock: IReactorTime, max_queue: int = 10_000, concurrency: int = 4,
                 timeout: float = 10.0, backoff: float = 0.5,
                 max_backoff: float = 30.0) -> None:
        self.http = http
        self.url = url
        self.secret = secret
        self.node_id = node_id
        self.clock = clock
        self.max_queue = max_queue
        self.concurrency = concurrency
        self.timeout = timeout
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.lanes: dict[str, deque[bytes]] = {}   # session id -> its bodies, oldest first
        self.ready: deque[str] = deque()     # sessions with a body to send, none in flight
        self.busy: set[str] = set()          # sessions with a POST in flight
        self.queued = 0
        self.failures = 0                    # back-off steps since the last success
        self.paused: IDelayedCall | None = None    # the delayed call that ends a back-off
        self.sent = self.failed = self.dropped = self.retries = 0
        self.last_error: str | None = None

    # -- queueing ----------------------------------------------------------------
    def send(self, event: str, sid: str, user: object) -> bool:
        """Queue one event (False: the queue was full and it was dropped)."""
        if self.queued >= self.max_queue:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warn("webhook queue full ({n} events): {dropped} events dropped so far",
                         n=self.queued, dropped=self.dropped)
            return False
        body = json.dumps({"event": event, "session": sid, "user": user,
                           "node": self.node_id, "time": round(self.clock.seconds(), 3)},
                          separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        lane = self.lanes.get(sid)
        if lane is None:
            lane = self.lanes[sid] = deque()
        lane.append(body)
        self.queued += 1
        if len(lane) == 1 and sid not in self.busy:
            self.ready.append(sid)
        self._pump()
        return True

    def _pump(self) -> None:
        while self.paused is None and self.ready and len(self.busy) < self.concurrency:
            sid = self.ready.popleft()
            self.busy.add(sid)
            self._post(sid)

    # -- sending -----------------------------------------------------------------
    def headers(self, body: bytes) -> dict[bytes, list[bytes]]:
        headers = {b"Content-Type": [b"application/json"],
                   b"User-Agent": [b"pushengine-webhooks"]}
        if self.secret:
            headers[SIGNATURE_HEADER.encode()] = [sign(self.secret, body).encode()]
        return headers

    def _post(self, sid: str) -> None:
        body = self.lanes[sid][0]
        try:
            d = self.http.post(self.url, data=body, headers=self.headers(body))
        except Exception:
            self._failed(Failure(), sid)
            return
        d.addTimeout(self.timeout, self.clock)
        d.addCallback(self._answered)
        d.addCallbacks(lambda _: self._done(sid), lambda f: self._failed(f, sid))
        d.addErrback(lambda f: log.failure("the webhook sender failed", f))

    def _answered(self, response: Response) -> Deferred[None]:
        code = response.code
        # read (and discard) the body so that the connection can be reused
        d = self.http.content(response)

        def check(_: bytes) -> None:
            if not 200 <= code < 300:
                raise BadStatus(f"HTTP {code}")
        return d.addCallback(check)

    def _done(self, sid: str) -> None:
        self.sent += 1
        if self.failures:
            log.info("webhooks are accepted again after {n} back-off steps", n=self.failures)
        self.failures = 0
        lane = self.lanes[sid]
        lane.popleft()
        self.queued -= 1
        self.busy.discard(sid)
        if lane:
            self.ready.append(sid)
        else:
            del self.lanes[sid]
        self._pump()

    def _failed(self, failure: Failure, sid: str) -> None:
        self.failed += 1
        self.last_error = failure.getErrorMessage()[:200] or (
            failure.type.__name__ if failure.type is not None else "error")
        if self.failures == 0:
            log.warn("POST to the webhook URL failed ({error}); retrying with back-off",
                     error=self.last_error)
        self.busy.discard(sid)
        # the same body goes first again, once the back-off is over
        self.ready.appendleft(sid)
        self.retries += 1
        if self.paused is None:
            # one back-off step per pause, however many POSTs were in flight
            self.failures += 1
            delay = min(self.max_backoff, self.backoff * 2 ** (self.failures - 1))
            self.paused = self.clock.callLater(delay, self._resume)

    def _resume(self) -> None:
        self.paused = None
        self._pump()

    def stop(self) -> None:
        if self.paused is not None and self.paused.active():
            self.paused.cancel()
        self.paused = None

    # -- figures -----------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        return {"sent": self.sent, "failed": self.failed, "dropped": self.dropped,
                "retries": self.retries, "queued": self.queued, "in_flight": len(self.busy)}

    def health(self) -> dict[str, Any]:
        return {"url": self.url, "queued": self.queued, "dropped": self.dropped,
                "failing": self.failures > 0, "last_error": self.last_error}


class WebhookHooks(SessionHooksBase):
    """One of the node's session hooks (``core.hooks``): turns created,
    authorized, destroyed and expired into the four webhook events."""

    def __init__(self, sender: WebhookSender) -> None:
        self.sender = sender
        self.users: dict[str, object] = {}   # session id -> the user last announced

    def created(self, session: Session) -> None:
        self.sender.send("session.created", session.id, session.user)
        if session.user is not None:
            self.users[session.id] = session.user

    def authorized(self, session: Session, claims: Mapping[str, Any]) -> None:
        # a token of the user already announced (authorized again) is not new
        user = session.user
        if user is not None and self.users.get(session.id) != user:
            self.users[session.id] = user
            self.sender.send("session.authorized", session.id, user)

    def destroyed(self, session: Session) -> None:
        self.users.pop(session.id, None)
        self.sender.send("session.destroyed", session.id, session.user)

    def expired(self, session: Session) -> None:
        self.users.pop(session.id, None)
        self.sender.send("session.expired", session.id, session.user)
