"""Webhooks of a real ``twistd -n pushengine`` to real local HTTP receivers:
one that fails its first attempts, one that never answers (SPEC section 16)."""
from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest

from pushengine.webhooks.sender import SIGNATURE_HEADER, verify
from tests.e2e.conftest import start
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
SECRET = "webhook-secret-for-the-process-test"
JWT_SECRET = "jwt-secret-of-at-least-thirty-two-bytes"


class Receiver(ThreadingHTTPServer):
    """Answers 503 to its first ``fail`` POSTs, 200 (and records) after."""

    daemon_threads = True

    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.attempts = 0
        self.accepted: list[dict] = []
        self.bad_signatures = 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        server: Receiver = self.server
        with server.lock:
            server.attempts += 1
            if not verify(SECRET, body, self.headers[SIGNATURE_HEADER]):
                server.bad_signatures += 1
            failing = server.attempts <= server.fail
            if not failing:
                server.accepted.append(json.loads(body))
        self.send_response(503 if failing else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def token(user: str) -> str:
    return jwt.encode({"sub": user}, JWT_SECRET, algorithm="HS256")


def test_a_receiver_that_fails_first_gets_each_event_once_signed_in_order(tmp_path) -> None:
    receiver = Receiver(fail=4)
    engine = start(tmp_path, "--webhook-url", receiver.url, "--webhook-secret", SECRET,
                   "--secret", JWT_SECRET, "--session-timeout", "1")
    try:
        sids = [engine.call("session.create") for _ in range(5)]
        for i, sid in enumerate(sids):
            engine.call("session.authorize", sid, token(f"user{i}"))
        for sid in sids[:3]:
            engine.call("session.destroy", sid)
        # the other two expire after --session-timeout
        wait_until(lambda: len(receiver.accepted) >= 15, 30.0, "15 events accepted")
        # nothing more comes once the node has no event waiting nor in flight
        wait_until(lambda: engine.metric("pushengine_webhooks_queued") == 0
                   and engine.metric("pushengine_webhooks_in_flight") == 0, 10,
                   "the webhook queue drained")
        assert receiver.attempts > len(receiver.accepted) and receiver.bad_signatures == 0
        got = [(e["event"], e["session"]) for e in receiver.accepted]
        assert len(got) == len(set(got)) == 5 * 3
        for i, sid in enumerate(sids):
            mine = [e for e in receiver.accepted if e["session"] == sid]
            last = "session.destroyed" if i < 3 else "session.expired"
            assert [e["event"] for e in mine] == ["session.created", "session.authorized", last]
            assert [e["user"] for e in mine] == [None, f"user{i}", f"user{i}"]
            assert all(e["node"] == "e2e" for e in mine)
        assert engine.metric("pushengine_webhooks_failed_total") >= 4
        assert engine.metric("pushengine_webhooks_queued") == 0
    finally:
        engine.stop()
        receiver.shutdown()


def test_a_receiver_that_never_answers_bounds_memory_and_not_delivery(tmp_path) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)                          # accepts nothing, answers nothing
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/hook"
    engine = start(tmp_path, "--webhook-url", url, "--webhook-secret", SECRET,
                   "--webhook-queue", "50", "--max-client-sessions", "0", "--client-rate", "0")
    try:
        sids = [engine.call("session.create") for _ in range(300)]
        key, _ = engine.call("session.subscribe", sids[0], "PublicLiveStreamView", {}, 10)
        began = time.monotonic()
        engine.publish({"type": "Stream", "action": "upsert",
                        "obj": {"id": 1, "title": "t", "user_id": 1, "live": True,
                                "public": True, "created_at": "2026-01-01T00:00:00Z"}})
        events = engine.call("session.get_events", sids[0], 5)
        assert [e["action"] for e in events] == ["insert"] and events[0]["key"] == key
        assert time.monotonic() - began < 2.0
        assert engine.metric("pushengine_webhooks_queued") <= 50
        assert engine.metric("pushengine_webhooks_dropped_total") >= 250
        assert engine.metric("pushengine_webhooks_sent_total") == 0
    finally:
        engine.stop()
        silent.close()
