"""The HTTP edge cases against both fronts (``--http fast`` and ``--http
twisted``): the same bytes in must give the same answers out (status and
JSON body; twisted.web adds Server and Date headers, the fast front does not).
"""
from __future__ import annotations

import json

import pytest

from tests.http.harness import ClockNode, Raw, http_request

FRONTS = ["fast", "twisted"]


def rpc_bytes(method: str, *params, id_=1, extra: dict | None = None) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": id_, "method": method,
                       "params": list(params)}).encode()
    return http_request("POST", "/api/jsonrpc", body,
                        {"Content-Type": "application/json", **(extra or {})})


def answers(front: str, data: bytes, *argv: str, chunks: int = 1, host: str = "127.0.0.1"):
    node = ClockNode("--http", front, *argv)
    raw = Raw(node.http_factory(), host=host)
    size = max(1, len(data) // chunks)
    for i in range(0, len(data), size):
        raw.send(data[i:i + size])
    node.clock.advance(0)
    return node, raw, [(r.code, _body(r)) for r in raw.responses()]


def _body(reply):
    if not reply.body:
        return None
    value = reply.json()
    if isinstance(value, dict) and isinstance(value.get("result"), str) and len(value["result"]) > 16:
        value = {**value, "result": "<sid>"}          # session ids differ between runs
    return value


def both(data: bytes, *argv: str, **kw):
    results = {front: answers(front, data, *argv, **kw)[2] for front in FRONTS}
    assert results["fast"] == results["twisted"], results
    return results["fast"]


def test_keep_alive_and_pipelining_answer_in_order() -> None:
    data = rpc_bytes("stats.online", id_=1) + rpc_bytes("no.such", id_=2) + \
        http_request("GET", "/health") + rpc_bytes("stats.online", id_=3)
    got = both(data)
    assert [code for code, _ in got] == [200, 200, 200, 200]
    assert got[0][1]["id"] == 1 and got[1][1]["error"]["code"] == -32601
    assert got[2][1]["status"] == "ok" and got[3][1]["id"] == 3


@pytest.mark.parametrize("chunks", [1, 7, 200])
def test_requests_split_anywhere(chunks: int) -> None:
    data = rpc_bytes("session.create") + rpc_bytes("stats.online", id_=2)
    got = both(data, chunks=chunks)
    assert [code for code, _ in got] == [200, 200]


def test_a_chunked_body() -> None:
    body = b'{"jsonrpc":"2.0","id":9,"method":"stats.online"}'
    data = (b"POST /api/jsonrpc HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (10, body[:10], len(body) - 10, body[10:]))
    assert both(data) == [(200, {"jsonrpc": "2.0", "result": 0, "id": 9})]


def test_413_before_the_body_from_content_length() -> None:
    data = http_request("POST", "/api/jsonrpc", b"", {}, length=10_000_000)
    for front in FRONTS:
        node, raw, got = answers(front, data, "--max-body", "1000")
        assert got[0][0] == 413 and got[0][1]["error"]["code"] == -32600, (front, got)
        # both read and drop the body for a moment (lingering close), then close
        assert not raw.closing
        node.clock.advance(60)
        assert raw.closing


def test_413_for_a_chunked_body_past_the_limit() -> None:
    data = (b"POST /api/publish HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + (b"400\r\n" + b"x" * 1024 + b"\r\n") * 3)
    for front in FRONTS:
        node, raw, got = answers(front, data, "--max-body", "2000")
        assert got and got[0][0] == 413, (front, got)


def test_a_lying_content_length_waits_for_the_body_then_the_next_request() -> None:
    body = b'{"jsonrpc":"2.0","id":1,"method":"stats.online"}'
    data = http_request("POST", "/api/jsonrpc", body, {}, length=len(body) + 5)
    for front in FRONTS:
        node, raw, got = answers(front, data)
        assert got == [], (front, got)                 # the body is not complete yet
        raw.send(b"     ")
        assert [r.code for r in raw.responses()] == [200], front


@pytest.mark.parametrize("data", [
    b"GARBAGE\r\n\r\n",
    b"POST /api/jsonrpc HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"GET / HTTP/9.9\r\n\r\n",
    b"POST /api/jsonrpc HTTP/1.1\r\nno colon here\r\n\r\n",
])
def test_malformed_requests_get_a_json_400_and_close(data: bytes) -> None:
    for front in FRONTS:
        node, raw, got = answers(front, data)
        assert got and got[0][0] == 400 and isinstance(got[0][1], dict), (front, got)
        assert raw.closing, front


def test_slow_headers_get_408_then_close() -> None:
    for front in FRONTS:
        node = ClockNode("--http", front, "--header-timeout", "2")
        raw = Raw(node.http_factory())
        raw.send(b"POST /api/jsonrpc HTTP/1.1\r\n")
        for _ in range(3):
            node.clock.advance(0.9)
            raw.send(b"X-Slow: 1\r\n")
        assert raw.closing, front
        assert raw.responses()[0].code == 408, front


def test_idle_connections_close_after_the_idle_timeout() -> None:
    for front in FRONTS:
        node = ClockNode("--http", front, "--idle-timeout", "5")
        raw = Raw(node.http_factory())
        raw.send(rpc_bytes("stats.online"))
        node.clock.advance(4)
        assert not raw.closing, front
        node.clock.advance(2)
        assert raw.closing, front


def test_a_parked_poll_answers_in_order_and_is_dropped_when_the_client_leaves() -> None:
    for front in FRONTS:
        node = ClockNode("--http", front)
        raw = Raw(node.http_factory())
        raw.send(rpc_bytes("session.create"))
        sid = raw.responses()[0].json()["result"]
        raw.send(rpc_bytes("session.get_events", sid, 30, id_=2) + rpc_bytes("stats.online", id_=3))
        assert len(raw.responses()) == 1 and node.engine.sessions.waiting == 1, front
        node.clock.advance(31)
        got = [r.json()["id"] for r in raw.responses()]
        assert got == [1, 2, 3], (front, got)          # the answer behind it waited its turn
        raw.send(rpc_bytes("session.get_events", sid, 30, id_=4))
        assert node.engine.sessions.waiting == 1
        from twisted.internet.error import ConnectionDone
        from twisted.python.failure import Failure
        raw.protocol.connectionLost(Failure(ConnectionDone()))
        assert node.engine.sessions.waiting == 0, front


def test_api_keys_cors_and_the_client_address() -> None:
    argv = ("--api-key", "k1", "--cors-origin", "https://app.example",
            "--trusted-proxies", "127.0.0.1", "--max-client-sessions", "1")
    refused = both(rpc_bytes("stats.online"), *argv)
    assert refused[0][0] == 403 and refused[0][1]["error"]["code"] == 1003
    ok = both(rpc_bytes("stats.online", extra={"X-Api-Key": "k1"}), *argv)
    assert ok[0][0] == 200
    for front in FRONTS:
        node, raw, _ = answers(front, rpc_bytes("stats.online", extra={"X-Api-Key": "k1"}), *argv)
        assert raw.responses()[0].header("access-control-allow-origin") == "https://app.example"
        data = (rpc_bytes("session.create", extra={"X-Api-Key": "k1",
                                                   "X-Forwarded-For": "198.51.100.1"})
                + rpc_bytes("session.create", extra={"X-Api-Key": "k1",
                                                     "X-Forwarded-For": "198.51.100.2"})
                + rpc_bytes("session.create", extra={"X-Api-Key": "k1",
                                                     "X-Forwarded-For": "198.51.100.1"}))
        node, raw, got = answers(front, data, *argv)
        assert [code for code, _ in got] == [200, 200, 429], (front, got)
        assert raw.responses()[2].header("retry-after") == "10"


def test_publish_on_both_fronts() -> None:
    change = json.dumps({"type": "Stream", "action": "upsert", "obj": {
        "id": 1, "public": True, "live": True}}).encode()
    ok = both(http_request("POST", "/api/publish", change))
    assert ok == [(200, {"accepted": 1})]
    web_page = both(http_request("POST", "/api/publish", change, {"Origin": "https://x.example"}))
    assert web_page[0][0] == 403
    remote = both(http_request("POST", "/api/publish", change), host="203.0.113.5")
    assert remote[0][0] == 403
    keyed = both(http_request("POST", "/api/publish", change,
                              {"Authorization": "Bearer pk"}), "--publish-key", "pk")
    assert keyed == [(200, {"accepted": 1})]
    bad = both(http_request("POST", "/api/publish", b'{"type":"Stream"}'))
    assert bad[0][0] == 400


def test_a_notification_is_204_on_both() -> None:
    body = b'{"jsonrpc":"2.0","method":"stats.online"}'
    assert both(http_request("POST", "/api/jsonrpc", body)) == [(204, None)]


def test_other_routes_pass_through_the_fast_front_in_order() -> None:
    """(Static files too: their answers are driven by twisted.web's producers,
    which the browser tests exercise through the fast front.)"""
    data = http_request("GET", "/health") + http_request("GET", "/nope") + \
        rpc_bytes("stats.online") + http_request("GET", "/metrics") + rpc_bytes("stats.online")
    node = ClockNode("--http", "fast")
    raw = Raw(node.http_factory())
    raw.send(data)
    replies = raw.responses()
    assert [r.code for r in replies] == [200, 404, 200, 200, 200]
    assert "text/plain" in replies[3].header("content-type")
