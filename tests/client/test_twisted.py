"""The Twisted flavour against a fake node: treq.testing.StubTreq for the
HTTP, a Clock for the waits."""
from __future__ import annotations

import io

import pytest
from treq.client import HTTPClient
from treq.testing import RequestTraversalAgent, StubTreq
from twisted.internet.defer import Deferred, fail
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.task import Clock

from pushengine.client import BadInput, RateLimited, RetryPolicy, Unavailable
from pushengine.client.tx import TwistedClient
from tests.client.fakenode import Answer, FakeNode, rpc_error, rpc_result

URL = "http://node.test:8080"


def client(node: FakeNode, clock: Clock, **kwargs) -> TwistedClient:
    kwargs.setdefault("retry", RetryPolicy(jitter=0))
    return TwistedClient(clock, URL, http=StubTreq(node.resource()), publish_key="pk", **kwargs)


def result_of(d: Deferred):
    out: list = []
    d.addBoth(out.append)
    assert out, "the Deferred has not fired"
    if hasattr(out[0], "raiseException"):
        out[0].raiseException()
    return out[0]


def test_calls_return_deferreds_of_their_results():
    node = FakeNode(rpc_result([1, 0]), Answer(200, {"accepted": 1}),
                    Answer(200, {"segments": [{"name": "vip", "valid": 200}]}))
    c = client(node, Clock())
    assert result_of(c.bf_madd("seen", ["ann", "bob"])) == [True, False]
    assert result_of(c.upsert("Stream", {"id": 7})) == 1
    assert result_of(c.segments()) == [{"name": "vip", "valid": 200}]
    first, second, third = node.seen
    assert (first.method, first.path) == ("POST", "/api/jsonrpc")
    assert first.headers["authorization"] == "Bearer pk"
    assert first.json()["method"] == "bf.madd"
    assert (second.path, second.json()) == ("/api/publish", [
        {"type": "Stream", "action": "upsert", "obj": {"id": 7}}])
    assert (third.method, third.path) == ("GET", "/api/segments")


def test_a_429_is_sent_again_only_after_retry_after_on_the_clock():
    node = FakeNode(rpc_error(1007, "rate limited", 429, **{"Retry-After": "2"}), rpc_result(1))
    clock = Clock()
    d = client(node, clock).bf_add("k", "a")
    assert len(node.seen) == 1 and not d.called
    clock.advance(1.9)
    assert len(node.seen) == 1
    clock.advance(0.1)
    assert len(node.seen) == 2 and result_of(d) is True


def test_503_backs_off_and_gives_up_after_the_attempts():
    node = FakeNode(Answer(503, {"error": "the change feed is not available; retry"}))
    clock = Clock()
    d = client(node, clock, retry=RetryPolicy(attempts=3, base=1, jitter=0)).publish([])
    clock.advance(1)
    assert len(node.seen) == 2
    clock.advance(2)
    assert len(node.seen) == 3
    with pytest.raises(Unavailable) as caught:
        result_of(d)
    assert caught.value.attempts == 3 and caught.value.status == 503


def test_a_400_is_not_retried_and_carries_the_details():
    node = FakeNode(Answer(400, {"error": "malformed change", "details": [
        "change 1: 'action' must be one of upsert, insert, update, delete"]}))
    clock = Clock()
    d = client(node, clock).publish([{"type": "A", "action": "upsert", "obj": {"id": 1}},
                                     {"type": "A", "action": "replace", "obj": {"id": 2}}])
    clock.advance(60)
    with pytest.raises(BadInput) as caught:
        result_of(d)
    assert len(node.seen) == 1
    assert caught.value.changes == {1: "'action' must be one of upsert, insert, update, delete"}


def test_the_total_time_bounds_the_retries():
    node = FakeNode(rpc_error(1007, "rate limited", 429, **{"Retry-After": "20"}))
    clock = Clock()
    d = client(node, clock, retry=RetryPolicy(total=30, jitter=0)).bf_add("k", "a")
    clock.advance(20)
    assert len(node.seen) == 2
    with pytest.raises(RateLimited) as caught:     # a third would start after 40 s
        result_of(d)
    assert caught.value.retry_after == 20.0


class Flaky:
    """A treq-like client whose first requests fail as given."""

    def __init__(self, node: FakeNode, *failures) -> None:
        self.stub = StubTreq(node.resource())
        self.failures = list(failures)
        self.asked = 0

    def request(self, method, url, **kwargs):
        self.asked += 1
        if self.failures:
            failure = self.failures.pop(0)
            return Deferred() if failure is None else fail(failure)
        return self.stub.request(method, url, **kwargs)


def test_a_refused_connection_is_retried():
    clock = Clock()
    http = Flaky(FakeNode(rpc_result(1)), ConnectionRefusedError())
    d = TwistedClient(clock, URL, http=http, retry=RetryPolicy(jitter=0)).bf_add("k", "a")
    clock.advance(0.5)
    assert result_of(d) is True and http.asked == 2


def test_an_answer_that_does_not_come_times_out_and_is_not_resent():
    clock = Clock()
    http = Flaky(FakeNode(rpc_result(1)), None)
    d = TwistedClient(clock, URL, http=http, timeout=5).bf_add("k", "a")
    clock.advance(5)
    with pytest.raises(Unavailable) as caught:
        result_of(d)
    assert not caught.value.retryable and http.asked == 1
    assert "no answer within 5 s" in str(caught.value)


def test_a_bad_call_fails_its_deferred_and_sends_nothing():
    node = FakeNode(rpc_result(1))
    c = client(node, Clock())
    with pytest.raises(BadInput):
        result_of(c.upsert("Stream", {"id": float("nan")}))
    assert node.seen == []


def pump(agent: RequestTraversalAgent, clock: Clock, d: Deferred, turns: int = 200) -> None:
    for _ in range(turns):
        if d.called:
            return
        clock.advance(0)
        agent.flush()


def test_a_segment_upload_is_streamed_in_blocks_with_progress():
    node = FakeNode(Answer(200, {"name": "vip", "rows": 3, "valid": 6}))
    agent = RequestTraversalAgent(node.resource())
    clock = Clock()
    c = TwistedClient(clock, URL, http=HTTPClient(agent), publish_key="pk")
    contents = b"phone,email\n" + b"79995551111,a@example.com\n" * 3
    progress: list = []
    d = c.upload_segment("vip", io.BytesIO(contents), hashed="sha256", block=16,
                         progress=lambda sent, total: progress.append((sent, total)))
    pump(agent, clock, d)
    assert result_of(d) == {"name": "vip", "rows": 3, "valid": 6}
    seen = node.seen[0]
    assert (seen.method, seen.path, seen.body) == ("POST", "/api/segments/vip?hashed=sha256",
                                                   contents)
    assert seen.headers["content-type"] == "text/csv"
    assert progress[0] == (0, len(contents)) and progress[-1] == (len(contents), len(contents))
    sent = [s for s, _ in progress]
    assert sent == sorted(sent) and len(progress) == 1 + -(-len(contents) // 16)


def test_an_upload_whose_source_lies_about_its_size_is_refused():
    node = FakeNode(Answer(200, {"name": "vip"}))
    agent = RequestTraversalAgent(node.resource())
    clock = Clock()
    c = TwistedClient(clock, URL, http=HTTPClient(agent))
    d = c.upload_segment("vip", [b"phone\n", b"79995551111\n"], size=100)
    pump(agent, clock, d)
    with pytest.raises(BadInput, match="not the 100"):
        result_of(d)
