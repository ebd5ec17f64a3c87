"""A real loopback connection for tests of what is written to sockets."""
from __future__ import annotations

from twisted.internet import protocol
from twisted.internet.defer import Deferred


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


async def connected(want: int):
    """``(server transport, client Sink, client's done, listening port)``."""
    from twisted.internet import reactor
    done: Deferred = Deferred()
    server_side: Deferred = Deferred()

    class Server(protocol.Protocol):
        def connectionMade(self) -> None:
            server_side.callback(self.transport)

    port = reactor.listenTCP(0, protocol.Factory.forProtocol(Server), interface="127.0.0.1")
    client = await protocol.ClientCreator(reactor, Sink, want, done).connectTCP(
        "127.0.0.1", port.getHost().port)
    return await server_side, client, done, port


def messages(count: int) -> list[bytes]:
    """Messages of many sizes, with one of 4 MiB in the middle: it passes the
    socket's buffer, so the ones after it must queue behind it."""
    out = [bytes([65 + i % 26]) * (1 + (i * 7919) % 3000) for i in range(count)]
    out.insert(count // 2, b"#" * (4 << 20))
    return out


def write_mixed(transport, items: list[bytes], write, every: int,
                before_twisted=lambda: None) -> None:
    """Every ``every``-th message through Twisted's own ``transport.write``
    (after ``before_twisted()``), the others through ``write(transport, m)``."""
    for i, m in enumerate(items):
        if i % every == 0:
            before_twisted()
            transport.write(m)
        else:
            write(transport, m)
