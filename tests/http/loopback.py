"""A real loopback connection for tests of what is written to sockets."""
from __future__ import annotations

import pytest_twisted
from twisted.internet import protocol
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater


class Sink(protocol.Protocol):
    """The client: keeps every byte; ``done`` fires once ``want`` arrived,
    ``lost`` with everything when the connection closes."""

    def __init__(self, want: int, done: Deferred) -> None:
        self.data = bytearray()
        self.want = want
        self.done = done
        self.lost: Deferred = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.data += data
        if len(self.data) >= self.want and not self.done.called:
            self.done.callback(bytes(self.data))

    def connectionLost(self, reason) -> None:
        self.lost.callback(bytes(self.data))


@pytest_twisted.inlineCallbacks
def connected(want: int):
    """``(server transport, client Sink, client's done, listening port)``."""
    from twisted.internet import reactor
    done: Deferred = Deferred()
    server_side: list = []

    class Server(protocol.Protocol):
        def connectionMade(self) -> None:
            server_side.append(self.transport)

    port = reactor.listenTCP(0, protocol.Factory.forProtocol(Server), interface="127.0.0.1")
    client = yield protocol.ClientCreator(reactor, Sink, want, done).connectTCP(
        "127.0.0.1", port.getHost().port)
    while not server_side:
        yield deferLater(reactor, 0.01, lambda: None)
    return server_side[0], client, done, port
