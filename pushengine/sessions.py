"""Sessions: subscriptions, the per-session event queue and the parked long-poll.

Time comes from the injected clock (``IReactorTime``), so tests drive
expiry, poll timeouts and pings with ``twisted.internet.task.Clock``.
"""
from __future__ import annotations

import secrets
from functools import partial
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from pushengine.errors import LimitReached, RateLimited, UnknownKey, UnknownSession
from pushengine.limits import SessionCounts
from pushengine.events import RESET, RawJSON, encode_event, events_json
from pushengine.views.registry import ViewRegistry
from pushengine.views.spec import BoundView
from pushengine.views.window import Window

log = Logger()
EMPTY = RawJSON("[]")


@dataclass
class SessionSettings:
    session_timeout: float = 120.0
    max_timeout: float = 90.0
    max_sessions: int = 0            # 0: no limit
    max_subscriptions: int = 50
    max_queue: int = 1000
    max_client_sessions: int = 0     # per client (an opaque key); 0: no limit


class Poll:
    """A parked get_events call."""

    __slots__ = ("deferred", "timer", "acking")

    def __init__(self, deferred: Deferred, acking: bool) -> None:
        self.deferred = deferred
        self.acking = acking
        self.timer: IDelayedCall | None = None


class Session:
    __slots__ = ("id", "user", "subs", "queue", "next_seq", "poll", "expiry",
                 "manager", "bounds", "client", "__weakref__")

    def __init__(self, manager: "SessionManager", id_: str, client: Any = None) -> None:
        self.manager = manager
        self.id = id_
        self.client = client
        self.user: Any = None
        self.subs: dict[str, Window] = {}
        self.bounds: dict[str, BoundView] = {}
        self.queue: deque = deque()
        self.next_seq = 1
        self.poll: Poll | None = None
        self.expiry: IDelayedCall | None = None

    def deliver(self, fragment: str, key: str) -> None:
        """Queue one encoded event (called by windows)."""
        self.queue.append((self.next_seq, key, fragment))
        self.next_seq += 1
        manager = self.manager
        if len(self.queue) > manager.settings.max_queue:
            manager.overflow(self)
        if self.poll is not None:
            manager.dirty.add(self)

    def __repr__(self) -> str:
        return f"<Session {self.id[:8]}… user={self.user!r} subs={len(self.subs)}>"


def new_session_id() -> str:
    """128 random bits, URL-safe: nothing secret beyond itself."""
    return secrets.token_urlsafe(16)


class SessionManager:
    def __init__(self, clock: IReactorTime, registry: ViewRegistry,
                 settings: SessionSettings | None = None) -> None:
        self.clock = clock
        self.registry = registry
        self.settings = settings or SessionSettings()
        self.sessions: dict[str, Session] = {}
        self.dirty: set[Session] = set()
        self.waiting = 0
        self.overflows = 0
        self.expired = 0
        self.events_out = 0
        self.per_client = SessionCounts(self.settings.max_client_sessions)
        # called with each session destroyed for not polling (after it is gone)
        self.expire_hooks: list[Callable[[Session], None]] = []

    # -- sessions --------------------------------------------------------------
    def create(self, id_: str | None = None, client: Any = None) -> Session:
        """A new session; ``client`` (who asked, an opaque key) counts it
        against the per-client cap until it is destroyed."""
        limit = self.settings.max_sessions
        if limit and len(self.sessions) >= limit:
            raise LimitReached(f"this node holds its maximum of {limit} sessions")
        if not self.per_client.may_open(client):
            raise RateLimited(f"this client holds its maximum of "
                              f"{self.per_client.limit} sessions", retry_after=10.0)
        session = Session(self, id_ or new_session_id(), client)
        self.sessions[session.id] = session
        self.per_client.opened(client)
        self._arm_expiry(session)
        return session

    def get(self, sid: Any) -> Session:
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is None:
            raise UnknownSession("unknown session; create a new one")
        return session

    def destroy(self, session: Session) -> None:
        if self.sessions.get(session.id) is not session:
            return
        del self.sessions[session.id]
        self.per_client.closed(session.client)
        self.dirty.discard(session)
        if session.expiry is not None and session.expiry.active():
            session.expiry.cancel()
        session.expiry = None
        for key in list(session.subs):
            self._detach(session, key)
        session.queue.clear()
        if session.poll is not None:
            self._answer(session, EMPTY)

    def _arm_expiry(self, session: Session) -> None:
        timeout = self.settings.session_timeout
        if session.expiry is not None and session.expiry.active():
            session.expiry.reset(timeout)
        else:
            session.expiry = self.clock.callLater(timeout, self._expire, session)

    def _disarm_expiry(self, session: Session) -> None:
        if session.expiry is not None and session.expiry.active():
            session.expiry.cancel()
        session.expiry = None

    def _expire(self, session: Session) -> None:
        session.expiry = None
        if session.poll is None and self.sessions.get(session.id) is session:
            self.expired += 1
            self.destroy(session)
            for hook in self.expire_hooks:
                try:
                    hook(session)
                except Exception:
                    log.failure("an expiry hook failed")

    # -- subscriptions ---------------------------------------------------------
    def subscribe(self, session: Session, bound: BoundView) -> Deferred:
        """Fire with ``[key, state]``; the session shares the view's window."""
        key = bound.key
        if key not in session.subs and len(session.subs) >= self.settings.max_subscriptions:
            raise LimitReached(
                f"a session may hold at most {self.settings.max_subscriptions} subscriptions")
        d = self.registry.open(bound)

        def opened(window: Window) -> list:
            if self.sessions.get(session.id) is not session:
                self.registry.close(window)
                raise UnknownSession("the session ended while subscribing")
            if key in session.subs:
                self._drop_queued(session, key)
            elif len(session.subs) >= self.settings.max_subscriptions:
                self.registry.close(window)
                raise LimitReached(
                    f"a session may hold at most {self.settings.max_subscriptions} subscriptions")
            session.subs[key] = window
            session.bounds[key] = bound
            window.subscribers.add(session)
            return [key, window.state()]
        return d.addCallback(opened)

    def unsubscribe(self, session: Session, key: Any) -> None:
        if not isinstance(key, str) or key not in session.subs:
            raise UnknownKey("this session has no subscription with that key")
        self._detach(session, key)
        self._drop_queued(session, key)

    def _detach(self, session: Session, key: str) -> None:
        window = session.subs.pop(key)
        session.bounds.pop(key, None)
        window.subscribers.discard(session)
        self.registry.close(window)

    @staticmethod
    def _drop_queued(session: Session, key: str) -> None:
        if any(e[1] == key for e in session.queue):
            session.queue = deque(e for e in session.queue if e[1] != key)

    def overflow(self, session: Session) -> None:
        """The queue is full: replace it with one reset per subscription."""
        self.overflows += 1
        session.queue.clear()
        for key, window in session.subs.items():
            session.queue.append((session.next_seq, key, window.reset_fragment()))
            session.next_seq += 1

    def reset_session(self, session: Session) -> None:
        """Queue one reset per subscription (a session resumed elsewhere)."""
        for key, window in session.subs.items():
            session.deliver(encode_event(key, RESET, window.state()), key)

    # -- long-polls ------------------------------------------------------------
    def get_events(self, session: Session, timeout: float, ack: int | None) -> Deferred | RawJSON:
        """Answer at once when events wait (or timeout is 0), else park."""
        if session.poll is not None:
            self._answer(session, EMPTY)
        if ack is not None:
            queue = session.queue
            while queue and queue[0][0] <= ack:
                queue.popleft()
        timeout = min(max(timeout, 0.0), self.settings.max_timeout)
        if session.queue or timeout <= 0:
            self._arm_expiry(session)
            return self._take(session, ack is not None)
        self._disarm_expiry(session)
        # the canceller holds the session, not the poll: no reference cycle
        # for the collector to find after every answer
        poll = Poll(Deferred(partial(self._cancelled, session)), ack is not None)
        poll.timer = self.clock.callLater(timeout, self._timed_out, session, poll)
        session.poll = poll
        self.waiting += 1
        return poll.deferred

    def _take(self, session: Session, acking: bool) -> RawJSON:
        if not session.queue:
            return EMPTY
        self.events_out += len(session.queue)
        answer = events_json(session.queue)
        if not acking:
            session.queue.clear()
        return answer

    def _answer(self, session: Session, answer: RawJSON | None = None) -> None:
        poll = session.poll
        session.poll = None
        self.waiting -= 1
        if poll.timer is not None and poll.timer.active():
            poll.timer.cancel()
        if answer is None:
            answer = self._take(session, poll.acking)
        if self.sessions.get(session.id) is session:
            self._arm_expiry(session)
        poll.deferred.callback(answer)

    def _timed_out(self, session: Session, poll: Poll) -> None:
        poll.timer = None
        if session.poll is poll:
            self._answer(session)

    def _cancelled(self, session: Session, deferred: Deferred) -> None:
        """The client went away mid-poll: drop its waiter."""
        poll = session.poll
        if poll is None or poll.deferred is not deferred:
            return
        session.poll = None
        self.waiting -= 1
        if poll.timer is not None and poll.timer.active():
            poll.timer.cancel()
        if self.sessions.get(session.id) is session:
            self._arm_expiry(session)

    def flush(self) -> None:
        """Answer every parked poll whose session received events."""
        dirty, self.dirty = self.dirty, set()
        for session in dirty:
            if session.poll is not None and session.queue:
                try:
                    self._answer(session)
                except Exception:
                    log.failure("answering a poll failed")
