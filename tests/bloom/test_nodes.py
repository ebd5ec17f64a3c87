"""Two real nodes (twistd) sharing filters through one Redis: bf.* written
on one is read on the other, stats.unique adds up both, once_per_user holds
across them; and Redis going away: the nodes keep pushing, /health says so,
bf.* answers 1011, and everything is back when Redis is."""
from __future__ import annotations

import jwt
import pytest

from tests.cluster.conftest import RedisProcess
from tests.e2e.conftest import start
from tests.waiting import wait_until

pytestmark = [pytest.mark.service, pytest.mark.e2e]

SECRET = "test-secret-of-enough-length-for-hs256"


@pytest.fixture
def own_redis():
    server = RedisProcess().start()
    yield server
    server.stop()


def rpc(node, method, *params):
    answer = node.post("/api/jsonrpc", {"jsonrpc": "2.0", "id": 1, "method": method,
                                        "params": list(params)}).json()
    return answer.get("result"), answer.get("error")


def ok(node, method, *params):
    result, error = rpc(node, method, *params)
    assert error is None, (method, error)
    return result


def seen_answers(node) -> float:
    """The once_per_user filter's answers this node received (or gave up on)."""
    return sum(node.metric(f"pushengine_seen_{name}_total")
               for name in ("admitted", "refused", "failed_open"))


def authorized(node, user: str) -> str:
    sid = ok(node, "session.create")
    ok(node, "session.authorize", sid, jwt.encode({"sub": user}, SECRET, algorithm="HS256"))
    return sid


def live(id_: int, user_id: int = 5) -> dict:
    return {"type": "Stream", "action": "upsert", "obj": {
        "id": id_, "user_id": user_id, "live": True, "public": True,
        "created_at": f"2024-01-01T00:00:{id_:02d}Z"}}


@pytest.fixture
def nodes(tmp_path, own_redis):
    url = f"redis://127.0.0.1:{own_redis.port}/0?timeout=1"
    started = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        started.append(start(tmp_path / name, "--redis", url, "--node-id", f"bloom-{name}",
                             "--secret", SECRET, "--max-timeout", "2"))
    for node in started:
        wait_until(lambda: node.get("/health").json()["bloom"]["up"], 10, "bloom up")
    yield started
    for node in started:
        node.stop()
        assert "Traceback" not in node.log_text(), node.log_text()[-5000:]


def test_two_nodes_share_one_filter(nodes):
    a, b = nodes
    assert a.get("/health").json()["bloom"] == {
        "up": True, "kind": "redis", "server": b.get("/health").json()["bloom"]["server"],
        "engine": "lua"}
    assert ok(a, "bf.reserve", "seen", 0.001, 1000) == "OK"
    assert rpc(b, "bf.reserve", "seen", 0.01, 10)[1]["message"] == "item exists"
    assert ok(a, "bf.madd", "seen", ["x", "y"]) == [1, 1]
    assert ok(b, "bf.madd", "seen", ["y", "z"]) == [0, 1]
    assert ok(b, "bf.mexists", "seen", ["x", "y", "z", "w"]) == [1, 1, 1, 0]
    assert ok(a, "bf.info", "seen")["Number of items inserted"] == 3
    # stats.unique: the users of a key on both nodes
    for node, user in ((a, "1"), (a, "2"), (b, "2"), (b, "3")):
        sid = authorized(node, user)
        key, _ = ok(node, "stream.subscribe_public_live", sid, 10)
    # (each node adds its users a round trip after the call that counted them)
    wait_until(lambda: ok(a, "stats.unique", key) == ok(b, "stats.unique", key) == 3,
               5, "3 unique users on both nodes")
    # once_per_user across nodes: a stream shown on one is not shown on the other
    for node in (a, b):
        assert node.publish(live(1)).code == 200
    on_a = authorized(a, "42")
    assert [s["id"] for s in ok(a, "stream.subscribe_followed_new", on_a, [5])[1]] == [1]
    on_b = authorized(b, "42")
    assert ok(b, "stream.subscribe_followed_new", on_b, [5])[1] == []
    answered = seen_answers(a) + seen_answers(b)
    for node in (b, a):                      # as a fanout delivers it: both nodes
        assert node.publish(live(2)).code == 200
    # the filter answers a round trip later: once both nodes have their answer
    # about stream 2 (admitted on one, refused on the other), the events are in
    wait_until(lambda: seen_answers(a) + seen_answers(b) >= answered + 2, 5,
               "both nodes' answers about stream 2")
    got_a = [e["obj"]["id"] for e in ok(a, "session.get_events", on_a, 0)
             if e["action"] == "insert"]
    got_b = [e["obj"]["id"] for e in ok(b, "session.get_events", on_b, 0)
             if e["action"] == "insert"]
    assert sorted(got_a + got_b) == [2]      # on one node only


def test_redis_down_the_nodes_keep_pushing_and_say_so(nodes, own_redis):
    a, _ = nodes
    sid = authorized(a, "7")
    ok(a, "stream.subscribe_public_live", sid, 5)
    ok(a, "stream.subscribe_followed_new", sid, [5])
    own_redis.stop()
    health = wait_until(lambda: (h := a.get("/health")).json()["bloom"]["up"] is False and h,
                        10, "bloom down")
    assert health.code == 200 and health.json()["status"] == "ok"
    assert "error" in health.json()["bloom"] and "down_for" in health.json()["bloom"]
    assert a.publish(live(3)).code == 200
    events = ok(a, "session.get_events", sid, 1)
    assert sorted(e["key"].split("(")[0] for e in events if e["action"] == "insert") == [
        "FollowedNewStreamView", "PublicLiveStreamView"]          # fails open: still shown
    result, error = rpc(a, "bf.add", "k", "x")
    assert result is None and error["code"] == 1011
    assert ok(a, "stats.unique", "PublicLiveStreamView(limit=5)") == 0
    assert a.metric("pushengine_bloom_connected") == 0
    own_redis.start()
    wait_until(lambda: a.get("/health").json()["bloom"]["up"], 15, "bloom back")
    assert ok(a, "bf.add", "k", "x") == 1
