"""The retry steps both flavours drive, without any I/O."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from pushengine.client.calls import Call, Calls, Response
from pushengine.client.errors import BadInput, PushengineError, RateLimited, Unavailable
from pushengine.client.retry import NO_RETRY, RetryPolicy, Send, Wait, exchange

calls = Calls("http://127.0.0.1:8080")
OK = Response(200, {}, b'{"jsonrpc":"2.0","result":1,"id":1}')
LIMITED = Response(429, {"retry-after": "2"}, b'{"jsonrpc":"2.0","error":{"code":1007,'
                                              b'"message":"rate limited"},"id":1}')
DOWN = Response(503, {}, b'{"error":"the change feed is not available; retry"}')
BAD = Response(400, {}, b'{"error":"malformed change","details":["change 0: no"]}')


def drive(call: Call, outcomes: list, policy: RetryPolicy = RetryPolicy(jitter=0)):
    """Run ``call`` with these outcomes for its sends: (result or error, the
    waits, the number of sends)."""
    now = [0.0]
    waits: list[float] = []
    sends = 0
    steps = exchange(call, policy, lambda: now[0], lambda: 0.5)
    try:
        step = next(steps)
        while True:
            if isinstance(step, Wait):
                waits.append(step.seconds)
                now[0] += step.seconds
                step = steps.send(None)
            else:
                assert isinstance(step, Send) and step.request is call.request
                sends += 1
                step = steps.send(outcomes[min(sends, len(outcomes)) - 1])
    except StopIteration as done:
        return done.value, waits, sends
    except PushengineError as e:
        return e, waits, sends


def test_429_waits_what_retry_after_says_then_succeeds():
    result, waits, sends = drive(calls.bf_add("k", "a"), [LIMITED, LIMITED, OK])
    assert (result, waits, sends) == (True, [2.0, 2.0], 3)


def test_503_without_retry_after_backs_off_doubling_up_to_the_cap():
    policy = RetryPolicy(attempts=7, total=100, base=0.5, cap=3, jitter=0)
    error, waits, sends = drive(calls.publish([]), [DOWN], policy)
    assert isinstance(error, Unavailable) and error.attempts == 7 == sends
    assert waits == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]


def test_a_400_is_not_retried_and_keeps_its_details():
    error, waits, sends = drive(calls.publish([]), [BAD, OK])
    assert isinstance(error, BadInput) and (waits, sends) == ([], 1)
    assert error.changes == {0: "no"} and error.call == "POST /api/publish"


def test_a_retry_after_beyond_the_total_ends_the_call_at_once():
    long = Response(429, {"retry-after": "60"}, LIMITED.body)
    error, waits, sends = drive(calls.bf_add("k", "a"), [long, OK])
    assert isinstance(error, RateLimited) and error.retry_after == 60.0 and sends == 1


def test_a_connection_never_made_is_retried_an_answer_lost_is_not():
    refused = Unavailable("cannot connect")
    lost = Unavailable("no answer", retryable=False)
    assert drive(calls.bf_add("k", "a"), [refused, OK])[0] is True
    error, waits, sends = drive(calls.bf_add("k", "a"), [lost, OK])
    assert error is lost and sends == 1


def test_no_retry_policy_sends_once():
    error, waits, sends = drive(calls.bf_add("k", "a"), [DOWN, OK], NO_RETRY)
    assert isinstance(error, Unavailable) and sends == 1


def test_a_body_that_cannot_be_read_again_is_not_resent_and_the_upload_is_closed():
    closed = []
    gen = calls.upload_segment("s", (b for b in [b"phone\n"]))
    call = Call(gen.name, gen.request, gen.read, lambda: closed.append(True))
    steps = exchange(call, RetryPolicy(jitter=0), lambda: 0.0, lambda: 0.0)
    send = next(steps)
    assert list(send.request.body.chunks()) == [b"phone\n"]
    with pytest.raises(Unavailable):
        steps.send(DOWN)
    assert closed == [True]
    again = calls.upload_segment("s", [b"phone\n", b"1\n"])       # a list can be read again
    result, waits, sends = drive(again, [DOWN, Response(200, {}, b'{"name":"s"}')])
    assert result == {"name": "s"} and sends == 2


@given(attempts=st.integers(1, 8), total=st.floats(0, 60), base=st.floats(0, 5),
       cap=st.floats(0, 20), jitter=st.floats(0, 1), rand=st.floats(0, 0.999),
       retry_after=st.none() | st.integers(0, 100),
       statuses=st.lists(st.sampled_from([429, 503, 400, 401, 404, 413, 500, 502]), min_size=1,
                         max_size=10))
def test_retries_stay_within_their_bounds(attempts, total, base, cap, jitter, rand, retry_after,
                                          statuses):
    """However the node answers: at most ``attempts`` sends, waits that end
    within ``total`` seconds of the first, Retry-After honoured exactly, and
    nothing sent again after a 4xx that is not 429."""
    policy = RetryPolicy(attempts=attempts, total=total, base=base, cap=cap, jitter=jitter)
    headers = {} if retry_after is None else {"retry-after": str(retry_after)}
    outcomes = [Response(s, headers, b'{"error":"x"}') for s in statuses] + [OK]
    now = [0.0]
    sent: list[int] = []
    steps = exchange(calls.bf_add("k", "a"), policy, lambda: now[0], lambda: rand)
    try:
        step = next(steps)
        while True:
            if isinstance(step, Wait):
                if retry_after is not None:
                    assert step.seconds == retry_after
                else:
                    assert step.seconds <= max(cap, 0) + 1e-9
                now[0] += step.seconds
                step = steps.send(None)
            else:
                outcome = outcomes[len(sent)]
                sent.append(outcome.status)
                step = steps.send(outcome)
    except (StopIteration, PushengineError):
        pass
    assert len(sent) <= attempts
    assert now[0] <= total + 1e-9
    for status in sent[:-1]:
        assert status in (429, 503)
