"""The Redis registry against real Redis: the same contract as the
in-process one, TTLs, the owner checks, the "moved" messages, scripts
flushed, and Redis going away and coming back."""
from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred

from pushengine.cluster.memory import MemoryRegistry, SharedTable
from pushengine.cluster.record import BadRecord, SessionRecord, Subscription
from pushengine.cluster.registry import MISSING, MOVED, OK, RegistryUnavailable
from tests.cluster.conftest import REDIS_HOST, REDIS_PORT, TEST_DB
from tests.deferreds import eventually

pytestmark = pytest.mark.service

SID = "AAAAbbbbCCCCddddEEEEff"


def record(owner: str = "node-a", seq: int = 3) -> SessionRecord:
    return SessionRecord(owner, user=42, seq=seq, period=7, subs=[
        Subscription("PublicLiveStreamView", {}, 5, "PublicLiveStreamView(limit=5)")])


@pytest.fixture(params=["memory", "redis"])
def pair(request):
    """Two nodes' registries on one backend."""
    if request.param == "memory":
        from twisted.internet import reactor
        table = SharedTable(reactor)
        return MemoryRegistry(table, "node-a", 30), MemoryRegistry(table, "node-b", 30)
    request.getfixturevalue("redis_db")
    make = request.getfixturevalue("registries")
    prefix = request.getfixturevalue("prefix")
    url = f"redis://{REDIS_HOST}:{REDIS_PORT}/{TEST_DB}?prefix={prefix}"
    a, b = make(url, "node-a"), make(url, "node-b")
    pytest_twisted.blockon(Deferred.fromCoroutine(eventually(
        lambda: a.available and b.available and a.health()["subscribed"]
        and b.health()["subscribed"])))
    return a, b


@pytest_twisted.ensureDeferred
async def test_the_registry_contract(pair) -> None:
    a, b = pair
    assert await a.lookup(SID) is None
    assert await a.write(SID, record()) == (OK, None)
    got = await b.lookup(SID)
    assert got == record()
    assert await b.owner(SID) == "node-a"
    # another node neither overwrites nor refreshes nor releases it
    assert await b.write(SID, record("node-b")) == (MOVED, "node-a")
    assert await b.refresh(SID, {"seq": "9"}) == MOVED
    assert await b.release(SID) is False
    assert await a.refresh(SID, {"seq": "9"}) == OK
    assert (await a.lookup(SID)).seq == 9
    # taking it over
    assert await b.write(SID, record("node-b", 10), take=True) == (OK, "node-a")
    assert await a.refresh(SID) == MOVED
    assert await a.release(SID) is False
    assert await b.release(SID) is True
    assert await a.refresh(SID) == MISSING
    assert await a.write(SID, record()) == (OK, None)      # missing: anyone may write
    assert await b.delete(SID) is True                     # destroy: whoever owns it
    assert await b.delete(SID) is False
    assert await a.owner(SID) is None


@pytest_twisted.ensureDeferred
async def test_moved_messages_reach_the_previous_owner(pair) -> None:
    a, b = pair
    heard: list[str] = []
    a.on_moved = heard.append
    await a.write(SID, record())
    await b.write(SID, record("node-b"), take=True)
    await b.moved(SID, "node-a")
    await eventually(lambda: heard == [SID])


@pytest_twisted.ensureDeferred
async def test_entries_expire_and_refresh_renews_them(redis_db, registries, prefix) -> None:
    url = f"redis://{REDIS_HOST}:{REDIS_PORT}/{TEST_DB}?prefix={prefix}"
    a = registries(url, "node-a", ttl=1.5)
    await eventually(lambda: a.available)
    await a.write(SID, record())
    key = a.key(SID)
    assert key == f"{prefix}session:{SID}"
    assert 1000 < redis_db("PTTL", key) <= 1500
    redis_db("PEXPIRE", key, 100_000)
    assert await a.refresh(SID) == OK
    assert 1000 < redis_db("PTTL", key) <= 1500
    assert redis_db.hgetall(key)["owner"] == "node-a"
    await eventually(lambda: redis_db("EXISTS", key) == 0, timeout=5)
    assert await a.lookup(SID) is None


@pytest_twisted.ensureDeferred
async def test_a_held_entry_gets_its_own_ttl_and_keeps_its_mark(redis_db, registries,
                                                                prefix) -> None:
    url = f"redis://{REDIS_HOST}:{REDIS_PORT}/{TEST_DB}?prefix={prefix}"
    a = registries(url, "node-a", ttl=30)
    await eventually(lambda: a.available)
    held = record()
    held.held = True
    await a.write(SID, held, ttl=3600)
    key = a.key(SID)
    assert 3_590_000 < redis_db("PTTL", key) <= 3_600_000
    assert (await a.lookup(SID)).held
    redis_db("PEXPIRE", key, 100_000)
    assert await a.refresh(SID, {"seq": "4"}, 3600) == OK
    assert 3_590_000 < redis_db("PTTL", key) <= 3_600_000
    assert await a.refresh(SID, {"held": "0"}) == OK           # the stream ended
    assert 20_000 < redis_db("PTTL", key) <= 30_000
    got = await a.lookup(SID)
    assert not got.held and got.seq == 4


@pytest_twisted.ensureDeferred
async def test_values_come_back_as_they_were(redis_db, registries, prefix) -> None:
    a = registries(f"redis://{REDIS_HOST}:{REDIS_PORT}/{TEST_DB}?prefix={prefix}")
    await eventually(lambda: a.available)
    for user in ("340699", 340699, "кошка", None):
        r = SessionRecord("node-a", user=user, seq=12345678901234, subs=[Subscription(
            "WordStreamView", {"word": "кошка"}, 5, 'WordStreamView(word="кошка";limit=5)')])
        await a.write(SID, r)
        assert await a.lookup(SID) == r
    redis_db("HSET", a.key(SID), "v", "99")
    with pytest.raises(BadRecord):
        await a.lookup(SID)


@pytest_twisted.ensureDeferred
async def test_scripts_flushed_on_the_server_are_loaded_again(own_redis, registries) -> None:
    from tests.cluster.resp import Resp
    a = registries(f"redis://127.0.0.1:{own_redis.port}/0")
    await eventually(lambda: a.available)
    with Resp("127.0.0.1", own_redis.port) as r:
        r("SCRIPT", "FLUSH")
    assert await a.write(SID, record()) == (OK, None)
    assert await a.refresh(SID) == OK


@pytest_twisted.ensureDeferred
async def test_redis_down_fails_fast_and_comes_back(own_redis, registries) -> None:
    from twisted.internet import reactor
    a = registries(f"redis://127.0.0.1:{own_redis.port}/3?timeout=1", "node-a")
    await eventually(lambda: a.available and a.health()["subscribed"])
    await a.write(SID, record())
    assert a.health() == {"up": True, "kind": "redis", "subscribed": True,
                          "server": f"redis://127.0.0.1:{own_redis.port}/3"}
    own_redis.stop()
    await eventually(lambda: not a.available)
    started = reactor.seconds()
    with pytest.raises(RegistryUnavailable):
        await a.write(SID, record())
    with pytest.raises(RegistryUnavailable):
        await a.lookup(SID)
    assert reactor.seconds() - started < 0.1            # nothing waits for Redis
    health = a.health()
    assert health["up"] is False and health["subscribed"] is False and "error" in health
    assert a.stats()["connected"] == 0 and a.stats()["disconnects"] == 1
    port = own_redis.port
    own_redis.port = port
    own_redis.start()                                   # back, empty, on the same port
    await eventually(lambda: a.available and a.health()["subscribed"], timeout=15)
    assert await a.lookup(SID) is None
    assert await a.write(SID, record()) == (OK, None)
    assert a.stats()["connects"] == 2


@pytest_twisted.ensureDeferred
async def test_a_silent_server_times_out_and_is_dropped(registries) -> None:
    """A server that accepts and never answers: every command fails within
    the timeout, and the connection is made again."""
    from twisted.internet import protocol, reactor
    from twisted.internet.endpoints import TCP4ClientEndpoint

    accepted: list = []

    class Silent(protocol.Protocol):
        def connectionMade(self):
            accepted.append(self)

    listening = reactor.listenTCP(0, protocol.Factory.forProtocol(Silent),
                                  interface="127.0.0.1")
    try:
        port = listening.getHost().port
        endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", port)
        a = registries(f"redis://127.0.0.1:{port}/0?timeout=0.3", endpoint=endpoint)
        await eventually(lambda: len(accepted) >= 2, timeout=5)   # commands + subscriber
        assert not a.available
        await eventually(lambda: len(accepted) >= 3, timeout=5)   # SELECT timed out: again
        assert a.stats()["connected"] == 0
    finally:
        for p in accepted:
            p.transport.abortConnection()
        await listening.stopListening()


def test_urls() -> None:
    from pushengine.redis.cluster import parse_redis_url
    u = parse_redis_url("redis://:s3cret@cache.example:6380/4?prefix=pe:&timeout=0.5&refresh=3")
    assert (u.host, u.port, u.db, u.password, u.prefix, u.timeout, u.refresh) == (
        "cache.example", 6380, 4, "s3cret", "pe:", 0.5, 3.0)
    assert "s3cret" not in str(u) and "s3cret" not in repr(u)
    assert str(parse_redis_url("redis://localhost")) == "redis://localhost:6379/0"
    assert parse_redis_url("rediss://u:p@h/1").tls
    assert parse_redis_url("rediss://u:p@h/1").username == "u"
    for bad in ("http://x", "redis://h/x", "redis://h:port/1", "redis://h/1?nope=1",
                "redis://h/1?timeout=-1", "redis://h/1?prefix=a b"):
        with pytest.raises(ValueError):
            parse_redis_url(bad)


def test_a_bad_url_is_a_usage_error() -> None:
    from twisted.python import usage

    from tests.http.harness import ClockNode
    with pytest.raises(usage.UsageError, match="--redis"):
        ClockNode("--redis", "redis://h/1?nope=1")


def test_wiring_with_redis_on_a_clock() -> None:
    """The node with --redis: the registry on the node's reactor, its
    figures in /metrics, its state in /health (down: never connected)."""
    from tests.http.harness import ClockNode, Http
    node = ClockNode("--redis", "redis://127.0.0.1:1/0", "--session-timeout", "60",
                     "--max-timeout", "20")
    registry = node.cluster.registry
    assert registry.reactor is node.clock and registry.ttl == 60
    assert node.api.resume is node.cluster.resume and node.cluster.hooks in node.api.hooks
    http = Http(node.web.resource())
    health = http.get("/health")
    assert health.code == 200 and health.json()["redis"]["up"] is False
    assert health.json()["status"] == "ok"
    metrics = http.get("/metrics").body.decode()
    assert 'pushengine_redis_connected{node="test-node"} 0.0' in metrics
    assert 'pushengine_redis_writes_dropped_total{node="test-node"}' in metrics
