"""The Bloom filter backends for tests: in process, and on the shared Redis
(database ``BLOOM_DB``, every test under a key prefix of its own, whose
keys are deleted afterwards; nothing is flushed)."""
from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred

from tests.cluster.resp import Resp
from tests.deferreds import eventually
from tests.services import require_service

REDIS_HOST = "127.0.0.1"
REDIS_PORT = 6379
BLOOM_DB = int(os.environ.get("PUSHENGINE_BLOOM_REDIS_DB", "7"))


async def outcome(d: Any) -> Any:
    """A command's result, or ``(error class, message)`` when it failed
    (list elements that are errors, likewise)."""
    try:
        result = await d
    except Exception as e:  # noqa: BLE001 - the failure is the outcome
        return type(e).__name__, getattr(e, "message", str(e))
    if isinstance(result, list):
        return [(type(r).__name__, r.message) if isinstance(r, Exception) else r
                for r in result]
    return result


def delete_prefix(prefix: str) -> None:
    with Resp(REDIS_HOST, REDIS_PORT, BLOOM_DB) as r:
        cursor = "0"
        while True:
            cursor, keys = r("SCAN", cursor, "MATCH", prefix + "*", "COUNT", 1000)
            if keys:
                r("DEL", *keys)
            if cursor == "0":
                break


def wait_available(bloom: Any, timeout: float = 10.0) -> None:
    """For a synchronous fixture: block until ``bloom`` is connected."""
    pytest_twisted.blockon(Deferred.fromCoroutine(
        eventually(lambda: bloom.available, timeout, "the Bloom filters' Redis")))


@pytest.fixture
def redis_prefix():
    require_service("Redis", REDIS_HOST, REDIS_PORT)
    prefix = f"bloomtest:{uuid.uuid4().hex[:12]}:"
    yield prefix
    delete_prefix(prefix)


@pytest.fixture
def redis_bloom(redis_prefix):
    """A started RedisBloom (Lua scripts) on its own key prefix."""
    from twisted.internet import reactor

    from pushengine.redis.bloom import RedisBloom
    made = []

    def make(**kwargs: Any) -> RedisBloom:
        url = f"redis://{REDIS_HOST}:{REDIS_PORT}/{BLOOM_DB}?prefix={redis_prefix}&timeout=10"
        bloom = RedisBloom(reactor, url, **kwargs)
        bloom.startService()
        made.append(bloom)
        wait_available(bloom)
        return bloom
    yield make
    for bloom in made:
        pytest_twisted.blockon(bloom.stopService())


@pytest.fixture(params=["memory", "redis"])
def bloom(request):
    """Each backend in turn."""
    if request.param == "memory":
        from pushengine.bloom.memory import MemoryBloom
        return MemoryBloom()
    return request.getfixturevalue("redis_bloom")()
