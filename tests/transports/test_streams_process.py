"""SSE and WebSocket against ``twistd -n pushengine`` over real sockets (SPEC 10)."""
from __future__ import annotations

import json
import socket
import time

import pytest

from tests.e2e.conftest import start
from tests.transports.wsclient import WsClient

pytestmark = pytest.mark.e2e


def stream(id_: int, **fields) -> dict:
    obj = {"id": id_, "title": f"stream {id_}", "user_id": 1, "live": True, "public": True,
           "created_at": f"2026-01-01T00:{id_ // 60 % 60:02d}:{id_ % 60:02d}Z"}
    obj.update(fields)
    return {"type": "Stream", "action": "upsert", "obj": obj}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    e = start(tmp_path_factory.mktemp("streams"), "--max-queue", "50")
    yield e
    e.stop()


class Sse:
    """A raw SSE reader: the answer's head, then messages as they come."""

    def __init__(self, port: int, query: str, headers: dict | None = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        lines = [f"GET /api/events?{query} HTTP/1.1", "Host: 127.0.0.1"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            self._read()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        self.status = int(head.split()[1])
        self.head = head.decode("latin-1").lower()
        self.text = ""

    def _read(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("closed")
        self.buffer += data

    def body(self) -> bytes:
        while True:
            try:
                self._read()
            except (ConnectionError, socket.timeout):
                return self.buffer

    def _decode(self) -> None:
        # chunked transfer encoding: take whole chunks off the buffer
        while True:
            size, sep, rest = self.buffer.partition(b"\r\n")
            if not sep or len(rest) < int(size, 16) + 2:
                return
            n = int(size, 16)
            self.text += rest[:n].decode("utf-8")
            self.buffer = rest[n + 2:]

    def messages(self, count: int) -> list[dict]:
        """Wait for ``count`` data messages: [{"id": ..., "data": {...}}]."""
        for _ in range(200):
            self._decode()
            blocks = [b for b in self.text.split("\n\n") if "data: " in b]
            if len(blocks) >= count and self.text.endswith("\n\n"):
                out = []
                for block in blocks:
                    fields = dict(line.split(": ", 1) for line in block.split("\n")
                                  if ": " in line and not line.startswith(":"))
                    out.append({"id": int(fields["id"]), "data": json.loads(fields["data"])})
                return out
            self._read()
        raise AssertionError(f"fewer than {count} messages: {self.text!r}")

    def close(self) -> None:
        self.sock.close()


def test_sse_streams_events_with_ids_and_resumes_with_last_event_id(engine) -> None:
    sid = engine.call("session.create")
    key, _ = engine.call("stream.subscribe_public_live", sid, 10)
    sse = Sse(engine.port, f"session={sid}")
    assert sse.status == 200
    assert "content-type: text/event-stream" in sse.head
    assert "cache-control: no-store" in sse.head
    engine.publish(stream(1), stream(2))
    got = sse.messages(2)
    assert [m["id"] for m in got] == [1, 2]
    assert [m["data"]["seq"] for m in got] == [1, 2]
    assert got[0]["data"]["key"] == key and got[0]["data"]["action"] == "insert"
    assert sse.text.startswith(": open\n\nretry: 3000\nid: 1\ndata: ")
    sse.close()
    engine.publish(stream(3))
    again = Sse(engine.port, f"session={sid}", {"Last-Event-ID": "1"})
    assert [m["id"] for m in again.messages(2)] == [2, 3]
    again.close()
    by_query = Sse(engine.port, f"session={sid}&last_event_id=2")
    assert [m["id"] for m in by_query.messages(1)] == [3]
    by_query.close()


def test_sse_bad_requests_are_json_errors(engine) -> None:
    sid = engine.call("session.create")
    cases = [("session=nope", {}, 404, 1001), ("", {}, 400, -32602),
             (f"session={sid}", {"Last-Event-ID": "x"}, 400, -32602),
             (f"session={sid}", {"Last-Event-ID": "99"}, 400, -32602)]
    for query, headers, status, code in cases:
        sse = Sse(engine.port, query, headers)
        assert sse.status == status, (query, headers)
        assert "application/json" in sse.head
        body = sse.body()
        assert json.loads(body)["error"]["code"] == code, body
        sse.close()


def test_websocket_calls_events_attach_and_replacement(engine) -> None:
    ws = WsClient(engine.port)
    sid = ws.call("session.create")["result"]
    key, state = ws.call("stream.subscribe_public_live", sid, 10)["result"]
    assert ws.call("session.get_events", sid, 0)["error"]["code"] == -32601
    engine.publish(stream(10))
    (event,) = ws.events(1)
    assert event["key"] == key and event["obj"]["id"] == 10
    # a batch on the socket
    ws.send_text(json.dumps([{"jsonrpc": "2.0", "id": 77, "method": "stats.online"},
                             {"jsonrpc": "2.0", "id": 78, "method": "no.such"}]))
    batch = ws.wait(lambda m: isinstance(m, list))
    assert {a["id"] for a in batch} == {77, 78}
    # another socket takes the session over with replay from seq 0
    other = WsClient(engine.port)
    assert other.call("session.attach", sid, 0)["result"] is True
    assert [e["seq"] for e in other.events(1)] == [event["seq"]]
    with pytest.raises(ConnectionError, match="1000"):
        ws.wait(lambda m: False, limit=5)
    assert other.call("session.attach", sid, 999)["error"]["code"] == -32602
    assert other.call("session.attach", "nope", 0)["error"]["code"] == 1001
    other.close()


def test_websocket_bad_input(engine) -> None:
    ws = WsClient(engine.port)
    ws.send_bytes(b"\x00binary")
    assert ws.wait(lambda m: isinstance(m, dict) and "error" in m)["error"]["code"] == -32600
    ws.send_text("{not json")
    assert ws.wait(lambda m: isinstance(m, dict) and "error" in m
                   and m["error"]["code"] == -32700)
    ws.send_text('{"jsonrpc":"2.0","id":1,"method":"stats.online","params":["\\ud800"]}')
    assert ws.wait(lambda m: isinstance(m, dict) and m.get("id") == 1)["error"]["code"] == -32602
    ws.send_text("x" * (1 << 20 + 1))
    with pytest.raises(ConnectionError, match="1009"):
        ws.wait(lambda m: False, limit=50)
    # the node serves everyone else as before
    assert engine.call("stats.online") >= 0


def test_a_plain_get_of_the_websocket_path_is_a_json_426(engine) -> None:
    answer = engine.get("/api/ws")
    assert answer.code == 426 and answer.json()["error"]["code"] == -32600


def test_a_client_that_never_reads_does_not_hold_memory_or_others(engine) -> None:
    """A socket that stops reading: its session's log overflows into a reset,
    the node's memory stays bounded and another client keeps getting events."""
    slow = WsClient(engine.port)
    slow_sid = slow.call("session.create")["result"]
    slow.call("stream.subscribe_public_live", slow_sid, 50)
    slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    fast_sid = engine.call("session.create")
    engine.call("stream.subscribe_public_live", fast_sid, 50)
    fast = Sse(engine.port, f"session={fast_sid}")
    big = "x" * 900
    before = engine.metric("pushengine_queue_overflows_total")
    t0 = time.monotonic()
    for batch in range(40):
        engine.publish(*[stream(1000 + batch * 25 + i, title=big) for i in range(25)])
        if batch % 8 == 0:
            assert fast.messages(1)
    assert time.monotonic() - t0 < 30
    assert engine.metric("pushengine_queue_overflows_total") > before
    with open(f"/proc/{engine.process.pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
    assert rss < 400_000, rss
    fast.close()
    slow.sock.close()


def test_sse_and_websocket_respect_api_keys_and_origin(tmp_path) -> None:
    e = start(tmp_path, "--api-key", "k1", "--cors-origin", "https://app.example")
    try:
        sid = json.loads(e.post("/api/jsonrpc?apikey=k1", {
            "jsonrpc": "2.0", "id": 1, "method": "session.create"}).body)["result"]
        assert Sse(e.port, f"session={sid}").status == 403
        ok = Sse(e.port, f"session={sid}&apikey=k1", {"Origin": "https://app.example"})
        assert ok.status == 200
        ok.close()
        assert Sse(e.port, f"session={sid}&apikey=k1",
                   {"Origin": "https://evil.example"}).status == 403
        assert WsClient(e.port, "/api/ws").rejected == 403
        assert WsClient(e.port, "/api/ws?apikey=k1",
                        [(b"origin", b"https://evil.example")]).rejected == 403
        ws = WsClient(e.port, "/api/ws?apikey=k1", [(b"origin", b"https://app.example")])
        assert ws.rejected is None and "result" in ws.call("session.create")
        ws.close()
    finally:
        e.stop()
