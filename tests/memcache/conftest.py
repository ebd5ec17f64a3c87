"""memcached instances and caches for the memcache tests.

Each real server is ``memcached -p PORT -l 127.0.0.1 -U 0`` on a free port,
started by the fixture and stopped after. ``make_cache`` builds a cache of
either backend so a test runs against both.
"""
from __future__ import annotations

import os
import subprocess

import pytest
import pytest_twisted
from twisted.internet.task import Clock

from pushengine.memcache import InMemoryCache, MemcacheClient
from tests.services import free_port, require_program, unavailable
from tests.waiting import wait_listening


class MemcachedProcess:
    """One memcached server on 127.0.0.1."""

    def __init__(self, port: int | None = None) -> None:
        self.binary = require_program("memcached")
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "MemcachedProcess":
        args = [self.binary, "-p", str(self.port), "-l", "127.0.0.1", "-U", "0"]
        if os.geteuid() == 0:
            args += ["-u", "root"]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        why = wait_listening(self.process, self.port, interval=0.01)
        if why is not None:
            err = self.process.stderr.read().decode(errors="replace") if why == "exited" else why
            self.stop()
            unavailable(f"memcached did not start on port {self.port}: {err}")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            # memcached keeps nothing worth a graceful stop (which waits
            # about a second for open connections): kill it, as a crash would
            self.process.kill()
            self.process.wait()
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()
        self.process = None


@pytest.fixture(scope="session")
def memcached():
    """A memcached server shared by the session (tests flush it)."""
    server = MemcachedProcess().start()
    yield server
    server.stop()


@pytest.fixture
def memcached_factory():
    """Start extra memcached servers (stopped after the test)."""
    started: list[MemcachedProcess] = []

    def start(port: int | None = None) -> MemcachedProcess:
        server = MemcachedProcess(port).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def reactor():
    from twisted.internet import reactor as global_reactor

    return global_reactor


@pytest.fixture
def client_factory(reactor):
    """Build started MemcacheClients (one connection each); stopped after."""
    clients: list[MemcacheClient] = []

    def make(servers, **kwargs) -> MemcacheClient:
        kwargs.setdefault("timeout", 2.0)
        client = MemcacheClient(reactor, servers, **kwargs)
        client.startService()
        clients.append(client)
        return client

    yield make
    for client in clients:
        pytest_twisted.blockon(client.stopService())


@pytest.fixture(params=["memory", "memcached"])
def backend(request):
    """The backend name; the memcached one starts (and flushes) a server."""
    if request.param == "memcached":
        server = request.getfixturevalue("memcached")
        make = request.getfixturevalue("client_factory")
        pytest_twisted.blockon(make([server.address]).flush_all())
    return request.param


@pytest.fixture
def make_cache(backend, request):
    """``make_cache(clock=None)`` → a cache of the test's backend. For
    memory, one store shared by every call (a fresh cache object per
    "client" would be a fresh store), on ``clock`` (default: the reactor);
    for memcached, a new client with its own connection per call (its
    expiry runs on the server's real clock)."""
    if backend == "memory":
        shared: dict = {}

        def make(clock=None):
            if "cache" not in shared:
                shared["cache"] = InMemoryCache(clock or request.getfixturevalue("reactor"))
            return shared["cache"]

        return make

    server = request.getfixturevalue("memcached")
    factory = request.getfixturevalue("client_factory")
    return lambda clock=None: factory([server.address])


@pytest.fixture
def clock():
    c = Clock()
    c.advance(1_700_000_000)  # a realistic unix time
    return c
