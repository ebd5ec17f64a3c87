"""What the in-process HTTP benchmarks (``answer_cost.py``, ``http_paths.py``)
share: a JSON-RPC request's bytes, a connection to a node's HTTP factory on a
test transport, sessions subscribed to the shared view, and a ``callLater``
whose timers never fire (the timed work is the answers, not the timers).

It imports nothing of the project, so that a benchmark measuring another
checkout can use it before that checkout is on the path."""
from __future__ import annotations

import json
from typing import Any, Callable

from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport


def request(body: dict) -> bytes:
    """``POST /api/jsonrpc`` with ``body``, kept alive."""
    raw = json.dumps(body).encode()
    return (b"POST /api/jsonrpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(raw), raw))


def connect(factory: Any, port: int) -> tuple[Any, StringTransport]:
    """A connection from 127.0.0.1:``port`` to ``factory``'s protocol."""
    transport = StringTransport(hostAddress=IPv4Address("TCP", "127.0.0.1", 8080),
                                peerAddress=IPv4Address("TCP", "127.0.0.1", port))
    protocol = factory.buildProtocol(transport.getPeer())
    protocol.makeConnection(transport)
    return protocol, transport


def subscribed(factory: Any, count: int) -> list[tuple[Any, StringTransport, str]]:
    """``count`` connections, each with a session subscribed to the newest
    live stream (one view they all share): (protocol, transport, session id)."""
    conns = []
    for i in range(count):
        protocol, transport = connect(factory, 10000 + i)
        protocol.dataReceived(request({"jsonrpc": "2.0", "id": 1, "method": "session.create"}))
        sid = json.loads(transport.value().split(b"\r\n\r\n", 1)[1])["result"]
        transport.clear()
        protocol.dataReceived(request({"jsonrpc": "2.0", "id": 2,
                                       "method": "stream.subscribe_public_live",
                                       "params": [sid, 1]}))
        transport.clear()
        conns.append((protocol, transport, sid))
    return conns


def waiting_answers(node: Any, changes: list[Any], connections: int = 50
                    ) -> Callable[[int], int]:
    """A session subscribed to the shared view with ``changes`` applied (the
    events waiting), and ``run(n)``: ``n`` get_events answers of it, one
    request per connection per reactor turn over ``connections``
    connections, each checked to be a 200 (returns how many were made)."""
    factory = node.http_factory()
    protocol, transport = connect(factory, 39999)
    protocol.dataReceived(request({"jsonrpc": "2.0", "id": 1, "method": "session.create"}))
    node.clock.advance(0)
    sid = json.loads(transport.value().split(b"\r\n\r\n", 1)[1])["result"]
    protocol.dataReceived(request({"jsonrpc": "2.0", "id": 2,
                                   "method": "stream.subscribe_public_live",
                                   "params": [sid, 50]}))
    node.clock.advance(0)
    node.engine.apply_changes(changes)
    one = request({"jsonrpc": "2.0", "id": 1, "method": "session.get_events",
                   "params": [sid, 0, 0]})
    conns = [connect(factory, 40000 + i) for i in range(connections)]

    def run(n: int) -> int:
        done = 0
        for _ in range(n // len(conns)):
            for protocol, _transport in conns:
                protocol.dataReceived(one)
            node.clock.advance(0)
            for _protocol, transport in conns:
                assert transport.value().startswith(b"HTTP/1.1 200")
                transport.clear()
            done += len(conns)
        return done
    return run


class NeverTimer:
    """What a ``DelayedCall`` offers the engine, doing nothing."""

    def __init__(self) -> None:
        self.on = True

    def active(self) -> bool:
        return self.on

    def cancel(self) -> None:
        self.on = False

    def reset(self, seconds: float) -> None:
        pass

    def delay(self, seconds: float) -> None:
        pass


def never_timer(delay: float, f: Any, *args: Any, **kwargs: Any) -> NeverTimer:
    """A ``callLater`` whose calls never run."""
    return NeverTimer()
