"""send_now over real loopback sockets: order kept, nothing lost, the
buffered and the closing cases left to Twisted."""
from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import protocol
from twisted.internet.defer import Deferred
from twisted.internet.testing import StringTransport

from pushengine.web.sendnow import send_now


class Sink(protocol.Protocol):
    def __init__(self, want: int, done: Deferred) -> None:
        self.data = bytearray()
        self.want = want
        self.done = done

    def dataReceived(self, data: bytes) -> None:
        self.data += data
        if len(self.data) >= self.want and not self.done.called:
            self.done.callback(bytes(self.data))


def test_a_transport_that_is_not_a_socket_gets_a_plain_write():
    t = StringTransport()
    send_now(t, b"abc")
    send_now(t, b"def")
    assert t.value() == b"abcdef"


@pytest_twisted.inlineCallbacks
def test_messages_arrive_whole_and_in_order_mixed_with_buffered_writes():
    from twisted.internet import reactor
    messages = [bytes([65 + i % 26]) * (1 + (i * 7919) % 3000) for i in range(400)]
    # a large one passes the socket's buffer: the rest must queue behind it
    messages.insert(200, b"#" * (4 << 20))
    want = sum(map(len, messages))
    done: Deferred = Deferred()
    server_side: list = []

    class Server(protocol.Protocol):
        def connectionMade(self) -> None:
            server_side.append(self.transport)

    port = reactor.listenTCP(0, protocol.Factory.forProtocol(Server), interface="127.0.0.1")
    client = protocol.ClientCreator(reactor, Sink, want, done)
    conn = yield client.connectTCP("127.0.0.1", port.getHost().port)
    try:
        while not server_side:
            yield deferLater(reactor, 0.01)
        transport = server_side[0]
        for i, m in enumerate(messages):
            if i % 5 == 0:
                transport.write(m)          # Twisted's own path between them
            else:
                send_now(transport, m)
        got = yield done
        assert got == b"".join(messages)
    finally:
        conn.transport.loseConnection()
        yield port.stopListening()


@pytest_twisted.inlineCallbacks
def test_a_closing_connection_is_left_to_twisted():
    from twisted.internet import reactor
    done: Deferred = Deferred()
    server_side: list = []

    class Server(protocol.Protocol):
        def connectionMade(self) -> None:
            server_side.append(self.transport)

    port = reactor.listenTCP(0, protocol.Factory.forProtocol(Server), interface="127.0.0.1")
    lost: Deferred = Deferred()

    class Client(Sink):
        def connectionLost(self, reason) -> None:
            lost.callback(bytes(self.data))

    conn = yield protocol.ClientCreator(reactor, Client, 10**9, done).connectTCP(
        "127.0.0.1", port.getHost().port)
    try:
        while not server_side:
            yield deferLater(reactor, 0.01)
        transport = server_side[0]
        send_now(transport, b"before")
        transport.loseConnection()
        assert transport.disconnecting
        send_now(transport, b"after")       # closing: Twisted's write, which flushes it first
        got = yield lost
        assert got == b"beforeafter"
    finally:
        conn.transport.loseConnection()
        yield port.stopListening()


def deferLater(reactor, seconds: float) -> Deferred:
    from twisted.internet.task import deferLater as later
    return later(reactor, seconds, lambda: None)
