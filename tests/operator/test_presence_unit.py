"""Presence across two nodes on Clocks sharing one cache (SPEC section 16)."""
from __future__ import annotations

from pathlib import Path

import jwt
import pytest

from pushengine.memcache import InMemoryCache
from pushengine.views.conditions import ViewDefinitionError
from pushengine.views.spec import parse_catalog
from tests.http.harness import ClockNode, Http, Rpc

VIEWS = str(Path(__file__).with_name("views_presence.yaml"))
SECRET = "jwt-secret-of-at-least-thirty-two-bytes"


def token(user: str) -> str:
    return jwt.encode({"sub": user}, SECRET, algorithm="HS256")


class Cluster:
    """Two nodes whose presence shares one in-process cache."""

    def __init__(self) -> None:
        self.a = ClockNode("--views", VIEWS, "--secret", SECRET, "--node-id", "a",
                           "--session-timeout", "60")
        self.b = ClockNode("--views", VIEWS, "--secret", SECRET, "--node-id", "b",
                           "--session-timeout", "60")
        self.cache = InMemoryCache(self.a.clock)
        for node in (self.a, self.b):
            node.presence.store.cache = self.cache
            node.rpc = Rpc(Http(node.web.resource()))

    def tick(self, seconds: float = 1.0) -> None:
        """Time passes; each node writes and reads (twice: both see the other's writes)."""
        for node in (self.a, self.b):
            node.clock.advance(seconds)
        for node in (self.a, self.b, self.a, self.b):
            node.presence.tick()

    def user(self, node, name: str | None, view: str = "RoomView", **params):
        sid = node.rpc("session.create")
        if name:
            node.rpc("session.authorize", sid, token(name))
        if view == "RoomView":
            params = params or {"room_id": 7}
        key, _ = node.rpc("session.subscribe", sid, view, params, 10)
        return sid, key


def events(node, sid) -> list:
    return [(e["action"], e["obj"]["user"]) for e in node.rpc("session.get_events", sid, 0)
            if e["action"] in ("join", "leave")]


def test_presence_list_across_two_nodes() -> None:
    c = Cluster()
    sa, ka = c.user(c.a, "alice")
    sb, kb = c.user(c.b, "bob")
    c.user(c.b, None)                               # anonymous: not present
    c.user(c.b, "carol", "PublicLiveStreamView")    # another view
    assert c.a.rpc("presence.list", sa, ka) == ["alice"]          # written at the next tick
    c.tick()
    assert c.a.rpc("presence.list", sa, ka) == ["alice", "bob"]
    assert c.b.rpc("presence.list", sb, kb) == ["alice", "bob"]


def test_only_subscribers_may_ask() -> None:
    c = Cluster()
    sa, ka = c.user(c.a, "alice")
    other = c.a.rpc("session.create")
    assert c.a.rpc.error("presence.list", other, ka).code == 1005
    assert c.a.rpc.error("presence.list", sa, "RoomView(room_id=8;limit=10)").code == 1005
    assert c.a.rpc.error("presence.list", "nope", ka).code == 1001
    assert c.a.rpc.error("presence.list", sa, 5).code == -32602
    c.a.rpc("session.unsubscribe", sa, ka)
    assert c.a.rpc.error("presence.list", sa, ka).code == 1005


def test_join_and_leave_across_nodes_only_to_presence_subscribers() -> None:
    c = Cluster()
    watcher, _ = c.user(c.a, None)                   # anonymous sessions are told too
    plain, _ = c.user(c.a, "pat", "PublicLiveStreamView")
    other_room, _ = c.user(c.a, None, room_id=8)
    c.tick()
    events(c.a, watcher), events(c.a, plain), events(c.a, other_room)
    bob, _ = c.user(c.b, "bob")                      # on the other node
    local, _ = c.user(c.a, "alice")                  # on this node: told at once
    assert events(c.a, watcher) == [("join", "alice")]
    c.tick()
    assert events(c.a, watcher) == [("join", "bob")]
    assert events(c.b, bob) == [("join", "alice")]
    # a second session of bob's: no new join; its end: no leave
    bob2, _ = c.user(c.b, "bob")
    c.b.rpc("session.destroy", bob2)
    c.tick()
    assert events(c.a, watcher) == []
    c.b.rpc("session.destroy", bob)
    c.tick()
    assert events(c.a, watcher) == [("leave", "bob")]
    assert events(c.a, plain) == [] and events(c.a, other_room) == []
    # expiry is a leave too
    c.a.rpc("session.get_events", local, 0)
    for _ in range(3):
        c.a.rpc("session.get_events", watcher, 0)
        c.tick(25)
    assert ("leave", "alice") in events(c.a, watcher)


def test_a_dead_node_leaves_after_the_ttl() -> None:
    c = Cluster()
    watcher, key = c.user(c.a, "alice")
    c.user(c.b, "bob")
    c.tick()
    assert events(c.a, watcher) == [("join", "bob")]
    for _ in range(35):                              # b stops writing (it died)
        c.a.clock.advance(1)
        c.a.presence.tick()
    assert c.a.rpc("presence.list", watcher, key) == ["alice"]
    assert events(c.a, watcher) == [("leave", "bob")]


def test_presence_must_be_a_boolean() -> None:
    with pytest.raises(ViewDefinitionError, match="presence"):
        parse_catalog({"views": {"V": {"type": "T", "presence": "yes"}}})
    assert parse_catalog({"views": {"V": {"type": "T", "presence": True}}}).views["V"].presence


def test_presence_is_opt_in_a_view_without_it_is_1013_and_never_listed() -> None:
    """SPEC section 16: only views declared with presence: true answer
    presence.list; watching a public list tells nobody who watches it.
    Before, any view answered, and every node wrote its members of every
    view into the shared cache."""
    c = Cluster()
    sc, kc = c.user(c.a, "carol", "PublicLiveStreamView")
    sd, kd = c.user(c.b, "dave", "PublicLiveStreamView")
    c.tick()
    for node, sid, key in ((c.a, sc, kc), (c.b, sd, kd)):
        error = node.rpc.error("presence.list", sid, key)
        assert error.code == 1013 and "presence: true" in error.message
    # nothing of that view was counted or written where another node reads
    assert c.a.presence.local == {} and c.b.presence.local == {}
    assert c.a.presence.stats()["rooms"] == 0
    assert c.a.presence.store.writes == 0 and c.b.presence.store.writes == 0
    # a session in both views: present in the room that declares presence only
    sa, ka = c.user(c.a, "alice")
    c.a.rpc("session.subscribe", sa, "PublicLiveStreamView", {}, 10)
    c.tick()
    assert c.a.rpc("presence.list", sa, ka) == ["alice"]
    assert c.a.rpc.error("presence.list", sa, kc).code == 1013
    assert list(c.a.presence.local) == [ka.rpartition(";limit=")[0] + ")"]
    # the OpenRPC document declares the error
    doc = c.a.rpc("rpc.discover")
    (method,) = [m for m in doc["methods"] if m["name"] == "presence.list"]
    assert 1013 in {e["code"] for e in method["errors"]}
