"""CPU and memory of fan-out to streams, in process (no sockets, no loadgen).

    python bench/stream_fanout.py [--streams 10000] [--changes 200] [--transport ws|sse]
                                  [--deflate]

Builds an engine on a Clock, opens ``--streams`` sessions on one shared
limit-1 view, attaches a real WebSocket (or SSE) delivery to each over a
transport that only counts bytes, then applies ``--changes`` updates of the
view's object one at a time, each followed by the flush that writes them.
Prints the engine's CPU per stream per event (queueing, framing, the write
call; not the kernel's ``send``, which a real socket adds) with the replay
buffers full (``--max-queue`` events per session), garbage collections
meanwhile, and the memory the full replay buffers hold per stream. What it isolates is the per-stream
work that bounds fan-out (docs/benchmarks.md, "Profile"). ``--deflate``: every
WebSocket negotiated permessage-deflate (docs/websocket.md); the bytes per
event on the wire are printed too.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from twisted.internet.task import Clock  # noqa: E402

from pushengine.core.changes import Change  # noqa: E402
from pushengine.app.engine import build_engine  # noqa: E402
from pushengine.core.sessions import SessionSettings  # noqa: E402
from pushengine.stores.memory import MemoryStore  # noqa: E402
from pushengine.transports.sse import SseStream, StreamHub  # noqa: E402
from pushengine.transports.deflate import ServerDeflate  # noqa: E402
from pushengine.transports.websocket import SharedFrames, WsConnection  # noqa: E402
from pushengine.views.spec import load_catalog  # noqa: E402


class CountingTransport:
    """Takes bytes and keeps only their count."""

    def __init__(self) -> None:
        self.bytes = 0

    def write(self, data: bytes) -> None:
        self.bytes += len(data)

    def writeSequence(self, data) -> None:
        for d in data:
            self.bytes += len(d)

    def loseConnection(self) -> None:
        pass


class CountingRequest(CountingTransport):
    """What an SSE stream writes through (twisted.web's request, minus HTTP)."""

    def registerProducer(self, producer, streaming) -> None:
        pass

    def unregisterProducer(self) -> None:
        pass

    def finish(self) -> None:
        pass


def stream_obj(n: int) -> dict:
    return {"id": 1, "n": n, "title": "the benchmark's stream", "live": True,
            "public": True, "created_at": "2030-01-01T00:00:00Z", "user_id": 1}


def run(streams: int, changes: int, transport: str, max_queue: int,
        deflate: bool = False) -> dict:
    clock = Clock()
    catalog = load_catalog()
    engine = build_engine(clock, catalog, MemoryStore(catalog.id_fields),
                    SessionSettings(max_queue=max_queue, max_sessions=0))
    engine.apply_changes([Change("Stream", "upsert", 1, stream_obj(0))])
    bound = catalog.views["PublicLiveStreamView"].bind({}, None, 1)
    sinks = []
    frames = SharedFrames()
    for _ in range(streams):
        s = engine.sessions.create()
        engine.sessions.subscribe(s, bound)
        if transport == "ws":
            sink = CountingTransport()
            ext = None
            if deflate:
                ext = ServerDeflate(1 << 20)
                ext.accept("permessage-deflate")
            d = WsConnection(None, None, engine.sessions, clock, 1 << 20, None, None, ext,
                             frames=frames)     # shared by every socket, as on a node
            d.transport = sink
            d.session = s
        else:
            sink = CountingRequest()
            d = SseStream(StreamHub(clock, engine.sessions, None), sink)
            d.session = s
        engine.sessions.attach(s, d)
        sinks.append(sink)
    gc.collect()
    # fill the replay buffers first: the steady state of a long-running node
    tracemalloc.start()
    before_mem = tracemalloc.get_traced_memory()[0]
    for n in range(1, max_queue + 1):
        engine.apply_changes([Change("Stream", "upsert", 1, stream_obj(n))])
    gc.collect()
    replay_mem = tracemalloc.get_traced_memory()[0] - before_mem
    tracemalloc.stop()
    collections = [g["collections"] for g in gc.get_stats()]
    written_before = sum(s.bytes for s in sinks)
    start = time.process_time()
    for n in range(max_queue + 1, max_queue + 1 + changes):
        engine.apply_changes([Change("Stream", "upsert", 1, stream_obj(n))])
    spent = time.process_time() - start
    collections = [g["collections"] - c for g, c in zip(gc.get_stats(), collections)]
    written = sum(s.bytes for s in sinks)
    return {"streams": streams, "changes": changes,
            "transport": transport + (" deflate" if deflate else ""),
            "bytes_per_event": (written - written_before) / (streams * changes),
            "us_per_stream_event": spent / (streams * changes) * 1e6,
            "seconds_per_change": spent / changes,
            "gc_collections": collections, "bytes_written": written,
            "replay_kb_per_stream": replay_mem / 1024 / streams}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", type=int, default=10_000)
    p.add_argument("--changes", type=int, default=50)
    p.add_argument("--transport", choices=["ws", "sse"], default="ws")
    p.add_argument("--max-queue", type=int, default=100)
    p.add_argument("--deflate", action="store_true",
                   help="WebSockets with permessage-deflate negotiated")
    a = p.parse_args()
    r = run(a.streams, a.changes, a.transport, a.max_queue, a.deflate)
    print(f"{r['transport']}: {r['streams']:,} streams x {r['changes']} changes: "
          f"{r['us_per_stream_event']:.2f} µs CPU per stream per event "
          f"({r['seconds_per_change'] * 1000:.0f} ms per change); "
          f"{r['bytes_per_event']:.1f} bytes per event on the wire; "
          f"gc collections {r['gc_collections']}; "
          f"replay buffers {r['replay_kb_per_stream']:.2f} KiB per stream")


if __name__ == "__main__":
    main()
