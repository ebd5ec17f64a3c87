"""``twistd -n pushengine --admin-key`` as an operator starts it (SPEC
section 16): the page, the key's rules, the statistics over long-polling,
and two nodes that see each other's statistics through RabbitMQ."""
from __future__ import annotations

import json
import time

import pytest

from tests.e2e.conftest import start
from tests.e2e.test_amqp_process import cluster, stream  # noqa: F401 (a fixture)

pytestmark = pytest.mark.e2e
KEY = "process-admin-key-0123456789"


def admin_call(engine, method: str, *params):
    answer = engine.post("/api/jsonrpc", {"jsonrpc": "2.0", "id": 1, "method": method,
                                          "params": list(params)}).json()
    return answer


def stats_events(engine, sid: str, want, wait: float = 10.0) -> dict:
    """Poll until an admin event's object satisfies ``want``; return it."""
    end = time.monotonic() + wait
    seen = []
    while time.monotonic() < end:
        for event in engine.call("session.get_events", sid, 1):
            if event["key"] == "$admin.NodeStats" and event["action"] in ("insert", "update"):
                seen.append(event["obj"])
                if want(event["obj"]):
                    return event["obj"]
    raise AssertionError(f"no admin event as wanted; last: {seen[-3:]}")


def test_admin_node(tmp_path) -> None:
    engine = start(tmp_path, "--admin-key", KEY, "--access-log", "--max-timeout", "5")
    try:
        page = engine.get("/admin/")
        assert page.code == 200 and page.headers["content-type"].startswith("text/html")
        assert b'src="/admin/admin.js"' in page.body
        assert page.headers["cache-control"] == "no-store"
        assert engine.get("/admin/admin.js").code == 200
        assert engine.get("/admin").code == 200        # redirected to /admin/
        refused = engine.get(f"/admin/?key={KEY}")
        assert refused.code == 400 and KEY.encode() not in refused.body
        # a key in the URL of a call is not read
        answer = engine.post(f"/api/jsonrpc?admin_key={KEY}", {
            "jsonrpc": "2.0", "id": 1, "method": "admin.stats", "params": []}).json()
        assert answer["error"]["code"] == 1003
        assert admin_call(engine, "admin.stats", "wrong")["error"]["code"] == 1003

        sid = engine.call("session.create")
        key, state = engine.call("admin.subscribe", sid, KEY)
        assert key == "$admin.NodeStats"
        viewers = [engine.call("session.create") for _ in range(4)]
        for v in viewers:
            engine.call("stream.subscribe_public_live", v, 10)
        got = stats_events(engine, sid, lambda o: o["sessions"] == 5 and o["subscriptions"] == 4)
        assert got["node"] == "e2e" and got["feed"]["up"] is True
        assert got["busiest"] == [{"key": "PublicLiveStreamView(limit=10)", "subscribers": 4}]
        engine.publish(*[stream(i) for i in range(1, 11)])
        got = stats_events(engine, sid, lambda o: o["events_in"] == 10)
        assert engine.call("admin.publish", KEY, [stream(11)]) == {"accepted": 1}
        stats_events(engine, sid, lambda o: o["events_in"] == 11)
        found = engine.call("admin.session", KEY, viewers[0])
        assert [s["key"] for s in found["subscriptions"]] == ["PublicLiveStreamView(limit=10)"]
        # header form, as a script would
        answer = engine.request("POST", "/api/jsonrpc", b'{"jsonrpc":"2.0","id":1,'
                                b'"method":"admin.stats","params":[]}',
                                {"Content-Type": "application/json",
                                 "Authorization": f"Bearer {KEY}"}).json()
        assert [s["node"] for s in answer["result"]] == ["e2e"]
        # the metric of changes counts only the changes published
        assert engine.metric("pushengine_changes_total") == 11
    finally:
        engine.stop()
    log = engine.log_text()
    assert "/admin/" in log                      # the access log is on...
    # ...and saw the key only where this test put it in a URL on purpose
    leaked = [line for line in log.splitlines() if KEY in line]
    assert leaked and all("?key=" in line or "?admin_key=" in line
                                    for line in leaked), leaked
    assert "Traceback" not in log


def test_closed_without_the_option(tmp_path) -> None:
    engine = start(tmp_path)
    try:
        page = engine.get("/admin/")
        assert page.code == 404 and page.json() == {"error": "not found"}
        assert admin_call(engine, "admin.stats", KEY)["error"]["code"] == 1003
    finally:
        engine.stop()


def test_every_node_sees_every_node_through_amqp(cluster) -> None:  # noqa: F811
    a = cluster("a", "--admin-key", KEY)
    b = cluster("b", "--admin-key", KEY)
    sid = a.call("session.create")
    a.call("admin.subscribe", sid, KEY)
    for _ in range(3):
        b.call("stream.subscribe_public_live", b.call("session.create"), 10)
    name_b = f"e2e-{cluster.tag}-b"
    got = stats_events(a, sid, lambda o: o["node"] == name_b and o["sessions"] == 3)
    assert got["feed"]["up"] is True and got["feed"]["kind"] == "amqp"
    nodes = sorted(s["node"] for s in a.call("admin.stats", KEY))
    assert nodes == [f"e2e-{cluster.tag}-a", name_b]
    # a change published by either node reaches both, counted once each
    a.publish(stream(1))
    stats_events(a, sid, lambda o: o["node"] == name_b and o["events_in"] == 1)
    assert a.metric("pushengine_changes_total") == 1


def test_admin_disconnect_reaches_the_other_node_through_amqp(cluster) -> None:  # noqa: F811
    import jwt
    secret = "process-disconnect-secret-0123456789"
    a = cluster("a", "--admin-key", KEY, "--secret", secret)
    b = cluster("b", "--admin-key", KEY, "--secret", secret)
    token = jwt.encode({"sub": "42", "exp": time.time() + 600}, secret, algorithm="HS256")
    here, there, other = a.call("session.create"), b.call("session.create"), \
        b.call("session.create")
    a.call("session.authorize", here, token)
    b.call("session.authorize", there, token)
    assert a.call("admin.disconnect", KEY, 42) == 1
    end = time.monotonic() + 10
    while time.monotonic() < end:
        answer = admin_call(b, "session.get_events", there, 0)
        if "error" in answer:
            break
        time.sleep(0.05)
    assert answer["error"]["code"] == 1001
    assert admin_call(a, "session.get_events", here, 0)["error"]["code"] == 1001
    assert b.call("session.get_events", other, 0) == []


@pytest.mark.parametrize("memory", ["redis", "the node's start"])
def test_a_captured_disconnect_replayed_after_a_restart_is_refused(
        cluster, tmp_path, memory: str) -> None:  # noqa: F811
    """SPEC section 22: a genuine disconnect, captured on the broker and
    published again after the receiving node restarted, ends nothing. With
    --redis the node finds the id it applied in Redis; without, it refuses
    what was sent before it started. Before, a restarted node had forgotten
    every id and applied the copy: the user's new session ended."""
    import uuid

    import jwt
    import pika

    from tests.cluster.resp import Resp
    from tests.e2e.test_amqp_process import BROKER
    from tests.services import require_service
    from tests.waiting import wait_until

    secret = "process-replay-secret-0123456789abcd"
    prefix = f"test:{uuid.uuid4().hex[:12]}:"
    extra: tuple[str, ...] = ()
    if memory == "redis":
        require_service("Redis", "127.0.0.1", 6379)
        extra = ("--redis", f"redis://127.0.0.1:6379/12?prefix={prefix}")
    args = ("--admin-key", KEY, "--secret", secret, *extra)
    a = cluster("a", *args)
    b = cluster("b", *args)
    token = jwt.encode({"sub": "42", "exp": time.time() + 600}, secret, algorithm="HS256")
    # an eavesdropper's queue on the exchange
    connection = pika.BlockingConnection(pika.URLParameters(BROKER))
    restarted = None
    try:
        channel = connection.channel()
        tap = channel.queue_declare(queue="", exclusive=True).method.queue
        channel.queue_bind(queue=tap, exchange=cluster.exchange, routing_key="")
        first = b.call("session.create")
        b.call("session.authorize", first, token)
        assert a.call("admin.disconnect", KEY, 42) == 0
        wait_until(lambda: "error" in admin_call(b, "session.get_events", first, 0), 10,
                   "the disconnect applied on b", interval=0.05)

        def captured():
            got = channel.basic_get(queue=tap, auto_ack=True)
            if got[0] is not None and b"pushengine.Disconnect" in got[2]:
                return got
            return None
        _, properties, body = wait_until(captured, 10, "the disconnect on the broker",
                                         interval=0.05)
        # b restarts: same node id, same durable queue
        b.stop()
        (tmp_path / "b-again").mkdir()
        restarted = start(tmp_path / "b-again", "--amqp", BROKER, "--amqp-exchange",
                          cluster.exchange, "--node-id", f"e2e-{cluster.tag}-b",
                          "--max-timeout", "5", *args)
        since = restarted.call("session.create")
        restarted.call("session.authorize", since, token)
        channel.basic_publish(exchange=cluster.exchange, routing_key="", body=body,
                              properties=properties)
        wait_until(lambda: restarted.metric("pushengine_admin_disconnects_replayed_total")
                   == 1, 10, "the copy refused by the restarted node", interval=0.05)
        assert restarted.call("session.get_events", since, 0) == []
        assert restarted.metric("pushengine_admin_disconnects_received_total") == 0
        if memory == "redis":
            with Resp(db=12) as redis:
                keys = redis("KEYS", f"{prefix}disconnect:*")
                assert [k.decode() if isinstance(k, bytes) else k for k in keys] == [
                    f"{prefix}disconnect:e2e-{cluster.tag}-b:"
                    + message_id(body)]
                assert 590 < redis("PTTL", keys[0]) / 1000 <= 601
        # a new genuine one still ends it
        assert a.call("admin.disconnect", KEY, 42) == 0
        wait_until(lambda: "error" in admin_call(restarted, "session.get_events", since, 0),
                   10, "the new disconnect applied on the restarted b", interval=0.05)
    finally:
        connection.close()
        if restarted is not None:
            restarted.stop()
            assert "Traceback" not in restarted.log_text()
        if memory == "redis":
            with Resp(db=12) as redis:
                keys = redis("KEYS", f"{prefix}*")
                if keys:
                    redis("DEL", *keys)


def message_id(body: bytes) -> str:
    """The id of the disconnect in a message body (a change, or a list of them)."""
    value = json.loads(body)
    (change,) = [c for c in (value if isinstance(value, list) else [value])
                 if c.get("type") == "pushengine.Disconnect"]
    return change["obj"]["id"]
