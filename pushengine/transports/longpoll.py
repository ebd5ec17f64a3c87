"""Long-polling: ``session.get_events`` over ``POST /api/jsonrpc`` (SPEC section 3).

A poll answers at once when events wait (or its timeout is 0); otherwise it
parks: a ``ParkedPoll`` is attached to the session as its delivery until
events come (the session's ``flush`` notifies it), its timeout passes (it
answers what waits, often ``[]``; the timeout is rounded up to the next
quarter second of the clock: ``timeouts.TimerWheel``, one timer for every
parked poll instead of a reactor timer each), another delivery replaces it
(``[]``), or
the client goes away (the HTTP side cancels the answer's Deferred: the
waiter is dropped, and the session may expire from then on).

``ack``: the client has every event up to it; those are dropped and every
later one is answered, and stays queued until a later poll acknowledges it
(a lost answer loses nothing). Without ``ack`` what a poll answers is
dropped. A poll after a stream first queues again what the stream wrote
(``EventLog.unwrite``): its ``ack`` says which of it the client has.

The API layer reaches this through ``pushengine.core.interfaces.Poller``;
``pushengine.app.service`` builds it.
"""
from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from pushengine.core.events import RawUTF8
from pushengine.core.log import EMPTY
from pushengine.core.sessions import Session, SessionManager
from pushengine.transports.timeouts import RESOLUTION, TimerWheel


class ParkedPoll(Deferred[RawUTF8]):
    """A parked ``get_events``: the session's delivery until it answers,
    once, and the Deferred of its answer (one object per poll, no closure:
    its canceller is the poller's).

    Its timeout is an entry of the poller's timer wheel (``bucket``: where,
    None once out of it), not a reactor timer of its own. It holds its
    session, and the session holds it only while it is attached: no
    reference cycle outlives the poll."""

    __slots__ = ("poller", "session", "bucket", "acking")
    holds_session = False

    def __init__(self, poller: "LongPolling", session: Session, acking: bool) -> None:
        Deferred.__init__(self, poller.canceller)
        self.poller = poller
        self.session = session
        self.acking = acking
        self.bucket: int | None = None

    def notify(self, session: Session) -> None:
        """Events came: answer them."""
        if session.log.pending:
            self.poller.answer(session, self)

    def close(self) -> None:
        """Replaced by another delivery, or the session ended: ``[]``."""
        self.poller.unpark(self)
        self.callback(EMPTY)


class LongPolling:
    """The long-polls of one node's sessions; their timeouts on one timer
    wheel on ``clock`` (``transports.timeouts``): a poll times out at its
    timeout rounded up to the wheel's next edge, at most ``resolution``
    seconds late, never early."""

    def __init__(self, sessions: SessionManager, clock: IReactorTime,
                 resolution: float = RESOLUTION) -> None:
        self.sessions = sessions
        self.clock = clock
        self.wheel: TimerWheel[ParkedPoll] = TimerWheel(clock, self._timed_out, resolution)
        # one bound method for every poll's Deferred, made once
        self.canceller = self._cancelled

    def get_events(self, session: Session, timeout: float,
                   ack: int | None) -> Deferred[RawUTF8] | RawUTF8:
        """Answer at once when events wait (or timeout is 0), else park for
        at most ``timeout`` seconds (bounded by ``--max-timeout``)."""
        sessions = self.sessions
        if session.delivery is not None:
            sessions.release(session)
        log = session.log
        log.unwrite()
        if ack is not None:
            log.ack(ack)
        timeout = min(max(timeout, 0.0), sessions.settings.max_timeout)
        if log.pending or timeout <= 0:
            sessions.keep_alive(session)
            return sessions.take(session, ack is not None)
        poll = ParkedPoll(self, session, ack is not None)
        poll.bucket = self.wheel.add(poll, timeout)
        sessions.attach(session, poll)
        return poll

    def answer(self, session: Session, poll: ParkedPoll) -> None:
        """Answer a parked poll with what waits (events came, or its time is up)."""
        self.sessions.detach(session, poll)
        self.unpark(poll)
        poll.callback(self.sessions.take(session, poll.acking))

    def unpark(self, poll: ParkedPoll) -> None:
        """Take the poll's timeout out of the wheel (answered, or given up)."""
        bucket = poll.bucket
        if bucket is not None:
            poll.bucket = None
            self.wheel.remove(poll, bucket)

    def _timed_out(self, poll: ParkedPoll) -> None:
        poll.bucket = None
        session = poll.session
        if session.delivery is poll:
            self.answer(session, poll)

    def _cancelled(self, deferred: Deferred[RawUTF8]) -> None:
        """The client went away mid-poll: drop its waiter."""
        if not isinstance(deferred, ParkedPoll):
            return
        session = deferred.session
        if session.delivery is not deferred:
            return
        self.sessions.detach(session, deferred)
        self.unpark(deferred)
