"""The lifecycle of a session's token (SPEC section 18 "Tokens"): a session
stops being authorized at its token's ``exp``, and ``session.refresh``
extends it. Driven over HTTP on a node built by the composition root, on a
Clock: nothing sleeps."""
from __future__ import annotations

import time

import jwt
import pytest

from tests.http.harness import ClockNode, Http, Rpc

SECRET = "token-test-secret-of-enough-length"
VIEWS = """
types: {Stream: {id: id}, Offer: {id: id}}
views:
  HomeView:
    type: Stream
    params: [limit]
    where: {visible_to: $session.user}
    order: id
  PublicView:
    type: Stream
    params: [limit]
    where: {public: true}
    order: id
  OfferView:
    type: Offer
    where: {audience: $session.segments}
    order: id
    limit: {default: 50, max: 50}
"""
PHONE = "79990000001"


def token(user: str, ttl: float | None = None, **claims) -> str:
    """A token of ``user`` whose ``exp`` is ``ttl`` seconds from now (the
    node's Clock counts them from the call that takes it)."""
    if ttl is not None:
        claims["exp"] = time.time() + ttl
    return jwt.encode({"sub": user, **claims}, SECRET, algorithm="HS256")


@pytest.fixture
def node(tmp_path):
    views = tmp_path / "views.yaml"
    views.write_text(VIEWS)
    node = ClockNode("--views", str(views), "--secret", SECRET, "--segment-min", "1",
                     "--session-timeout", "3600")
    node.http = Http(node.web.resource())
    node.rpc = Rpc(node.http)
    return node


def publish(node, type_, *objs) -> None:
    reply = node.http.post("/api/publish", [{"type": type_, "action": "upsert", "obj": o}
                                            for o in objs])
    assert reply.code == 200, reply


def events(node, sid) -> list:
    return [(e["key"].partition("(")[0], e["action"], e["obj"]["id"])
            for e in node.rpc("session.get_events", sid, 0)]


def private_home(node, ttl):
    """A session of user 7 authorized for ``ttl`` seconds, subscribed to its home
    view, which shows one private object (and a public one)."""
    publish(node, "Stream", {"id": 1, "user_id": 5, "public": False, "allowed_users": [7]},
            {"id": 2, "public": True})
    sid = node.rpc("session.create")
    assert node.rpc("session.authorize", sid, token("7", ttl)) == 7
    key, state = node.rpc("session.subscribe", sid, "HomeView", {}, 10)
    assert [o["id"] for o in state] == [1, 2]
    pkey, pstate = node.rpc("session.subscribe", sid, "PublicView", {}, 10)
    assert [o["id"] for o in pstate] == [2]
    return sid, key, pkey


def test_a_private_object_leaves_at_exp_and_user_calls_answer_1003_or_1005(node):
    sid, key, pkey = private_home(node, ttl=60)
    node.clock.advance(59)
    assert events(node, sid) == []
    assert node.rpc("stats.online", key, sid) >= 0
    node.clock.advance(1)
    # what the personal subscription showed leaves as ordinary deletes
    assert events(node, sid) == [("HomeView", "delete", 1), ("HomeView", "delete", 2)]
    session = node.engine.sessions.get(sid)
    assert session.user is None and key not in session.subs and pkey in session.subs
    # the key is gone; what needs a user answers 1003
    assert node.rpc.error("session.unsubscribe", sid, key).code == 1005
    assert node.rpc.error("session.subscribe", sid, "HomeView", {}, 10).code == 1003
    # its figure is a subscriber's only, and it holds the key no more (SPEC 12)
    assert node.rpc.error("stats.online", key, sid).code == 1005
    # the public subscription goes on
    publish(node, "Stream", {"id": 3, "public": True})
    assert ("PublicView", "insert", 3) in events(node, sid)
    # an expired token is refused
    assert node.rpc.error("session.authorize", sid, token("7", -1)).code == 1003
    assert node.rpc.error("session.refresh", sid, token("7", -1)).code == 1003
    # a fresh one authorizes again
    assert node.rpc("session.authorize", sid, token("7", 1000)) == 7
    assert [o["id"] for o in node.rpc("session.subscribe", sid, "HomeView", {}, 10)[1]] \
        == [1, 2, 3]


def test_refresh_before_exp_keeps_the_authorization(node):
    sid, key, _ = private_home(node, ttl=60)
    node.clock.advance(30)
    assert node.rpc("session.refresh", sid, token("7", 90)) == 7
    node.clock.advance(60)                       # past the first exp
    assert events(node, sid) == []
    assert node.engine.sessions.get(sid).user == 7
    node.clock.advance(30)                       # the new exp
    assert [a for _, a, _ in events(node, sid)] == ["delete", "delete"]
    assert node.engine.sessions.get(sid).user is None


def test_refresh_without_exp_never_expires(node):
    sid, key, _ = private_home(node, ttl=60)
    assert node.rpc("session.refresh", sid, token("7")) == 7
    for _ in range(4):                           # polls keep the session alive
        node.clock.advance(3000)
        assert events(node, sid) == []
    assert node.engine.sessions.get(sid).user == 7
    assert key in node.engine.sessions.get(sid).subs


def test_refresh_with_another_users_token_is_1003_and_changes_nothing(node):
    sid, key, _ = private_home(node, ttl=60)
    assert node.rpc.error("session.refresh", sid, token("8", 4000)).code == 1003
    assert node.rpc.error("session.refresh", sid, "not-a-token").code == 1003
    other = jwt.encode({"sub": "7", "exp": time.time() + 4000},
                       "another-secret-of-enough-length-xx",
                       algorithm="HS256")
    assert node.rpc.error("session.refresh", sid, other).code == 1003
    assert node.engine.sessions.get(sid).user == 7
    node.clock.advance(60)                       # the first exp still holds
    assert node.engine.sessions.get(sid).user is None
    anonymous = node.rpc("session.create")
    assert node.rpc.error("session.refresh", anonymous, token("7", 4000)).code == 1003


def test_destroy_cancels_the_expiry(node):
    sid, _, _ = private_home(node, ttl=60)
    session = node.engine.sessions.get(sid)
    assert node.rpc("session.destroy", sid) is True
    assert session.authorized_until is None
    assert not [c for c in node.clock.getDelayedCalls()
                if c.func == node.engine.sessions._authorization_ended]


def test_audience_objects_leave_at_exp(node):
    digest_csv = f"phone\n{PHONE}\n".encode()
    assert node.http.request("POST", "/api/segments/vip", digest_csv).code == 200
    publish(node, "Offer", {"id": 1, "public": True, "audience": "vip"},
            {"id": 2, "public": True})
    sid = node.rpc("session.create")
    node.rpc("session.authorize", sid, token("7", 60, phone=PHONE))
    key, state = node.rpc("session.subscribe", sid, "OfferView", {}, 50)
    assert [o["id"] for o in state] == [1, 2]
    node.clock.advance(60)
    # the targeted offer leaves under the client's key; the untargeted stays
    got = node.rpc("session.get_events", sid, 0)
    assert [(e["key"], e["action"], e["obj"]["id"]) for e in got] == [(key, "delete", 1)]
    session = node.engine.sessions.get(sid)
    assert key in session.subs and [o["id"] for o in session.subs[key].state()] == [2]
    assert node.contacts.of(session) == ()
    # a new targeted offer does not reach it any more; an untargeted one does
    publish(node, "Offer", {"id": 3, "public": True, "audience": "vip"},
            {"id": 4, "public": True})
    assert [(e["action"], e["obj"]["id"]) for e in node.rpc("session.get_events", sid, 0)] \
        == [("insert", 4)]


def test_hooks_hear_of_the_deauthorization(node):
    heard = []
    from pushengine.core.hooks import SessionHooksBase

    class Ear(SessionHooksBase):
        def deauthorized(self, session):
            heard.append(("deauthorized", session.id, session.user))

        def changed(self, session):
            heard.append(("changed", session.id, session.user))
    node.hooks.add(Ear())
    sid, _, _ = private_home(node, ttl=60)
    heard.clear()
    node.clock.advance(60)
    assert heard == [("deauthorized", sid, None), ("changed", sid, None)]


def test_presence_of_a_personal_view_is_1003_after_exp(tmp_path):
    views = tmp_path / "views.yaml"
    # presence is opt-in per view (SPEC section 16): both views declare it
    declared = VIEWS.replace("    order: id\n  PublicView",
                             "    order: id\n    presence: true\n  PublicView")
    declared = declared.replace("where: {public: true}\n    order: id",
                                "where: {public: true}\n    order: id\n    presence: true")
    views.write_text(declared)
    node = ClockNode("--views", str(views), "--secret", SECRET, "--session-timeout", "3600")
    node.http = Http(node.web.resource())
    node.rpc = Rpc(node.http)
    assert node.catalog.views["HomeView"].presence and node.catalog.views["PublicView"].presence
    sid, key, pkey = private_home(node, ttl=60)
    assert node.rpc("presence.list", sid, key) == [7]
    node.clock.advance(60)
    assert node.rpc.error("presence.list", sid, key).code == 1003
    assert node.rpc("presence.list", sid, pkey) == []      # no longer present as user 7
