"""Sessions: subscriptions, the numbered event log, and one attached delivery.

A session's events are numbered (``seq``) and kept in its log until the
client is known to have them: ``pushengine.core.log.EventLog`` owns the
numbering, the events not yet taken (its queue) and those a stream wrote
(its replay, at most ``max_queue`` events with the queue). Nothing else
changes a log: the manager's methods (``last_seq``, ``continue_numbering``,
``renumber``...) and the deliveries go through its operations.

At most one *delivery* is attached to a session at a time: a stream that
writes events as they come (SSE and WebSocket), or a parked long-poll,
answered once (``pushengine.transports``). The core does not tell them
apart: when events wait, ``flush`` calls the attached delivery's
``notify``, and the delivery takes them from the log in its own way. A new
delivery replaces the old one (its ``close``: a parked poll answers ``[]``,
a stream closes).

- Long-poll: ``get_events(ack)`` drops events up to ``ack`` and answers all
  later ones (a lost answer loses nothing); without ``ack`` what it answers is
  dropped.
- Stream: what it writes stays in the log as the replay buffer (at most
  ``max_queue`` events): a stream attached again with the last seq the client
  received gets every later event once, in order, or one ``reset`` per view
  when that seq is older than the buffer. A stream that cannot take more
  (its unsent bytes pass its bound) is not written to; its events wait in the
  log, which overflows into a reset as for long-polls.
- A delivery that ``holds_session`` (a stream) keeps its session from
  expiring; ``--session-timeout`` counts from the detach (or from the last
  poll's answer).

Time comes from the injected clock (``IReactorTime``), so tests drive
expiry, poll timeouts and pings with ``twisted.internet.task.Clock``.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from pushengine.core.errors import (
    LimitReached, NotAuthorized, RateLimited, UnknownKey, UnknownSession)
from pushengine.core.events import DELETE, RESET, Fragment, RawUTF8, encode_event
from pushengine.core.hooks import Hooks
from pushengine.core.limits import SessionCounts
from pushengine.core.interfaces import Binding, LiveWindow, ViewSource
from pushengine.core.log import EventLog
from pushengine.core.routes import Route, entry_for
from pushengine.core.timings import Timings

log = Logger()



@dataclass
class SessionSettings:
    session_timeout: float = 120.0
    max_timeout: float = 90.0
    max_sessions: int = 0            # 0: no limit
    max_subscriptions: int = 50
    max_queue: int = 1000
    max_client_sessions: int = 0     # per client (an opaque key); 0: no limit


class Delivery(Protocol):
    """Where a session's events go: a stream or a parked long-poll."""

    # True: the session does not expire while it is attached, and counts
    # among the ``streams``; False: it is answered once and detaches itself
    # (counted among the ``waiting``)
    holds_session: bool

    def notify(self, session: "Session") -> None:
        """Events may wait in ``session.log``: take them, if you can (a
        stream: ``EventLog.write``; a poll: ``SessionManager.take``), and add
        their number to the manager's ``events_out``. Nothing waiting: do
        nothing."""

    def close(self) -> None:
        """Another delivery took the session's place, or the session ended
        (the manager detached it already)."""


class Session:
    """One client's session. Its ``user``, ``subs`` and ``bounds`` are read
    anywhere but changed only by its SessionManager (``authorize``,
    ``subscribe``, ``install``, ``move``, ``remove``); its numbered events
    only by its ``log`` (``core.log.EventLog``)."""

    __slots__ = ("id", "user", "subs", "log", "delivery", "expiry", "authorized_until",
                 "manager", "bounds", "client", "__weakref__")

    def __init__(self, manager: "SessionManager", id_: str, client: Any = None) -> None:
        self.manager = manager
        self.id = id_
        self.client = client
        self.user: Any = None
        self.subs: dict[str, LiveWindow] = {}
        self.bounds: dict[str, Binding] = {}
        self.log = EventLog(manager.max_queue)
        self.delivery: Delivery | None = None
        self.expiry: IDelayedCall | None = None
        # the end of the token's validity (its ``exp``), armed by the manager
        self.authorized_until: IDelayedCall | None = None

    def deliver(self, fragment: str, key: str) -> None:
        """Queue one encoded event (called by windows with the fragment they
        share among their subscribers)."""
        if not isinstance(fragment, Fragment) or fragment.key != key:
            fragment = Fragment(fragment, key)
        if not self.log.append(fragment):
            self.manager.overflow(self)
        if self.delivery is not None:
            self.manager.dirty.add(self)

    def __repr__(self) -> str:
        return f"<Session {self.id[:8]}… user={self.user!r} subs={len(self.subs)}>"


def new_session_id() -> str:
    """128 random bits, URL-safe: nothing secret beyond itself."""
    return secrets.token_urlsafe(16)


class SessionManager:
    def __init__(self, clock: IReactorTime, registry: ViewSource,
                 settings: SessionSettings | None = None, hooks: Hooks | None = None) -> None:
        """``hooks``: the node's session hooks (the API's too); the manager
        tells them of the sessions that expire, after they are gone."""
        self.clock = clock
        self.registry = registry
        self.settings = settings or SessionSettings()
        self.max_queue = self.settings.max_queue
        self.sessions: dict[str, Session] = {}
        self.dirty: set[Session] = set()
        self.waiting = 0                 # deliveries attached that do not hold it (parked polls)
        self.streams = 0                 # deliveries attached that hold it (streams)
        self.overflows = 0
        self.expired = 0
        self.events_out = 0
        self.replays = 0                 # streams resumed from the replay buffer
        self.per_client = SessionCounts(self.settings.max_client_sessions)
        self.hooks = hooks if hooks is not None else Hooks()
        # the routes that show a window under a client's key (core/routes.py)
        self.routes: dict[tuple[LiveWindow, str], Route] = {}
        # /metrics: from a change's arrival to its events handed to each
        # delivery, by the delivery's ``transport_name`` (``flush(since)``)
        self.delivery_timings: Timings | None = None

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
        self._disarm_expiry(session)
        self._disarm_authorization(session)
        for key in list(session.subs):
            self._detach_window(session, key)
        session.log.clear()
        self.release(session)

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
        if session.delivery is None and self.sessions.get(session.id) is session:
            self.expired += 1
            self.destroy(session)
            self.hooks.expired(session)

    # -- numbering (for the cluster resumer: the session's EventLog does it) ------
    def last_seq(self, session: Session) -> int:
        """The seq of the last event numbered (0: none yet)."""
        return session.log.last_seq

    def continue_numbering(self, session: Session, after: int) -> None:
        """Number the next event ``after + 1`` (a session resumed here after
        another node numbered up to ``after``); nothing is queued yet."""
        session.log.continue_after(after)

    def pending_from(self, session: Session) -> int:
        """The seq the client will see next: the first queued, else the next."""
        return session.log.sent + 1

    def renumber(self, session: Session, after: int) -> None:
        """Number the queued events from ``after + 1`` on (none was delivered)."""
        session.log.renumber(after)

    def clear_events(self, session: Session) -> None:
        """Drop every queued event (they are about to be replaced by resets)."""
        session.log.clear()

    def queued(self, session: Session) -> list[tuple[int, str | None, Fragment]]:
        """The events not yet written to a stream (or acknowledged), as
        ``(seq, key, fragment)``: for inspection and tests."""
        return session.log.queued()

    # -- users and subscriptions (nothing else changes user, subs, bounds) ---
    def authorize(self, session: Session, user: Any, expires_at: float | None = None) -> None:
        """The session is ``user``'s from now on; NotAuthorized when it is
        another user's already (the same user again changes nothing but
        the expiry). ``expires_at``: the clock's time at which the
        authorization ends (the token's ``exp``; None: never), replacing
        any earlier one; at that time the manager deauthorizes the session
        and tells the hooks ``deauthorized`` then ``changed``."""
        if session.user is not None and session.user != user:
            raise NotAuthorized("this session is authorized as another user")
        session.user = user
        self._arm_authorization(session, expires_at)

    def refresh(self, session: Session, user: Any, expires_at: float | None = None) -> None:
        """A new token for the session's user: its authorization ends at
        ``expires_at`` now (None: never). NotAuthorized, changing nothing,
        when the session is not authorized as ``user``."""
        if session.user is None:
            raise NotAuthorized("this session is not authorized: use session.authorize")
        if session.user != user:
            raise NotAuthorized("this session is authorized as another user")
        self._arm_authorization(session, expires_at)

    def deauthorize(self, session: Session) -> None:
        """The session has no user any more: each subscription bound to its
        user ends, after a ``delete`` event for every object it showed (the
        events queued before it stay, so the client's copy empties)."""
        self._disarm_authorization(session)
        session.user = None
        for key, bound in list(session.bounds.items()):
            if not getattr(bound, "needs_user", False) or key not in session.subs:
                continue
            for obj in session.subs[key].state():
                session.deliver(encode_event(key, DELETE, obj), key)
            self._detach_window(session, key)

    def _arm_authorization(self, session: Session, expires_at: float | None) -> None:
        self._disarm_authorization(session)
        if expires_at is not None:
            delay = max(0.0, expires_at - self.clock.seconds())
            session.authorized_until = self.clock.callLater(
                delay, self._authorization_ended, session)

    @staticmethod
    def _disarm_authorization(session: Session) -> None:
        call = session.authorized_until
        if call is not None and call.active():
            call.cancel()
        session.authorized_until = None

    def _authorization_ended(self, session: Session) -> None:
        session.authorized_until = None
        if self.sessions.get(session.id) is not session or session.user is None:
            return
        self.deauthorize(session)
        self.hooks.deauthorized(session)
        self.hooks.changed(session)
        self.flush()

    def subscribe(self, session: Session, bound: Binding, key: str | None = None) -> Deferred:
        """Fire with ``[key, state]``; the session shares the view's window.

        ``key``: the client's key when it is not ``bound.key`` (a session
        resumed here whose segments bind the view under another key): the
        window is shown under it (``core.routes``)."""
        if key is None:
            key = bound.key
        limit = self.settings.max_subscriptions
        if key not in session.subs and len(session.subs) >= limit:
            raise LimitReached(f"a session may hold at most {limit} subscriptions")
        d = self.registry.open(bound)

        def opened(window: LiveWindow) -> list:
            if self.sessions.get(session.id) is not session:
                self.registry.close(window)
                raise UnknownSession("the session ended while subscribing")
            if key not in session.subs and len(session.subs) >= limit:
                self.registry.close(window)
                raise LimitReached(f"a session may hold at most {limit} subscriptions")
            return [key, self.install(session, key, window, bound).state()]
        return d.addCallback(opened)

    def install(self, session: Session, key: str, window: LiveWindow,
                bound: Binding) -> LiveWindow:
        """Show ``window`` (opened for ``bound``) to ``session`` under
        ``key``. A key held already is subscribed again: what it showed is
        left and its unsent events go (the client takes the state afresh).
        Returns the entry now in ``session.subs``."""
        held = key in session.subs
        entry = self._place(session, key, window, bound)
        if held:
            self._drop_queued(session, key)
        return entry

    def move(self, session: Session, key: str, window: LiveWindow,
             bound: Binding) -> LiveWindow:
        """Show ``window`` under the held ``key`` in place of what it showed,
        keeping the events queued under it (the caller queues the
        difference between the two states). Returns the new entry."""
        if key not in session.subs:
            raise UnknownKey("this session has no subscription with that key")
        return self._place(session, key, window, bound)

    def remove(self, session: Session, key: str) -> None:
        """End the subscription ``key``: its window is left and its unsent
        events go."""
        self._detach_window(session, key)
        self._drop_queued(session, key)

    def unsubscribe(self, session: Session, key: Any) -> None:
        if not isinstance(key, str) or key not in session.subs:
            raise UnknownKey("this session has no subscription with that key")
        self.remove(session, key)

    def _place(self, session: Session, key: str, window: LiveWindow,
               bound: Binding) -> LiveWindow:
        """``session.subs[key]`` shows ``window``: the window itself, or the
        route of (window, key); what the key showed before is left after
        the new entry is joined (a window both show stays open)."""
        entry = entry_for(self.routes, window, key)
        old = session.subs.get(key)
        if old is not entry:
            if isinstance(entry, Route):
                entry.join(session)
            else:
                window.subscribers.add(session)
            if old is not None:
                self._leave(session, old)
            session.subs[key] = entry
        session.bounds[key] = bound
        return entry

    def _detach_window(self, session: Session, key: str) -> None:
        session.bounds.pop(key, None)
        self._leave(session, session.subs.pop(key))

    def _leave(self, session: Session, entry: LiveWindow) -> None:
        # the entry lets the session go (a route keeps the window's other
        # subscriptions of the same session untouched); the window closes
        # when nobody holds it
        self.registry.close(entry.leave(session))

    @staticmethod
    def _drop_queued(session: Session, key: str) -> None:
        """A subscription made again or ended: its unsent events go (see
        ``EventLog.drop``)."""
        session.log.drop(key)

    def overflow(self, session: Session) -> None:
        """The log passed ``max_queue``. Events a stream wrote already are
        only replay: those go first. Otherwise the client is too far behind:
        the log becomes one reset per subscription."""
        if session.log.overflow(window.reset_fragment() for window in session.subs.values()):
            self.overflows += 1

    def reset_session(self, session: Session) -> None:
        """Queue one reset per subscription (a session resumed elsewhere)."""
        for key, window in session.subs.items():
            session.deliver(encode_event(key, RESET, window.state()), key)

    # -- deliveries ------------------------------------------------------------
    def attach(self, session: Session, delivery: Delivery, last_seq: int | None = None) -> None:
        """Attach a delivery; the one attached before is replaced (closed).

        ``last_seq``: the last seq the client received (a stream's
        reconnect): every later event is written again, or one reset per
        view when that seq is older than the replay buffer. None: deliver
        what is queued. ``ValueError`` when ``last_seq`` is ahead of the
        session."""
        log_ = session.log
        if last_seq is not None and last_seq > log_.last_seq:
            raise ValueError(f"{last_seq} is ahead of the last event ({log_.last_seq})")
        if session.delivery is not delivery:      # attached again: nothing to replace
            if session.delivery is not None:
                self.release(session)
            session.delivery = delivery
            if delivery.holds_session:
                self.streams += 1
            else:
                self.waiting += 1
        if delivery.holds_session:
            self._disarm_expiry(session)
        # otherwise the expiry timer stays armed (it does nothing for a
        # session with a delivery, and the detach resets it): no cancel and
        # new timer per parked poll
        if last_seq is not None:
            self._rewind(session, last_seq)
        if log_.pending:
            self.dirty.add(session)
            self.flush()

    def _rewind(self, session: Session, last_seq: int) -> None:
        if not session.log.rewind(last_seq):
            # events after last_seq were dropped: the views start afresh
            self.replays += 1
            self.clear_events(session)
            self.reset_session(session)
        elif session.log.pending:
            self.replays += 1

    def detach(self, session: Session, delivery: Delivery) -> None:
        """A delivery ended (a poll answered or given up, a stream's client
        went away): the session may now expire."""
        if session.delivery is not delivery:
            return
        session.delivery = None
        if delivery.holds_session:
            self.streams -= 1
        else:
            self.waiting -= 1
        self.dirty.discard(session)
        if self.sessions.get(session.id) is session:
            self._arm_expiry(session)
            if delivery.holds_session:
                self.hooks.detached(session)

    def release(self, session: Session) -> None:
        """End whatever delivery is attached (replaced, or the session ended)."""
        delivery = session.delivery
        if delivery is None:
            return
        self.detach(session, delivery)
        try:
            delivery.close()
        except Exception:
            log.failure("closing a replaced delivery failed")

    def keep_alive(self, session: Session) -> None:
        """The client was heard from (a poll answered at once): the session
        expires ``session_timeout`` from now, unless a delivery is attached."""
        if self.sessions.get(session.id) is session:
            self._arm_expiry(session)

    def resume_writing(self, session: Session, delivery: Delivery) -> None:
        """A stream that could not take more drained: write what waits."""
        if session.delivery is delivery and session.log.pending:
            self.dirty.add(session)
            self.flush()

    def take(self, session: Session, acking: bool) -> RawUTF8:
        """A poll's answer: what is queued, as a JSON list (``EventLog.take``)."""
        self.events_out += session.log.pending
        return session.log.take(acking)

    def flush(self, since: float | None = None) -> None:
        """Notify the delivery of every session that received events: a
        parked poll answers, a stream that can take more writes. ``since``:
        when the changes that made these events arrived; each delivery's
        time from then to the end of its ``notify`` is counted in
        ``delivery_timings``."""
        dirty, self.dirty = self.dirty, set()
        timings = self.delivery_timings if since is not None else None
        if timings is not None:
            assert since is not None
            now = self.clock.seconds
            for session in dirty:
                delivery = session.delivery
                if delivery is None:
                    continue
                try:
                    delivery.notify(session)
                except Exception:
                    log.failure("delivering to a session failed")
                    continue
                timings.observe(getattr(delivery, "transport_name", "other"), now() - since)
            return
        for session in dirty:
            delivery = session.delivery
            if delivery is None:
                continue
            try:
                delivery.notify(session)
            except Exception:
                log.failure("delivering to a session failed")
