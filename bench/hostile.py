"""What one hostile client can take from a node, with the default limits.

Starts ``twistd -n pushengine`` (defaults: --max-client-sessions 100,
--client-rate 200) and, from one address, runs the two attacks of the
hardening review while a second client (another loopback address, 127.0.0.2)
keeps calling ``stats.online`` and timing its answers:

1. ``session.create`` in a loop on one keep-alive connection for ``--seconds``;
2. every session it got subscribing to 50 views with 1,000-character params.

Prints the answers by status, the node's RSS before and after, and the other
client's latency (p50/p99/max). Usage: python bench/hostile.py [--seconds 10]
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


def start(port: int, workdir: str) -> subprocess.Popen:
    twistd = shutil.which("twistd", path=os.path.dirname(sys.executable)) or "twistd"
    proc = subprocess.Popen([twistd, "-n", "--pidfile=", f"--logfile={workdir}/engine.log",
                             "pushengine", "--port", f"tcp:{port}:interface=127.0.0.1"],
                            cwd=workdir)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            Client(port).call("stats.online")
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the engine did not start")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=10.0)
    args = p.parse_args()
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
