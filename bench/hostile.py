"""What one hostile client can take from a node, with the default limits.

Starts ``twistd -n pushengine`` (defaults: --max-client-sessions 100,
--client-rate 200) and, from one address, runs the two attacks of the
hardening review while a second client (another loopback address, 127.0.0.2)
keeps calling ``stats.online`` and timing its answers:

1. ``session.create`` in a loop on one keep-alive connection for ``--seconds``;
2. every session it got subscribing to 50 views with 1,000-character params.

Prints the answers by status, the node's RSS before and after, and the other
client's latency (p50/p99/max). Usage: python bench/hostile.py [--seconds 10]

``--ws`` runs the WebSocket attacks instead, each for ``--seconds`` while the
other client times ``GET /health``: ``pings`` (ping frames, never reading),
``flood`` (tiny frames of invalid JSON, answers read and dropped), ``idle``
(a socket with no session that answers no ping, under ``--idle-timeout 2``)
and ``bomb`` (a deflated message that inflates to 256 MiB).
``--attack NAME`` runs one attack of the second round instead (SPEC 18), with
the node under ``ulimit -n 1024``, while the other client times ``GET
/health``: ``body`` (1,000 connections that send ``Content-Length: 100`` and
then nothing), ``upgrade`` (200 connections that send a request with
``Upgrade: h2c`` and then trickle header lines), ``pipeline`` (40 connections,
each a parked ``get_events`` and 15 pipelined 1 MB bodies), ``last-event-id``
(``Last-Event-ID: ²`` on a keep-alive connection in a loop), ``oversize``
(1 MB bodies above a 64 KiB ``--max-body``, answered 413).
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Client:
    def __init__(self, port: int, source: str = "127.0.0.1") -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30,
                                               source_address=(source, 0))
        self.ids = 0

    def call(self, method: str, *params) -> tuple[int, dict | list | None]:
        self.ids += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.ids, "method": method,
                           "params": list(params)})
        self.conn.request("POST", "/api/jsonrpc", body, {"content-type": "application/json"})
        reply = self.conn.getresponse()
        data = reply.read()
        return reply.status, (json.loads(data) if data else None)


def start(port: int, workdir: str, *argv: str, files: int | None = None) -> subprocess.Popen:
    twistd = shutil.which("twistd", path=os.path.dirname(sys.executable)) or "twistd"

    def limit_files() -> None:
        if files is not None:
            import resource
            resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
    # this checkout first on the path: its twisted/plugins holds the plugin
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUSHENGINE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    proc = subprocess.Popen([twistd, "-n", "--pidfile=", f"--logfile={workdir}/engine.log",
                             "pushengine", "--port", f"tcp:{port}:interface=127.0.0.1", *argv],
                            cwd=workdir, env=env, preexec_fn=limit_files)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            Client(port).call("stats.online")
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the engine did not start")


def ws_open(port: int, deflate: bool = False) -> socket.socket:
    """A raw WebSocket (the handshake done, nothing read after it)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    ext = "Sec-WebSocket-Extensions: permessage-deflate\r\n" if deflate else ""
    sock.sendall(("GET /api/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                  "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                  f"Sec-WebSocket-Version: 13\r\n{ext}\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert b" 101 " in head.split(b"\r\n")[0] + b" ", head
    return sock


def ws_frame(opcode: int, payload: bytes, rsv1: bool = False) -> bytes:
    """A masked client frame (the mask is zero: the payload goes as it is)."""
    n = len(payload)
    first = 0x80 | (0x40 if rsv1 else 0) | opcode
    if n < 126:
        head = bytes([first, 0x80 | n])
    elif n < 65536:
        head = bytes([first, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([first, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + b"\x00" * 4 + payload


def health_times(port: int, stop: threading.Event, out: list[float]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60,
                                      source_address=("127.0.0.2", 0))
    while not stop.is_set():
        t = time.perf_counter()
        conn.request("GET", "/health")
        reply = conn.getresponse()
        reply.read()
        out.append(time.perf_counter() - t)
        time.sleep(0.01)


def ws_attack(name: str, port: int, seconds: float) -> str:
    if name == "pings":
        sock = ws_open(port)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        ping = ws_frame(9, b"p" * 125) * 64
        sent = 0
        end = time.time() + seconds
        while time.time() < end:
            try:
                sent += sock.send(ping)
            except BlockingIOError:
                time.sleep(0.01)
        sock.close()
        return f"{sent / 2**20:.1f} MiB of pings sent"
    if name == "flood":
        frames = ws_frame(1, b"x") * 4096
        sent = closed = 0
        got = [0]
        end = time.time() + seconds
        while time.time() < end:          # a new socket each time the node closes one
            sock = ws_open(port)

            def drain(sock: socket.socket = sock) -> None:
                while True:
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    got[0] += len(data)
            reader = threading.Thread(target=drain, daemon=True)
            reader.start()
            try:
                while time.time() < end:
                    sock.sendall(frames)
                    sent += 4096
            except OSError:
                closed += 1
            sock.close()
            reader.join(5)
        return (f"{sent} invalid frames written, {got[0] / 1024:.0f} KiB answered, "
                f"{closed} sockets closed by the node")
    if name == "idle":
        socks = [ws_open(port) for _ in range(50)]
        end = time.time() + seconds
        closed = 0
        for sock in socks:
            sock.settimeout(max(end - time.time(), 0.1))
            try:
                while sock.recv(65536):
                    pass
                closed += 1
            except OSError:
                pass
        return f"{closed} of 50 idle sockets closed by the node within {seconds:g} s"
    if name == "bomb":
        import zlib
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        bomb = (c.compress(b"[" * (256 << 20)) + c.flush(zlib.Z_SYNC_FLUSH))[:-4]
        count = 0
        end = time.time() + seconds
        while time.time() < end:
            sock = ws_open(port, deflate=True)
            sock.sendall(ws_frame(1, bomb, rsv1=True))
            while sock.recv(65536):
                pass
            sock.close()
            count += 1
        return f"{count} bombs of {len(bomb) / 1024:.0f} KiB, each closed"
    raise SystemExit(f"no attack {name}")


def ws_main(args: argparse.Namespace) -> None:
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="pushengine-hostile-")
    proc = start(port, workdir, "--idle-timeout", "2")
    try:
        for name in args.attacks.split(","):
            latencies: list[float] = []
            stop = threading.Event()
            watcher = threading.Thread(target=health_times, args=(port, stop, latencies),
                                       daemon=True)
            before = rss_kib(proc.pid)
            watcher.start()
            what = ws_attack(name, port, args.seconds)
            after = rss_kib(proc.pid)
            stop.set()
            watcher.join(60)
            print(f"{name}: {what}; RSS {before / 1024:.1f} → {after / 1024:.1f} MB; "
                  f"/health ({len(latencies)}): {percentiles(latencies)}", flush=True)
    finally:
        proc.terminate()
        proc.wait(10)


def percentiles(lat: list[float]) -> str:
    lat = sorted(lat)
    if not lat:
        return "no answers"
    return (f"p50 {statistics.median(lat) * 1000:.1f} ms, "
            f"p99 {lat[max(0, int(len(lat) * 0.99) - 1)] * 1000:.1f} ms, "
            f"max {lat[-1] * 1000:.1f} ms ({len(lat)} answers)")


def raw_connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.settimeout(0.5)
    return sock


def closed_by_node(sock: socket.socket) -> bool:
    """Whether the node closed ``sock`` (reading what it answered)."""
    try:
        sock.setblocking(False)
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


def open_many(port: int, count: int, first: bytes) -> tuple[list[socket.socket], int]:
    """``count`` connections that each sent ``first``; and how many the kernel refused."""
    socks, refused = [], 0
    for _ in range(count):
        try:
            sock = raw_connect(port)
            sock.sendall(first)
            socks.append(sock)
        except OSError:
            refused += 1
    return socks, refused


def attack_body(port: int, seconds: float) -> str:
    socks, refused = open_many(port, 1000, b"POST /api/jsonrpc HTTP/1.1\r\nHost: x\r\n"
                               b"Content-Length: 100\r\nContent-Type: application/json\r\n"
                               b"\r\n{\"a\":")
    time.sleep(seconds)
    closed = sum(closed_by_node(s) for s in socks)
    for s in socks:
        s.close()
    return (f"{len(socks)} connections opened ({refused} refused by the kernel), "
            f"{closed} closed by the node after {seconds:g} s")


def attack_upgrade(port: int, seconds: float) -> str:
    socks, _ = open_many(port, 200, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: upgrade"
                         b"\r\nUpgrade: h2c\r\n\r\nGET /health HTTP/1.1\r\n")
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        for sock in socks:
            try:
                sock.sendall(b"X-Slow-%d: 1\r\n" % n)
            except OSError:
                pass
        n += 1
        time.sleep(1)
    closed = sum(closed_by_node(s) for s in socks)
    for s in socks:
        s.close()
    return f"{len(socks)} connections trickling headers after an Upgrade: h2c request, " \
           f"{closed} closed by the node within {seconds:g} s"


def attack_pipeline(port: int, seconds: float, pid: int) -> str:
    before = rss_kib(pid)
    body = b" " * (1 << 20)
    big = (b"POST /api/jsonrpc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(body)) + body
    socks = []
    for i in range(40):
        client = Client(port)
        _, answer = client.call("session.create")
        sid = answer["result"] if isinstance(answer, dict) else None
        call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session.get_events",
                           "params": [sid, 60]}).encode()
        poll = (b"POST /api/jsonrpc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(call)) + call
        sock = raw_connect(port)
        sock.setblocking(False)
        socks.append([sock, memoryview(poll + big * 15)])
    end = time.time() + seconds
    while time.time() < end:
        for entry in socks:
            sock, rest = entry
            if len(rest):
                try:
                    entry[1] = rest[sock.send(rest[:65536]):]
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    entry[1] = rest[:0]
        time.sleep(0.01)
    peak = rss_kib(pid)
    unsent = sum(len(rest) for _, rest in socks)
    for sock, _ in socks:
        sock.close()
    return (f"RSS {before / 1024:.0f} MiB before, {peak / 1024:.0f} MiB after {seconds:g} s; "
            f"{unsent / (1 << 20):.0f} MiB of the 600 MiB never read by the node")


def attack_last_event_id(port: int, seconds: float) -> str:
    statuses: dict[int, int] = {}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    end = time.time() + seconds
    while time.time() < end:
        conn.putrequest("GET", "/api/events?session=x")
        conn.putheader("Last-Event-ID", "\xb2")
        conn.endheaders()
        reply = conn.getresponse()
        reply.read()
        statuses[reply.status] = statuses.get(reply.status, 0) + 1
    return ", ".join(f"{n} × HTTP {s}" for s, n in sorted(statuses.items()))


def attack_oversize(port: int, seconds: float) -> str:
    statuses: dict[str, int] = {}
    end = time.time() + seconds
    body = b"x" * (1 << 20)
    while time.time() < end:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            sock.sendall(b"POST /api/jsonrpc HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                         % len(body) + body)
            answer = sock.recv(4096)
            key = answer.split(b"\r\n", 1)[0].decode("latin-1") or "closed without an answer"
        except OSError as e:
            key = type(e).__name__
        finally:
            sock.close()
        statuses[key] = statuses.get(key, 0) + 1
    return ", ".join(f"{n} × {k}" for k, n in sorted(statuses.items()))


def run_attack(name: str, seconds: float) -> None:
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="pushengine-hostile-")
    argv = ["--max-body", "65536"] if name == "oversize" else []
    proc = start(port, workdir, "--client-rate", "0", *argv, files=1024)
    latencies: list[float] = []
    failures: dict[str, int] = {}
    stop = threading.Event()

    def bystander() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30,
                                          source_address=("127.0.0.2", 0))
        while not stop.is_set():
            t = time.perf_counter()
            try:
                conn.request("GET", "/health")
                conn.getresponse().read()
                latencies.append(time.perf_counter() - t)
            except OSError as e:
                failures[type(e).__name__] = failures.get(type(e).__name__, 0) + 1
                conn.close()
            time.sleep(0.01)

    watcher = threading.Thread(target=bystander, daemon=True)
    try:
        watcher.start()
        if name == "body":
            result = attack_body(port, seconds)
        elif name == "upgrade":
            result = attack_upgrade(port, seconds)
        elif name == "pipeline":
            result = attack_pipeline(port, seconds, proc.pid)
        elif name == "last-event-id":
            result = attack_last_event_id(port, seconds)
        else:
            result = attack_oversize(port, seconds)
        stop.set()
        watcher.join(5)
        print(f"{name}: {result}")
        print(f"  another client's GET /health meanwhile: {percentiles(latencies)}"
              + (f"; failed: {failures}" if failures else ""))
    finally:
        stop.set()
        proc.terminate()
        proc.wait(10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--ws", action="store_true", help="the WebSocket attacks")
    p.add_argument("--attacks", default="pings,flood,idle,bomb")
    p.add_argument("--attack", choices=["body", "upgrade", "pipeline", "last-event-id",
                                        "oversize", "all"])
    args = p.parse_args()
    if args.ws:
        ws_main(args)
        return
    if args.attack:
        for name in (["body", "upgrade", "pipeline", "last-event-id", "oversize"]
                     if args.attack == "all" else [args.attack]):
            run_attack(name, args.seconds)
        return
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="pushengine-hostile-")
    proc = start(port, workdir)
    latencies: list[float] = []
    stop = threading.Event()

    def bystander() -> None:
        client = Client(port, "127.0.0.2")
        while not stop.is_set():
            t = time.perf_counter()
            status, _ = client.call("stats.online")
            latencies.append(time.perf_counter() - t)
            assert status == 200, status
            time.sleep(0.01)

    watcher = threading.Thread(target=bystander, daemon=True)
    try:
        before = rss_kib(proc.pid)
        watcher.start()
        hostile = Client(port)
        statuses: dict[int, int] = {}
        sids = []
        end = time.time() + args.seconds
        while time.time() < end:
            status, answer = hostile.call("session.create")
            statuses[status] = statuses.get(status, 0) + 1
            if status == 200 and "result" in answer:
                sids.append(answer["result"])
        after_sessions = rss_kib(proc.pid)
        sub_statuses: dict[int, int] = {}
        end = time.time() + args.seconds
        for sid in sids:
            for v in range(50):
                if time.time() > end:
                    break
                status, _ = hostile.call("stream.subscribe_user", sid, f"{v:04d}" + "u" * 996)
                sub_statuses[status] = sub_statuses.get(status, 0) + 1
        after_subs = rss_kib(proc.pid)
        stop.set()
        watcher.join(5)
        lat = sorted(latencies)
        print(f"session.create for {args.seconds:g} s from one address: "
              f"{', '.join(f'{n} × HTTP {s}' for s, n in sorted(statuses.items()))}; "
              f"sessions held: {len(sids)}")
        print(f"subscriptions with 1,000-character params for {args.seconds:g} s: "
              f"{', '.join(f'{n} × HTTP {s}' for s, n in sorted(sub_statuses.items()))}")
        print(f"RSS: {before / 1024:.1f} MB at start, {after_sessions / 1024:.1f} MB after the "
              f"sessions, {after_subs / 1024:.1f} MB after the subscriptions")
        if lat:
            print(f"another client's stats.online meanwhile ({len(lat)} calls): "
                  f"p50 {statistics.median(lat) * 1000:.1f} ms, "
                  f"p99 {lat[int(len(lat) * 0.99) - 1] * 1000:.1f} ms, "
                  f"max {lat[-1] * 1000:.1f} ms")
    finally:
        stop.set()
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
