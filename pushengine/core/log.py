"""One session's numbered event log: the only owner of its numbering.

A session numbers its events (``seq``) and keeps them until the client is
known to have them. The log holds the events' shared ``Fragment`` objects
themselves (one per view event, whatever the number of sessions), in two
parts whose numbers follow from their place:

- the *queue*, the events not yet taken (seqs ``sent + 1`` to ``last_seq``);
- the *replay*, the events a stream wrote (seqs ``forgotten + 1`` to
  ``sent``), kept so that a stream attached again with the last seq its
  client received gets every later event once.

Together they hold at most ``max_queue`` events. The replay exists only
once a stream has written an event (a deque costs more than half a
kilobyte, and most sessions never have one: polls drop what they take, a
held stream may wait long for its first event). Appending is one append of
a pointer: no object per session per event, nothing for the garbage
collector, and a write to a stream never walks the replay.

What the log does not know: windows, deliveries, timers. When it is full
and has no replay left to drop, ``append`` says so and the caller gives it
the resets that replace it (``overflow``); the caller counts what it
delivers from the value the taking methods return.
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Iterable, Sequence

from pushengine.core.events import DROPPED, Fragment, RawUTF8, events_json

EMPTY = RawUTF8(b"[]")

Writer = Callable[[int, Sequence[Fragment]], None]


class EventLog:
    """A session's events not yet known to be received, numbered."""

    __slots__ = ("_queue", "_replay", "_sent", "_next", "_max")

    def __init__(self, max_queue: int) -> None:
        self._queue: deque[Fragment] = deque()    # seqs sent+1 .. next-1
        self._replay: deque[Fragment] | None = None   # seqs forgotten+1 .. sent
        self._sent = 0                            # the seq before the queue's first
        self._next = 1                            # the seq of the next event
        self._max = max_queue

    # -- reading ---------------------------------------------------------------
    @property
    def last_seq(self) -> int:
        """The seq of the last event numbered (0: none yet)."""
        return self._next - 1

    @property
    def sent(self) -> int:
        """The seq before the first queued event (taken or written up to it)."""
        return self._sent

    @property
    def forgotten(self) -> int:
        """The highest seq no longer in the log (the replay ends at ``sent``)."""
        replay = self._replay
        return self._sent - len(replay) if replay else self._sent

    @property
    def pending(self) -> int:
        """How many events are queued (``DROPPED`` ones included)."""
        return len(self._queue)

    @property
    def size(self) -> int:
        """The events the log holds: queued and replay."""
        replay = self._replay
        return len(self._queue) + len(replay) if replay else len(self._queue)

    def queued(self) -> list[tuple[int, str | None, Fragment]]:
        """The queued events as ``(seq, key, fragment)``, without the
        ``DROPPED`` ones: for inspection and tests."""
        return [(seq, f.key, f) for seq, f in enumerate(self._queue, self._sent + 1)
                if f is not DROPPED]

    # -- numbering new events ----------------------------------------------------
    def append(self, fragment: Fragment) -> bool:
        """Number and queue one event. False when the log is over
        ``max_queue`` with no replay left to drop: the caller then gives
        ``overflow`` the resets that replace it."""
        queue = self._queue
        queue.append(fragment)
        self._next += 1
        replay = self._replay
        if replay is None:
            return len(queue) <= self._max
        if len(queue) + len(replay) > self._max:
            if not replay:
                return False
            replay.popleft()                # what a stream wrote already goes first
        return True

    def overflow(self, resets: Iterable[Fragment]) -> bool:
        """Bring the log within ``max_queue``: the replay goes first; if that
        is not enough, every queued event is dropped and ``resets`` (one per
        subscription; read only then) are queued after them. True when the
        log was reset."""
        queue, replay, limit = self._queue, self._replay, self._max
        if replay is not None:
            while replay and len(queue) + len(replay) > limit:
                replay.popleft()
        if self.size <= limit:
            return False
        self._sent = self._next - 1
        queue.clear()
        for fragment in resets:
            queue.append(fragment)
            self._next += 1
        return True

    # -- what the client has -------------------------------------------------------
    def ack(self, seq: int) -> None:
        """The client has every event up to ``seq``: drop the queued ones
        (and the replay, all older)."""
        if seq > self._sent:
            if self._replay:
                self._replay.clear()
            queue = self._queue
            dropped = min(seq - self._sent, len(queue))
            for _ in range(dropped):
                queue.popleft()
            self._sent += dropped

    def take(self, acking: bool) -> RawUTF8:
        """The queued events as one poll's answer (a JSON list). ``acking``:
        they stay queued until a later ``ack``; otherwise they are dropped
        (and the replay, all older)."""
        queue = self._queue
        if not queue:
            return EMPTY
        answer = events_json(self._sent + 1, queue)
        if not acking:
            self._sent += len(queue)
            queue.clear()
            if self._replay:
                self._replay.clear()
        return answer

    def write(self, write: Writer) -> int:
        """Hand the queued events to a stream's ``write(first, fragments)``
        (which frames them at once: the sequence changes after the call);
        they become replay, which keeps the log within ``max_queue``.
        Returns how many were written."""
        queue = self._queue
        count = len(queue)
        if not count:
            return 0
        write(self._sent + 1, queue)
        self._sent += count
        replay = self._replay
        if replay is None:
            replay = self._replay = deque()
        replay.extend(queue)
        queue.clear()
        over = len(replay) - self._max
        if over > 0:
            for _ in range(over):
                replay.popleft()
        return count

    def unwrite(self) -> None:
        """A poll after a stream: what the stream wrote is queued again (the
        poll's ``ack`` says which of it the client has)."""
        replay = self._replay
        if replay:
            self._sent -= len(replay)
            self._queue.extendleft(reversed(replay))
            replay.clear()

    def rewind(self, last_seq: int) -> bool:
        """A stream attached again: its client received up to ``last_seq``
        (at most ``last_seq``). What was written after it is queued again
        (or, when the client has more than a stream wrote, the queued
        events it has are dropped). False, changing nothing, when events
        after ``last_seq`` are no longer in the log."""
        if last_seq < self.forgotten:
            return False
        queue, replay = self._queue, self._replay
        if last_seq <= self._sent:
            if replay is not None:
                for _ in range(self._sent - last_seq):
                    queue.appendleft(replay.pop())
        else:
            for _ in range(min(last_seq - self._sent, len(queue))):
                queue.popleft()
        if replay:
            replay.clear()
        self._sent = last_seq
        return True

    def drop(self, key: str) -> None:
        """A subscription made again or ended: its queued events become
        ``DROPPED`` in place, so that later events keep their seq (events a
        stream wrote stay, so that replay keeps their numbers)."""
        queue = self._queue
        if any(f.key == key for f in queue):
            self._queue = deque(DROPPED if f.key == key else f for f in queue)

    # -- renumbering ---------------------------------------------------------------
    def clear(self) -> None:
        """Drop every event; the numbering goes on from ``last_seq``."""
        self._queue.clear()
        self._replay = None
        self._sent = self._next - 1

    def continue_after(self, after: int) -> None:
        """Empty, and number the next event ``after + 1``."""
        self._queue.clear()
        self._replay = None
        self._next = after + 1
        self._sent = after

    def renumber(self, after: int) -> None:
        """Number the queued events from ``after + 1`` on (the replay goes)."""
        self._replay = None
        self._sent = after
        self._next = after + 1 + len(self._queue)

    def __repr__(self) -> str:
        return (f"<EventLog forgotten={self.forgotten} sent={self._sent} "
                f"last={self._next - 1}>")
