"""How long a node holding many clients takes to stop on SIGTERM, and what
its clients see (SPEC 21).

One ``twistd -n pushengine`` node on a free loopback port (this checkout,
``--shutdown-timeout`` as given) holds ``--clients`` sessions, a third each
on a parked long-poll, an SSE stream and a WebSocket, every session
subscribed to one view. The node is sent SIGTERM; measured: the seconds
from the signal to the process's exit, and to the last client's end; and
what each client saw:

- a long-poll: a whole HTTP 200 answer whose result is ``[]`` ("answered"),
  or anything else (the connection closed without an answer: "error");
- an SSE stream: its ``going-away`` message, then the chunked body's last
  chunk, then the connection's end ("ended cleanly"), or an end without
  them ("error");
- a WebSocket: a close frame with 1001, then the connection's end (the
  client answers the close frame as a browser does) ("closed 1001"), or
  another code or none ("error").

    python bench/shutdown.py [--clients 10000] [--shutdown-timeout 10] [--drain-delay 0]

The clients are one asyncio loop in this process (uvloop when installed);
the node and the clients share the machine. Printed: one line per
transport, then the timings; the exit status is 1 when any client saw an
error or the node did not exit within the timeout.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from loadgen import raise_nofile, run_loop, ws_frame  # noqa: E402

BATCH = 100                 # calls per JSON-RPC batch (the node's --max-batch)
VIEW = "stream.subscribe_public_live"
OPENING = 200               # connections opened at once


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def twistd() -> list[str]:
    path = Path(sys.executable).with_name("twistd")
    if path.exists():
        return [str(path)]
    return [sys.executable, "-c", "import sys; from twisted.scripts.twistd import run; "
                                  "sys.argv[0] = 'twistd'; run()"]


class Reader:
    """A connection's bytes as they come, read by the coroutines below."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.buf = b""

    @classmethod
    async def open(cls, port: int) -> "Reader":
        for attempt in range(20):
            try:
                r, w = await asyncio.open_connection("127.0.0.1", port)
                return cls(r, w)
            except OSError:
                await asyncio.sleep(0.05 * (attempt + 1))
        raise ConnectionError("cannot connect")

    async def more(self) -> bool:
        try:
            data = await self.reader.read(65536)
        except (ConnectionError, OSError):
            return False
        self.buf += data
        return bool(data)

    async def head(self) -> tuple[int, bytes]:
        while b"\r\n\r\n" not in self.buf:
            if not await self.more():
                raise ConnectionError("closed before the head")
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1]), head.lower()

    async def body(self, head: bytes) -> bytes:
        found = re.search(rb"content-length: *(\d+)", head)
        if found is None:
            raise ConnectionError("no Content-Length")
        length = int(found.group(1))
        while len(self.buf) < length:
            if not await self.more():
                raise ConnectionError("closed inside the body")
        body, self.buf = self.buf[:length], self.buf[length:]
        return body

    async def until_closed(self) -> None:
        while await self.more():
            pass

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:
            pass


def request(method: str, path: str, body: bytes = b"", headers: str = "") -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def rpc_batch(conn: Reader, calls: list[tuple[str, list]]) -> list[Any]:
    body = json.dumps([{"jsonrpc": "2.0", "id": i, "method": m, "params": p}
                       for i, (m, p) in enumerate(calls)]).encode()
    conn.writer.write(request("POST", "/api/jsonrpc", body,
                              "Content-Type: application/json\r\n"))
    status, head = await conn.head()
    answers = json.loads(await conn.body(head))
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {answers}")
    by_id = {a["id"]: a for a in answers}
    out = []
    for i in range(len(calls)):
        a = by_id[i]
        if "error" in a:
            raise RuntimeError(f"{calls[i][0]}: {a['error']}")
        out.append(a["result"])
    return out


async def sessions(port: int, count: int) -> list[str]:
    """``count`` sessions, each subscribed to the view, over a few connections."""
    async def some(n: int) -> list[str]:
        conn = await Reader.open(port)
        try:
            made: list[str] = []
            while len(made) < n:
                sids = await rpc_batch(conn, [("session.create", [])] * min(BATCH, n - len(made)))
                await rpc_batch(conn, [(VIEW, [sid, 10]) for sid in sids])
                made += sids
            return made
        finally:
            conn.close()
    workers = 8
    parts = await asyncio.gather(*(some(count // workers + (i < count % workers))
                                   for i in range(workers)))
    return [sid for part in parts for sid in part]


# -- the three kinds of client ---------------------------------------------------------

class Client:
    kind = ""

    def __init__(self, port: int, sid: str) -> None:
        self.port = port
        self.sid = sid
        self.conn: Reader | None = None
        self.outcome = "error: never opened"
        self.ended: float | None = None

    async def open(self) -> None:
        raise NotImplementedError

    async def follow(self) -> None:
        raise NotImplementedError

    async def run(self, opened: asyncio.Event | None = None) -> None:
        try:
            await self.follow()
        except Exception as e:          # every way it can go wrong is an outcome
            self.outcome = f"error: {type(e).__name__}: {e}"[:120]
        finally:
            self.ended = time.monotonic()
            if self.conn is not None:
                self.conn.close()


class Poll(Client):
    kind = "long-poll"

    async def open(self) -> None:
        self.conn = await Reader.open(self.port)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session.get_events",
                           "params": [self.sid, 90]}).encode()
        self.conn.writer.write(request("POST", f"/api/jsonrpc?session={self.sid}", body,
                                       "Content-Type: application/json\r\n"))

    async def follow(self) -> None:
        assert self.conn is not None
        status, head = await self.conn.head()
        answer = json.loads(await self.conn.body(head))
        if status == 200 and answer.get("result") == []:
            self.outcome = "answered []"
            if b"connection: close" in head:
                self.outcome += " (Connection: close)"
        else:
            self.outcome = f"error: HTTP {status} {answer}"[:120]


class Sse(Client):
    kind = "SSE"

    async def open(self) -> None:
        self.conn = await Reader.open(self.port)
        self.conn.writer.write(f"GET /api/events?session={self.sid} HTTP/1.1\r\n"
                               f"Host: 127.0.0.1\r\n\r\n".encode())
        status, head = await self.conn.head()
        if status != 200 or b"chunked" not in head:
            raise ConnectionError(f"HTTP {status}")

    async def follow(self) -> None:
        assert self.conn is not None
        await self.conn.until_closed()
        body, terminated = dechunk(self.conn.buf)
        going = body.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
        if terminated and going.startswith(b"event: going-away\n") and body.endswith(b"\n\n"):
            self.outcome = "ended cleanly (going-away, last chunk)"
        else:
            self.outcome = f"error: ended with {body[-60:]!r}, terminated={terminated}"


def dechunk(data: bytes) -> tuple[bytes, bool]:
    out = b""
    while data:
        size, sep, data = data.partition(b"\r\n")
        if not sep:
            return out, False
        n = int(size, 16)
        if n == 0:
            return out, data == b"\r\n"
        out += data[:n]
        data = data[n + 2:]
    return out, False


class Ws(Client):
    kind = "WebSocket"

    async def open(self) -> None:
        self.conn = await Reader.open(self.port)
        key = base64.b64encode(os.urandom(16)).decode()
        self.conn.writer.write(
            f"GET /api/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            f"Sec-WebSocket-Version: 13\r\n\r\n".encode())
        status, _ = await self.conn.head()
        if status != 101:
            raise ConnectionError(f"HTTP {status}")
        self.conn.writer.write(ws_frame(json.dumps({
            "jsonrpc": "2.0", "id": 1, "method": "session.attach",
            "params": [self.sid, 0]}).encode()))
        while True:
            frame = await self.frame()
            if frame is None:
                raise ConnectionError("closed before the attach's answer")
            opcode, payload = frame
            if opcode == 1 and json.loads(payload).get("id") == 1:
                return

    async def frame(self) -> tuple[int, bytes] | None:
        """The next frame from the server (unmasked), or None at the end."""
        conn = self.conn
        assert conn is not None
        while True:
            buf = conn.buf
            if len(buf) >= 2:
                n, at = buf[1] & 0x7F, 2
                if n == 126:
                    n, at = int.from_bytes(buf[2:4], "big"), 4
                elif n == 127:
                    n, at = int.from_bytes(buf[2:10], "big"), 10
                if len(buf) >= at + n:
                    conn.buf = buf[at + n:]
                    return buf[0] & 0x0F, buf[at:at + n]
            if not await conn.more():
                return None

    async def follow(self) -> None:
        assert self.conn is not None
        while True:
            frame = await self.frame()
            if frame is None:
                self.outcome = "error: the connection ended without a close frame"
                return
            opcode, payload = frame
            if opcode == 9:                 # ping
                self.conn.writer.write(ws_frame(payload, 10))
            elif opcode == 8:
                code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
                self.conn.writer.write(ws_frame(payload[:2], 8))    # as a browser answers
                await self.conn.until_closed()
                self.outcome = "closed 1001" if code == 1001 else f"error: close code {code}"
                return


async def bench(args: argparse.Namespace) -> int:
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="pushengine-shutdown-"))
    log = workdir / "twistd.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUSHENGINE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    node = await asyncio.create_subprocess_exec(
        *twistd(), "-n", "--pidfile=", f"--logfile={log}", "pushengine",
        "--port", f"tcp:{port}:interface=127.0.0.1:backlog=4096", "--node-id", "shutdown-bench",
        "--max-client-connections", "0", "--max-client-sessions", "0", "--client-rate", "0",
        "--max-timeout", "90", "--session-timeout", "600",
        "--shutdown-timeout", str(args.shutdown_timeout), "--drain-delay", str(args.drain_delay),
        cwd=str(workdir), env=env, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                probe = await Reader.open(port)
                probe.close()
                break
            except ConnectionError:
                if node.returncode is not None:
                    raise SystemExit(f"the node exited: {log.read_text()[-2000:]}")
                await asyncio.sleep(0.1)
        started = time.monotonic()
        sids = await sessions(port, args.clients)
        kinds = [Poll, Sse, Ws]
        clients: list[Client] = [kinds[i % 3](port, sid) for i, sid in enumerate(sids)]
        for i in range(0, len(clients), OPENING):
            await asyncio.gather(*(c.open() for c in clients[i:i + OPENING]))
        tasks = [asyncio.ensure_future(c.run()) for c in clients]
        await asyncio.sleep(0.5)            # the last polls park
        held = time.monotonic() - started
        signalled = time.monotonic()
        node.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(node.wait(), args.shutdown_timeout + 30)
        except asyncio.TimeoutError:
            node.kill()
            await node.wait()
        exited = time.monotonic() - signalled
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        last = max((c.ended or signalled) for c in clients) - signalled
    finally:
        if node.returncode is None:
            node.kill()
            await node.wait()
    text = log.read_text("utf-8", "replace")
    let_go = re.search(r"every client let go in ([\d.]+) s", text)
    errors = 0
    print(f"shutdown: {len(clients)} clients held ({held:.1f} s to set up), "
          f"--shutdown-timeout {args.shutdown_timeout:g} s, --drain-delay {args.drain_delay:g} s")
    for kind in kinds:
        outcomes: dict[str, int] = {}
        for c in clients:
            if isinstance(c, kind):
                outcomes[c.outcome] = outcomes.get(c.outcome, 0) + 1
        bad = sum(n for o, n in outcomes.items() if o.startswith("error"))
        errors += bad
        shown = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items(), key=lambda x: -x[1]))
        print(f"  {kind.kind}: {shown}")
    print(f"  SIGTERM to exit: {exited:.2f} s; to the last client's end: {last:.2f} s; "
          f"the node let every client go in "
          f"{let_go.group(1) + ' s' if let_go else 'no (cut at the deadline)'}; "
          f"exit status {node.returncode}")
    print(f"  errors: {errors}")
    if "Traceback" in text or "Unhandled" in text:
        print("  the node's log holds a traceback: " + str(log))
        return 1
    return 1 if errors or exited > args.shutdown_timeout else 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--shutdown-timeout", type=float, default=10.0)
    parser.add_argument("--drain-delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    if args.clients < 3:
        parser.error("--clients must be at least 3 (one of each transport)")
    limit = raise_nofile()          # (the node, a child, inherits it)
    if limit < args.clients + 100:
        parser.error(f"--clients {args.clients} needs {args.clients + 100} file "
                     f"descriptors in each process; the limit is {limit}")
    sys.exit(run_loop(bench(args)))


if __name__ == "__main__":
    main()
