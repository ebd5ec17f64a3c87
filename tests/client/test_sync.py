"""The synchronous flavour against a fake node on a loopback socket; its
waits go to a fake sleep that moves a fake clock."""
from __future__ import annotations

import threading

import pytest

from pushengine.client import BadInput, RateLimited, RetryPolicy, SyncClient, Unavailable
from tests.client.fakenode import Answer, FakeNode, rpc_error, rpc_result
from tests.services import free_port


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def client(url: str, time: FakeTime, **kwargs) -> SyncClient:
    kwargs.setdefault("retry", RetryPolicy(jitter=0))
    return SyncClient(url, publish_key="pk", admin_key="admin-key-0123456", sleep=time.sleep,
                      clock=time.clock, **kwargs)


def test_calls_answer_their_results_on_one_kept_connection():
    node = FakeNode(rpc_result("OK"), rpc_result([{"id": "n1"}]), Answer(200, {"accepted": 2}))
    with node.serve() as url:
        c = client(url, FakeTime())
        assert c.bf_reserve("k", 0.01, 1000) == "OK"
        assert c.admin_stats() == [{"id": "n1"}]
        assert c.delete_many("Stream", [1, 2]) == 2
        c.close()
    assert [s.path for s in node.seen] == ["/api/jsonrpc", "/api/jsonrpc", "/api/publish"]
    assert node.connections == 1
    assert node.seen[1].json()["params"] == ["admin-key-0123456"]
    assert all(s.headers["authorization"] == "Bearer pk" for s in node.seen)


def test_429_sleeps_retry_after_then_succeeds():
    node = FakeNode(rpc_error(1007, "rate limited", 429, **{"Retry-After": "3"}), rpc_result(5))
    time = FakeTime()
    with node.serve() as url:
        assert client(url, time).online() == 5
    assert time.slept == [3.0] and len(node.seen) == 2


def test_the_attempts_bound_and_the_last_error():
    node = FakeNode(rpc_error(1007, "rate limited", 429, **{"Retry-After": "1"}))
    time = FakeTime()
    with node.serve() as url, pytest.raises(RateLimited) as caught:
        client(url, time, retry=RetryPolicy(attempts=4, jitter=0)).bf_add("k", "a")
    assert time.slept == [1.0, 1.0, 1.0] and len(node.seen) == 4
    assert caught.value.attempts == 4 and caught.value.code == 1007


def test_a_400_is_not_retried():
    node = FakeNode(Answer(400, {"error": "malformed change", "details": ["change 0: bad"]}))
    time = FakeTime()
    with node.serve() as url, pytest.raises(BadInput) as caught:
        client(url, time).publish({"type": "A"})
    assert time.slept == [] and len(node.seen) == 1 and caught.value.changes == {0: "bad"}


def test_nothing_listening_is_retried_then_unavailable():
    time = FakeTime()
    c = client(f"http://127.0.0.1:{free_port()}", time, retry=RetryPolicy(attempts=3, jitter=0))
    with pytest.raises(Unavailable) as caught:
        c.bf_add("k", "a")
    assert time.slept == [0.5, 1.0] and caught.value.attempts == 3
    assert "cannot connect" in str(caught.value)


def test_a_kept_connection_the_node_closed_is_replaced_without_a_retry():
    node = FakeNode(Answer(200, {"accepted": 1}, close=True), Answer(200, {"accepted": 1}))
    time = FakeTime()
    with node.serve() as url:
        c = client(url, time)
        assert c.upsert("A", {"id": 1}) == 1
        assert c.upsert("A", {"id": 2}) == 1      # on a new connection, sent once
    assert len(node.seen) == 2 and time.slept == [] and node.connections == 2


def test_uploads_are_streamed_with_progress_sized_or_chunked(tmp_path):
    node = FakeNode(respond=lambda seen: Answer(200, {"name": "vip", "bytes": len(seen.body)}))
    contents = b"phone,email\n" + b"79995551111,a@example.com\n" * 1000
    path = tmp_path / "contacts.csv"
    path.write_bytes(contents)
    with node.serve() as url:
        c = client(url, FakeTime())
        progress: list = []
        answer = c.upload_segment("vip", str(path), block=4096,
                                  progress=lambda sent, total: progress.append((sent, total)))
        assert answer == {"name": "vip", "bytes": len(contents)}
        assert progress[0] == (0, len(contents)) and progress[-1] == (len(contents),) * 2
        assert len(progress) == 1 + -(-len(contents) // 4096)
        blocks = (contents[i:i + 1000] for i in range(0, len(contents), 1000))
        assert c.upload_segment("vip", blocks)["bytes"] == len(contents)
    sized, chunked = node.seen
    assert sized.headers["content-length"] == str(len(contents)) and sized.body == contents
    assert chunked.headers["transfer-encoding"] == "chunked" and chunked.body == contents


def test_threads_have_their_own_connections():
    node = FakeNode(respond=lambda seen: rpc_result(seen.json()["params"]["item"]))
    results: dict[int, list] = {}
    with node.serve() as url:
        c = client(url, FakeTime())

        def work(n: int) -> None:
            results[n] = [c.rpc("bf.add", {"key": "k", "item": f"{n}-{i}"}) for i in range(20)]
        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert results == {n: [f"{n}-{i}" for i in range(20)] for n in range(4)}
