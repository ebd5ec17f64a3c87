"""Presence across two ``twistd -n pushengine`` processes sharing a real
memcached (SPEC section 16)."""
from __future__ import annotations

import time
from pathlib import Path

import jwt
import pytest

from tests.e2e.conftest import start
from tests.memcache.conftest import MemcachedProcess

pytestmark = pytest.mark.e2e
VIEWS = str(Path(__file__).with_name("views_presence.yaml"))
SECRET = "jwt-secret-of-at-least-thirty-two-bytes"


def token(user: str) -> str:
    return jwt.encode({"sub": user}, SECRET, algorithm="HS256")


def joins(engine, sid, wait: float = 5.0) -> list:
    end, got = time.monotonic() + wait, []
    while time.monotonic() < end:
        got += [(e["action"], e["obj"]["user"])
                for e in engine.call("session.get_events", sid, 1)
                if e["action"] in ("join", "leave")]
        if got:
            return got
    return got


def test_presence_across_two_nodes_through_memcached(tmp_path) -> None:
    server = MemcachedProcess().start()
    args = ("--views", VIEWS, "--secret", SECRET, "--memcache", server.address,
            "--max-timeout", "2")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = start(tmp_path / "a", *args, "--node-id", "a")
    b = start(tmp_path / "b", *args, "--node-id", "b")
    try:
        sa = a.call("session.create")
        a.call("session.authorize", sa, token("alice"))
        ka, _ = a.call("session.subscribe", sa, "RoomView", {"room_id": 1}, 10)
        sb = b.call("session.create")
        b.call("session.authorize", sb, token("bob"))
        kb, _ = b.call("session.subscribe", sb, "RoomView", {"room_id": 1}, 10)
        assert ka == kb
        assert joins(a, sa) == [("join", "bob")]          # bob joined on the other node
        assert a.call("presence.list", sa, ka) == ["alice", "bob"]
        assert b.call("presence.list", sb, kb) == ["alice", "bob"]
        # a session not subscribed to that key may not ask
        other = b.call("session.create")
        answer = b.post("/api/jsonrpc", {"jsonrpc": "2.0", "id": 1, "method": "presence.list",
                                         "params": [other, kb]}).json()
        assert answer["error"]["code"] == 1005
        b.call("session.destroy", sb)
        assert joins(a, sa) == [("leave", "bob")]
        assert a.call("presence.list", sa, ka) == ["alice"]
    finally:
        a.stop()
        b.stop()
        server.stop()
