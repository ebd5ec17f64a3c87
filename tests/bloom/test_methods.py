"""The bf.* JSON-RPC methods (publish key or loopback), stats.unique and a
once_per_user default view, through a node's real HTTP resource."""
from __future__ import annotations

import json

import jwt
import pytest

from pushengine.bloom.methods import may_use_backend_methods
from pushengine.api.caller import Caller
from tests.http.harness import ClockNode, Http, Raw, Rpc, http_request

SECRET = "test-secret-of-enough-length-for-hs256"


def token(sub: str) -> str:
    return jwt.encode({"sub": sub}, SECRET, algorithm="HS256")


@pytest.mark.parametrize("caller, key, allowed", [
    (Caller("127.0.0.1", loopback=True), None, True),
    (Caller("::1", loopback=True), None, True),
    (Caller("203.0.113.9"), None, False),
    (Caller("127.0.0.1", loopback=True, from_page=True), None, False),   # a web page
    (Caller("127.0.0.1", loopback=False), None, False),                 # relayed by a proxy
    (Caller("203.0.113.9", bearer="s3cret"), "s3cret", True),
    (Caller("127.0.0.1", loopback=True), "s3cret", False),              # a key is a key
    (Caller("127.0.0.1", loopback=True, bearer="wrong"), "s3cret", False),
    (Caller("203.0.113.9", bearer="s3cret", from_page=True), "s3cret", True),
    ("127.0.0.1", None, False),                                         # says nothing: no
    (None, "s3cret", False),
])
def test_who_may_use_the_backend_methods(caller, key, allowed):
    assert may_use_backend_methods(caller, key) is allowed


def test_a_raw_authorization_header_counts_too():
    class Headers:
        address, loopback, from_page = "203.0.113.9", False, False
        authorization = b"Bearer s3cret"
    assert may_use_backend_methods(Headers(), "s3cret")
    Headers.authorization = "Basic s3cret"
    assert not may_use_backend_methods(Headers(), "s3cret")


def call(raw_site, method: str, params, headers=None, host: str = "127.0.0.1") -> dict:
    raw = Raw(raw_site, host=host)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    raw.send(http_request("POST", "/api/jsonrpc", body,
                          {"Content-Type": "application/json", **(headers or {})}))
    return raw.response().json()


def test_the_bf_methods_over_json_rpc_from_loopback():
    node = ClockNode()
    rpc = Rpc(Http(node.web.resource()))
    assert rpc("bf.reserve", "visitors", 0.01, 1000) == "OK"
    assert rpc.error("bf.reserve", "visitors", 0.01, 1000).code == 1010
    assert rpc("bf.add", "visitors", "ann") == 1
    assert rpc("bf.madd", "visitors", ["ann", "bob", 7]) == [0, 1, 1]
    assert rpc("bf.exists", "visitors", "bob") == 1
    assert rpc("bf.mexists", "visitors", ["bob", "eve", "7"]) == [1, 0, 1]
    assert rpc("bf.info", "visitors") == {
        "Capacity": 1000, "Size": 1379, "Number of filters": 1,
        "Number of items inserted": 3, "Expansion rate": 2}
    body = rpc.http.post("/api/jsonrpc", {"jsonrpc": "2.0", "id": 9, "method": "bf.insert",
                                          "params": {"key": "made", "items": ["a"],
                                                     "capacity": 2, "nonscaling": True}})
    assert body.json()["result"] == [1]
    assert rpc("bf.insert", "made", ["b", "c", "d"]) == [
        1, {"error": {"code": 1010, "message": "non scaling filter is full"}}]
    error = rpc.error("bf.insert", "other", ["a"], None, None, None, True)
    assert (error.code, error.message) == (1010, "not found")
    error = rpc.error("bf.reserve", "bad", 1.5, 10)
    assert (error.code, error.message) == (-32602, "(0 < error rate range < 1)")
    assert rpc.error("bf.info", "nothing").message == "not found"
    # a batch of 1000 items is one call
    assert len(rpc("bf.madd", "big", [f"i{i}" for i in range(1000)])) == 1000
    assert rpc.error("bf.madd", "big", [f"i{i}" for i in range(1001)]).code == -32602


def test_the_bf_methods_refuse_other_clients():
    node = ClockNode()
    site = node.site()
    answer = call(site, "bf.add", ["k", "x"], host="203.0.113.9")
    assert answer["error"]["code"] == 1003
    answer = call(site, "bf.add", ["k", "x"], headers={"Origin": "http://evil.example"})
    assert answer["error"]["code"] == 1003
    assert call(site, "bf.add", ["k", "x"])["result"] == 1


def test_with_a_publish_key_the_bf_methods_need_it():
    node = ClockNode("--publish-key", "s3cret")
    site = node.site()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
        answer = call(site, "bf.info", ["k"], headers=headers)
        assert answer["error"]["code"] == 1003, headers
    answer = call(site, "bf.add", ["k", "x"], {"Authorization": "Bearer s3cret"},
                  host="203.0.113.9")
    assert answer["result"] == 1


def authorized(rpc: Rpc, user: str) -> str:
    sid = rpc("session.create")
    rpc("session.authorize", sid, token(user))
    return sid


def test_stats_unique_counts_authorized_users_of_a_key():
    node = ClockNode("--secret", SECRET)
    rpc = Rpc(Http(node.web.resource()))
    key = None
    for user in ("1", "2", "2", "3"):
        sid = authorized(rpc, user)
        key, _ = rpc("stream.subscribe_public_live", sid, 10)
        rpc("session.get_events", sid, 0)
    anonymous = rpc("session.create")
    rpc("stream.subscribe_public_live", anonymous, 10)
    assert rpc("stats.unique", key) == 3
    assert rpc("stats.online", key) == 5
    assert rpc("stats.unique", "PublicLiveStreamView(limit=5)") == 0
    assert rpc.error("stats.unique", 5).code == -32602
    # a personal view's figure goes to its subscribers only
    sid = authorized(rpc, "9")
    home, _ = rpc("stream.subscribe_home", sid, [9])
    assert rpc.error("stats.unique", home).code == 1005
    assert rpc("stats.unique", home, sid) == 1


def test_the_default_notification_view_shows_a_stream_once():
    node = ClockNode("--secret", SECRET)
    http = Http(node.web.resource())
    rpc = Rpc(http)

    def live(id_: int, user_id: int = 5, **fields) -> dict:
        return {"type": "Stream", "action": "upsert", "obj": {
            "id": id_, "user_id": user_id, "live": True, "public": True,
            "created_at": f"2024-01-01T00:00:{id_:02d}Z", **fields}}
    http.post("/api/publish", [live(1), live(2, user_id=6)])
    sid = authorized(rpc, "42")
    key, state = rpc("stream.subscribe_followed_new", sid, [5, 6])
    assert [s["id"] for s in state] == [2, 1]
    http.post("/api/publish", [live(3), live(4, user_id=8)])
    events = rpc("session.get_events", sid, 0)
    assert [(e["action"], e["obj"]["id"]) for e in events] == [("insert", 3)]
    # a reload (the page's session is destroyed, a new one made): nothing shown before
    rpc("session.destroy", sid)
    again = authorized(rpc, "42")
    assert rpc("stream.subscribe_followed_new", again, [5, 6])[1] == []
    http.post("/api/publish", [live(5)])
    assert [e["obj"]["id"] for e in rpc("session.get_events", again, 0)] == [5]
    # someone else
    other = authorized(rpc, "43")
    assert [s["id"] for s in rpc("stream.subscribe_followed_new", other, [5])[1]] == [5, 3, 1]
    assert rpc.error("stream.subscribe_followed_new", rpc("session.create"), [5]).code == 1003


def test_caps_and_bf_del_over_json_rpc():
    """SPEC 18: a tiny error rate is -32602 (the 1e-300 filter whose madd
    held the reactor 7.9 s cannot be made), --bloom-max-bytes bounds the
    filters, bf.del frees them (publish key as for the other bf.* methods)."""
    node = ClockNode("--bloom-max-bytes", "100000", "--publish-key", "pk-of-the-tests")
    rpc = Rpc(Http(node.web.resource()))
    assert rpc.error("bf.reserve", "k", 1e-300, 100).code == 1003      # no key
    raw_site = node.site()
    auth = {"Authorization": "Bearer pk-of-the-tests"}
    for rate in (5e-324, 1e-300, 1e-10):
        answer = call(raw_site, "bf.reserve", ["k", rate, 100], auth)
        assert answer["error"]["code"] == -32602, answer
        assert "1e-09" in answer["error"]["message"]
    assert call(raw_site, "bf.reserve", ["k", 0.01, 380_000_000], auth)["error"]["code"] == -32602
    assert call(raw_site, "bf.reserve", ["a", 0.01, 50_000], auth)["result"] == "OK"
    answer = call(raw_site, "bf.reserve", ["b", 0.01, 50_000], auth)
    assert answer["error"] == {"code": 1010, "message": "could not create filter: the filters "
                               "of this node would pass their memory cap (--bloom-max-bytes)"}
    assert call(raw_site, "bf.del", ["a"], {"Authorization": "Bearer wrong"})["error"]["code"] \
        == 1003
    assert call(raw_site, "bf.del", {"key": "a"}, auth)["result"] == 1
    assert call(raw_site, "bf.del", ["a"], auth)["result"] == 0
    assert call(raw_site, "bf.reserve", ["b", 0.01, 50_000], auth)["result"] == "OK"
    described = {m["name"] for m in call(raw_site, "rpc.discover", [], auth)["result"]["methods"]}
    assert "bf.del" in described
