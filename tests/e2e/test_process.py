"""The engine as it runs: ``twistd -n pushengine`` in a subprocess, over real sockets."""
from __future__ import annotations

import json
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.e2e.conftest import Engine, start
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e


def stream(id_: int, **fields) -> dict:
    obj = {"id": id_, "title": f"stream {id_}", "user_id": 340699, "live": True,
           "public": True, "created_at": f"2026-01-01T00:00:{id_:02d}Z"}
    obj.update(fields)
    return obj


def upsert(obj: dict) -> dict:
    return {"type": "Stream", "action": "upsert", "obj": obj}


def raw_request(engine: Engine, head: bytes, body: bytes = b"") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", engine.port), timeout=5)
    s.sendall(head + body)
    return s


def read_response(s: socket.socket) -> bytes:
    """One response with a Content-Length, without waiting for the close."""
    data = b""
    while True:
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            length = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")]
            if length and len(body) >= length[0]:
                return data
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk


def test_health_and_metrics(engine: Engine) -> None:
    health = engine.get("/health")
    assert health.code == 200 and health.headers["Content-Type"] == "application/json"
    report = health.json()
    assert report["status"] == "ok" and report["node"] == "e2e"
    assert report["feed"]["up"] is True
    metrics = engine.get("/metrics")
    assert metrics.headers["Content-Type"].startswith("text/plain")
    assert engine.metric("pushengine_polls_waiting") == 0


def test_subscribe_publish_and_poll(engine: Engine) -> None:
    sid = engine.call("session.create")
    key, state = engine.call("stream.subscribe_user", sid, 340699, 5)
    assert key == "UserStreamView(user_id=340699;limit=5)" and state == []
    with ThreadPoolExecutor(1) as pool:
        poll = pool.submit(engine.call, "session.get_events", sid, 5)
        wait_until(lambda: engine.metric("pushengine_polls_waiting") == 1,
                   what="a parked poll")
        assert engine.publish(upsert(stream(1))).json() == {"accepted": 1}
        events = poll.result(5)
    assert events == [{"seq": 1, "key": key, "action": "insert", "obj": stream(1)}]
    engine.publish(upsert(stream(1, title="renamed")),
                   {"type": "Stream", "action": "delete", "obj": {"id": 1}})
    events = engine.call("session.get_events", sid, 5, 1)
    assert [(e["seq"], e["action"]) for e in events] == [(2, "update"), (3, "delete")]
    assert events[0]["old"] == stream(1) and events[0]["obj"]["title"] == "renamed"
    assert events[1]["obj"] == stream(1, title="renamed")
    # an ack of 1 redelivers what followed it
    assert engine.call("session.get_events", sid, 0, 1) == events
    assert engine.call("session.get_events", sid, 0, 3) == []
    assert engine.call("session.destroy", sid) is True


def test_poll_times_out_empty(engine: Engine) -> None:
    sid = engine.call("session.create")
    started = time.monotonic()
    assert engine.call("session.get_events", sid, 0.3) == []
    assert 0.25 < time.monotonic() - started < 3


def test_poll_capped_by_max_timeout(engine: Engine) -> None:
    sid = engine.call("session.create")
    started = time.monotonic()
    assert engine.call("session.get_events", sid, 3600, timeout=15) == []
    assert 4.5 < time.monotonic() - started < 8          # --max-timeout 5


def test_client_closing_mid_poll_frees_the_waiter(engine: Engine) -> None:
    sid = engine.call("session.create")
    engine.call("stream.subscribe_public_live", sid)
    body = json.dumps({"jsonrpc": "2.0", "method": "session.get_events",
                       "params": [sid, 5], "id": 1}).encode()
    head = (b"POST /api/jsonrpc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))
    s = raw_request(engine, head, body)
    wait_until(lambda: engine.metric("pushengine_polls_waiting") == 1, what="a parked poll")
    s.close()
    wait_until(lambda: engine.metric("pushengine_polls_waiting") == 0, what="the waiter freed")
    # the session lives on, and the change goes to its next poll
    engine.publish(upsert(stream(2)))
    events = engine.call("session.get_events", sid, 1)
    assert [e["obj"]["id"] for e in events] == [2]


def test_body_above_max_body_gets_413_from_its_length(engine: Engine) -> None:
    head = (b"POST /api/jsonrpc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000\r\n\r\n")
    s = raw_request(engine, head, b"[" + b" " * 1000)       # most of the body never comes
    try:
        response = read_response(s)
    finally:
        s.close()
    assert response.startswith(b"HTTP/1.1 413 ")
    head, _, body = response.partition(b"\r\n\r\n")
    assert b"application/json" in head.lower()
    assert json.loads(body)["error"]["code"] == -32600


@pytest.mark.parametrize("path", ["/api/jsonrpc", "/api/publish"])
def test_full_body_above_max_body_gets_413(engine: Engine, path: str) -> None:
    sessions = engine.metric("pushengine_sessions")
    changes = engine.metric("pushengine_changes_total")
    if path == "/api/jsonrpc":
        body = json.dumps([{"jsonrpc": "2.0", "method": "session.create", "id": i}
                           for i in range(100)]).encode()
    else:
        body = json.dumps([upsert(stream(i)) for i in range(100, 160)]).encode()
    assert len(body) > 4096
    answer = engine.post(path, body)
    assert answer.code == 413
    assert answer.headers["Content-Type"] == "application/json"
    assert "too large" in answer.body.decode()
    assert engine.metric("pushengine_sessions") == sessions
    assert engine.metric("pushengine_changes_total") == changes


def test_body_just_under_max_body_is_served(engine: Engine) -> None:
    body = json.dumps({"jsonrpc": "2.0", "method": "stats.online", "id": 1}).encode()
    body += b" " * (4096 - len(body))
    answer = engine.post("/api/jsonrpc", body)
    assert answer.code == 200 and isinstance(answer.json()["result"], int)


def test_errors_are_json(engine: Engine) -> None:
    for method, path, body in [("GET", "/api/jsonrpc", b'{"jsonrpc":"2.0"}'),
                               ("GET", "/nope", None), ("POST", "/api/jsonrpc", b"{"),
                               ("GET", "/static/js/nope.js", None),
                               ("GET", "/static/js/%ff", None)]:
        answer = engine.request(method, path, body)
        assert answer.code in (200, 400, 404, 405), (path, answer.code)
        assert "html" not in (answer.headers["Content-Type"] or "").lower(), path
        assert b"Traceback" not in answer.body and b"<html" not in answer.body.lower()


def test_static_js_is_served(engine: Engine) -> None:
    answer = engine.get("/static/js/api.js")
    assert answer.code == 200
    assert answer.headers["Content-Type"].startswith("text/javascript")
    assert b"export" in answer.body


def test_demo_views_change_by_themselves(tmp_path) -> None:
    demo = start(tmp_path, "--demo", "--demo-rate", "20")
    try:
        sid = demo.call("session.create")
        key, state = demo.call("stream.subscribe_public_live", sid, 50)
        seen = []

        def changed() -> bool:
            seen.extend(e for e in demo.call("session.get_events", sid, 2)
                        if e["action"] != "ping")
            return len(seen) >= 3
        wait_until(changed, timeout=10, what="demo events")
        assert all(e["key"] == key for e in seen)
        assert {e["action"] for e in seen} <= {"insert", "update", "delete", "reset"}
        assert demo.metric("pushengine_changes_total") > 0
    finally:
        demo.stop()


def test_stops_cleanly_on_sigterm(tmp_path) -> None:
    e = start(tmp_path, "--demo")
    try:
        sid = e.call("session.create")
        e.call("stream.subscribe_user", sid, 1)      # a view the demo leaves alone
        with ThreadPoolExecutor(1) as pool:
            poll = pool.submit(lambda: e.request(
                "POST", "/api/jsonrpc", json.dumps({"jsonrpc": "2.0", "id": 1,
                                                   "method": "session.get_events",
                                                   "params": [sid, 60]}).encode()))
            wait_until(lambda: e.metric("pushengine_polls_waiting") == 1, what="a parked poll")
            started = time.monotonic()
            e.process.send_signal(signal.SIGTERM)
            # twistd stops its services, then ends itself with the signal it got
            assert e.process.wait(10) in (0, -signal.SIGTERM)
            assert time.monotonic() - started < 5
            # the parked poll was answered, an ordinary answer (SPEC 21)
            assert poll.result(5).json()["result"] == []
    finally:
        e.stop()
    log = e.log_text()
    assert "Server Shut Down" in log
    assert "Traceback" not in log and "Unhandled" not in log, log[-3000:]
