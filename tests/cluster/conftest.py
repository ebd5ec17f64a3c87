"""Redis for the cluster tests.

The shared Redis on 127.0.0.1:6379 is used in two databases these tests own
and may flush: ``TEST_DB`` (registry integration tests; every test also has
a key prefix of its own) and ``CLUSTER_DB`` (the multi-process cluster
test). Tests that need Redis to go away start a ``redis-server`` of their
own on a free port.
"""
from __future__ import annotations

import os
import subprocess
import uuid

import pytest
import pytest_twisted

from tests.cluster.resp import Resp
from tests.services import free_port, port_open, require_program, require_service, unavailable
from tests.waiting import wait_listening

REDIS_HOST = "127.0.0.1"
REDIS_PORT = 6379
TEST_DB = int(os.environ.get("PUSHENGINE_TEST_REDIS_DB", "12"))
CLUSTER_DB = int(os.environ.get("PUSHENGINE_CLUSTER_REDIS_DB", "13"))


@pytest.fixture
def redis_db():
    """The shared Redis, database TEST_DB, flushed once per test session."""
    require_service("Redis", REDIS_HOST, REDIS_PORT)
    with Resp(REDIS_HOST, REDIS_PORT, TEST_DB) as r:
        yield r


@pytest.fixture(scope="session", autouse=True)
def _flush_test_db():
    if port_open(REDIS_HOST, REDIS_PORT):
        with Resp(REDIS_HOST, REDIS_PORT, TEST_DB) as r:
            r("FLUSHDB")
    yield


@pytest.fixture
def prefix() -> str:
    return f"test:{uuid.uuid4().hex[:12]}:"


class RedisProcess:
    """A redis-server of the test's own, to stop and start again."""

    def __init__(self) -> None:
        self.binary = require_program("redis-server")
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    def start(self) -> "RedisProcess":
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        why = wait_listening(self.process, self.port)
        if why is not None:
            self.stop()
            unavailable(f"redis-server did not start on port {self.port} ({why})")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None


@pytest.fixture
def own_redis():
    server = RedisProcess().start()
    yield server
    server.stop()


@pytest.fixture
def registries():
    """``make(url, node_id, ttl)`` → a started RedisRegistry on the reactor; stopped after."""
    from pushengine.redis.cluster import RedisRegistry
    from twisted.internet import reactor
    made = []

    def make(url: str, node_id: str = "node-a", ttl: float = 30.0, **kw):
        registry = RedisRegistry(reactor, url, node_id, ttl, **kw)
        registry.startService()
        made.append(registry)
        return registry
    yield make
    for registry in made:
        pytest_twisted.blockon(registry.stopService())
