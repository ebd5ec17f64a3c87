"""A real node whose Redis goes away and comes back: it keeps serving the
sessions it holds, /health says Redis is down (status still ok), resume
answers 1001, and the entries are written again once Redis is back."""
from __future__ import annotations

import pytest

from tests.cluster.resp import Resp
from tests.e2e.conftest import start
from tests.waiting import wait_until

pytestmark = [pytest.mark.service, pytest.mark.e2e]


def rpc(node, method, *params):
    answer = node.post("/api/jsonrpc", {"jsonrpc": "2.0", "id": 1, "method": method,
                                        "params": list(params)}).json()
    return answer.get("result"), answer.get("error")


def test_a_node_outlives_its_redis(tmp_path, own_redis) -> None:
    url = f"redis://127.0.0.1:{own_redis.port}/0?refresh=1"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = start(tmp_path / "a", "--redis", url, "--node-id", "down-a", "--max-timeout", "2")
    b = start(tmp_path / "b", "--redis", url, "--node-id", "down-b", "--max-timeout", "2")
    try:
        sid, _ = rpc(a, "session.create")
        rpc(a, "stream.subscribe_public_live", sid, 5)
        with Resp("127.0.0.1", own_redis.port) as r:
            assert r("HGET", f"pushengine:session:{sid}", "owner") == "down-a"
        own_redis.stop()
        wait_until(lambda: a.get("/health").json()["redis"]["up"] is False, 10, "redis down")
        health = a.get("/health")
        assert health.code == 200 and health.json()["status"] == "ok"
        assert a.publish({"type": "Stream", "action": "upsert", "obj": {
            "id": 1, "live": True, "public": True, "created_at": 1}}).code == 200
        events, error = rpc(a, "session.get_events", sid, 0, 0)
        assert error is None and [e["action"] for e in events] == ["insert"]
        other, _ = rpc(a, "session.create")            # its write is dropped
        assert rpc(b, "session.get_events", sid, 0, 1)[1]["code"] == 1001
        assert a.metric("pushengine_redis_writes_dropped_total") >= 1
        assert a.metric("pushengine_redis_connected") == 0

        own_redis.start()                               # back, and empty
        wait_until(lambda: a.get("/health").json()["redis"]["up"], 15, "redis back")
        with Resp("127.0.0.1", own_redis.port) as r:
            def written_again(session: str) -> bool:
                # a poll writes the entry again once its refresh is due
                rpc(a, "session.get_events", session, 0, 0)
                return r("HGET", f"pushengine:session:{session}", "owner") == "down-a"
            wait_until(lambda: written_again(sid), 5, "the entry written again",
                       interval=0.1)
            wait_until(lambda: written_again(other), 5,
                       "the entry of the session created while Redis was down", interval=0.1)
        wait_until(lambda: b.get("/health").json()["redis"]["up"], 15, "redis back on b")
        events, error = rpc(b, "session.get_events", sid, 0, 1)
        assert error is None and [e["action"] for e in events] == ["reset"]
    finally:
        a.stop()
        b.stop()
    for node in (a, b):
        log = node.log_text()
        assert "Unhandled" not in log and "Traceback" not in log, log[-4000:]
        assert "the sessions this node holds keep working" in log
