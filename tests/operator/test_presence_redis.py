"""Presence through Redis (``--redis`` without ``--memcache``): the store on
a Clock with a stand-in connection, and two real nodes sharing Redis."""
from __future__ import annotations

import uuid

import pytest
from twisted.internet.defer import succeed
from twisted.internet.task import Clock

from pushengine.api.presence import PresenceUnavailable
from pushengine.app.adapters import build_presence_store
from pushengine.memcache import InMemoryCache
from pushengine.memcache.presence import PresenceStore
from pushengine.redis.presence import RedisPresenceStore
from tests.e2e.conftest import start
from tests.operator.test_presence_process import SECRET, VIEWS, joins, token
from tests.services import require_service
from tests.waiting import wait_until


class FakeRedis:
    """The commands the store sends, on a dict (hashes with expiry)."""

    def __init__(self) -> None:
        self.hashes: dict[str, dict[str, str]] = {}
        self.expiry: dict[str, int] = {}
        self.sent: list[tuple] = []

    def execute_command(self, *args):
        self.sent.append(args)
        name, key, *rest = args
        if name == "HSET":
            self.hashes.setdefault(key, {})[rest[0]] = rest[1]
            return succeed(1)
        if name == "HDEL":
            return succeed(int(self.hashes.get(key, {}).pop(rest[0], None) is not None))
        if name == "PEXPIRE":
            self.expiry[key] = rest[0]
            return succeed(1)
        if name == "HGETALL":
            flat = []
            for k, v in self.hashes.get(key, {}).items():
                flat += [k, v]
            return succeed(flat)
        raise AssertionError(args)


def stores(clock: Clock, redis: FakeRedis, *nodes: str) -> list[RedisPresenceStore]:
    out = []
    for node in nodes:
        s = RedisPresenceStore(clock, "redis://127.0.0.1:6379/0?prefix=t:", node, ttl=30)
        s.link.proto = redis
        out.append(s)
    return out


def test_each_node_writes_its_own_field_and_reads_the_fresh_ones() -> None:
    clock, redis = Clock(), FakeRedis()
    a, b = stores(clock, redis, "a", "b")
    results = []
    a.write("RoomView(room_id=1)", ["alice"])
    b.write("RoomView(room_id=1)", ["bob", "carol"])
    a.read("RoomView(room_id=1)").addCallback(results.append)
    assert results == [{"a": ["alice"], "b": ["bob", "carol"]}]
    key = a.key("RoomView(room_id=1)")
    assert key.startswith("t:presence:") and redis.expiry[key] == 61000
    # a node that stopped writing is stale after the ttl
    clock.advance(20)
    a.write("RoomView(room_id=1)", ["alice"])
    clock.advance(15)
    a.read("RoomView(room_id=1)").addCallback(results.append)
    assert results[-1] == {"a": ["alice"]}
    # nobody left: the node's field goes
    a.write("RoomView(room_id=1)", [])
    a.read("RoomView(room_id=1)").addCallback(results.append)
    assert results[-1] == {} and "a" not in redis.hashes[key]


def test_garbage_in_a_field_is_ignored_and_redis_down_fails_at_once() -> None:
    clock, redis = Clock(), FakeRedis()
    [a] = stores(clock, redis, "a")
    redis.hashes[a.key("r")] = {"x": "not json", "y": '{"a": 1}', "z": '[0, "no list"]'}
    results = []
    a.read("r").addCallback(results.append)
    assert results == [{}]
    a.link.proto = None
    failures = []
    a.read("r").addErrback(failures.append)
    a.write("r", ["u"]).addErrback(failures.append)
    assert [f.check(PresenceUnavailable) for f in failures] == [PresenceUnavailable] * 2
    assert a.health()["up"] is False


def test_which_store() -> None:
    clock = Clock()
    cache = InMemoryCache(clock)
    assert isinstance(build_presence_store(cache, "n", clock), PresenceStore)
    assert isinstance(build_presence_store(cache, "n", clock, memcache="127.0.0.1:11211",
                                           redis="redis://127.0.0.1/0"), PresenceStore)
    assert isinstance(build_presence_store(cache, "n", clock, redis="redis://127.0.0.1/0"),
                      RedisPresenceStore)


@pytest.mark.e2e
def test_presence_across_two_nodes_through_redis(tmp_path) -> None:
    require_service("Redis", "127.0.0.1", 6379)
    url = f"redis://127.0.0.1:6379/12?prefix=test:{uuid.uuid4().hex[:12]}:"
    args = ("--views", VIEWS, "--secret", SECRET, "--redis", url, "--max-timeout", "2")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = start(tmp_path / "a", *args, "--node-id", "a")
    b = start(tmp_path / "b", *args, "--node-id", "b")
    try:
        sa = a.call("session.create")
        a.call("session.authorize", sa, token("alice"))
        ka, _ = a.call("session.subscribe", sa, "RoomView", {"room_id": 1}, 10)
        sb = b.call("session.create")
        b.call("session.authorize", sb, token("bob"))
        kb, _ = b.call("session.subscribe", sb, "RoomView", {"room_id": 1}, 10)
        assert ka == kb
        assert joins(a, sa) == [("join", "bob")]
        assert joins(b, sb) in ([("join", "alice")], [])   # alice may have been there first
        assert a.call("presence.list", sa, ka) == ["alice", "bob"]
        assert b.call("presence.list", sb, kb) == ["alice", "bob"]
        b.call("session.destroy", sb)
        assert joins(a, sa) == [("leave", "bob")]
        wait_until(lambda: a.call("presence.list", sa, ka) == ["alice"], 5,
                   "bob gone from the room on a", interval=0.1)
        assert a.get("/health").json()["redis"]["up"] is True
    finally:
        a.stop()
        b.stop()
    for e in (a, b):
        assert "Traceback" not in e.log_text()
