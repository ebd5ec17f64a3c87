"""The Redis registry's connections on a fake reactor (MemoryReactorClock):
set-up, timeouts and reconnection run on the injected reactor, not the
global one."""
from __future__ import annotations

from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.error import ConnectionDone, ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from pushengine.cluster.record import SessionRecord
from pushengine.redis.cluster import SCRIPTS, RedisRegistry
from pushengine.cluster.registry import OK, RegistryUnavailable

SID = "AAAAbbbbCCCCddddEEEEff"


def bulk(text: str) -> bytes:
    data = text.encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


def command(*args) -> bytes:
    parts = [str(a).encode() for a in args]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


class WireTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        endpoint = TCP4ClientEndpoint(self.reactor, "127.0.0.1", 6390)
        self.registry = RedisRegistry(self.reactor, "redis://127.0.0.1:6390/2?timeout=1",
                                      "node-a", 30, endpoint=endpoint)
        self.registry.startService()
        self.handled = 0

    def attempts(self) -> list:
        new = self.reactor.tcpClients[self.handled:]
        self.handled = len(self.reactor.tcpClients)
        return [factory for _, _, factory, *_ in new]

    def accept(self, factory) -> tuple:
        proto = factory.buildProtocol(None)
        transport = StringTransport()
        proto.makeConnection(transport)
        return proto, transport

    def feed(self, proto, data: bytes) -> None:
        """Bytes from the server (txredisapi finishes a multi-bulk reply in a
        call of its own, on the reactor)."""
        proto.dataReceived(data)
        self.reactor.advance(0)

    def connect(self) -> tuple:
        commands, subscriber = self.attempts()
        proto, transport = self.accept(commands)
        self.assertEqual(transport.value(), command("SELECT", 2))
        transport.clear()
        proto.dataReceived(b"+OK\r\n")
        for i, source in enumerate(SCRIPTS.values()):
            self.assertEqual(transport.value(), command("SCRIPT", "LOAD", source))
            transport.clear()
            self.assertFalse(self.registry.available)
            proto.dataReceived(bulk(f"{i:040d}"))
        self.assertTrue(self.registry.available)
        sub, sub_transport = self.accept(subscriber)
        self.assertEqual(sub_transport.value(), command("SUBSCRIBE", "pushengine:moved:2:node-a"))
        self.feed(sub, b"*3\r\n" + bulk("subscribe") + bulk("pushengine:moved:2:node-a")
                  + b":1\r\n")
        self.assertTrue(self.registry.health()["subscribed"])
        return proto, transport, sub

    def test_commands_use_the_loaded_scripts(self) -> None:
        proto, transport, _ = self.connect()
        d = self.registry.refresh(SID, {"seq": "4"})
        self.assertEqual(transport.value(), command(
            "EVALSHA", f"{1:040d}", 1, f"pushengine:session:{SID}", "node-a", 30000, "seq", "4"))
        proto.dataReceived(b":1\r\n")
        self.assertEqual(self.successResultOf(d), OK)

    def test_moved_messages_are_handed_on(self) -> None:
        _, _, sub = self.connect()
        heard: list = []
        self.registry.on_moved = heard.append
        self.feed(sub, b"*3\r\n" + bulk("message") + bulk("pushengine:moved:2:node-a")
                  + bulk(SID))
        self.assertEqual(heard, [SID])

    def test_a_command_without_an_answer_times_out_and_reconnects(self) -> None:
        proto, transport, _ = self.connect()
        d = self.registry.write(SID, SessionRecord("node-a"))
        self.reactor.advance(0.99)
        self.assertNoResult(d)
        self.reactor.advance(0.02)
        self.failureResultOf(d, RegistryUnavailable)
        self.assertTrue(transport.disconnecting)
        proto.connectionLost(Failure(ConnectionDone()))
        self.assertFalse(self.registry.available)
        self.failureResultOf(self.registry.lookup(SID), RegistryUnavailable)  # at once
        self.assertEqual(self.attempts(), [])
        self.reactor.advance(2)                    # the backoff, on this reactor's clock
        self.assertEqual(len(self.attempts()), 1)
        self.assertEqual(self.registry.stats()["disconnects"], 1)

    def test_refused_connections_are_retried_with_backoff(self) -> None:
        times = []
        for _ in range(1200):                      # a minute of refused connections
            for factory in self.attempts():
                times.append(self.reactor.seconds())
                factory.clientConnectionFailed(None, Failure(ConnectionRefusedError()))
            self.reactor.advance(0.05)
        gaps = [b - a for a, b in zip(times[::2], times[2::2])]
        self.assertTrue(14 <= len(times) <= 60, len(times))   # two services, backing off
        self.assertTrue(max(gaps) <= 6.1, gaps)             # at most 5 s (+ jitter) apart
        self.assertFalse(self.registry.available)
        health = self.registry.health()
        self.assertFalse(health["up"])
        self.assertIn("refused", health["error"])

    def test_stopping_closes_the_connections(self) -> None:
        proto, transport, _ = self.connect()
        self.registry.stopService()
        self.assertTrue(transport.disconnecting)
        self.assertFalse(self.registry.available)
