"""CPU per WebSocket event per stream, in process (no sockets).

    python bench/ws_cpu.py [--streams 1000] [--events 100] [--deflate]
                           [--batch 1] [--repeat 1]

Builds a node on a Clock (the real fast front, its route table and
WebSocket transport), creates ``--streams`` sessions subscribed to one
limit-1 view, and opens a WebSocket per session on a connection of its own
(the upgrade, then ``session.attach``), with permessage-deflate negotiated
when ``--deflate``. The connections are test transports that only count the
bytes written, so no system call is measured: what remains is the Python
cost of the path from the engine to ``transport.write``. Then ``--events``
changes of the view's one object are applied through the engine, each
adding an event to every stream (``--batch`` changes in one call: a batch of
events per frame); ``time.process_time`` over them, divided by the events
written, is the CPU per event per stream. The collector runs with a node's
own settings (frozen after start-up).

``--repeat``: runs one after the other, each on a fresh node; one line of
figures per run, then their median. Run it against another checkout with
``PYTHONPATH`` naming it (the script imports ``pushengine`` from the tree it
sits in first: copy it there) to compare two versions in the same run.
"""
from __future__ import annotations

import base64
import gc
import json
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from wsproto import ConnectionType  # noqa: E402
from wsproto.connection import Connection  # noqa: E402
from wsproto.events import TextMessage  # noqa: E402

from pushengine.app.service import Node  # noqa: E402
from pushengine.core.changes import Change  # noqa: E402
from sse_cpu import CountingTransport, open_streams, parser, stream_obj  # noqa: E402
from sse_cpu import node as sse_node  # noqa: E402

KEY = base64.b64encode(b"0123456789abcdef")


def node() -> Node:
    """A node on a Clock with the fast front and no per-client limits."""
    return sse_node("fast")


def upgrade(deflate: bool) -> bytes:
    lines = [b"GET /api/ws HTTP/1.1", b"Host: 127.0.0.1", b"Upgrade: websocket",
             b"Connection: Upgrade", b"Sec-WebSocket-Key: " + KEY,
             b"Sec-WebSocket-Version: 13"]
    if deflate:
        lines.append(b"Sec-WebSocket-Extensions: permessage-deflate")
    return b"\r\n".join(lines) + b"\r\n\r\n"


def changes(start: int, batch: int) -> list[Change]:
    return [Change("Stream", "upsert", 1, stream_obj(n)) for n in range(start, start + batch)]


def run(streams: int, events: int, deflate: bool, batch: int) -> dict:
    n = node()
    engine = n.engine

    def open_socket(transport: CountingTransport, session: Any) -> None:
        transport.protocol.dataReceived(upgrade(deflate))
        attach = Connection(ConnectionType.CLIENT).send(TextMessage(json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "session.attach",
             "params": [session.id, 0]})))
        transport.protocol.dataReceived(attach)
    transports = open_streams(n, streams, open_socket, "socket")
    gc.collect()
    gc.freeze()                          # as a node does once started (--gc-freeze)
    gc.set_threshold(50_000, 20, 100)
    written_before = sum(t.written for t in transports)
    out_before = engine.sessions.events_out
    rounds = max(1, events // batch)
    start = time.process_time()
    for r in range(rounds):
        engine.apply_changes(changes(2 + r * batch, batch))
    spent = time.process_time() - start
    gc.unfreeze()
    written = engine.sessions.events_out - out_before
    nbytes = sum(t.written for t in transports) - written_before
    return {"kind": "deflate" if deflate else "plain", "streams": streams,
            "events": rounds * batch, "batch": batch, "events_written": written,
            "us_per_event": spent / written * 1e6 if written else None,
            "bytes_per_frame": nbytes / (written / batch) if written else None,
            "ms_per_change": spent / (rounds * batch) * 1000}


def line(r: dict) -> str:
    return (f"ws {r['kind']}: {r['streams']:,} streams x {r['events']} events "
            f"(batches of {r['batch']}): {r['us_per_event']:.2f} us CPU per event per stream "
            f"({r['events_written']:,} events written, {r['bytes_per_frame']:.0f} bytes per "
            f"frame, {r['ms_per_change']:.1f} ms per change)")


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--deflate", action="store_true", help="negotiate permessage-deflate")
    p.add_argument("--batch", type=int, default=1,
                   help="changes applied together: events per frame (default 1)")
    a = p.parse_args()
    if a.streams < 1 or a.events < 1 or a.batch < 1:
        p.error("--streams, --events and --batch must be 1 or more")
    figures = []
    for _ in range(a.repeat):
        r = run(a.streams, a.events, a.deflate, a.batch)
        figures.append(r["us_per_event"])
        print(line(r), flush=True)
    if a.repeat > 1:
        print(f"ws {r['kind']}: median of {a.repeat} runs: "
              f"{statistics.median(figures):.2f} us CPU per event per stream", flush=True)


if __name__ == "__main__":
    main()
