"""Bytes per event on the wire and server CPU per stream per event for
WebSocket streams with and without permessage-deflate, on pushengine and on
nginx+nchan (``nchan_deflate_message_for_websocket on``).

    python bench/ws_deflate.py [--target engine|nchan] [--streams 1000]
                               [--events 100] [--deflate]

Opens ``--streams`` raw WebSockets from one asyncio process (offering
permessage-deflate with ``--deflate``), each carrying the same events (the
engine: a session subscribed to the public live streams on its socket;
nchan: ``/stream/bench``), publishes ``--events`` changes one at a time
(the engine: ``POST /api/publish``; nchan: ``POST /pubdeflate/bench`` with
the engine's own message for the same change) and waits until every stream
has every event. Counts the bytes each socket read after its handshake and
the server's CPU (utime + stime of the engine, or of nginx's worker) over
the publishing.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import urllib.request
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bench.hostile import free_port, start  # noqa: E402
from bench.nchan import Nchan, children  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / TICK


def change(n: int) -> dict:
    return {"type": "Stream", "action": "upsert", "obj": {
        "id": 1, "n": n, "title": "the benchmark's stream", "live": True, "public": True,
        "created_at": "2030-01-01T00:00:00Z", "user_id": 1}}


def masked(payload: bytes) -> bytes:
    n = len(payload)
    head = bytes([0x81, 0x80 | n]) if n < 126 else bytes([0x81, 0xFE]) + n.to_bytes(2, "big")
    return head + b"\x00" * 4 + payload


class Stream:
    """One raw WebSocket: frames read and inflated, bytes counted."""

    def __init__(self) -> None:
        self.bytes = 0
        self.events = 0
        self.buffer = b""
        self.messages: list[bytes] = []
        self.inflater = zlib.decompressobj(-15)
        self.extensions = ""
        self.sample: bytes | None = None

    async def open(self, port: int, path: str, deflate: bool) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port)
        ext = "Sec-WebSocket-Extensions: permessage-deflate\r\n" if deflate else ""
        self.writer.write((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                           f"Sec-WebSocket-Version: 13\r\n{ext}\r\n").encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        assert b" 101 " in head, head
        for line in head.decode("latin-1").split("\r\n"):
            if line.lower().startswith("sec-websocket-extensions:"):
                self.extensions = line.split(":", 1)[1].strip()
        self.inflater = zlib.decompressobj(-15)

    def _frames(self) -> None:
        while len(self.buffer) >= 2:
            b0, b1 = self.buffer[0], self.buffer[1]
            n, at = b1 & 0x7F, 2
            if n == 126:
                if len(self.buffer) < 4:
                    return
                n, at = int.from_bytes(self.buffer[2:4], "big"), 4
            elif n == 127:
                if len(self.buffer) < 10:
                    return
                n, at = int.from_bytes(self.buffer[2:10], "big"), 10
            if len(self.buffer) < at + n:
                return
            payload, self.buffer = self.buffer[at:at + n], self.buffer[at + n:]
            if b0 & 0x0F not in (1, 2):
                continue
            if b0 & 0x40:
                # one inflater per socket: it reads streams that keep their
                # context and streams that do not
                payload = self.inflater.decompress(payload + b"\x00\x00\xff\xff")
            self.messages.append(payload)

    async def read(self) -> None:
        while True:
            data = await self.reader.read(65536)
            if not data:
                return
            self.bytes += len(data)
            self.buffer += data
            self._frames()
            for m in self.messages:
                if m.startswith(b'{"jsonrpc":"2.0","method":"events"'):
                    self.events += m.count(b'"seq":')
                elif not m.startswith(b'{"jsonrpc"'):
                    self.events += 1            # nchan: one message per event
            if self.messages:
                self.sample = self.messages[-1]
            self.messages = [m for m in self.messages if m.startswith(b'{"jsonrpc":"2.0","id"')]

    async def call(self, method: str, *params) -> dict:
        self.writer.write(masked(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method,
                                             "params": list(params)}).encode()))
        while True:
            for m in self.messages:
                answer = json.loads(m)
                if answer.get("id") == 1:
                    self.messages.remove(m)
                    return answer
            data = await self.reader.read(65536)
            self.buffer += data
            self._frames()


def post(url: str, body: bytes) -> None:
    urllib.request.urlopen(urllib.request.Request(url, body, {
        "Content-Type": "application/json"}), timeout=30).read()


async def run(args: argparse.Namespace) -> None:
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="pushengine-wsdeflate-")
    server = None
    proc = None
    if args.target == "engine":
        proc = start(port, workdir, "--max-sessions", str(args.streams * 2),
                     "--max-client-sessions", "0", "--client-rate", "0",
                     "--max-client-connections", "0")
        path = "/api/ws"
    else:
        server = Nchan(port).start()
        path = "/stream/bench"
    try:
        streams = [Stream() for _ in range(args.streams)]
        for i in range(0, len(streams), 200):
            await asyncio.gather(*(s.open(port, path, args.deflate) for s in streams[i:i + 200]))
        if args.target == "engine":
            for s in streams:
                sid = (await s.call("session.create"))["result"]
                await s.call("stream.subscribe_public_live", sid, 1)
        readers = [asyncio.create_task(s.read()) for s in streams]
        for s in streams:
            s.bytes, s.events = 0, 0
        pids = [proc.pid] if proc else children(server.proc.pid)
        cpu0 = cpu_seconds(pids)
        loop = asyncio.get_running_loop()
        for n in range(1, args.events + 1):
            if args.target == "engine":
                body = json.dumps([change(n)]).encode()
                await loop.run_in_executor(None, post, f"http://127.0.0.1:{port}/api/publish", body)
            else:
                # the engine's own message for the same change (seq aside)
                obj = change(n)["obj"]
                body = json.dumps({"jsonrpc": "2.0", "method": "events", "params": [
                    {"seq": n, "key": "PublicLiveStreamView(limit=1)", "action": "update",
                     "obj": obj, "old": change(n - 1)["obj"]}]},
                    separators=(",", ":")).encode()
                await loop.run_in_executor(None, post,
                                           f"http://127.0.0.1:{port}/pubdeflate/bench", body)
            while min(s.events for s in streams) < n:
                await asyncio.sleep(0.005)
        cpu = cpu_seconds(pids) - cpu0
        for r in readers:
            r.cancel()
        total = sum(s.bytes for s in streams)
        print(f"{args.target} {'deflate' if args.deflate else 'plain'}: {args.streams} streams x "
              f"{args.events} events: {total / (args.streams * args.events):.1f} bytes per event "
              f"on the wire; {cpu / (args.streams * args.events) * 1e6:.2f} µs server CPU per "
              f"stream per event; extensions answered: {streams[0].extensions or 'none'}",
              flush=True)
        if args.sample:
            print(streams[0].sample.decode())
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        if server is not None:
            server.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", choices=["engine", "nchan"], default="engine")
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--events", type=int, default=100)
    p.add_argument("--deflate", action="store_true")
    p.add_argument("--sample", action="store_true", help="print one message received")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
