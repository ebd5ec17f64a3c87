"""A server with the bloom module: the Redis backend finds it out and uses
the server's own BF.* commands (here a fake that answers them as the module
does), with the same results as the scripts give."""
from __future__ import annotations

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from pushengine.redis.bloom import RedisBloom
from tests.bloom.conftest import outcome
from tests.bloom.fake_module import FakeModuleServer
from tests.deferreds import eventually


@pytest_twisted.ensureDeferred
async def test_the_servers_own_commands_are_used_when_it_has_them():
    server = FakeModuleServer()
    port = reactor.listenTCP(0, server, interface="127.0.0.1")
    bloom = RedisBloom(reactor, f"redis://127.0.0.1:{port.getHost().port}/3?timeout=5")
    bloom.startService()
    try:
        await Deferred.fromCoroutine(eventually(lambda: bloom.available))
        assert bloom.native is True and bloom.health()["engine"] == "module"
        assert await bloom.reserve("k", 0.01, 3, nonscaling=True) == "OK"
        assert await outcome(bloom.reserve("k", 0.01, 3)) == ("BloomError", "item exists")
        assert await bloom.madd("k", ["a", "b"]) == [1, 1]
        assert await outcome(bloom.madd("k", ["a", "c", "d"])) == [
            0, 1, ("BloomError", "non scaling filter is full")]
        assert await bloom.exists("k", "c") == 1
        assert await bloom.mexists("k", ["a", "zz"]) == [1, 0]
        assert (await bloom.info("k"))["Expansion rate"] is None
        assert await bloom.insert("s", ["x"], capacity=10, error=0.001, expansion=3,
                                  ttl=60) == [1]
        assert await bloom.info("s") == {
            "Capacity": 10, "Size": 20, "Number of filters": 1,
            "Number of items inserted": 1, "Expansion rate": 3}
        assert await outcome(bloom.insert("t", ["x"], nocreate=True)) == (
            "BloomError", "not found")
        assert await outcome(bloom.info("t")) == ("BloomError", "not found")
        assert "EVALSHA" not in server.commands and "SCRIPT" not in server.commands
        assert {"BF.RESERVE", "BF.INSERT", "BF.MEXISTS", "BF.INFO", "PEXPIRE"} <= set(
            server.commands)
        # the keys carry the backend's prefix and hash tag
        assert list(server.bloom.filters) == ["pushengine:bf:{k}", "pushengine:bf:{s}"]
    finally:
        await bloom.stopService()
        await port.stopListening()
