"""The graceful shutdown (SPEC 21) of ``twistd -n pushengine`` stopped with SIGTERM.

What each transport's client sees when its node stops: a parked poll gets
``[]`` (a whole HTTP 200), an SSE stream ends after a ``going-away``
message with its chunked body terminated, a WebSocket gets the events
queued for it and then a close frame with 1001; the process exits within
``--shutdown-timeout``. During ``--drain-delay`` the node is not ready but
serves. With ``--redis`` a session of a stopped node resumes on another.
"""
from __future__ import annotations

import json
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.e2e.conftest import Engine, start
from tests.transports.wsclient import WsClient
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e


def stream(id_: int) -> dict:
    return {"id": id_, "title": f"stream {id_}", "user_id": 1, "live": True, "public": True,
            "created_at": f"2026-01-01T00:00:{id_ % 60:02d}Z"}


def upsert(id_: int) -> dict:
    return {"type": "Stream", "action": "upsert", "obj": stream(id_)}


def subscribed(engine: Engine) -> str:
    sid = engine.call("session.create")
    engine.call("stream.subscribe_public_live", sid, 10)
    return sid


def poll_body(sid: str, timeout: float = 60) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session.get_events",
                       "params": [sid, timeout]}).encode()


class RawSse:
    """An SSE stream read from a plain socket: the head, then the chunked body."""

    def __init__(self, port: int, sid: str, last_event_id: int | None = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        resume = "" if last_event_id is None else f"Last-Event-ID: {last_event_id}\r\n"
        self.sock.sendall(f"GET /api/events?session={sid} HTTP/1.1\r\n"
                          f"Host: 127.0.0.1\r\n{resume}\r\n".encode())
        self.data = b""
        while b"\r\n\r\n" not in self.data:
            self._read()
        self.head, _, self.rest = self.data.partition(b"\r\n\r\n")
        assert self.head.startswith(b"HTTP/1.1 200"), self.head
        assert b"transfer-encoding: chunked" in self.head.lower()

    def _read(self) -> bytes:
        chunk = self.sock.recv(65536)
        self.data += chunk
        return chunk

    def until_closed(self) -> bytes:
        """Every byte until the server closes the connection."""
        while self._read():
            pass
        return self.data.partition(b"\r\n\r\n")[2]


def dechunk(body: bytes) -> tuple[bytes, bool]:
    """The chunked body's data, and whether its last chunk (``0``) came."""
    out = b""
    while body:
        size, _, body = body.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            return out, body == b"\r\n"
        out += body[:n]
        assert body[n:n + 2] == b"\r\n", body[:n + 2]
        body = body[n + 2:]
    return out, False


def sse_messages(text: bytes) -> list[dict[str, str]]:
    """The messages of an event stream (comments left out)."""
    assert text.endswith(b"\n\n"), text[-200:]
    out = []
    for block in text.decode().split("\n\n")[:-1]:
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            name, _, value = line.partition(": ")
            fields[name] = fields.get(name, "") + value
        if fields:
            out.append(fields)
    return out


def ws_attached(engine: Engine, sid: str) -> WsClient:
    ws = WsClient(engine.port, timeout=10)
    ws.call("session.attach", sid, 0)
    return ws


def ws_until_closed(ws: WsClient) -> None:
    """Read until the server's close frame, and answer it as a client does."""
    while ws.closed is None:
        ws._pump()
    ws.sock.sendall(ws.ws.send(ws.closed.response()))


def test_sigterm_answers_polls_ends_streams_closes_sockets_and_exits_in_time(
        tmp_path: Path) -> None:
    timeout = 6.0
    e = start(tmp_path, "--shutdown-timeout", str(timeout), "--max-timeout", "60")
    try:
        poll_sid, sse_sid, ws_sid = subscribed(e), subscribed(e), subscribed(e)
        sse = RawSse(e.port, sse_sid)
        ws = ws_attached(e, ws_sid)
        with ThreadPoolExecutor(1) as pool:
            poll = pool.submit(e.request, "POST", "/api/jsonrpc", poll_body(poll_sid),
                               {"Content-Type": "application/json"}, 30)
            wait_until(lambda: e.metric("pushengine_polls_waiting") == 1, what="a parked poll")
            wait_until(lambda: e.metric("pushengine_streams") == 2, what="two streams")
            # an event for each, queued just before the signal (the socket
            # and the stream are not read meanwhile)
            assert e.publish(upsert(7)).code == 200
            assert poll.result(10).json()["result"][0]["obj"]["id"] == 7
            poll = pool.submit(e.request, "POST", "/api/jsonrpc", poll_body(poll_sid),
                               {"Content-Type": "application/json"}, 30)
            wait_until(lambda: e.metric("pushengine_polls_waiting") == 1, what="a parked poll")
            started = time.monotonic()
            e.process.send_signal(signal.SIGTERM)
            answer = poll.result(timeout)
            # the parked poll: an ordinary, whole answer, [] (nothing new)
            assert answer.code == 200
            assert answer.json() == {"jsonrpc": "2.0", "id": 1, "result": []}
            assert answer.headers["Connection"] == "close"
        # the WebSocket: the event queued for it, then 1001
        ws_until_closed(ws)
        pushed = [ev for m in ws.messages if isinstance(m, dict) and m.get("method") == "events"
                  for ev in m["params"]]
        assert [ev["obj"]["id"] for ev in pushed if ev["action"] != "reset"][-1] == 7
        assert ws.closed is not None and ws.closed.code == 1001
        assert ws.closed.reason == "the node is shutting down"
        # the SSE stream: its event, a going-away message, the chunked body terminated
        body, terminated = dechunk(sse.until_closed())
        assert terminated, body[-200:]
        messages = sse_messages(body)
        assert json.loads(messages[-2]["data"])["obj"]["id"] == 7
        assert messages[-1] == {"event": "going-away",
                                "data": '{"code":1001,"reason":"the node is shutting down"}'}
        assert e.process.wait(timeout) in (0, -signal.SIGTERM)
        assert time.monotonic() - started < timeout
    finally:
        e.stop()
    log = e.log_text()
    assert "every client let go" in log, log[-3000:]
    assert "Traceback" not in log and "Unhandled" not in log, log[-3000:]


def test_during_the_drain_delay_the_node_is_not_ready_but_serves(tmp_path: Path) -> None:
    e = start(tmp_path, "--drain-delay", "2", "--shutdown-timeout", "8")
    try:
        sid = subscribed(e)
        assert e.get("/health/ready").code == 200
        started = time.monotonic()
        e.process.send_signal(signal.SIGTERM)
        ready = wait_until(lambda: (a := e.get("/health/ready")).code == 503 and a,
                           what="/health/ready 503")
        assert ready.json() == {"status": "unavailable", "reason": "shutting down"}
        # still serving: the live probe, calls, publishing, a poll with events
        assert e.get("/health/live").code == 200
        assert e.call("session.create")
        assert e.publish(upsert(3)).code == 200
        events = e.call("session.get_events", sid, 0)
        assert [ev["obj"]["id"] for ev in events if ev["action"] != "reset"] == [3]
        assert time.monotonic() - started < 2, "the drain delay was over before the checks"
        assert e.process.wait(8) in (0, -signal.SIGTERM)
        # it stopped listening after the delay, not before
        assert time.monotonic() - started >= 2
    finally:
        e.stop()
    log = e.log_text()
    assert "Traceback" not in log and "Unhandled" not in log, log[-3000:]


def test_a_request_that_never_ends_is_cut_at_the_shutdown_timeout(tmp_path: Path) -> None:
    timeout = 3.0
    e = start(tmp_path, "--shutdown-timeout", str(timeout))
    try:
        # a call in flight whose body never comes whole: the node waits for
        # it until the deadline, then cuts it
        # (behind a request answered at once: once its answer is read, the
        # node holds the second request, its body under way)
        s = socket.create_connection(("127.0.0.1", e.port), timeout=10)
        s.sendall(b"GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                  b"POST /api/jsonrpc HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        first = b""
        while not first.endswith(b"0\r\n\r\n"):       # (a chunked answer)
            first += s.recv(4096)
        started = time.monotonic()
        e.process.send_signal(signal.SIGTERM)
        assert e.process.wait(timeout + 3) in (0, -signal.SIGTERM)
        elapsed = time.monotonic() - started
        assert timeout - 1.5 <= elapsed < timeout + 1
        assert s.recv(100) == b""           # cut, with nothing more written
        s.close()
    finally:
        e.stop()
    log = e.log_text()
    assert "cutting what is still open at the shutdown deadline" in log, log[-3000:]


def test_a_second_sigterm_cuts_the_shutdown_short(tmp_path: Path) -> None:
    e = start(tmp_path, "--drain-delay", "20", "--shutdown-timeout", "30")
    try:
        started = time.monotonic()
        e.process.send_signal(signal.SIGTERM)
        wait_until(lambda: e.get("/health/ready").code == 503, what="/health/ready 503")
        e.process.send_signal(signal.SIGTERM)
        assert e.process.wait(10) in (0, -signal.SIGTERM)
        assert time.monotonic() - started < 10
    finally:
        e.stop()
    log = e.log_text()
    assert "a second signal: cutting every connection now" in log, log[-3000:]
    assert "Traceback" not in log and "Unhandled" not in log, log[-3000:]


def test_the_python_client_goes_on_through_a_balancer_when_its_node_stops(
        tmp_path: Path) -> None:
    """``pushengine.client`` holds a keep-alive connection; the node it
    reaches closes it when it stops, and the next call goes, on a new
    connection, to the node the balancer (a forwarder here) now sends to."""
    from pushengine.client import SyncClient
    from tests.e2e.test_production import Forwarder
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = start(tmp_path / "a")
    b = start(tmp_path / "b")
    forwarder = Forwarder(("127.0.0.1", a.port))
    try:
        with SyncClient(f"http://127.0.0.1:{forwarder.port}") as client:
            assert client.upsert("Stream", stream(1)) == 1       # kept alive, to A
            forwarder.target = ("127.0.0.1", b.port)             # the balancer took A out
            a.process.send_signal(signal.SIGTERM)
            assert a.process.wait(10) in (0, -signal.SIGTERM)
            for i in range(2, 5):                                # no error: to B
                assert client.upsert("Stream", stream(i)) == 1
        assert b.call("session.create")
    finally:
        forwarder.cut()
        a.stop()
        b.stop()
