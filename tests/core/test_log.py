"""A session's EventLog on its own, against a plain model: one list of
``(seq, key, fragment)`` the client may still get (the replay, then the
queue) and the seq before the queue's first."""
from __future__ import annotations

import json
from typing import Sequence

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pushengine.core.events import DROPPED, Fragment
from pushengine.core.log import EventLog

KEYS = ("a", "b", "c")


def fragment(key: str, n: int) -> Fragment:
    return Fragment('"key":"%s","n":%d}' % (key, n), key)


def reset(key: str) -> Fragment:
    return Fragment('"key":"%s","action":"reset"}' % key, key)


class Model:
    """What the log should hold, kept the plainest way."""

    def __init__(self, max_queue: int) -> None:
        self.max = max_queue
        self.kept: list[tuple[int, str | None, Fragment]] = []   # by seq, contiguous
        self.sent = 0
        self.last = 0

    @property
    def queue(self) -> list[tuple[int, str | None, Fragment]]:
        return [e for e in self.kept if e[0] > self.sent]

    @property
    def replay(self) -> list[tuple[int, str | None, Fragment]]:
        return [e for e in self.kept if e[0] <= self.sent]

    def answer(self) -> list[dict]:
        return [json.loads('{"seq":%d,%s' % (seq, f)) for seq, _, f in self.queue
                if f is not DROPPED]


class LogMachine(RuleBasedStateMachine):
    @initialize(max_queue=st.integers(1, 5))
    def start(self, max_queue: int) -> None:
        self.log = EventLog(max_queue)
        self.model = Model(max_queue)
        self.count = 0

    # -- operations ------------------------------------------------------------
    @rule(key=st.sampled_from(KEYS))
    def append(self, key: str) -> None:
        self.count += 1
        f = fragment(key, self.count)
        m = self.model
        m.last += 1
        m.kept.append((m.last, key, f))
        fits = self.log.append(f)
        if len(m.kept) > m.max and m.replay:
            m.kept.pop(0)                     # the oldest replay goes first
        if len(m.kept) > m.max:
            assert not fits
            resets = [reset(k) for k in KEYS]
            assert self.log.overflow(iter(resets))
            m.sent = m.last
            m.kept = [(m.last + i, k, r) for i, (k, r) in enumerate(zip(KEYS, resets), 1)]
            m.last += len(resets)
        else:
            assert fits

    @rule(keys=st.lists(st.sampled_from(KEYS), min_size=2, max_size=8))
    def append_several(self, keys: list[str]) -> None:
        """A burst: reaches the overflow more often than one at a time."""
        for key in keys:
            self.append(key)
            self.agrees()

    @rule()
    def overflow_within_bounds(self) -> None:
        if self.log.size <= self.model.max:
            resets = iter([reset("a")])
            assert not self.log.overflow(resets)
            assert next(resets, None) is not None        # not even read

    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        m = self.model
        seq = data.draw(st.integers(0, m.last + 2))
        self.log.ack(seq)
        if seq > m.sent:
            m.sent = min(seq, m.last)              # the replay, all older, goes too
            m.kept = m.queue

    @rule(acking=st.booleans())
    def take(self, acking: bool) -> None:
        m = self.model
        assert json.loads(self.log.take(acking)) == m.answer()
        if not acking and m.queue:             # the replay, all older, goes too
            m.kept = []
            m.sent = m.last

    @rule()
    def write(self) -> None:
        m = self.model
        got: list[tuple[int, Fragment]] = []

        def write(first: int, fragments: Sequence[Fragment]) -> None:
            got.extend(enumerate(fragments, first))
        count = self.log.write(write)
        assert got == [(seq, f) for seq, _, f in m.queue]
        assert count == len(got)
        m.sent = m.last
        m.kept = m.kept[-m.max:]

    @rule()
    def unwrite(self) -> None:
        self.log.unwrite()
        self.model.sent -= len(self.model.replay)

    @rule(data=st.data())
    def rewind(self, data: st.DataObject) -> None:
        m = self.model
        last_seq = data.draw(st.integers(0, m.last))
        forgotten = m.sent - len(m.replay)
        ok = self.log.rewind(last_seq)
        assert ok == (last_seq >= forgotten)
        if ok:
            m.kept = [e for e in m.kept if e[0] > last_seq]
            m.sent = last_seq

    @rule(key=st.sampled_from(KEYS))
    def drop(self, key: str) -> None:
        m = self.model
        self.log.drop(key)
        m.kept = [(seq, k, DROPPED if seq > m.sent and k == key else f) for seq, k, f in m.kept]

    @rule()
    def clear(self) -> None:
        self.log.clear()
        self.model.kept = []
        self.model.sent = self.model.last

    @rule(after=st.integers(0, 50))
    def continue_after(self, after: int) -> None:
        self.log.continue_after(after)
        m = self.model
        m.kept, m.sent, m.last = [], after, after

    @rule(after=st.integers(0, 50))
    def renumber(self, after: int) -> None:
        self.log.renumber(after)
        m = self.model
        m.kept = [(after + i, k, f) for i, (_, k, f) in enumerate(m.queue, 1)]
        m.sent = after
        m.last = after + len(m.kept)

    # -- what must hold after every step ----------------------------------------
    @invariant()
    @precondition(lambda self: hasattr(self, "log"))
    def agrees(self) -> None:
        log, m = self.log, self.model
        assert log.last_seq == m.last
        assert log.sent == m.sent
        assert log.forgotten == m.sent - len(m.replay)
        assert log.pending == len(m.queue)
        assert log.size == len(m.kept)
        assert log.queued() == [e for e in m.queue if e[2] is not DROPPED]
        assert log.size <= max(m.max, len(KEYS))
        seqs = [e[0] for e in m.kept]
        assert seqs == list(range(log.forgotten + 1, log.last_seq + 1))


LogMachine.TestCase.settings = settings(max_examples=400, stateful_step_count=30,
                                        deadline=None)
TestLog = LogMachine.TestCase


# -- edge cases ------------------------------------------------------------------
def test_an_empty_log_answers_an_empty_list() -> None:
    log = EventLog(3)
    assert log.take(True) == b"[]" and log.take(False) == b"[]"
    assert log.write(lambda first, fragments: None) == 0
    assert (log.last_seq, log.sent, log.forgotten) == (0, 0, 0)


def test_the_replay_goes_before_the_log_resets() -> None:
    log = EventLog(2)
    log.append(fragment("a", 1))
    log.append(fragment("a", 2))
    log.write(lambda first, fragments: None)
    assert log.append(fragment("a", 3)) and log.forgotten == 1
    assert log.append(fragment("a", 4)) and log.forgotten == 2
    assert not log.append(fragment("a", 5))           # nothing left to drop
    assert log.overflow([reset("a")])
    assert [(seq, f) for seq, _, f in log.queued()] == [(6, reset("a"))]
    assert log.sent == 5


def test_a_rewind_older_than_the_log_changes_nothing() -> None:
    log = EventLog(2)
    for n in range(1, 5):
        log.append(fragment("a", n))
        log.write(lambda first, fragments: None)
    assert log.forgotten == 2
    assert not log.rewind(1)
    assert (log.sent, log.pending, log.forgotten) == (4, 0, 2)
    assert log.rewind(2)
    assert [seq for seq, _, _ in log.queued()] == [3, 4]


def test_a_poll_after_a_stream_acks_what_the_stream_wrote() -> None:
    log = EventLog(5)
    for n in range(1, 4):
        log.append(fragment("a", n))
    log.write(lambda first, fragments: None)
    log.unwrite()
    log.ack(2)
    assert [e["seq"] for e in json.loads(log.take(True))] == [3]


def test_dropped_events_keep_the_numbers_of_later_ones() -> None:
    log = EventLog(5)
    log.append(fragment("a", 1))
    log.append(fragment("b", 2))
    log.append(fragment("a", 3))
    log.drop("a")
    assert [(e["seq"], e["key"]) for e in json.loads(log.take(False))] == [(2, "b")]
    assert log.sent == 3 and log.last_seq == 3


def test_renumbering_keeps_the_queue_and_forgets_the_replay() -> None:
    log = EventLog(5)
    log.append(fragment("a", 1))
    log.write(lambda first, fragments: None)
    log.append(fragment("a", 2))
    log.renumber(10)
    assert [seq for seq, _, _ in log.queued()] == [11]
    assert (log.forgotten, log.last_seq) == (10, 11)
    log.continue_after(20)
    assert (log.sent, log.pending, log.last_seq) == (20, 0, 20)


def test_the_replay_is_made_when_a_stream_first_writes() -> None:
    """A held stream with no event yet, or a session that polls, keeps no
    replay: a deque costs more than half a kilobyte per session."""
    import sys
    log = EventLog(5)
    empty = sys.getsizeof(log._queue)
    log.append(fragment("a", 1))
    log.take(False)
    log.ack(1)
    assert log.rewind(1) and log.forgotten == 1 and log.size == 0
    assert log._replay is None                    # nothing a stream wrote: no deque
    log.append(fragment("a", 2))
    log.write(lambda first, fragments: None)
    assert log._replay is not None and sys.getsizeof(log._replay) >= empty
    assert (log.forgotten, log.sent, log.size) == (1, 2, 1)
