"""The admin interface on a Clock (SPEC section 16): the key, the admin.*
methods, the statistics publisher and the internal view."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from pushengine.admin import ADMIN_TYPE, ADMIN_VIEW_KEY
from pushengine.admin.hub import AdminHub, AdminSink
from pushengine.admin.methods import AdminKey
from pushengine.api.caller import Caller
from pushengine.core.changes import UPSERT, Change
from pushengine.core.errors import NotAuthorized, RateLimited
from pushengine.app.service import timer
from tests.http.harness import ClockNode, Http, Rpc

KEY = "admin-key-of-the-tests-0123"


class AdminNode(ClockNode):
    """A ClockNode whose feed delivers into the node's sink (as FeedService does)."""

    def __init__(self, *argv: str) -> None:
        super().__init__(*argv)
        self.feed.start(self.sink)
        self.http = Http(self.web.resource())
        self.rpc = Rpc(self.http)

    def tick(self, seconds: float = 1.0) -> None:
        self.clock.advance(seconds)
        self.stats_publisher.tick()


def node(*argv: str) -> AdminNode:
    return AdminNode("--admin-key", KEY, *argv)


def stream(id_: int, **fields) -> dict:
    return {"type": "Stream", "action": "upsert",
            "obj": {"id": id_, "live": True, "public": True, "created_at": id_, **fields}}


# -- closed without the option -------------------------------------------------------------

def test_closed_without_the_option() -> None:
    n = ClockNode()
    http, rpc = Http(n.web.resource()), Rpc(Http(n.web.resource()))
    for path in ("/admin/", "/admin/index.html", "/admin/admin.js"):
        reply = http.get(path)
        assert reply.code == 404 and reply.json() == {"error": "not found"}
    sid = rpc("session.create")
    for method, params in (("admin.subscribe", [sid, KEY]), ("admin.stats", [KEY]),
                           ("admin.publish", [KEY, stream(1)]), ("admin.session", [KEY, sid])):
        error = rpc.error(method, *params)
        assert error.code == 1003 and "closed" in error.message
    assert n.stats_publisher is None and n.admin_hub is None


def test_the_page_is_served_with_the_option() -> None:
    # (HEAD: a file's body is sent by a producer of the global reactor; the
    # end-to-end test reads the bodies. The page itself is HTML, which the
    # harness's checked requests refuse: asked through its stub directly.)
    n = node()
    for path in ("/admin/admin.js", "/admin/admin.css"):
        reply = n.http.request("HEAD", path)
        assert reply.code == 200, path
        assert reply.header("cache-control") == "no-store"
        assert reply.header("x-frame-options") == "DENY"
        assert "frame-ancestors 'none'" in reply.header("content-security-policy")
    answers = []
    n.http.stub.request("HEAD", "http://127.0.0.1/admin/").addCallback(answers.append)
    n.http.flush()
    [page] = answers
    assert page.code == 200
    assert page.headers.getRawHeaders("content-type")[0].startswith("text/html")
    assert page.headers.getRawHeaders("referrer-policy") == ["no-referrer"]
    assert n.http.request("HEAD", "/admin/nothing.js").code == 404


@pytest.mark.parametrize("query", [f"?key={KEY}", f"?admin_key={KEY}", "?apikey=x",
                                   "?token=x", "?Secret=1", "?x=1&password=2"])
def test_a_key_in_the_url_of_the_page_is_refused(query) -> None:
    reply = node().http.get("/admin/" + query)
    assert reply.code == 400
    assert "never goes in a URL" in reply.json()["error"]
    assert KEY not in reply.body.decode()


def test_a_key_in_the_url_of_a_call_is_ignored() -> None:
    n = node()
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "admin.stats", "params": []})
    for query in (f"?key={KEY}", f"?admin_key={KEY}", f"?apikey={KEY}"):
        reply = n.http.post("/api/jsonrpc" + query, body)
        assert reply.json()["error"]["code"] == 1003


# -- the key -------------------------------------------------------------------------------

def test_wrong_keys_are_refused_and_then_throttled() -> None:
    n = node()
    sid = n.rpc("session.create")
    for wrong in ("nope", KEY[:-1], KEY + "x", "", 12, None, KEY.upper()):
        error = n.rpc.error("admin.subscribe", sid, wrong)
        assert error.code == 1003
    assert n.admin_hub.subscribers == set()
    assert n.rpc("admin.stats", KEY) == []          # the right key still works
    for _ in range(3):
        n.rpc.error("admin.stats", "wrong")
    # ten wrong keys within the minute: the next wrong one waits, the right one not
    reply = n.rpc.send("admin.stats", "wrong").reply()
    assert reply.code == 429 and reply.json()["error"]["code"] == 1007
    assert int(reply.header("retry-after")) > 0
    assert n.rpc("admin.stats", KEY) == []
    n.clock.advance(61)
    assert n.rpc.error("admin.stats", "wrong").code == 1003


def test_key_check_compares_in_constant_time(monkeypatch) -> None:
    import hmac
    seen = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: seen.append((a, b)) or real(a, b))
    key = AdminKey(KEY, Clock())
    key.check(Caller("10.0.0.1"), KEY)
    with pytest.raises(NotAuthorized):
        key.check(Caller("10.0.0.1"), "other")
    assert seen == [(KEY.encode(), KEY.encode()), (b"other", KEY.encode())]


def test_the_key_in_an_authorization_header() -> None:
    key = AdminKey(KEY, Clock())
    key.check(Caller("10.0.0.1", bearer=KEY), None)
    with pytest.raises(NotAuthorized):
        key.check(Caller("10.0.0.1", bearer="wrong"), None)
    with pytest.raises(NotAuthorized):      # a wrong key in the params is not rescued
        key.check(Caller("10.0.0.1", bearer=KEY), "wrong")
    n = node()
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "admin.stats", "params": []})
    assert n.http.post("/api/jsonrpc", body,
                       {"authorization": f"Bearer {KEY}"}).json()["result"] == []


def test_throttle_is_per_client_and_bounded() -> None:
    clock = Clock()
    key = AdminKey(KEY, clock, max_failures=2, window=10)
    for _ in range(2):
        with pytest.raises(NotAuthorized):
            key.check(Caller("10.0.0.1"), "x")
    with pytest.raises(RateLimited):
        key.check(Caller("10.0.0.1"), "x")
    key.check(Caller("10.0.0.1"), KEY)       # never the right key
    with pytest.raises(NotAuthorized):       # another client is not affected
        key.check(Caller("10.0.0.2"), "x")
    clock.advance(10)
    with pytest.raises(NotAuthorized):
        key.check(Caller("10.0.0.1"), "x")
    assert list(key.failures) == ["10.0.0.2", "10.0.0.1"]


def test_option_checks() -> None:
    from twisted.python import usage

    from tests.http.harness import options
    with pytest.raises(usage.UsageError, match="at least 16"):
        options("--admin-key", "short")
    with pytest.raises(usage.UsageError, match="at least 16"):
        options("--admin-key", " " + KEY)
    from pushengine.app.tap import Options
    o = Options(environ={"PUSHENGINE_ADMIN_KEY": KEY})
    o.parseOptions([])
    assert o["admin-key"] == KEY


# -- the statistics --------------------------------------------------------------------------

def test_stats_follow_sessions_polls_and_events() -> None:
    n = node("--node-id", "n1")
    n.tick()
    [stats] = n.rpc("admin.stats", KEY)
    assert stats["id"] == stats["node"] == "n1"
    assert (stats["sessions"], stats["waiting"], stats["streams"]) == (0, 0, 0)
    assert stats["feed"]["up"] is True and stats["memcache"]["up"] is True
    assert stats["redis"] == {"up": False, "kind": "none"}
    assert stats["history"] == [[stats["time"], 0.0, 0.0]]
    sids = [n.rpc("session.create") for _ in range(3)]
    for sid in sids:
        n.rpc("stream.subscribe_public_live", sid, 10)
    polls = [n.rpc.send("session.get_events", sid, 30) for sid in sids[:2]]
    n.tick()
    [stats] = n.rpc("admin.stats", KEY)
    assert (stats["sessions"], stats["waiting"], stats["subscriptions"]) == (3, 2, 3)
    assert stats["busiest"] == [{"key": "PublicLiveStreamView(limit=10)", "subscribers": 3}]
    assert stats["views"] == 1
    # four changes in two seconds: 2 in per second; each reaches 3 sessions
    n.http.post("/api/publish", [stream(1), stream(2)])
    n.clock.advance(1)
    n.http.post("/api/publish", [stream(3), stream(4)])
    n.tick()
    [stats] = n.rpc("admin.stats", KEY)
    assert stats["in_rate"] == 2.0
    assert stats["events_in"] == 4
    assert all(p.done for p in polls)
    # the two parked polls took both changes of the first batch: 4 events in 2 s
    assert stats["out_rate"] == 2.0
    assert len(stats["history"]) == 3


def test_stats_are_not_user_data() -> None:
    n = node()
    sid = n.rpc("session.create")
    key, state = n.rpc("session.subscribe", sid, "PublicLiveStreamView", {}, 10)
    for _ in range(5):
        n.tick()
    assert n.engine.counters.changes_in == 0          # not counted as changes
    assert n.engine.counters.changes_dropped == 0
    assert n.rpc("session.get_events", sid, 0) == []  # no ordinary view sees them
    assert n.store.get(ADMIN_TYPE, "test-node") is None   # never stored
    metrics = n.http.get("/metrics").body.decode()
    assert "pushengine_changes_total{node=\"test-node\"} 0.0" in metrics
    # a views file view of that type would see nothing either: it never reaches the engine
    assert ADMIN_TYPE not in n.catalog.types


def test_admin_publish_goes_to_the_feed_and_refuses_bad_changes() -> None:
    n = node()
    sid = n.rpc("session.create")
    n.rpc("stream.subscribe_public_live", sid, 10)
    assert n.rpc("admin.publish", KEY, stream(7, title="from the page")) == {"accepted": 1}
    assert n.rpc("admin.publish", KEY, [stream(8), stream(9)]) == {"accepted": 2}
    events = n.rpc("session.get_events", sid, 0)
    assert [e["obj"]["id"] for e in events] == [7, 8, 9]
    assert n.rpc.error("admin.publish", KEY, {"type": "Stream"}).code == -32602
    assert n.rpc.error("admin.publish", KEY, []).code == -32602
    forged = {"type": ADMIN_TYPE, "action": "upsert", "obj": {"id": "evil", "sessions": 1}}
    assert n.rpc.error("admin.publish", KEY, forged).code == -32602
    # through /api/publish (a backend without the admin key): not shown
    assert n.http.post("/api/publish", [forged]).json() == {"accepted": 1}
    assert n.admin_hub.nodes == {} and n.admin_hub.forged == 1
    assert n.rpc.error("admin.publish", "wrong", stream(1)).code == 1003


def test_admin_session_lookup() -> None:
    n = node("--node-id", "n1")
    sid = n.rpc("session.create")
    other = n.rpc("session.create")
    key, _ = n.rpc("stream.subscribe_public_live", sid, 5)
    n.rpc("stream.subscribe_public_live", other, 5)
    n.rpc("session.subscribe", sid, "PublicRecentStreamView", {}, 10)
    found = n.rpc("admin.session", KEY, sid)
    assert found["session"] == sid and found["node"] == "n1" and found["here"] is True
    assert found["user"] is None and found["delivery"] is None and found["last_seq"] == 0
    subs = {s["key"]: s for s in found["subscriptions"]}
    assert subs[key] == {"key": key, "view": "PublicLiveStreamView", "params": {}, "limit": 5,
                         "subscribers": 2, "objects": 0}
    assert subs["PublicRecentStreamView(limit=10)"]["view"] == "PublicRecentStreamView"
    poll = n.rpc.send("session.get_events", sid, 30)
    assert n.rpc("admin.session", KEY, sid)["delivery"] == "longpoll"
    assert not poll.done
    assert n.rpc("admin.session", KEY, "no-such-session") is None
    assert n.rpc.error("admin.session", KEY, 5).code == -32602
    assert n.rpc.error("admin.session", "wrong", sid).code == 1003


def test_admin_subscribe_delivers_the_internal_view() -> None:
    n = node("--node-id", "n1")
    sid = n.rpc("session.create")
    key, state = n.rpc("admin.subscribe", sid, KEY)
    assert key == ADMIN_VIEW_KEY and state == []
    n.tick()
    [event] = n.rpc("session.get_events", sid, 0)
    assert event["key"] == ADMIN_VIEW_KEY and event["action"] == "insert"
    assert event["obj"]["node"] == "n1" and event["obj"]["admin_pages"] == 1
    n.tick()
    [event] = n.rpc("session.get_events", sid, 0)
    assert event["action"] == "update" and "history" not in event["obj"]
    # the admin page's own events do not count as events out
    assert event["obj"]["out_rate"] == 0.0
    # an ordinary session hears nothing of it, and cannot subscribe to it
    plain = n.rpc("session.create")
    n.tick()
    assert n.rpc("session.get_events", plain, 0) == []
    assert n.rpc.error("session.subscribe", plain, ADMIN_VIEW_KEY, {}, 1).code == 1002
    assert n.rpc.error("session.subscribe", plain, "NodeStats", {}, 1).code == 1002
    # a second admin.subscribe answers the state with the history
    key, state = n.rpc("admin.subscribe", sid, KEY)
    assert [s["node"] for s in state] == ["n1"] and len(state[0]["history"]) == 3
    assert n.rpc("admin.unsubscribe", sid, KEY) is True
    n.rpc("session.get_events", sid, 0)
    n.tick()
    assert n.rpc("session.get_events", sid, 0) == []


def test_a_destroyed_or_expired_admin_session_is_forgotten() -> None:
    n = node("--session-timeout", "30")
    a, b = n.rpc("session.create"), n.rpc("session.create")
    n.rpc("admin.subscribe", a, KEY)
    n.rpc("admin.subscribe", b, KEY)
    assert len(n.admin_hub.subscribers) == 2
    n.rpc("session.destroy", a)
    assert len(n.admin_hub.subscribers) == 1
    n.clock.advance(31)
    assert n.admin_hub.subscribers == set()


def test_nodes_of_the_cluster_and_a_node_gone_quiet() -> None:
    clock = Clock()

    class Sessions:
        sessions: dict = {}
        flushed = 0

        def flush(self):
            Sessions.flushed += 1
    hub = AdminHub(Sessions(), clock, b"k" * 16, stale=5)
    sink = AdminSink(engine=None, hub=hub)

    def stats(node, t):
        return Change(ADMIN_TYPE, UPSERT, node, hub.sign(
            {"id": node, "node": node, "time": t, "in_rate": 1, "out_rate": 2,
             "history": ["x"]}))
    sink.apply_changes([stats("b", 1), stats("a", 1)])
    clock.advance(3)
    sink.apply_changes([stats("a", 4)])
    state = hub.state()
    assert [s["node"] for s in state] == ["a", "b"]
    # the points the hub kept (a "history" sent along is not taken)
    assert state[0]["history"] == [[1, 1.0, 2.0], [4, 1.0, 2.0]]
    clock.advance(3)
    hub.expire()
    assert [s["node"] for s in hub.state()] == ["a"]
    # not signed with this key, or changed after signing, or a delete: ignored
    other = AdminHub(Sessions(), clock, b"x" * 16)
    forged = Change(ADMIN_TYPE, UPSERT, "evil", other.sign({"id": "evil", "node": "evil"}))
    tampered = stats("a", 9)
    tampered.obj["sessions"] = 1000
    unsigned = Change(ADMIN_TYPE, UPSERT, "u", {"id": "u", "node": "u"})
    sink.apply_changes([forged, tampered, unsigned,
                        Change(ADMIN_TYPE, "delete", "a", {"id": "a"})])
    assert [s["node"] for s in hub.state()] == ["a"] and "sessions" not in hub.nodes["a"]
    assert hub.forged == 3


def test_the_sink_passes_other_changes_and_gaps_to_the_engine() -> None:
    got = []

    class Engine:
        def apply_changes(self, changes):
            got.append([c.type for c in changes])

        def feed_gap(self):
            got.append("gap")
    sink = AdminSink(Engine(), hub=None)
    s = Change("Stream", UPSERT, 1, {"id": 1})
    a = Change(ADMIN_TYPE, UPSERT, "n", {"id": "n"})
    sink.apply_changes([s, a, s])
    sink.apply_changes([a])
    sink.apply_changes([s])
    sink.feed_gap()
    assert got == [["Stream", "Stream"], ["Stream"], "gap"]
    assert sink.ignored == 2


def test_the_publisher_survives_a_failing_feed_and_health() -> None:
    n = node("--node-id", "n1")
    sid = n.rpc("session.create")
    n.rpc("admin.subscribe", sid, KEY)
    n.feed.stop()                                   # the feed refuses: shown here anyway
    n.tick()
    [event] = n.rpc("session.get_events", sid, 0)
    assert event["obj"]["feed"]["up"] is False
    assert n.stats_publisher.failed == 1

    def broken():
        raise RuntimeError("boom")
    n.stats_publisher.health = broken
    n.tick()
    [event] = n.rpc("session.get_events", sid, 0)
    assert event["obj"]["feed"] == {"up": False, "kind": "none"}
    # the timer's body cannot die: an exception is logged and the next tick runs
    calls = []

    def body():
        calls.append(1)
        raise RuntimeError("boom")
    t = timer(1.0, body, n.clock)
    t.startService()
    n.clock.advance(1)
    n.clock.advance(1)
    t.stopService()
    assert len(calls) >= 2


# -- lockout (SPEC 18): per source of wrong keys, never the right key -----------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["10.0.0.1", "10.0.0.2", "?"]),
                          st.sampled_from([KEY, "wrong", None]),
                          st.sampled_from([0.0, 0.5, 3.0, 11.0])), max_size=60))
def test_the_right_key_is_never_locked_out(calls) -> None:
    """Whatever wrong keys came before, from whatever address (the
    operator's included), the right key is accepted; a wrong key is
    NotAuthorized, or RateLimited once its source gave max_failures of them
    within the window."""
    clock = Clock()
    key = AdminKey(KEY, clock, max_failures=3, window=10)
    wrong: dict[str, list[float]] = {}
    for address, presented, wait in calls:
        clock.advance(wait)
        caller = Caller(address)
        if presented == KEY:
            key.check(caller, presented)
            continue
        recent = [t for t in wrong.get(address, []) if t > clock.seconds() - 10]
        if len(recent) >= 3:
            with pytest.raises(RateLimited):
                key.check(caller, presented)
        else:
            with pytest.raises(NotAuthorized):
                key.check(caller, presented)
            recent.append(clock.seconds())
        wrong[address] = recent


def test_wrong_keys_from_the_operators_address_do_not_lock_the_operator_out() -> None:
    n = node()
    for _ in range(12):
        n.rpc.send("admin.stats", "wrong-key-guess-0000").reply()
    assert n.rpc("admin.stats", KEY) == []
