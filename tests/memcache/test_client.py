"""The real client's routing, timeouts and failover, on a fake reactor
(MemoryReactorClock: connections and time are the test's), plus one
failover against real memcached processes."""
from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet.error import ConnectionDone, ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from pushengine.memcache import (
    CacheTimeout,
    CacheUnavailable,
    KeyExists,
    MemcacheClient,
    NotFound,
)
from pushengine.memcache.keys import wire_key
from tests.deferreds import eventually

A, B, C = "127.0.0.1:11001", "127.0.0.1:11002", "127.0.0.1:11003"


class FakeServers:
    """The connection attempts a MemoryReactorClock recorded, by server."""

    def __init__(self, reactor: MemoryReactorClock) -> None:
        self.reactor = reactor
        self.handled = 0
        self.transports: dict[str, StringTransport] = {}
        self.protocols: dict[str, object] = {}

    def attempts(self) -> list[tuple[str, object]]:
        new = self.reactor.tcpClients[self.handled:]
        self.handled = len(self.reactor.tcpClients)
        return [(f"{host}:{port}", factory) for host, port, factory, *_ in new]

    def accept(self, factory, name: str) -> StringTransport:
        protocol = factory.buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        self.transports[name] = transport
        self.protocols[name] = protocol
        return transport

    def answer_pending(self, accept: set[str] = frozenset(), refuse: set[str] = frozenset()) -> None:
        for name, factory in self.attempts():
            if name in accept:
                self.accept(factory, name)
            elif name in refuse:
                factory.clientConnectionFailed(None, Failure(ConnectionRefusedError()))

    def sent(self, name: str) -> bytes:
        data = self.transports[name].value()
        self.transports[name].clear()
        return data

    def reply(self, name: str, data: bytes) -> None:
        self.protocols[name].dataReceived(data)

    def drop(self, name: str) -> None:
        self.protocols[name].connectionLost(Failure(ConnectionDone()))


class ClientRoutingTests(SynchronousTestCase):
    def setUp(self):
        self.reactor = MemoryReactorClock()
        self.servers = FakeServers(self.reactor)

    def make(self, names, **kwargs) -> MemcacheClient:
        kwargs.setdefault("timeout", 1.0)
        kwargs.setdefault("retry_delay", 10.0)
        client = MemcacheClient(self.reactor, names, **kwargs)
        client.startService()
        return client

    def key_on(self, client, name: str) -> str:
        for i in range(1000):
            if client.server_for(wire_key(f"k{i}")).name == name:
                return f"k{i}"
        raise AssertionError(f"no key on {name}")

    def test_commands_wait_for_the_first_connection(self):
        client = self.make([A])
        d = client.get("k")
        self.assertNoResult(d)
        self.servers.answer_pending(accept={A})
        self.assertEqual(self.servers.sent(A), b"get k\r\n")
        self.servers.reply(A, b"VALUE k 0 1\r\nv\r\nEND\r\n")
        self.assertEqual(self.successResultOf(d), b"v")

    def test_answers_map_to_explicit_errors(self):
        client = self.make([A])
        self.servers.answer_pending(accept={A})
        add, incr, cas = client.add("k", b"v"), client.incr("k"), client.cas("k", b"v", b"12")
        self.servers.reply(A, b"NOT_STORED\r\nNOT_FOUND\r\nEXISTS\r\n")
        self.failureResultOf(add, KeyExists)
        self.failureResultOf(incr, NotFound)
        self.failureResultOf(cas, KeyExists)

    def test_a_silent_server_times_out_and_its_keys_move(self):
        client = self.make([A, B])
        self.servers.answer_pending(accept={A, B})
        key = self.key_on(client, A)
        d = client.get(key)
        self.assertEqual(self.servers.sent(A), b"get " + key.encode() + b"\r\n")
        self.reactor.advance(0.99)
        self.assertNoResult(d)
        self.reactor.advance(0.01)
        self.failureResultOf(d, CacheTimeout)
        self.assertTrue(self.servers.transports[A].disconnecting)
        self.servers.drop(A)
        self.assertFalse(client.health()["servers"][A]["up"])
        self.assertTrue(client.health()["up"])
        d = client.get(key)
        self.assertEqual(self.servers.sent(B), b"get " + key.encode() + b"\r\n")
        self.servers.reply(B, b"END\r\n")
        self.assertIsNone(self.successResultOf(d))
        self.assertEqual(client.stats()["timeouts"], 1)

    def test_a_pipeline_times_out_by_its_oldest_command(self):
        client = self.make([A])
        self.servers.answer_pending(accept={A})
        first = client.incr("n")
        self.reactor.advance(0.5)
        second = client.incr("n")
        self.servers.reply(A, b"1\r\n")  # the first is answered in time
        self.assertEqual(self.successResultOf(first), 1)
        self.reactor.advance(0.6)  # the second is 1.1 s old: its deadline passed at 1.5
        self.assertNoResult(second)
        self.reactor.advance(0.4)
        self.failureResultOf(second, CacheTimeout)

    def test_a_refused_server_hands_its_waiting_commands_on(self):
        client = self.make([A, B])
        key = self.key_on(client, A)
        d = client.set(key, b"v")
        self.assertNoResult(d)
        self.servers.answer_pending(accept={B}, refuse={A})
        self.assertTrue(self.servers.sent(B).startswith(b"set " + key.encode()))
        self.servers.reply(B, b"STORED\r\n")
        self.assertTrue(self.successResultOf(d))

    def test_a_connection_that_never_completes_times_out(self):
        client = self.make([A, B])
        self.servers.answer_pending(accept={B})  # A's connection attempt hangs
        key = self.key_on(client, A)
        d = client.get(key)
        self.reactor.advance(1.0)
        self.failureResultOf(d, CacheTimeout)
        d = client.get(key)  # now straight to B
        self.servers.reply(B, b"END\r\n")
        self.assertIsNone(self.successResultOf(d))

    def test_all_servers_down_fails_at_once(self):
        client = self.make([A, B])
        self.servers.answer_pending(refuse={A, B})
        self.failureResultOf(client.get("k"), CacheUnavailable)
        self.failureResultOf(client.get_multi(["a", "b"]), CacheUnavailable)
        self.assertFalse(client.health()["up"])
        self.assertEqual(client.stats()["servers_up"], 0)

    def test_a_dead_server_is_retried_after_the_delay(self):
        client = self.make([A, B], retry_delay=10.0)
        self.servers.answer_pending(accept={A, B})
        key = self.key_on(client, A)
        self.servers.drop(A)
        self.assertEqual(client.server_for(wire_key(key)).name, B)
        for _ in range(30):  # ClientService reconnects (backoff with jitter)
            self.reactor.advance(0.1)
            self.servers.answer_pending(accept={A})
            if client.health()["servers"][A]["connected"]:
                break
        self.assertTrue(client.health()["servers"][A]["connected"])
        self.assertEqual(client.server_for(wire_key(key)).name, B)  # held down
        self.reactor.advance(10.0 - self.reactor.seconds())
        self.assertEqual(client.server_for(wire_key(key)).name, A)
        self.assertTrue(client.health()["servers"][A]["up"])

    def test_only_the_dead_servers_keys_move(self):
        client = self.make([A, B, C])
        self.servers.answer_pending(accept={A, B, C})
        keys = [wire_key(f"key{i}") for i in range(3000)]
        before = {k: client.server_for(k).name for k in keys}
        share = sum(1 for n in before.values() if n == A) / len(keys)
        self.assertTrue(0.2 < share < 0.5, share)
        self.servers.drop(A)
        after = {k: client.server_for(k).name for k in keys}
        for k in keys:
            if before[k] != A:
                self.assertEqual(after[k], before[k])
            else:
                self.assertIn(after[k], (B, C))

    def test_get_multi_spans_servers_and_keeps_what_answers(self):
        client = self.make([A, B])
        self.servers.answer_pending(accept={A, B})
        ka, kb = self.key_on(client, A), self.key_on(client, B)
        d = client.get_multi([ka, kb])
        self.servers.reply(A, b"VALUE " + ka.encode() + b" 0 1\r\na\r\nEND\r\n")
        self.assertNoResult(d)
        self.reactor.advance(1.0)  # B never answers: its keys are misses
        self.assertEqual(self.successResultOf(d), {ka: b"a"})

    def test_stopping_fails_what_waits(self):
        client = self.make([A])
        d = client.get("k")
        client.stopService()
        self.failureResultOf(d, CacheUnavailable)
        self.failureResultOf(client.get("k"), CacheUnavailable)

    def test_from_option(self):
        client = MemcacheClient.from_option(self.reactor, f"{A},{B}")
        self.assertEqual(sorted(client.servers), [A, B])
        self.assertEqual(client.health()["servers"][A]["connected"], False)


@pytest.mark.service
@pytest_twisted.ensureDeferred
async def test_real_failover_and_return(reactor, memcached_factory, client_factory):
    one, two = memcached_factory(), memcached_factory()
    client = client_factory([one.address, two.address], timeout=1.0, retry_delay=0.5)

    keys = [f"key{i}" for i in range(40)]
    for k in keys:
        await client.set(k, b"v")
    on_one = [k for k in keys if client.server_for(wire_key(k)).name == one.address]
    assert on_one and len(on_one) < len(keys)

    one.stop()
    await eventually(lambda: not client.health()["servers"][one.address]["up"])
    for k in keys:  # every command answers: one's keys now live on two
        await client.set(k, b"moved")
        assert await client.get(k) == b"moved"
    assert client.health()["up"]

    one.start()
    await eventually(lambda: client.health()["servers"][one.address]["up"])
    assert client.server_for(wire_key(on_one[0])).name == one.address
    assert await client.get(on_one[0]) is None  # a fresh server: a miss, not an error
