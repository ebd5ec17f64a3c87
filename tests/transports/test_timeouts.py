"""The timer wheel of parked polls' timeouts (transports/timeouts.py), and
long-polling on it (transports/longpoll.py), on a Clock."""
from __future__ import annotations

import gc
import json

from hypothesis import given, settings, strategies as st
from twisted.internet.defer import CancelledError
from twisted.internet.task import Clock
from twisted.logger import globalLogPublisher

from pushengine.transports.longpoll import LongPolling
from pushengine.transports.timeouts import TimerWheel
from tests.core.helpers import make_engine, upsert


class Recorder:
    """An expiry callback that records when each entry expired."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.fired: list[tuple[object, float]] = []

    def __call__(self, entry: object) -> None:
        self.fired.append((entry, self.clock.seconds()))


def wheel(resolution: float = 0.25) -> tuple[TimerWheel, Clock, Recorder]:
    clock = Clock()
    rec = Recorder(clock)
    return TimerWheel(clock, rec, resolution), clock, rec


def test_a_timeout_fires_at_its_deadline_rounded_up_to_the_bucket_edge():
    w, clock, rec = wheel()
    clock.advance(10.1)
    w.add("a", 1.0)                    # deadline 11.1: bucket edge 11.25
    clock.advance(1.0)                 # 11.1
    assert rec.fired == []
    clock.advance(0.1)                 # 11.2
    assert rec.fired == []
    clock.advance(0.05)                # 11.25
    assert rec.fired == [("a", 11.25)]


def test_a_deadline_on_an_edge_fires_on_it_not_a_bucket_later():
    w, clock, rec = wheel()
    w.add("a", 0.5)
    clock.advance(0.5)
    assert rec.fired == [("a", 0.5)]


def test_never_early_with_a_resolution_that_binary_floats_cannot_hold():
    w, clock, rec = wheel(0.1)
    deadlines = {}
    for i in range(1, 200):
        clock.advance(0.037)
        deadlines[i] = clock.seconds() + i * 0.013
        w.add(i, i * 0.013)
    for _ in range(300):
        clock.advance(0.01)
    assert sorted(e for e, _ in rec.fired) == sorted(deadlines)
    for entry, at in rec.fired:
        # late by at most a bucket and the step of the advance that passed it
        assert deadlines[entry] <= at <= deadlines[entry] + 0.1 + 0.037 + 1e-9


def test_a_removed_entry_never_fires_and_the_timer_stops():
    w, clock, rec = wheel()
    k = w.add("a", 1.0)
    assert len(clock.getDelayedCalls()) == 1
    assert w.remove("a", k)
    assert not w.remove("a", k)          # removed already
    assert clock.getDelayedCalls() == []  # empty: nothing wakes the reactor
    clock.advance(5)
    assert rec.fired == [] and len(w) == 0


def test_one_timer_for_many_entries():
    w, clock, rec = wheel()
    keys = [w.add(i, 1 + (i % 40) / 10) for i in range(10_000)]
    assert len(clock.getDelayedCalls()) == 1
    assert len(w) == 10_000
    for i in range(0, 10_000, 2):
        assert w.remove(i, keys[i])
    clock.advance(10)
    assert sorted(e for e, _ in rec.fired) == list(range(1, 10_000, 2))
    assert len(w) == 0


def test_the_timer_stops_when_the_last_entry_expires_and_restarts():
    w, clock, rec = wheel()
    w.add("a", 0.3)
    clock.advance(0.5)
    assert rec.fired == [("a", 0.5)]
    assert clock.getDelayedCalls() == []
    clock.advance(100)                   # idle: no wakeups
    w.add("b", 0.2)                      # 100.7 -> 100.75
    assert len(clock.getDelayedCalls()) == 1
    clock.advance(0.25)
    assert rec.fired[-1] == ("b", 100.75)
    assert clock.getDelayedCalls() == []


def test_the_timer_ticks_by_bucket_while_entries_wait():
    w, clock, rec = wheel()
    w.add("late", 2.0)
    w.add("soon", 0.25)
    ticks = 0
    while not any(e == "late" for e, _ in rec.fired):
        (call,) = clock.getDelayedCalls()
        clock.advance(call.getTime() - clock.seconds())
        ticks += 1
    assert ticks == 8                    # one per bucket of 0.25 s, up to 2.0 s
    assert clock.getDelayedCalls() == []


def test_a_clock_jump_expires_every_due_bucket_in_deadline_order():
    w, clock, rec = wheel()
    for i in range(5):
        w.add(i, 100.0 - i * 10)
    w.add("later", 1000.0)
    clock.advance(500)
    assert [e for e, _ in rec.fired] == [4, 3, 2, 1, 0]
    assert len(clock.getDelayedCalls()) == 1
    clock.advance(500)
    assert rec.fired[-1] == ("later", 1000.0)


def test_an_expiry_may_add_and_remove_entries_of_the_same_bucket():
    clock = Clock()
    fired = []
    keys = {}

    def expire(entry):
        fired.append(entry)
        if entry == "a":
            w.remove("b", keys["b"])    # expiring "a" answers "b" too
            keys["c"] = w.add("c", 1.0)

    w = TimerWheel(clock, expire)
    keys["a"] = w.add("a", 1.0)
    keys["b"] = w.add("b", 1.0)
    clock.advance(1.0)
    assert fired == ["a"]
    assert len(clock.getDelayedCalls()) == 1  # one timer, started again by the add
    clock.advance(1.0)
    assert fired == ["a", "c"]


def test_a_failing_expiry_is_logged_and_does_not_stop_the_others():
    clock = Clock()
    fired = []
    logged = []
    globalLogPublisher.addObserver(logged.append)

    def expire(entry):
        if entry == "bad":
            raise RuntimeError("boom")
        fired.append(entry)

    w = TimerWheel(clock, expire)
    w.add("bad", 1.0)
    w.add("good", 1.0)
    try:
        clock.advance(1.0)
    finally:
        globalLogPublisher.removeObserver(logged.append)
    assert fired == ["good"]
    assert len(w) == 0
    assert [e["log_failure"].value.args for e in logged if "log_failure" in e] == [("boom",)]


def test_stop_drops_everything():
    w, clock, rec = wheel()
    w.add("a", 1.0)
    w.stop()
    assert clock.getDelayedCalls() == [] and len(w) == 0
    clock.advance(2)
    assert rec.fired == []


# park a poll for timeout t, answer a poll, advance the clock
OPS = st.lists(st.one_of(
    st.tuples(st.just("park"), st.floats(min_value=0.001, max_value=5.0)),
    st.tuples(st.just("answer"), st.integers(min_value=0, max_value=50)),
    st.tuples(st.just("advance"), st.floats(min_value=0.0, max_value=2.0)),
), max_size=80)


@settings(max_examples=300, deadline=None)
@given(ops=OPS, resolution=st.sampled_from([0.25, 0.1, 0.3, 1.0]))
def test_each_entry_times_out_once_in_its_bucket_unless_removed_first(ops, resolution):
    w, clock, rec = wheel(resolution)
    deadlines: dict[int, float] = {}
    keys: dict[int, int] = {}
    removed: set[int] = set()
    for op, arg in ops:
        if op == "park":
            n = len(deadlines)
            deadlines[n] = clock.seconds() + arg
            keys[n] = w.add(n, arg)
        elif op == "answer":
            if arg < len(deadlines):
                fired_already = any(e == arg for e, _ in rec.fired)
                assert w.remove(arg, keys[arg]) == (not fired_already and arg not in removed)
                if not fired_already:
                    removed.add(arg)
        else:
            clock.advance(arg)
    clock.advance(10.0)                  # past every deadline
    fired = [e for e, _ in rec.fired]
    assert len(fired) == len(set(fired))                      # at most once
    assert set(fired) == set(deadlines) - removed             # exactly the ones not answered
    for entry, at in rec.fired:
        deadline = deadlines[entry]
        assert at >= deadline                                 # never early
        # within one bucket of it (on a Clock: by the end of the advance
        # that reached its deadline plus one bucket)
        assert at <= _advance_after(ops, deadline + resolution) + 1e-9
    assert len(w) == 0 and clock.getDelayedCalls() == []


def _advance_after(ops: list, latest: float) -> float:
    """The time at the end of the first advance that reached ``latest`` (a
    Clock runs what is due only when advanced: a bucket edge crossed inside
    one advance fires at the advance's end)."""
    now = 0.0
    for op, arg in ops:
        if op == "advance":
            now += arg
            if now >= latest:
                return now
    return now + 10.0


# -- long-polling on the wheel -------------------------------------------------------

VIEWS = {"Live": {"type": "Stream", "params": ["limit"], "where": {"live": True},
                  "order": "-n", "limit": {"default": 2, "max": 5}}}


def node():
    engine, clock = make_engine(VIEWS, session_timeout=120, max_timeout=90)
    return engine, clock, LongPolling(engine.sessions, clock)


def test_parked_polls_share_one_timer():
    engine, clock, poller = node()
    sessions = [engine.sessions.create() for _ in range(500)]
    before = len(clock.getDelayedCalls())      # the sessions' expiries
    polls = [poller.get_events(s, 30, None) for s in sessions]
    assert len(clock.getDelayedCalls()) == before + 1
    # parked again: still one timer, none cancelled and made again
    timer = poller.wheel.timer
    polls = [poller.get_events(s, 30, None) for s in sessions]
    assert poller.wheel.timer is timer and len(clock.getDelayedCalls()) == before + 1
    clock.advance(30)
    assert all(d.called for d in polls)
    assert poller.wheel.timer is None


def test_a_poll_times_out_at_the_bucket_edge_after_its_timeout():
    engine, clock, poller = node()
    s = engine.sessions.create()
    clock.advance(0.1)
    d = poller.get_events(s, 1.0, None)     # due at 1.1: answered at 1.25
    clock.advance(1.0)
    assert not d.called
    clock.advance(0.15)
    assert d.called and d.result == b"[]"
    assert engine.sessions.waiting == 0


def test_an_answered_or_cancelled_poll_leaves_the_wheel():
    engine, clock, poller = node()
    s = engine.sessions.create()
    bound = engine.catalog.views["Live"].bind({}, s.user, None)
    engine.sessions.subscribe(s, bound)
    d = poller.get_events(s, 30, None)
    assert len(poller.wheel) == 1
    engine.apply_changes([upsert({"id": 1, "n": 1, "live": True, "public": True})])
    assert [e["action"] for e in json.loads(d.result)] == ["insert"]
    assert len(poller.wheel) == 0 and poller.wheel.timer is None
    d = poller.get_events(s, 30, None)
    d.cancel()
    d.addErrback(lambda f: f.trap(CancelledError))
    assert len(poller.wheel) == 0 and s.delivery is None
    first = poller.get_events(s, 30, None)
    second = poller.get_events(s, 30, None)  # answers the first with []
    assert first.result == b"[]" and len(poller.wheel) == 1
    clock.advance(30)
    assert second.result == b"[]" and len(poller.wheel) == 0


def test_a_parked_poll_is_one_object_and_leaves_no_cycle():
    """The session's delivery is the poll the Deferred the caller gets
    stands for (no canceller closure per poll), and parking, answering,
    replacing, timing out and cancelling leave nothing for the collector:
    the two refer to each other only until the poll ends."""
    engine, clock, poller = node()
    sessions = [engine.sessions.create() for _ in range(50)]
    gc.collect()
    gc.disable()
    try:
        answers, parked = [], []
        for s in sessions:
            d = poller.get_events(s, 30, None)
            assert s.delivery is d.poll
            d.addCallback(answers.append)
            parked.append(poller.get_events(s, 30, None))   # replaces it: []
        assert answers == [b"[]"] * 50
        for d in parked[:25]:
            d.cancel()
            d.addErrback(lambda f: f.trap(CancelledError))
        assert [s.delivery for s in sessions[:25]] == [None] * 25
        clock.advance(31)                           # the others time out
        del d, parked
        assert gc.collect() == 0
        # the fast front's kind: a poll that calls its reply, no Deferred
        replies: list = []
        for s in sessions:
            parked = poller.get_events_to(s, 30, None, replies.append)
            assert s.delivery is parked and not replies
        for s in sessions[:25]:
            s.delivery.cancel()
        clock.advance(31)
        assert replies == [b"[]"] * 25
        del parked
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_a_reply_that_fails_is_logged_and_the_other_polls_still_answer():
    """A change wakes many polls in one pass: one reply raising must not
    stop the others, and it is called once only."""
    engine, clock, poller = node()
    sessions = [engine.sessions.create() for _ in range(3)]
    for s in sessions:
        engine.sessions.subscribe(s, engine.catalog.views["Live"].bind({}, s.user, None))
    calls: list[bytes] = []

    def bad(events):
        calls.append(events)
        raise RuntimeError("the connection broke")
    replies: list[bytes] = []
    for i, s in enumerate(sessions):
        poller.get_events(s, 0, None)               # the initial state, taken
        poller.get_events_to(s, 30, None, bad if i == 1 else replies.append)
    logged: list = []
    globalLogPublisher.addObserver(logged.append)
    try:
        engine.apply_changes([upsert({"id": 1, "n": 1, "live": True, "public": True})])
        clock.advance(31)
    finally:
        globalLogPublisher.removeObserver(logged.append)
    assert len(replies) == 2 and all(json.loads(r)[0]["action"] == "insert" for r in replies)
    assert len(calls) == 1
    assert [e["log_failure"].value.args for e in logged if "log_failure" in e] == [
        ("the connection broke",)]
    assert all(s.delivery is None for s in sessions)
