"""A segment upload or delete re-evaluates the sessions already subscribed
(SPEC 15): targeted objects enter and leave with insert/delete events under
the key the client was given, and later events keep coming under that key."""
from __future__ import annotations

import json

import pytest
from twisted.internet.defer import Deferred, succeed

from pushengine.core.changes import Change
from pushengine.core.routes import Route
from pushengine.segments.reevaluate import Reevaluator, diff
from pushengine.segments.store import MemorySegments
from pushengine.segments.contacts import SegmentMembership
from tests.core.helpers import Replica, get_events, make_engine
from tests.deferreds import fired
from tests.segments.test_http import (  # noqa: F401  (fixtures)
    contacts, csv_of, http, node, post, publish, rpc, session)

VIEWS = {
    "Offers": {"type": "Offer", "params": ["limit"], "where": {"audience": "$session.segments"},
               "order": "id", "limit": {"default": 3, "max": 10}},
    "Vip": {"type": "Offer", "params": ["limit"], "where": {"in_segment": "vip"},
            "order": "-id", "limit": {"default": 3, "max": 10}},
}


def offer(id_, audience=None, **more):
    obj = {"id": id_, "public": True, **more}
    if audience is not None:
        obj["audience"] = audience
    return Change("Offer", "upsert", id_, obj)


def digest_of(phone):
    import hashlib
    return hashlib.sha256(phone.encode()).digest()


class Setup:
    def __init__(self, store=None, **settings):
        self.engine, self.clock = make_engine(VIEWS, **settings)
        self.manager = self.engine.sessions
        self.store = store or MemorySegments()
        self.contacts = SegmentMembership(self.store)
        self.re = Reevaluator(self.manager, self.store, self.contacts)

    def upload(self, name, phones):
        upload = self.store.begin(name)
        upload.add([digest_of(p) for p in phones])
        fired(upload.commit({"valid": len(phones)}))

    def session(self, phone=None):
        s = self.manager.create()
        self.contacts.authorized(s, {"phone": phone} if phone else {})
        return s

    def subscribe(self, s, view, limit=3):
        segments = fired(self.contacts.segments_of(s))
        bound = self.engine.catalog.views[view].bind({}, None, limit, segments=segments)
        key, state = fired(self.manager.subscribe(s, bound))
        return key, Replica(state, VIEWS[view]["order"], limit)

    def events(self, s):
        return json.loads(get_events(self.manager, s, 0, None))


def apply(replica, key, events):
    for e in events:
        assert e["key"] == key
        replica.apply(e)
    return [o["id"] for o in replica.ordered()]


def test_an_upload_brings_the_targeted_objects_in_under_the_clients_key():
    t = Setup()
    t.engine.apply_changes([offer(1), offer(2, "vip"), offer(3, ["x", "vip"]), offer(4, "x")])
    member, stranger = t.session("79990000001"), t.session("79990000002")
    key, replica = t.subscribe(member, "Offers")
    skey, sreplica = t.subscribe(stranger, "Offers")
    assert key == skey == 'Offers(session.segments=[];limit=3)'
    assert [o["id"] for o in replica.ordered()] == [1]
    t.upload("vip", ["79990000001"])
    events = t.events(member)
    assert [(e["action"], e["obj"]["id"]) for e in events] == [("insert", 2), ("insert", 3)]
    assert apply(replica, key, events) == [1, 2, 3]
    assert t.events(stranger) == []
    assert list(member.subs) == [key]
    # later changes of the new view arrive under the client's key
    t.engine.apply_changes([offer(0, "vip")])
    assert apply(replica, key, t.events(member)) == [0, 1, 2]
    assert apply(sreplica, skey, t.events(stranger)) == [1]
    # deleted: the targeted objects leave
    fired(t.store.delete("vip"))
    events = t.events(member)
    assert {e["action"] for e in events} == {"delete"}
    assert apply(replica, key, events) == [1]
    assert member.subs[key].key == key and not isinstance(member.subs[key], Route)


def test_in_segment_views_fill_and_empty():
    t = Setup()
    t.engine.apply_changes([offer(i) for i in range(5)])
    s = t.session("79990000001")
    key, replica = t.subscribe(s, "Vip")
    assert replica.ordered() == []
    t.upload("other", ["79990000001"])      # another segment: nothing moves
    assert t.events(s) == [] and t.re.counters["moved"] == 0
    t.upload("vip", ["79990000001"])
    assert apply(replica, key, t.events(s)) == [4, 3, 2]
    t.upload("vip", ["79990000009"])        # replaced without the session
    assert apply(replica, key, t.events(s)) == []


def test_sessions_moved_together_share_one_route_and_one_encoding(monkeypatch):
    from pushengine.core import routes
    t = Setup()
    a, b = t.session("79990000001"), t.session("79990000001")
    ka, ra = t.subscribe(a, "Offers")
    kb, rb = t.subscribe(b, "Offers")
    t.upload("vip", ["79990000001"])
    assert a.subs[ka] is b.subs[kb] and isinstance(a.subs[ka], Route)
    t.events(a), t.events(b)
    made = []
    real = routes.Fragment
    monkeypatch.setattr(routes, "Fragment", lambda *args: made.append(args) or real(*args))
    t.engine.apply_changes([offer(7, "vip")])
    assert len(made) == 1                  # rewritten once for both sessions
    for s, key in ((a, ka), (b, kb)):
        assert [(e["key"], e["action"], e["obj"]["id"]) for e in t.events(s)] == [
            (key, "insert", 7)]
    # unsubscribing both frees the route and the new view's query
    t.manager.unsubscribe(a, ka)
    t.manager.unsubscribe(b, kb)
    assert t.manager.routes == {} and t.engine.registry.queries == {}


def test_an_overflow_resets_under_the_clients_key():
    t = Setup(max_queue=2)
    s = t.session("79990000001")
    key, replica = t.subscribe(s, "Offers", limit=10)
    t.upload("vip", ["79990000001"])
    t.engine.apply_changes([offer(i, "vip") for i in range(5)])
    events = t.events(s)
    assert [e["action"] for e in events] == ["reset"] and events[0]["key"] == key
    assert apply(replica, key, events) == [0, 1, 2, 3, 4]


def test_subscribing_again_under_the_same_key_leaves_the_route():
    t = Setup()
    t.engine.apply_changes([offer(1, "vip")])
    s = t.session("79990000001")
    key, _ = t.subscribe(s, "Offers")
    t.upload("vip", ["79990000001"])
    t.events(s)
    fired(t.store.delete("vip"))
    t.upload("vip", ["79990000001"])
    # the client subscribes again: now bound to ["vip"], a key of its own
    key2, replica = t.subscribe(s, "Offers")
    assert key2 != key and [o["id"] for o in replica.ordered()] == [1]
    t.manager.destroy(s)
    assert t.manager.routes == {} and t.engine.registry.queries == {}


class SlowStore(MemorySegments):
    """Membership answers held until the test releases them."""

    def __init__(self):
        super().__init__()
        self.waiting = []

    def members(self, name, groups):
        d = Deferred()
        self.waiting.append((d, super().members(name, groups)))
        return d

    def release(self, index):
        d, answer = self.waiting.pop(index)
        answer.addCallback(d.callback)


def test_two_changes_answered_out_of_order_both_count():
    t = Setup(store=SlowStore())
    t.engine.apply_changes([offer(1, "a"), offer(2, "b"), offer(3)])
    s = t.session("79990000001")
    key, replica = t.subscribe(s, "Offers")
    t.upload("a", ["79990000001"])
    t.upload("b", ["79990000001"])
    t.store.release(1)            # b answers first
    t.store.release(0)
    assert apply(replica, key, t.events(s)) == [1, 2, 3]
    assert s.bounds[key].values["session.segments"] == ["a", "b"]


def test_a_session_gone_or_unsubscribed_meanwhile_is_left_alone():
    t = Setup(store=SlowStore())
    s, u = t.session("79990000001"), t.session("79990000001")
    key, _ = t.subscribe(s, "Offers")
    ukey, _ = t.subscribe(u, "Offers")
    t.upload("vip", ["79990000001"])
    t.manager.destroy(s)
    t.manager.unsubscribe(u, ukey)
    t.store.release(0)
    assert t.engine.registry.queries == {} and t.manager.routes == {}


def test_store_failure_keeps_what_sessions_see():
    class Down(MemorySegments):
        def members(self, name, groups):
            from twisted.internet.defer import fail
            from pushengine.segments.store import SegmentsUnavailable
            return fail(SegmentsUnavailable("down"))
    t = Setup(store=Down())
    s = t.session("79990000001")
    key, _ = t.subscribe(s, "Offers")
    assert fired(t.re.changed("vip")) == 0 and t.re.counters["failures"] == 1
    assert list(s.subs) == [key]


def test_diff_turns_one_state_into_the_other():
    a = [{"id": 1}, {"id": 2, "x": 1}, {"id": 3}]
    b = [{"id": 0}, {"id": 2, "x": 2}, {"id": 4}]
    r = Replica(a, "id", 3)
    for action, obj, old in diff(a, b):
        r.apply({"action": action, "obj": obj, "old": old})
    assert r.ordered() == b


# -- through the node: an upload over HTTP moves subscribed sessions ----------------

def test_an_http_upload_and_delete_move_subscribed_sessions(http, rpc, node):
    http.post("/api/publish", [
        {"type": "Offer", "action": "upsert", "obj": {"id": 1, "public": True,
                                                      "audience": "vip"}},
        {"type": "Offer", "action": "upsert", "obj": {"id": 2, "public": True}}])
    member = session(rpc, sub="1", phone=contacts(1)[0])
    stranger = session(rpc, sub="2", phone=contacts(1, start=900)[0])
    keys = {}
    for sid in (member, stranger):
        keys[sid], state = rpc("session.subscribe", sid, "OfferView", {}, 50)
        assert [o["id"] for o in state] == [2]
    assert post(http, "vip", csv_of(contacts(3))).code == 200
    assert [(e["key"], e["action"], e["obj"]["id"]) for e in
            rpc("session.get_events", member, 0)] == [(keys[member], "insert", 1)]
    assert rpc("session.get_events", stranger, 0) == []
    assert http.request("DELETE", "/api/segments/vip").code == 200
    assert [(e["key"], e["action"], e["obj"]["id"]) for e in
            rpc("session.get_events", member, 0)] == [(keys[member], "delete", 1)]
    # the client's key still unsubscribes
    assert rpc("session.unsubscribe", member, keys[member]) is True


# -- other nodes learn of a change by polling the versions in Redis ------------------

class FakeRedis:
    """Answers HGETALL of the versions hash; fails while ``down``."""

    def __init__(self):
        self.versions = {}
        self.down = False

    def __call__(self, *args):
        from twisted.internet.defer import fail
        from pushengine.segments.store import SegmentsUnavailable
        if self.down:
            return fail(SegmentsUnavailable("down"))
        assert args[0] == "HGETALL"
        flat = []
        for k, v in self.versions.items():
            flat += [k.encode(), str(v).encode()]
        return succeed(flat)


def test_redis_store_reports_what_another_node_changed():
    from twisted.internet.task import Clock
    from pushengine.redis.segments import RedisSegments
    clock = Clock()
    store = RedisSegments(clock, "redis://127.0.0.1:1/0", endpoint=object())
    store.send = redis = FakeRedis()
    heard = []
    store.listeners.append(heard.append)
    redis.versions = {"a": 1}
    store._poller.start(1.0, now=False)
    clock.advance(1)                  # the first poll reports every segment
    assert heard == ["a"]
    clock.advance(1)
    assert heard == ["a"]
    redis.versions = {"a": 2, "b": 1}
    clock.advance(1)
    assert heard == ["a", "a", "b"]
    redis.down = True                 # changes made while Redis is out of reach
    redis.versions = {"b": 1}
    clock.advance(1)
    assert heard == ["a", "a", "b"]
    redis.down = False
    clock.advance(1)
    assert heard == ["a", "a", "b", "a"]
    store.changed_here("b", 2)        # this node's own change: heard once
    redis.versions = {"b": 2}
    clock.advance(1)
    assert heard == ["a", "a", "b", "a", "b"]
    store._poller.stop()


# -- a session resumed on another node -------------------------------------------------

def test_a_resumed_session_keeps_its_key_without_segments(tmp_path):
    import jwt
    from tests.cluster.nodes import MemoryCluster
    from tests.segments.test_http import SECRET, VIEWS as NODE_VIEWS
    views = tmp_path / "views.yaml"
    views.write_text(NODE_VIEWS)
    cluster = MemoryCluster(2, "--views", str(views), "--secret", SECRET, "--segment-min", "1")
    a, b = cluster.nodes
    assert post(a.http, "vip", csv_of(contacts(1))).code == 200
    changes = [{"type": "Offer", "action": "upsert", "obj": {"id": 1, "public": True,
                                                             "audience": "vip"}},
               {"type": "Offer", "action": "upsert", "obj": {"id": 2, "public": True}}]
    for node in (a, b):
        assert node.http.post("/api/publish", changes).code == 200
    sid = a.rpc("session.create")
    a.rpc("session.authorize", sid, jwt.encode({"sub": "1", "phone": contacts(1)[0]}, SECRET,
                                               algorithm="HS256"))
    key, state = a.rpc("session.subscribe", sid, "OfferView", {}, 50)
    assert key == 'OfferView(session.segments=["vip"];limit=50)'
    assert [o["id"] for o in state] == [1, 2]
    # b resumes it: no digests in the registry entry, so no segments (fail
    # closed), under the key the client holds
    events = b.rpc("session.get_events", sid, 0)
    assert [(e["key"], e["action"], [o["id"] for o in e["obj"]]) for e in events] == [
        (key, "reset", [2])]
    resumed = b.engine.sessions.get(sid)
    assert b.contacts.of(resumed) == () and isinstance(resumed.subs[key], Route)
    b.http.post("/api/publish", [{"type": "Offer", "action": "upsert",
                                  "obj": {"id": 3, "public": True}}])
    assert [(e["key"], e["obj"]["id"]) for e in b.rpc("session.get_events", sid, 0)] == [
        (key, 3)]
    assert b.rpc("session.unsubscribe", sid, key) is True
    assert b.engine.sessions.routes == {}
