"""A node stopped with SIGTERM lets its clients go, and they resume on another
(SPEC 21 with SPEC 8): two ``twistd -n pushengine`` nodes on a Redis of the
test's own. Node A holds a long-polling, an SSE and a WebSocket session;
SIGTERM ends their poll, stream and socket cleanly, A leaves the sessions in
the registry, and each client, reconnecting at once to node B as a balancer
would send it, gets its session back there (a reset per view) and the
events published on B, with no error on the way.
"""
from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.cluster.processes import Node
from tests.cluster.resp import Resp
from tests.e2e.test_shutdown import (
    RawSse, dechunk, poll_body, sse_messages, subscribed, upsert, ws_attached, ws_until_closed)
from tests.transports.wsclient import WsClient
from tests.waiting import wait_until

pytestmark = [pytest.mark.service, pytest.mark.e2e]


def events_of(ws: WsClient) -> list[dict]:
    return [ev for m in ws.messages if isinstance(m, dict) and m.get("method") == "events"
            for ev in m["params"]]


def test_sessions_of_a_node_stopped_with_sigterm_resume_on_another(tmp_path, own_redis) -> None:
    redis = f"redis://127.0.0.1:{own_redis.port}/0"
    a = Node(tmp_path / "a", "node-a", "--redis", redis, "--max-timeout", "60",
             "--shutdown-timeout", "8")
    b = Node(tmp_path / "b", "node-b", "--redis", redis, "--max-timeout", "60")
    try:
        a.wait_ready()
        b.wait_ready()
        poll_sid, sse_sid, ws_sid = subscribed(a), subscribed(a), subscribed(a)
        assert a.publish(upsert(1)).code == 200
        first = a.call("session.get_events", poll_sid, 0)
        ack = first[-1]["seq"]
        sse = RawSse(a.port, sse_sid)
        ws = ws_attached(a, ws_sid)
        with ThreadPoolExecutor(1) as pool:
            poll = pool.submit(a.request, "POST", "/api/jsonrpc", poll_body(poll_sid),
                               {"Content-Type": "application/json"}, 30)
            wait_until(lambda: a.metric("pushengine_polls_waiting") == 1, what="a parked poll")
            wait_until(lambda: a.metric("pushengine_streams") == 2, what="two streams")
            a.process.send_signal(signal.SIGTERM)
            answer = poll.result(10)
        assert answer.code == 200 and answer.json()["result"] == []
        ws_until_closed(ws)
        assert ws.closed is not None and ws.closed.code == 1001
        last_ws = max(ev["seq"] for ev in events_of(ws))
        body, terminated = dechunk(sse.until_closed())
        messages = sse_messages(body)
        assert terminated and messages[-1]["event"] == "going-away"
        last_sse = max(int(m["id"]) for m in messages if "id" in m)
        assert a.process.wait(8) in (0, -signal.SIGTERM)
        log = a.log_text()
        assert "Traceback" not in log and "Unhandled" not in log, log[-3000:]

        # node A left its sessions in the registry
        with Resp("127.0.0.1", own_redis.port) as r:
            for sid in (poll_sid, sse_sid, ws_sid):
                assert r("HGET", f"pushengine:session:{sid}", "owner") == "node-a", sid

        # each client comes back at once, to node B: no error, its session
        polled = b.call("session.get_events", poll_sid, 0, ack)
        assert {ev["action"] for ev in polled} == {"reset"}
        sse_b = RawSse(b.port, sse_sid, last_sse)
        ws_b = WsClient(b.port, timeout=10)
        attached = ws_b.call("session.attach", ws_sid, last_ws)
        assert "result" in attached, attached
        with Resp("127.0.0.1", own_redis.port) as r:
            wait_until(lambda: all(
                r("HGET", f"pushengine:session:{sid}", "owner") == "node-b"
                for sid in (poll_sid, sse_sid, ws_sid)), what="node B owning the sessions")

        # and the sessions work there: an event published on B reaches each
        assert b.publish(upsert(2)).code == 200
        polled = b.call("session.get_events", poll_sid, 5, polled[-1]["seq"])
        assert [ev["obj"]["id"] for ev in polled if ev["action"] != "reset"] == [2]
        ws_b.wait(lambda m: isinstance(m, dict) and m.get("method") == "events" and any(
            ev["action"] != "reset" and ev["obj"]["id"] == 2 for ev in m["params"]))
        while b'"obj":{"id":2,' not in sse_b.data:
            assert sse_b._read(), "the stream on node B ended"
        ws_b.close()
        sse_b.sock.close()
    finally:
        a.stop()
        b.stop()
    log = b.log_text()
    assert "Traceback" not in log and "Unhandled" not in log, log[-3000:]

