"""admin.disconnect (SPEC section 16): every session of a user ends, on
this node at once and on the other nodes through a signed message on the
shared change feed. Two nodes on Clocks share one in-process feed."""
from __future__ import annotations

import time
from typing import Any, Sequence

import jwt
import pytest
from twisted.internet.defer import succeed

from pushengine.admin import DISCONNECT_TYPE
from pushengine.admin.hub import signature
from pushengine.core.changes import UPSERT, Change
from pushengine.core.hooks import SessionHooksBase
from pushengine.feeds.memory import MemoryFeed
from tests.http.harness import ClockNode, Http, Rpc

KEY = "admin-key-of-the-tests-0123"
SECRET = "disconnect-test-secret-of-enough-length"


class Bus:
    """One feed shared by nodes: what one publishes reaches every node's sink."""

    def __init__(self) -> None:
        self.ports: list[Port] = []


class Port(MemoryFeed):
    def __init__(self, bus: Bus) -> None:
        super().__init__()
        self.bus = bus
        bus.ports.append(self)

    def publish(self, changes: Sequence[Change]) -> Any:
        for port in self.bus.ports:
            if port.sink is not None:
                port.sink.apply_changes(list(changes))
        return succeed(len(changes))


class Ear(SessionHooksBase):
    def __init__(self) -> None:
        self.destroyed_ids: list[str] = []

    def destroyed(self, session) -> None:
        self.destroyed_ids.append(session.id)


class Node(ClockNode):
    def __init__(self, bus: Bus, node_id: str, key: str = KEY, clock: Any = None) -> None:
        super().__init__("--admin-key", key, "--secret", SECRET, "--node-id", node_id,
                         feed=Port(bus), clock=clock)
        self.feed.start(self.sink)            # as the feed service does
        self.http = Http(self.web.resource())
        self.rpc = Rpc(self.http)
        self.ear = Ear()
        self.hooks.add(self.ear)

    def user(self, name: str) -> str:
        sid = self.rpc("session.create")
        self.rpc("session.authorize", sid, jwt.encode(
            {"sub": name, "exp": time.time() + 600}, SECRET, algorithm="HS256"))
        return sid


class Stream:
    """A streaming delivery that records being closed."""
    holds_session = True

    def __init__(self) -> None:
        self.closed = False

    def notify(self, session) -> None:
        pass

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def nodes():
    bus = Bus()
    return Node(bus, "a"), Node(bus, "b")


def test_disconnect_ends_the_users_sessions_here_and_there(nodes):
    a, b = nodes
    mine = [a.user("42"), a.user("42")]
    theirs = b.user("42")
    others = [a.user("7"), b.user("7"), a.user("420"), a.rpc("session.create")]
    stream = Stream()
    a.engine.sessions.attach(a.engine.sessions.get(mine[0]), stream)
    assert a.rpc("admin.disconnect", KEY, "42") == 2          # "42" is the user 42
    for node, sid in ((a, mine[0]), (a, mine[1]), (b, theirs)):
        assert node.rpc.error("session.get_events", sid, 0).code == 1001
    assert stream.closed
    assert sorted(a.ear.destroyed_ids) == sorted(mine) and b.ear.destroyed_ids == [theirs]
    for sid in others:
        node = a if sid in a.engine.sessions.sessions else b
        assert node.rpc("session.get_events", sid, 0) == []
    assert b.disconnector.received == 1 and a.disconnector.received == 0
    # nobody left: 0
    assert b.rpc("admin.disconnect", KEY, 42) == 0


def test_a_forged_disconnect_does_nothing(nodes):
    a, b = nodes
    sid = b.user("42")
    obj = {"id": "x1", "user": 42, "origin": "a", "time": 0}
    for bad in (dict(obj, sig=signature(b"another-admin-key-0123456", obj)),
                dict(obj, sig=signature(KEY.encode(), dict(obj, user=7))),   # tampered
                dict(obj)):                                                   # unsigned
        a.feed.publish([Change(DISCONNECT_TYPE, UPSERT, "x1", bad)])
    # published as an ordinary change by a backend: the same
    reply = a.http.post("/api/publish", [{"type": DISCONNECT_TYPE, "action": "upsert",
                                          "obj": dict(obj, sig="0" * 64)}])
    assert reply.code == 200, reply
    assert b.rpc("session.get_events", sid, 0) == []
    assert b.disconnector.forged >= 3 and b.disconnector.received == 0
    # a genuine one, for contrast, ends it
    a.feed.publish([Change(DISCONNECT_TYPE, UPSERT, "x2",
                           dict(obj, id="x2", sig=signature(KEY.encode(), dict(obj, id="x2"))))])
    assert b.rpc.error("session.get_events", sid, 0).code == 1001


def test_a_node_with_another_admin_key_ignores_it():
    bus = Bus()
    a, b = Node(bus, "a"), Node(bus, "b", key="a-different-admin-key-999")
    sid = b.user("42")
    assert a.rpc("admin.disconnect", KEY, 42) == 0
    assert b.rpc("session.get_events", sid, 0) == []
    assert b.disconnector.forged == 1


def test_the_key_and_the_user_are_checked(nodes):
    a, _ = nodes
    sid = a.user("42")
    assert a.rpc.error("admin.disconnect", "wrong-key-wrong-key", 42).code == 1003
    for bad in (True, None, 1.5, [], ""):
        assert a.rpc.error("admin.disconnect", KEY, bad).code == -32602
    assert a.rpc("session.get_events", sid, 0) == []
    closed = ClockNode()
    assert Rpc(Http(closed.web.resource())).error("admin.disconnect", KEY, 42).code == 1003


def signed(obj: dict) -> Change:
    return Change(DISCONNECT_TYPE, UPSERT, obj["id"],
                  dict(obj, sig=signature(KEY.encode(), obj)))


def test_a_signed_disconnect_is_applied_once_and_only_within_its_window(nodes):
    """A copy of a genuine message (captured and published again, or a
    message that waited in a queue) must not end the sessions the user
    opened since."""
    a, b = nodes
    b.clock.advance(10_000)
    first = b.user("42")
    message = signed({"id": "d1", "user": 42, "origin": "a", "time": b.clock.seconds()})
    a.feed.publish([message])
    assert b.rpc.error("session.get_events", first, 0).code == 1001
    again = b.user("42")
    a.feed.publish([message])                                    # the same copy again
    a.feed.publish([signed({"id": "d2", "user": 42, "origin": "a",
                            "time": b.clock.seconds() - 601})])  # out of its window
    a.feed.publish([signed({"id": "d3", "user": 42, "origin": "a",
                            "time": b.clock.seconds() + 601})])  # from the future
    a.feed.publish([signed({"id": "d4", "user": 42, "origin": "a", "time": "now"})])
    assert b.rpc("session.get_events", again, 0) == []
    assert b.disconnector.received == 1 and b.disconnector.replayed == 4
    metrics = b.http.get("/metrics").body.decode()
    for series, value in (("disconnects_replayed", 4), ("disconnects_received", 1),
                          ("disconnect_sessions_ended", 1)):
        assert f'pushengine_admin_{series}_total{{node="b"}} {value}.0' in metrics
    # a new genuine message still works
    a.feed.publish([signed({"id": "d5", "user": 42, "origin": "a",
                            "time": b.clock.seconds()})])
    assert b.rpc.error("session.get_events", again, 0).code == 1001


def test_the_ids_remembered_are_bounded(nodes, monkeypatch):
    from pushengine.admin import disconnect

    monkeypatch.setattr(disconnect, "MAX_SEEN", 5)
    a, b = nodes
    for i in range(20):
        b.clock.advance(1)
        a.feed.publish([signed({"id": f"m{i}", "user": 9, "origin": "a",
                                "time": b.clock.seconds()})])
    assert len(b.disconnector._seen) <= 5 and b.disconnector.received == 20
    # an id forgotten within its window is not applied again: nothing sent
    # by the time of the last one forgotten is
    a.feed.publish([signed({"id": "m3", "user": 9, "origin": "a", "time": 4.0})])
    a.feed.publish([signed({"id": "m20", "user": 9, "origin": "a", "time": 15.0})])
    assert b.disconnector.received == 20 and b.disconnector.replayed == 2


# -- a restart of the receiving node (SPEC section 22) ---------------------------------------

class Tap:
    """What goes over the bus, as an eavesdropper on the broker captures it."""

    def __init__(self, bus: Bus) -> None:
        self.captured: list[Change] = []
        port = Port(bus)
        port.sink = self
        self.port = port

    def apply_changes(self, changes) -> None:
        self.captured.extend(c for c in changes if c.type == DISCONNECT_TYPE)


def restart(bus: Bus, old: Node, clock) -> Node:
    """``old`` stops (its port leaves the bus) and starts again, same id."""
    bus.ports.remove(old.feed)
    return Node(bus, "b", clock=clock)


def test_a_captured_message_replayed_after_a_restart_of_the_receiving_node_is_refused():
    """Before, the ids a node applied lived in its memory only: after a
    restart, a copy of a genuine message, replayed within its window, ended
    the sessions the user had opened since."""
    from twisted.internet.task import Clock
    clock = Clock()
    clock.advance(1_000)
    bus = Bus()
    tap = Tap(bus)
    a, b = Node(bus, "a", clock=clock), Node(bus, "b", clock=clock)
    before = b.user("42")
    assert a.rpc("admin.disconnect", KEY, 42) == 0
    assert b.rpc.error("session.get_events", before, 0).code == 1001
    (message,) = tap.captured
    clock.advance(30)
    b = restart(bus, b, clock)
    since = b.user("42")
    tap.port.publish([message])                   # the copy, well within its window
    assert b.rpc("session.get_events", since, 0) == []
    assert b.disconnector.replayed == 1 and b.disconnector.received == 0
    # a new genuine message still ends it
    assert a.rpc("admin.disconnect", KEY, 42) == 0
    assert b.rpc.error("session.get_events", since, 0).code == 1001
    assert b.disconnector.received == 1


class FakeRedis:
    """SET NX PX on a dict with expiry on the test's Clock; down when asked."""

    def __init__(self, clock) -> None:
        self.clock = clock
        self.keys: dict[str, float] = {}
        self.sent: list[tuple] = []

    def execute_command(self, *args):
        self.sent.append(args)
        name, key, value, nx, px, ms = args
        assert (name, value, nx, px) == ("SET", "1", "NX", "PX")
        now = self.clock.seconds()
        if self.keys.get(key, -1.0) > now:
            return succeed(None)
        self.keys[key] = now + ms / 1000
        return succeed("OK")


def with_redis(node: Node, redis: FakeRedis) -> Node:
    """The node's disconnects remembered in (fake) Redis, as with --redis."""
    from pushengine.redis.replay import RedisSeenIds
    store = RedisSeenIds(node.clock, "redis://127.0.0.1:6379/0?prefix=t:", "b")
    store.link.proto = redis
    node.disconnector.shared = store
    return node


def test_with_redis_the_ids_survive_a_restart_and_messages_from_before_it_still_count():
    from twisted.internet.task import Clock
    clock = Clock()
    clock.advance(1_000)
    redis = FakeRedis(clock)
    bus = Bus()
    tap = Tap(bus)
    a, b = Node(bus, "a", clock=clock), with_redis(Node(bus, "b", clock=clock), redis)
    first = b.user("42")
    a.rpc("admin.disconnect", KEY, 42)
    assert b.rpc.error("session.get_events", first, 0).code == 1001
    (applied,) = tap.captured
    key = f"t:disconnect:b:{applied.obj['id']}"
    assert key in redis.keys and 600 < redis.keys[key] - clock.seconds() <= 601
    # a message sent before the restart that b never applied: it waited in
    # b's queue while b was down
    waiting = signed({"id": "w1", "user": 7, "origin": "a", "time": clock.seconds()})
    clock.advance(30)
    b = with_redis(restart(bus, b, clock), redis)
    since, seven = b.user("42"), b.user("7")
    tap.port.publish([applied])                    # applied before the restart: refused
    assert b.rpc("session.get_events", since, 0) == []
    tap.port.publish([waiting])                    # never applied: Redis says so
    assert b.rpc.error("session.get_events", seven, 0).code == 1001
    assert (b.disconnector.replayed, b.disconnector.received) == (1, 1)
    # Redis down: the node decides alone, refusing what was sent before it started
    b.disconnector.shared.link.proto = None
    tap.port.publish([signed({"id": "w2", "user": 42, "origin": "a",
                              "time": clock.seconds() - 60})])
    assert b.rpc("session.get_events", since, 0) == []
    tap.port.publish([signed({"id": "w3", "user": 42, "origin": "a",
                              "time": clock.seconds()})])
    assert b.rpc.error("session.get_events", since, 0).code == 1001
    assert (b.disconnector.replayed, b.disconnector.received) == (2, 2)
