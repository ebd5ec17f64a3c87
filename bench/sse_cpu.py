"""CPU per SSE event written by the transport, in process (no sockets).

    python bench/sse_cpu.py [--streams 1000] [--events 100] [--front fast|twisted]
                            [--repeat 1]

Builds a node on a Clock (the real HTTP front, its route table and SSE
transport), creates ``--streams`` sessions subscribed to one limit-1 view,
and opens each session's stream with ``GET /api/events`` on a connection of
its own. The connections are test transports that only count the bytes
written, so no system call is measured: what remains is the Python cost of
the path from the engine to ``transport.write``. Then ``--events`` changes
of the view's one object are applied through the engine, each adding an
event to every stream; ``time.process_time`` over them, divided by the
events written, is the CPU per event per stream.

``--front fast`` (the default): the fast front hands each connection to the
stream, which frames its chunks and writes straight to the socket;
``--front twisted``: the same stream writes through twisted.web's request
(``--http twisted``), the reference to compare with in the same run.
``--repeat``: runs one after the other, each on a fresh node; one line of
figures per run.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from typing import Any, Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from twisted.internet.address import IPv4Address  # noqa: E402
from twisted.internet.task import Clock  # noqa: E402
from twisted.internet.testing import StringTransport  # noqa: E402

from pushengine.app.service import Node  # noqa: E402
from pushengine.app.tap import Options  # noqa: E402
from pushengine.core.changes import Change  # noqa: E402

HOST = IPv4Address("TCP", "127.0.0.1", 8080)
VIEW = "PublicLiveStreamView"


class CountingTransport(StringTransport):
    """A connection that keeps only the count of the bytes written to it
    (a StringTransport would hold every event of every stream)."""

    def __init__(self, port: int) -> None:
        super().__init__(hostAddress=HOST, peerAddress=IPv4Address("TCP", "127.0.0.1", port))
        self.written = 0

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def writeSequence(self, data: Any) -> None:
        for piece in data:
            self.written += len(piece)


def stream_obj(n: int) -> dict:
    return {"id": 1, "n": n, "title": "the benchmark's stream", "live": True,
            "public": True, "created_at": "2030-01-01T00:00:00Z", "user_id": 1}


def node(front: str) -> Node:
    options = Options(environ={})
    options.parseOptions(["--node-id", "bench", "--http", front, "--client-rate", "0",
                          "--max-client-sessions", "0", "--max-client-connections", "0",
                          "--max-sessions", "0"])
    return Node(options, Clock())


def open_streams(n: Node, streams: int, open_stream: Callable[[CountingTransport, Any], None],
                 what: str) -> list[CountingTransport]:
    """``streams`` sessions on the shared view, each with a stream that
    ``open_stream(transport, session)`` opens on a connection of its own
    (the bytes a client sends); the view's current object, replayed on
    subscribing, already written. Returns the connections' transports."""
    engine = n.engine
    engine.apply_changes([Change("Stream", "upsert", 1, stream_obj(0))])
    bound = n.catalog.views[VIEW].bind({}, None, 1)
    factory = n.http_factory()
    transports = []
    for i in range(streams):
        session = engine.sessions.create()
        engine.sessions.subscribe(session, bound)
        transport = CountingTransport(10_000 + i)
        protocol = factory.buildProtocol(transport.getPeer())
        transport.protocol = protocol
        protocol.makeConnection(transport)
        open_stream(transport, session)
        n.reactor.advance(0)
        assert session.delivery is not None, f"the {what} did not open"
        transports.append(transport)
    engine.apply_changes([Change("Stream", "upsert", 1, stream_obj(1))])
    return transports


def run(streams: int, events: int, front: str) -> dict:
    n = node(front)
    engine = n.engine

    def open_stream(transport: CountingTransport, session: Any) -> None:
        transport.protocol.dataReceived(
            b"GET /api/events?session=%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            % session.id.encode())
    transports = open_streams(n, streams, open_stream, "stream")
    gc.collect()
    written_before = sum(t.written for t in transports)
    out_before = engine.sessions.events_out
    start = time.process_time()
    for e in range(2, events + 2):
        engine.apply_changes([Change("Stream", "upsert", 1, stream_obj(e))])
    spent = time.process_time() - start
    written = engine.sessions.events_out - out_before
    nbytes = sum(t.written for t in transports) - written_before
    return {"front": front, "streams": streams, "events": events, "events_written": written,
            "us_per_event": spent / written * 1e6 if written else None,
            "bytes_per_event": nbytes / written if written else None,
            "ms_per_change": spent / events * 1000}


def line(r: dict) -> str:
    return (f"sse {r['front']}: {r['streams']:,} streams x {r['events']} events: "
            f"{r['us_per_event']:.2f} us CPU per event per stream "
            f"({r['events_written']:,} events written, {r['bytes_per_event']:.0f} bytes each, "
            f"{r['ms_per_change']:.1f} ms per change)")


def parser(description: str | None) -> argparse.ArgumentParser:
    """The options every in-process stream benchmark takes: how many
    streams, how many events."""
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", type=int, default=1000, help="streams held (default 1000)")
    p.add_argument("--events", type=int, default=100,
                   help="events published to the view every stream carries (default 100)")
    p.add_argument("--repeat", type=int, default=1)
    return p


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--front", choices=["fast", "twisted"], default="fast")
    a = p.parse_args()
    if a.streams < 1 or a.events < 1:
        p.error("--streams and --events must be 1 or more")
    for _ in range(a.repeat):
        print(line(run(a.streams, a.events, a.front)), flush=True)


if __name__ == "__main__":
    main()
