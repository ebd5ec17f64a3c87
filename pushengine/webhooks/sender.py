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
- the queue is bounded (``max_queue`` events in all) and shared fairly
  between clients: when it is full, an event of a client that holds fewer
  events than the heaviest one takes the place of one of the heaviest's;
  ``session.authorized`` events are kept preferentially; what is dropped is
  counted (``pushengine_webhooks_dropped_total``);
- POSTs go round-robin between clients;
- at most ``concurrency`` POSTs are in flight, each cut after ``timeout``
  seconds (headers and body: a backend that answers its headers and then
  hangs is cut too); a POST waiting half that long shows the backend as
  ``hanging`` and ``failing`` in /health and /metrics;
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
from typing import Any, Callable, Hashable, Mapping, Protocol

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.defer import TimeoutError as DeferredTimeout
from twisted.internet.error import TimeoutError as ConnectTimeout
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


QUEUED, IN_FLIGHT, GONE = 0, 1, 2


class _Entry:
    """One queued event: its session, its client, its body."""

    __slots__ = ("sid", "client", "body", "authorized", "state")

    def __init__(self, sid: str, client: Hashable, body: bytes, authorized: bool) -> None:
        self.sid = sid
        self.client = client
        self.body = body
        self.authorized = authorized
        self.state = QUEUED


class _ClientQueue:
    """The events of one client: how many (in flight included), the
    candidates for eviction (other events, then ``authorized`` ones, newest
    last) and the client's sessions that have an event ready to send."""

    __slots__ = ("count", "plain", "authd", "ready", "scheduled")

    def __init__(self) -> None:
        self.count = 0
        self.plain: deque[_Entry] = deque()
        self.authd: deque[_Entry] = deque()
        self.ready: deque[str] = deque()
        self.scheduled = False              # in the sender's round of clients

    def evictable(self, authorized: bool) -> _Entry | None:
        """The newest queued (not in flight) event of that kind, taken out."""
        entries = self.authd if authorized else self.plain
        skipped = []
        found = None
        while entries:
            entry = entries.pop()
            if entry.state == QUEUED:
                found = entry
                break
            if entry.state == IN_FLIGHT:
                skipped.append(entry)       # it may fail and be queued again
        entries.extend(reversed(skipped))
        return found

    def compact(self) -> None:
        if len(self.plain) + len(self.authd) > 2 * self.count + 32:
            self.plain = deque(e for e in self.plain if e.state != GONE)
            self.authd = deque(e for e in self.authd if e.state != GONE)


class WebhookSender:
    """The queue and the POSTs. ``send(event, session, user)`` is all the
    hooks call.

    The queue is shared fairly between clients (the address that created a
    session, from ``client_of(sid)``): when it is full, an event of a client
    that holds fewer events than the heaviest client takes the place of one
    of the heaviest client's events, and an event of a heaviest client is
    dropped — so a flood from a few addresses fills only their own share.
    ``session.authorized`` events are kept preferentially: an arriving one
    pushes out one of its own client's other events before it is dropped,
    and an eviction takes other events first. POSTs go round-robin between
    clients, so a long queue of one client does not delay the others'."""

    counter_names = ("sent", "failed", "dropped", "retries", "timeouts")

    def __init__(self, http: HttpClient, url: str, secret: str | None, node_id: str,
                 clock: IReactorTime, max_queue: int = 10_000, concurrency: int = 4,
                 timeout: float = 10.0, backoff: float = 0.5,
                 max_backoff: float = 30.0,
                 client_of: Callable[[str], Hashable] | None = None) -> None:
        """``client_of(sid)``: who created a session (its client key), or
        None when unknown; every event of a session counts for that client."""
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
        self.client_of = client_of
        self.session_clients: dict[str, Hashable] = {}   # live sessions' clients, as first seen
        self.lanes: dict[str, deque[_Entry]] = {}   # session id -> its events, oldest first
        self.clients: dict[Hashable, _ClientQueue] = {}
        self.rounds: deque[Hashable] = deque()  # clients with a session ready, round-robin
        self.busy: dict[str, float] = {}     # sessions with a POST in flight -> since when
        self.by_count: dict[int, set[Hashable]] = {}   # events held -> the clients holding them
        self.top = 0                         # the most events one client holds
        self.queued = 0
        self.failures = 0                    # back-off steps since the last success
        self.paused: IDelayedCall | None = None    # the delayed call that ends a back-off
        self.sent = self.failed = self.dropped = self.retries = self.timeouts = 0
        self.last_error: str | None = None

    # -- queueing ----------------------------------------------------------------
    def _client(self, sid: str, event: str) -> Hashable:
        client = self.session_clients.get(sid)
        if client is None:
            client = self.client_of(sid) if self.client_of is not None else None
            client = "?" if client is None else client
            if event not in ("session.destroyed", "session.expired"):
                self.session_clients[sid] = client
        if event in ("session.destroyed", "session.expired"):
            self.session_clients.pop(sid, None)
        return client

    def _count(self, client: Hashable, queue: _ClientQueue, step: int) -> None:
        """Move a client's count by one (+1 / -1), keeping ``by_count`` and ``top``."""
        before = queue.count
        after = queue.count = before + step
        if before:
            holders = self.by_count[before]
            holders.discard(client)
            if not holders:
                del self.by_count[before]
                if before == self.top and step < 0:
                    self.top = after
        if after:
            self.by_count.setdefault(after, set()).add(client)
            self.top = max(self.top, after)
        self.queued += step

    def send(self, event: str, sid: str, user: object) -> bool:
        """Queue one event (False: the queue was full and it was dropped)."""
        client = self._client(sid, event)
        authorized = event == "session.authorized"
        if self.queued >= self.max_queue and not self._make_room(client, authorized):
            self._dropped()
            return False
        body = json.dumps({"event": event, "session": sid, "user": user,
                           "node": self.node_id, "time": round(self.clock.seconds(), 3)},
                          separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        entry = _Entry(sid, client, body, authorized)
        queue = self.clients.get(client)
        if queue is None:
            queue = self.clients[client] = _ClientQueue()
        (queue.authd if authorized else queue.plain).append(entry)
        self._count(client, queue, 1)
        lane = self.lanes.get(sid)
        if lane is None:
            lane = self.lanes[sid] = deque()
        lane.append(entry)
        if len(lane) == 1 and sid not in self.busy:
            self._schedule(entry)
        self._pump()
        return True

    def _dropped(self) -> None:
        self.dropped += 1
        if self.dropped == 1 or self.dropped % 1000 == 0:
            log.warn("webhook queue full ({n} events): {dropped} events dropped so far",
                     n=self.queued, dropped=self.dropped)

    def _make_room(self, client: Hashable, authorized: bool) -> bool:
        """Free one place for an event of ``client``: take one of the
        heaviest client's events when ``client`` holds fewer; else, for an
        ``authorized`` event, one of the client's own other events."""
        mine = self.clients.get(client)
        held = mine.count if mine is not None else 0
        if held < self.top:
            for victim in self.by_count.get(self.top, ()):
                queue = self.clients[victim]
                entry = queue.evictable(False) or (queue.evictable(True) if authorized
                                                   else None)
                if entry is not None:
                    self._evict(entry, queue)
                    return True
        if authorized and mine is not None:
            entry = mine.evictable(False)
            if entry is not None:
                self._evict(entry, mine)
                return True
        return False

    def _evict(self, entry: _Entry, queue: _ClientQueue) -> None:
        entry.state = GONE
        lane = self.lanes[entry.sid]
        lane.remove(entry)
        if not lane:
            del self.lanes[entry.sid]
        self._count(entry.client, queue, -1)
        self._dropped()
        self._forget_if_idle(entry.client, queue)

    def _forget_if_idle(self, client: Hashable, queue: _ClientQueue) -> None:
        if queue.count == 0:
            del self.clients[client]
        else:
            queue.compact()

    def _schedule(self, entry: _Entry, first: bool = False) -> None:
        """The session of ``entry`` has an event ready: queue it in its client's round."""
        queue = self.clients[entry.client]
        if first:
            queue.ready.appendleft(entry.sid)
        else:
            queue.ready.append(entry.sid)
        if not queue.scheduled:
            queue.scheduled = True
            if first:
                self.rounds.appendleft(entry.client)
            else:
                self.rounds.append(entry.client)

    def _pump(self) -> None:
        while self.paused is None and self.rounds and len(self.busy) < self.concurrency:
            client = self.rounds.popleft()
            queue = self.clients.get(client)
            if queue is None:
                continue
            queue.scheduled = False
            while queue.ready:
                sid = queue.ready.popleft()
                if sid in self.lanes and sid not in self.busy:
                    self.busy[sid] = self.clock.seconds()
                    self._post(sid)
                    break
            if queue.ready:
                queue.scheduled = True
                self.rounds.append(client)

    # -- sending -----------------------------------------------------------------
    def headers(self, body: bytes) -> dict[bytes, list[bytes]]:
        headers = {b"Content-Type": [b"application/json"],
                   b"User-Agent": [b"pushengine-webhooks"]}
        if self.secret:
            headers[SIGNATURE_HEADER.encode()] = [sign(self.secret, body).encode()]
        return headers

    def _post(self, sid: str) -> None:
        entry = self.lanes[sid][0]
        entry.state = IN_FLIGHT
        body = entry.body
        try:
            d = self.http.post(self.url, data=body, headers=self.headers(body))
        except Exception:
            self._failed(Failure(), sid)
            return
        # the timeout covers the whole exchange: a backend that sends its
        # headers and then hangs is cut too
        d.addCallback(self._answered)
        d.addTimeout(self.timeout, self.clock)
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
        entry = lane.popleft()
        entry.state = GONE
        queue = self.clients[entry.client]
        self._count(entry.client, queue, -1)
        del self.busy[sid]
        if lane:
            self._schedule(lane[0])
        else:
            del self.lanes[sid]
        self._forget_if_idle(entry.client, queue)
        self._pump()

    def _failed(self, failure: Failure, sid: str) -> None:
        self.failed += 1
        if failure.check(DeferredTimeout, ConnectTimeout, TimeoutError, CancelledError):
            self.timeouts += 1
            self.last_error = f"no answer within {self.timeout:g} s"
        else:
            self.last_error = failure.getErrorMessage()[:200] or (
                failure.type.__name__ if failure.type is not None else "error")
        if self.failures == 0:
            log.warn("POST to the webhook URL failed ({error}); retrying with back-off",
                     error=self.last_error)
        self.busy.pop(sid, None)
        entry = self.lanes[sid][0]
        entry.state = QUEUED
        # the same body goes first again, once the back-off is over
        self._schedule(entry, first=True)
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
    def oldest_in_flight(self) -> float:
        """Seconds the oldest POST in flight has waited for its answer (0: none)."""
        if not self.busy:
            return 0.0
        return max(0.0, self.clock.seconds() - min(self.busy.values()))

    def hanging(self) -> bool:
        """A POST has waited half its timeout or more: the backend is not answering."""
        return self.oldest_in_flight() >= self.timeout / 2

    def stats(self) -> dict[str, float]:
        return {"sent": self.sent, "failed": self.failed, "dropped": self.dropped,
                "retries": self.retries, "timeouts": self.timeouts, "queued": self.queued,
                "in_flight": len(self.busy), "clients": len(self.clients),
                "oldest_in_flight_seconds": round(self.oldest_in_flight(), 3),
                "failing": int(self.failures > 0 or self.hanging())}

    def health(self) -> dict[str, Any]:
        hanging = self.hanging()
        return {"url": self.url, "queued": self.queued, "dropped": self.dropped,
                "failing": self.failures > 0 or hanging, "hanging": hanging,
                "oldest_in_flight": round(self.oldest_in_flight(), 3),
                "timeouts": self.timeouts, "last_error": self.last_error}


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
