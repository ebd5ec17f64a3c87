"""Sessions: subscriptions, the numbered event log, and one attached delivery.

A session's events are numbered (``seq``) and kept in its log until the
client is known to have them. The log holds the events' shared ``Fragment``
objects themselves (one per view event, whatever the number of sessions), in
two parts whose numbers follow from their place: ``queue``, the events not yet
written to a stream (seqs ``sent + 1`` to ``next_seq - 1``), and ``replay``,
those a stream wrote (seqs ``forgotten + 1`` to ``sent``). Queueing an event
for a session is one append of a pointer: no object per session per event,
nothing for the garbage collector, and a write never walks the replay. At most one *delivery* is attached at a time:
a parked long-poll (``LongPoll``, answered once), or a stream that writes
events as they come (the SSE and WebSocket adapters in
``pushengine.transports``). A new delivery replaces the old one: a parked
poll is answered ``[]``, a stream is closed. Nothing outside this module
touches the log or the numbering: transports and the cluster resumer use the
SessionManager's methods.

- Long-poll: ``get_events(ack)`` drops events up to ``ack`` and answers all
  later ones (a lost answer loses nothing); without ``ack`` what it answers is
  dropped.
- Stream: what it writes stays in the log as the replay buffer (at most
  ``max_queue`` events): a stream attached again with the last seq the client
  received gets every later event once, in order, or one ``reset`` per view
  when that seq is older than the buffer. A stream that cannot take more
  (its unsent bytes pass its bound) is not written to; its events wait in the
  log, which overflows into a reset as for long-polls.
- A session with a stream attached does not expire; ``--session-timeout``
  counts from the detach (or from the last poll's answer).

Time comes from the injected clock (``IReactorTime``), so tests drive
expiry, poll timeouts and pings with ``twisted.internet.task.Clock``.
"""
from __future__ import annotations

import secrets
from collections import deque
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, Sequence

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from pushengine.core.errors import (
    LimitReached, NotAuthorized, RateLimited, UnknownKey, UnknownSession)
from pushengine.core.events import DROPPED, RESET, Fragment, RawUTF8, encode_event, events_json
from pushengine.core.hooks import Hooks
from pushengine.core.limits import SessionCounts
from pushengine.core.interfaces import Binding, LiveWindow, ViewSource
from pushengine.core.routes import Route, entry_for

log = Logger()
EMPTY = RawUTF8(b"[]")



@dataclass
class SessionSettings:
    session_timeout: float = 120.0
    max_timeout: float = 90.0
    max_sessions: int = 0            # 0: no limit
    max_subscriptions: int = 50
    max_queue: int = 1000
    max_client_sessions: int = 0     # per client (an opaque key); 0: no limit


class Delivery(Protocol):
    """Where a session's events go. ``streaming`` deliveries take events as
    they come; the long-poll is answered once and detaches itself."""

    streaming: bool

    def write(self, first: int, fragments: Sequence[Fragment]) -> None:
        """Send these events, numbered from ``first`` (a fragment may be
        ``events.DROPPED``: skip it). Frame them now: the sequence is the
        session's own and changes after the call."""

    def writable(self) -> bool:
        """False while the client is not reading (unsent bytes above the bound)."""

    def close(self) -> None:
        """Another delivery took the session's place, or the session ended."""


class LongPoll:
    """A parked ``get_events``: answered once, with the events then waiting
    (or ``[]`` when replaced or timed out)."""

    __slots__ = ("deferred", "timer", "acking")
    streaming = False

    def __init__(self, deferred: Deferred, acking: bool) -> None:
        self.deferred = deferred
        self.acking = acking
        self.timer: IDelayedCall | None = None


class Session:
    """One client's session. Its ``user``, ``subs`` and ``bounds`` are read
    anywhere but changed only by its SessionManager (``authorize``,
    ``subscribe``, ``install``, ``move``, ``remove``)."""

    __slots__ = ("id", "user", "subs", "queue", "replay", "next_seq", "delivery", "expiry",
                 "manager", "bounds", "client", "sent", "__weakref__")

    def __init__(self, manager: "SessionManager", id_: str, client: Any = None) -> None:
        self.manager = manager
        self.id = id_
        self.client = client
        self.user: Any = None
        self.subs: dict[str, LiveWindow] = {}
        self.bounds: dict[str, Binding] = {}
        self.queue: deque = deque()      # not written to a stream: seqs sent+1 .. next_seq-1
        self.replay: deque = deque()     # written to a stream: seqs forgotten+1 .. sent
        self.next_seq = 1
        self.sent = 0                    # the seq before the queue's first
        self.delivery: Any = None
        self.expiry: IDelayedCall | None = None

    @property
    def poll(self) -> LongPoll | None:
        """The parked long-poll, if that is what is attached."""
        d = self.delivery
        return d if d is not None and not d.streaming else None

    @property
    def forgotten(self) -> int:
        """The highest seq dropped from the log (the replay ends at ``sent``)."""
        return self.sent - len(self.replay)

    def deliver(self, fragment: str, key: str) -> None:
        """Queue one encoded event (called by windows with the fragment they
        share among their subscribers)."""
        if getattr(fragment, "key", None) != key:
            fragment = Fragment(fragment, key)
        queue = self.queue
        queue.append(fragment)
        self.next_seq += 1
        manager = self.manager
        if len(queue) + len(self.replay) > manager.max_queue:
            if self.replay:          # what a stream wrote already goes first
                self.replay.popleft()
            else:
                manager.overflow(self)
        if self.delivery is not None:
            manager.dirty.add(self)

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
        self.waiting = 0                 # parked long-polls
        self.streams = 0                 # streams attached
        self.overflows = 0
        self.expired = 0
        self.events_out = 0
        self.replays = 0                 # streams resumed from the replay buffer
        self.per_client = SessionCounts(self.settings.max_client_sessions)
        self.hooks = hooks if hooks is not None else Hooks()
        # the routes that show a window under a client's key (core/routes.py)
        self.routes: dict[tuple[LiveWindow, str], Route] = {}

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
        for key in list(session.subs):
            self._detach_window(session, key)
        session.queue.clear()
        session.replay.clear()
        self._release(session)

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

    # -- numbering (for the cluster resumer: nothing else touches it) -----------
    def last_seq(self, session: Session) -> int:
        """The seq of the last event numbered (0: none yet)."""
        return session.next_seq - 1

    def continue_numbering(self, session: Session, after: int) -> None:
        """Number the next event ``after + 1`` (a session resumed here after
        another node numbered up to ``after``); nothing is queued yet."""
        session.queue.clear()
        session.replay.clear()
        session.next_seq = after + 1
        session.sent = after

    def pending_from(self, session: Session) -> int:
        """The seq the client will see next: the first queued, else the next."""
        return session.sent + 1

    def renumber(self, session: Session, after: int) -> None:
        """Number the queued events from ``after + 1`` on (none was delivered)."""
        session.replay.clear()
        session.sent = after
        session.next_seq = after + 1 + len(session.queue)

    def clear_events(self, session: Session) -> None:
        """Drop every queued event (they are about to be replaced by resets)."""
        session.queue.clear()
        session.replay.clear()
        session.sent = session.next_seq - 1

    def queued(self, session: Session) -> list[tuple[int, str, str]]:
        """The events not yet written to a stream (or acknowledged), as
        ``(seq, key, fragment)``: for inspection and tests."""
        return [(seq, f.key, f) for seq, f in enumerate(session.queue, session.sent + 1)
                if f is not DROPPED]

    # -- users and subscriptions (nothing else changes user, subs, bounds) ---
    def authorize(self, session: Session, user: Any) -> None:
        """The session is ``user``'s from now on; NotAuthorized when it is
        another user's already (the same user again changes nothing)."""
        if session.user is not None and session.user != user:
            raise NotAuthorized("this session is authorized as another user")
        session.user = user

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
        """A subscription made again or ended: its unsent events go (events a
        stream already wrote stay, so that replay keeps their numbers). They
        become ``DROPPED`` in place, so that later events keep their seq."""
        if any(f.key == key for f in session.queue):
            session.queue = deque(DROPPED if f.key == key else f for f in session.queue)

    def overflow(self, session: Session) -> None:
        """The log passed ``max_queue``. Events a stream wrote already are
        only replay: those go first. Otherwise the client is too far behind:
        the log becomes one reset per subscription."""
        queue, replay, limit = session.queue, session.replay, self.max_queue
        while replay and len(queue) + len(replay) > limit:
            replay.popleft()
        if len(queue) + len(replay) <= limit:
            return
        self.overflows += 1
        session.sent = session.next_seq - 1
        queue.clear()
        for key, window in session.subs.items():
            queue.append(window.reset_fragment())
            session.next_seq += 1

    def reset_session(self, session: Session) -> None:
        """Queue one reset per subscription (a session resumed elsewhere)."""
        for key, window in session.subs.items():
            session.deliver(encode_event(key, RESET, window.state()), key)

    # -- deliveries ------------------------------------------------------------
    def attach(self, session: Session, delivery: Any, last_seq: int | None = None) -> None:
        """Attach a stream; the delivery attached before is replaced.

        ``last_seq``: the last seq the client received (a reconnect): every
        later event is written again, or one reset per view when that seq is
        older than the replay buffer. None: write what is queued.
        ``ValueError`` when ``last_seq`` is ahead of the session."""
        if last_seq is not None and last_seq >= session.next_seq:
            raise ValueError(f"{last_seq} is ahead of the last event ({session.next_seq - 1})")
        if session.delivery is not delivery:      # attached again: nothing to replace
            self._release(session)
            session.delivery = delivery
            self.streams += 1
        self._disarm_expiry(session)
        if last_seq is not None:
            self._rewind(session, last_seq)
        if session.queue:
            self.dirty.add(session)
            self.flush()

    def _rewind(self, session: Session, last_seq: int) -> None:
        queue, replay = session.queue, session.replay
        if last_seq < session.forgotten:
            # events after last_seq were dropped: the views start afresh
            self.replays += 1
            self.clear_events(session)
            self.reset_session(session)
            return
        if last_seq <= session.sent:
            # what was written after last_seq is written again
            for _ in range(session.sent - last_seq):
                queue.appendleft(replay.pop())
        else:
            # the client has more than a stream wrote (long-poll answers)
            for _ in range(min(last_seq - session.sent, len(queue))):
                queue.popleft()
        replay.clear()
        session.sent = last_seq
        if queue:
            self.replays += 1

    def detach(self, session: Session, delivery: Any) -> None:
        """A stream ended (the client went away): the session may now expire."""
        if session.delivery is not delivery:
            return
        session.delivery = None
        self.streams -= 1
        self.dirty.discard(session)
        if self.sessions.get(session.id) is session:
            self._arm_expiry(session)

    def resume_writing(self, session: Session, delivery: Any) -> None:
        """A stream that could not take more drained: write what waits."""
        if session.delivery is delivery and session.queue:
            self.dirty.add(session)
            self.flush()

    def _release(self, session: Session) -> None:
        """End whatever delivery is attached (replaced, or the session ended)."""
        delivery = session.delivery
        if delivery is None:
            return
        if delivery.streaming:
            session.delivery = None
            self.streams -= 1
            try:
                delivery.close()
            except Exception:
                log.failure("closing a replaced stream failed")
        else:
            self._answer(session, EMPTY)

    def _write(self, session: Session) -> None:
        delivery = session.delivery
        queue = session.queue
        if not queue or not delivery.writable():
            return
        first = session.sent + 1
        count = len(queue)
        self.events_out += count
        delivery.write(first, queue)
        # what was written is replay now (the log stays within max_queue)
        session.sent += count
        replay = session.replay
        replay.extend(queue)
        queue.clear()
        over = len(replay) - self.max_queue
        if over > 0:
            for _ in range(over):
                replay.popleft()

    # -- long-polls ------------------------------------------------------------
    def get_events(self, session: Session, timeout: float, ack: int | None) -> Deferred | RawUTF8:
        """Answer at once when events wait (or timeout is 0), else park."""
        self._release(session)
        if session.replay:
            self._unwrite(session)
        queue = session.queue
        if ack is not None and ack > session.sent:
            dropped = min(ack - session.sent, len(queue))
            for _ in range(dropped):
                queue.popleft()
            session.sent += dropped
        timeout = min(max(timeout, 0.0), self.settings.max_timeout)
        if queue or timeout <= 0:
            self._arm_expiry(session)
            return self._take(session, ack is not None)
        # the expiry timer stays armed while the poll is parked (it does
        # nothing for a session with a delivery, and the answer resets it):
        # no cancel and new timer per poll
        # the canceller holds the session, not the poll: no reference cycle
        # for the collector to find after every answer
        poll = LongPoll(Deferred(partial(self._cancelled, session)), ack is not None)
        poll.timer = self.clock.callLater(timeout, self._timed_out, session, poll)
        session.delivery = poll
        self.waiting += 1
        return poll.deferred

    @staticmethod
    def _unwrite(session: Session) -> None:
        """A long-poll after a stream: the events the stream wrote are queued
        again (a poll's ``ack`` says which of them the client has)."""
        session.sent = session.forgotten
        session.queue.extendleft(reversed(session.replay))
        session.replay.clear()

    def _take(self, session: Session, acking: bool) -> RawUTF8:
        queue = session.queue
        if not queue:
            return EMPTY
        self.events_out += len(queue)
        answer = events_json(session.sent + 1, queue)
        if not acking:
            session.sent += len(queue)
            queue.clear()
        return answer

    def _answer(self, session: Session, answer: RawUTF8 | None = None) -> None:
        poll = session.delivery
        session.delivery = None
        self.waiting -= 1
        if poll.timer is not None and poll.timer.active():
            poll.timer.cancel()
        if answer is None:
            answer = self._take(session, poll.acking)
        if self.sessions.get(session.id) is session:
            self._arm_expiry(session)
        poll.deferred.callback(answer)

    def _timed_out(self, session: Session, poll: LongPoll) -> None:
        poll.timer = None
        if session.delivery is poll:
            self._answer(session)

    def _cancelled(self, session: Session, deferred: Deferred) -> None:
        """The client went away mid-poll: drop its waiter."""
        poll = session.delivery
        if poll is None or poll.streaming or poll.deferred is not deferred:
            return
        session.delivery = None
        self.waiting -= 1
        if poll.timer is not None and poll.timer.active():
            poll.timer.cancel()
        if self.sessions.get(session.id) is session:
            self._arm_expiry(session)

    def flush(self) -> None:
        """Give every attached delivery the events its session received:
        answer parked polls, write to streams that can take more."""
        dirty, self.dirty = self.dirty, set()
        for session in dirty:
            delivery = session.delivery
            if delivery is None or not session.queue:
                continue
            try:
                if delivery.streaming:
                    self._write(session)
                else:
                    self._answer(session)
            except Exception:
                log.failure("delivering to a session failed")
