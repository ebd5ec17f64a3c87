"""The asyncio flavour against httpx's MockTransport: the same calls,
errors and retry rules as the others; its waits go to a fake sleep that
moves a fake clock."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from pushengine.client import (
    AsyncClient, BadInput, RateLimited, RetryPolicy, SyncClient, Unavailable)


def run(coro):
    """``asyncio.run`` on a thread of its own: a test run that drives a
    browser (playwright's sync API) keeps an event loop running in the
    main thread, where asyncio.run refuses to start another."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def client(handler, time: FakeTime, **kwargs) -> AsyncClient:
    kwargs.setdefault("retry", RetryPolicy(jitter=0))
    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return AsyncClient("http://node.test", http=http, publish_key="pk", sleep=time.sleep,
                       clock=time.clock, **kwargs)


def rpc(result=None, error=None, status=200, headers=None) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1}
    body.update({"error": error} if error is not None else {"result": result})
    return httpx.Response(status, json=body, headers=headers)


def answers(*responses):
    """A handler that answers in turn, and the requests it saw."""
    seen: list[httpx.Request] = []
    queue = list(responses)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        return answer
    return handle, seen


def test_calls_answer_their_results():
    handle, seen = answers(rpc(True), httpx.Response(200, json={"accepted": 2}), rpc(7))

    async def main():
        c = client(handle, FakeTime())
        return [await c.bf_add("k", "a"), await c.delete_many("Stream", [1, 2]),
                await c.online("PublicLiveStreamView(limit=5)")]
    assert run(main()) == [True, 2, 7]
    assert [r.url.path for r in seen] == ["/api/jsonrpc", "/api/publish", "/api/jsonrpc"]
    assert all(r.headers["authorization"] == "Bearer pk" for r in seen)
    assert json.loads(seen[1].content) == [
        {"type": "Stream", "action": "delete", "obj": {"id": 1}},
        {"type": "Stream", "action": "delete", "obj": {"id": 2}}]


def test_the_same_request_as_the_synchronous_flavour():
    # one description of the calls: the same method, URL, headers and body
    handle, seen = answers(httpx.Response(200, json={"accepted": 1}))
    run(client(handle, FakeTime()).upsert("Stream", {"id": 1, "title": "Cats"}))
    call = SyncClient("http://node.test", publish_key="pk").calls.upsert(
        "Stream", {"id": 1, "title": "Cats"})
    assert seen[0].method == call.request.method and str(seen[0].url) == call.request.url
    assert seen[0].content == call.request.body
    assert all(seen[0].headers[k] == v for k, v in call.request.headers.items())


def test_429_waits_retry_after_then_succeeds():
    handle, seen = answers(rpc(error={"code": 1007, "message": "rate limited"}, status=429,
                               headers={"Retry-After": "3"}), rpc(5))
    time = FakeTime()
    assert run(client(handle, time).online()) == 5
    assert time.slept == [3.0] and len(seen) == 2


def test_the_attempts_bound_and_the_last_error():
    handle, seen = answers(rpc(error={"code": 1007, "message": "rate limited"}, status=429,
                               headers={"Retry-After": "1"}))
    time = FakeTime()
    with pytest.raises(RateLimited) as caught:
        run(client(handle, time, retry=RetryPolicy(attempts=4, jitter=0))
                    .bf_add("k", "a"))
    assert time.slept == [1.0, 1.0, 1.0] and len(seen) == 4
    assert caught.value.attempts == 4 and caught.value.call == "bf.add"


def test_a_refused_publish_names_the_bad_change_and_is_not_retried():
    handle, seen = answers(httpx.Response(400, json={
        "error": "malformed change", "details": ["change 1: 'action' must be one of upsert"]}))
    with pytest.raises(BadInput) as caught:
        run(client(handle, FakeTime()).publish([{}, {}]))
    assert caught.value.changes == {1: "'action' must be one of upsert"} and len(seen) == 1


def test_no_connection_is_retried_a_lost_answer_is_not():
    handle, seen = answers(httpx.ConnectError("refused"), rpc(3))
    time = FakeTime()
    assert run(client(handle, time).online()) == 3
    assert len(seen) == 2 and time.slept == [0.5]
    handle, seen = answers(httpx.ReadError("reset"))
    with pytest.raises(Unavailable) as caught:
        run(client(handle, FakeTime()).online())
    assert len(seen) == 1 and not caught.value.retryable


def test_an_upload_is_streamed_with_its_length_and_progress():
    body = b"email\n" + b"".join(b"user%d@example.com\n" % i for i in range(2000))
    got: list[bytes] = []
    progress: list[tuple[int, int | None]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        got.append(request.read())
        assert request.headers["content-length"] == str(len(body))
        assert request.headers["content-type"] == "text/csv"
        return httpx.Response(200, json={"name": "vip", "rows": 2000, "valid": 2000})

    segment = run(client(handle, FakeTime()).upload_segment(
        "vip", body, block=4096, progress=lambda sent, total: progress.append((sent, total))))
    assert segment["rows"] == 2000 and got == [body]
    assert progress[0] == (0, len(body)) and progress[-1] == (len(body), len(body))
    assert len(progress) == 1 + -(-len(body) // 4096)


def test_a_slow_answer_is_a_timeout_not_retried():
    async def handle(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return rpc(1)

    c = AsyncClient("http://node.test", timeout=0.05,
                    http=httpx.AsyncClient(transport=httpx.MockTransport(handle)))
    with pytest.raises(Unavailable) as caught:
        run(c.online())
    assert "no answer within" in str(caught.value) and caught.value.attempts == 1
