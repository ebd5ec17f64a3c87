"""Long-polling: ``session.get_events`` over ``POST /api/jsonrpc`` (SPEC section 3).

A poll answers at once when events wait (or its timeout is 0); otherwise it
parks: a ``ParkedPoll`` is attached to the session as its delivery until
events come (the session's ``flush`` notifies it), its timeout passes (it
answers what waits, often ``[]``; the timeout is rounded up to the next
quarter second of the clock: ``timeouts.TimerWheel``, one timer for every
parked poll instead of a reactor timer each), another delivery replaces it
(``[]``), or the client goes away (``ParkedPoll.cancel``: the waiter is
dropped, and the session may expire from then on).

A parked poll answers by calling the reply it was given, once: the fast
HTTP front's (``get_events_to``) frames the answer and writes it from that
one call, with no Deferred made, fired and run per poll; every other caller
gets a Deferred (``get_events``) whose cancel gives the poll up.

``ack``: the client has every event up to it; those are dropped and every
later one is answered, and stays queued until a later poll acknowledges it
(a lost answer loses nothing). Without ``ack`` what a poll answers is
dropped. A poll after a stream first queues again what the stream wrote
(``EventLog.unwrite``): its ``ack`` says which of it the client has.

When the node shuts down (SPEC 21, ``close_all``) every parked poll
answers at once (what waits, ``[]`` mostly: an ordinary, whole answer, which
the fast front sends with ``Connection: close``), and from then on a poll
answers at once instead of parking: the client's next poll goes to another
node.

The API layer reaches this through ``pushengine.core.interfaces.Poller``;
``pushengine.app.service`` builds it.
"""
from __future__ import annotations

from typing import Callable

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from pushengine.core.events import RawUTF8
from pushengine.core.log import EMPTY
from pushengine.core.sessions import Session, SessionManager
from pushengine.transports.timeouts import RESOLUTION, TimerWheel

log = Logger()


class ParkedPoll:
    """A parked ``get_events``: the session's delivery until it answers,
    once, by calling ``reply`` with the events (one object per poll, no
    closure; the reply is dropped once called). ``cancel``: the client went
    away, nothing is answered.

    Its timeout is an entry of the poller's timer wheel (``bucket``: where,
    None once out of it), not a reactor timer of its own. It holds its
    session, and the session holds it only while it is attached: no
    reference cycle outlives the poll."""

    __slots__ = ("poller", "session", "bucket", "acking", "reply")
    holds_session = False
    transport_name = "longpoll"     # the label of /metrics' delivery times

    def __init__(self, poller: "LongPolling", session: Session, acking: bool,
                 reply: Callable[[RawUTF8], object]) -> None:
        self.poller = poller
        self.session = session
        self.acking = acking
        self.reply = reply
        self.bucket: int | None = None

    def notify(self, session: Session) -> None:
        """Events came: answer them."""
        if session.log.pending:
            self.poller.answer(session, self)

    def close(self) -> None:
        """Replaced by another delivery, or the session ended: ``[]``."""
        self.poller.unpark(self)
        self.poller.send(self, EMPTY)

    def cancel(self) -> None:
        """The client went away mid-poll: drop the waiter, answer nothing."""
        self.reply = _answered
        self.poller.cancel(self)


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
        self.closing = False            # the node shuts down: no poll parks

    def close_all(self, reason: str) -> Deferred[None]:
        """The node shuts down: every parked poll answers now (what waits
        for it: ``[]`` unless an event came this very turn), and polls from
        now on answer at once. Fires at once: the answers are written, the
        HTTP front closes their connections once they are sent."""
        self.closing = True
        polls = self.wheel.entries()
        if polls:
            log.info("answering {count} parked polls: {reason}", count=len(polls),
                     reason=reason)
        for poll in polls:
            session = poll.session
            if session.delivery is poll:
                self.answer(session, poll)
            else:
                self.unpark(poll)
        return succeed(None)

    def abort_all(self) -> None:
        """Nothing of its own to cut: a poll's connection is the front's."""

    def get_events(self, session: Session, timeout: float,
                   ack: int | None) -> Deferred[RawUTF8] | RawUTF8:
        """Answer at once when events wait (or timeout is 0), else park for
        at most ``timeout`` seconds (bounded by ``--max-timeout``): a
        Deferred of the answer, whose cancel gives the poll up."""
        answered = PollAnswer()
        result = self.get_events_to(session, timeout, ack, answered.callback)
        if isinstance(result, ParkedPoll):
            answered.poll = result
            return answered
        return result

    def get_events_to(self, session: Session, timeout: float, ack: int | None,
                      reply: Callable[[RawUTF8], object]) -> RawUTF8 | ParkedPoll:
        """As ``get_events``, the answer of a parked poll given to ``reply``
        (once, unless the poll is cancelled first): the events at once, or
        the ``ParkedPoll``."""
        sessions = self.sessions
        if session.delivery is not None:
            sessions.release(session)
        log = session.log
        log.unwrite()
        if ack is not None:
            log.ack(ack)
        timeout = min(max(timeout, 0.0), sessions.settings.max_timeout)
        if log.pending or timeout <= 0 or self.closing:
            sessions.keep_alive(session)
            return sessions.take(session, ack is not None)
        poll = ParkedPoll(self, session, ack is not None, reply)
        poll.bucket = self.wheel.add(poll, timeout)
        sessions.attach(session, poll)
        return poll

    def answer(self, session: Session, poll: ParkedPoll) -> None:
        """Answer a parked poll with what waits (events came, or its time is up)."""
        self.sessions.detach(session, poll)
        self.unpark(poll)
        self.send(poll, self.sessions.take(session, poll.acking))

    @staticmethod
    def send(poll: ParkedPoll, events: RawUTF8) -> None:
        """Give the poll its answer. A failing reply is logged: it must not
        stop the other polls a change wakes."""
        reply, poll.reply = poll.reply, _answered
        try:
            reply(events)
        except Exception:
            log.failure("answering a parked poll failed")

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

    def cancel(self, poll: ParkedPoll) -> None:
        """The client went away mid-poll: drop its waiter."""
        session = poll.session
        if session.delivery is not poll:
            return
        self.sessions.detach(session, poll)
        self.unpark(poll)


class PollAnswer(Deferred[RawUTF8]):
    """The Deferred of a parked poll's answer (``LongPolling.get_events``):
    cancelling it gives the poll up, and it fails with CancelledError."""

    poll: ParkedPoll | None = None

    def __init__(self) -> None:
        Deferred.__init__(self, _cancel_poll)


def _cancel_poll(answered: Deferred[RawUTF8]) -> None:
    assert isinstance(answered, PollAnswer)
    poll = answered.poll
    if poll is not None:
        answered.poll = None            # (the two refer to each other)
        poll.cancel()


def _answered(events: RawUTF8) -> None:
    """The reply of a poll that has answered or was cancelled: it answers
    once, and no longer holds its waiter."""
