"""Per-client limits on a Clock: the call rate and the session cap."""
from __future__ import annotations

from hypothesis import given, strategies as st
from twisted.internet.task import Clock

from pushengine.core.errors import RateLimited
from pushengine.core.limits import CallRate, SessionCounts, retry_after
from tests.core.helpers import make_engine


def test_a_burst_then_the_rate():
    clock = Clock()
    rate = CallRate(clock, rate=10)
    assert [rate.admit("a") for _ in range(20)] == [0.0] * 20     # the burst: 2 × rate
    wait = rate.admit("a")
    assert 0 < wait <= 0.1 and rate.refused == 1
    assert rate.admit("b") == 0.0                                 # others are not affected
    clock.advance(0.1)
    assert rate.admit("a") == 0.0
    assert rate.admit("a") > 0


def test_a_refused_call_takes_nothing():
    clock = Clock()
    rate = CallRate(clock, rate=1, burst=2)
    assert rate.admit("a", 2) == 0.0
    for _ in range(5):
        assert rate.admit("a") > 0
    clock.advance(1.0)
    assert rate.admit("a") == 0.0


def test_zero_rate_means_no_limit():
    rate = CallRate(Clock(), rate=0)
    assert all(rate.admit("a") == 0.0 for _ in range(10_000))


def test_full_buckets_are_forgotten():
    clock = Clock()
    rate = CallRate(clock, rate=100, sweep_every=100)
    for i in range(100):
        rate.admit(f"client-{i}")
    clock.advance(10)                       # every bucket is full again
    for i in range(100):
        rate.admit(f"new-{i}")               # the 100th new client sweeps
    assert not any(c.startswith("client-") for c in rate.buckets)


@given(st.lists(st.tuples(st.floats(0, 2), st.integers(1, 5)), max_size=60))
def test_never_more_than_burst_plus_rate_times_elapsed(steps):
    clock = Clock()
    rate = CallRate(clock, rate=5, burst=10)
    admitted = 0
    for dt, cost in steps:
        clock.advance(dt)
        if rate.admit("a", cost) == 0.0:
            admitted += cost
    assert admitted <= 10 + 5 * clock.seconds() + 1e-9


def test_retry_after_is_whole_seconds():
    assert retry_after(0.001) == 1 and retry_after(1.2) == 2 and retry_after(10) == 10


def test_session_counts():
    counts = SessionCounts(2)
    for _ in range(2):
        assert counts.may_open("a")
        counts.opened("a")
    assert not counts.may_open("a") and counts.may_open("b") and counts.may_open(None)
    counts.closed("a")
    assert counts.may_open("a")
    counts.closed("a")
    counts.closed("a")
    assert counts.counts == {}


def test_sessions_of_one_client_are_capped_and_freed_on_expiry():
    engine, clock = make_engine({"V": {"type": "Stream"}}, max_client_sessions=2,
                                session_timeout=10)
    sessions = engine.sessions
    a = [sessions.create(client="10.0.0.1") for _ in range(2)]
    try:
        sessions.create(client="10.0.0.1")
    except RateLimited as e:
        assert e.code == 1007 and e.retry_after > 0
    else:
        raise AssertionError("a third session was created")
    sessions.create(client="10.0.0.2")
    sessions.create()                       # a resumed session has no client
    sessions.destroy(a[0])
    sessions.create(client="10.0.0.1")
    clock.advance(11)
    assert sessions.sessions == {}
    assert sessions.per_client.counts == {}
