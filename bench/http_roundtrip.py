"""get_events round trips per second over HTTP, with events waiting, beside nchan.

    python bench/http_roundtrip.py [--seconds 10] [--connections 50] [--http fast|twisted] [--repeat N]
                                   [--baseline DIR]

Starts ``twistd -n pushengine`` on a free port, makes one session with 10
events waiting, then has wrk (a separate C process, one thread) POST
``session.get_events(sid, 0, 0)`` — ``ack`` 0 keeps the events queued, so every
answer carries them — and reports answers per second beside a bare
``GET /health`` for the fixed cost of one response. Then the same against
nginx+nchan (``bench/nchan.py``): 10 messages of the same size waiting on a
channel, wrk sending ``GET /sub/CH`` with the same ``If-Modified-Since`` each
time, so that every answer carries the 10 messages. Prints the ratio. wrk
reads faster than the Python loadgen of ``bench/driver.py``, whose nchan
figure is the loadgen's limit. Needs wrk.

Beside answers per second, each server's CPU while wrk ran (from /proc: the
engine's process, nginx's master and workers) gives its answers per
CPU-second, a figure per core that another process on the machine moves
less than the wall-clock rate. ``--baseline DIR``: another checkout of the
project (e.g. ``git worktree add`` of main) measured in the same pairs,
before this one, with its own ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import fleet  # bench/: /proc sampling shared with the cluster benchmarks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rpc(port: int, method: str, *params):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)})
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/jsonrpc", body.encode())
    return json.loads(urllib.request.urlopen(req, timeout=10).read())["result"]


def publish(port: int, changes: list) -> None:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/publish",
                                 json.dumps(changes).encode())
    urllib.request.urlopen(req, timeout=10).read()


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU of ``pids`` so far (from /proc)."""
    return sum(fleet.cpu_seconds(pid) for pid in pids)


def start_engine(port: int, workdir: str, *extra: str,
                 tree: str | None = None) -> subprocess.Popen:
    """``tree``: the checkout whose engine runs (PYTHONPATH), this one's by default."""
    twistd = shutil.which("twistd", path=os.path.dirname(sys.executable)) or "twistd"
    env = None if tree is None else dict(os.environ, PYTHONPATH=tree)
    proc = subprocess.Popen([twistd, "-n", "--pidfile=", f"--logfile={workdir}/engine.log",
                             "pushengine", "--port", f"tcp:{port}", "--client-rate", "0",
                             "--max-client-connections", "0",
                             *extra],
                            cwd=workdir, env=env)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the engine did not start")


def wrk(url: str, seconds: int, connections: int, script: str | None = None) -> float:
    return wrk_cpu(url, seconds, connections, script)[0]


def wrk_cpu(url: str, seconds: int, connections: int, script: str | None = None,
            pids: list[int] = ()) -> tuple[float, float | None]:
    """(answers per second, answers per CPU-second of ``pids`` while wrk ran)."""
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", url]
    if script:
        cmd[1:1] = ["-s", script]
    before = cpu_seconds(list(pids))
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    spent = cpu_seconds(list(pids)) - before
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    answers = int(re.search(r"(\d+) requests in", out).group(1))
    return rate, (answers / spent if pids and spent > 0 else None)


def nchan_answers(seconds: int, connections: int, size: int) -> tuple[float, float | None]:
    """wrk against nchan: 10 messages of ``size`` bytes waiting on a channel;
    (answers per second, answers per CPU-second of nginx)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from nchan import Nchan
    message = (b'{"n":0,"pad":"' + b"x" * max(0, size - 20) + b'"}')[:size]
    with Nchan(free_port(), timeout=30) as server:
        for _ in range(10):
            req = urllib.request.Request(server.url + "/pub/answers", message, method="POST")
            urllib.request.urlopen(req, timeout=10).read()
        with tempfile.TemporaryDirectory() as workdir:
            script = os.path.join(workdir, "get.lua")
            with open(script, "w") as f:
                f.write('wrk.headers["If-Modified-Since"] = "Thu, 01 Jan 1970 00:00:01 GMT"\n'
                        'wrk.headers["If-None-Match"] = "0"\n')
            probe = urllib.request.Request(server.url + "/sub/answers", headers={
                "If-Modified-Since": "Thu, 01 Jan 1970 00:00:01 GMT", "If-None-Match": "0"})
            body = urllib.request.urlopen(probe, timeout=10).read()
            if body.count(b'"n":0') != 10:
                raise SystemExit(f"nchan did not answer the 10 messages: {body[:200]!r}")
            return wrk_cpu(server.url + "/sub/answers", seconds, connections, script,
                           server.pids())


def engine_answers(a: argparse.Namespace,
                   tree: str | None = None) -> tuple[float, float, int, float | None]:
    """(GET /health answers/s, get_events answers/s, bytes per event,
    get_events answers per CPU-second) of a fresh engine (``tree``'s)."""
    with tempfile.TemporaryDirectory() as workdir:
        port = free_port()
        proc = start_engine(port, workdir, "--http", a.http, *a.engine.split(), tree=tree)
        try:
            sid = rpc(port, "session.create")
            rpc(port, "stream.subscribe_public_live", sid, 50)
            publish(port, [{"type": "Stream", "action": "upsert", "obj": {
                "id": i, "title": f"stream {i}", "user_id": 1, "live": True, "public": True,
                "created_at": f"2026-11-30T00:00:{i:02d}Z", "viewers": i}} for i in range(10)])
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session.get_events",
                               "params": [sid, 0, 0]})
            script = os.path.join(workdir, "post.lua")
            with open(script, "w") as f:
                f.write('wrk.method = "POST"\nwrk.body = %s\n'
                        'wrk.headers["Content-Type"] = "application/json"\n' % json.dumps(body))
            req = urllib.request.Request(f"http://127.0.0.1:{port}/api/jsonrpc", body.encode())
            answer = json.loads(urllib.request.urlopen(req, timeout=10).read())["result"]
            size = len(json.dumps(answer, ensure_ascii=False).encode()) // len(answer)
            health = wrk(f"http://127.0.0.1:{port}/health", a.seconds, a.connections)
            events, per_cpu = wrk_cpu(f"http://127.0.0.1:{port}/api/jsonrpc", a.seconds,
                                      a.connections, script, [proc.pid])
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
    return health, events, size, per_cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--connections", type=int, default=50)
    p.add_argument("--http", choices=["fast", "twisted"], default="fast")
    p.add_argument("--repeat", type=int, default=1,
                   help="pairs of runs (engine, then nchan), for the spread of the ratio")
    p.add_argument("--engine", default="", help="extra engine options, e.g. "
                   "'--memcache 127.0.0.1:11211'")
    p.add_argument("--baseline", help="another checkout of the project, measured in the "
                   "same pairs")
    a = p.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    trees: dict[str, str | None] = {"pushengine": None}
    if a.baseline:
        trees = {"baseline": os.path.abspath(a.baseline), "pushengine": None}
    ratios: dict[str, list[float]] = {f"{name} {kind}": [] for name in trees
                                      for kind in ("answers/s", "per CPU-second")}
    for _ in range(a.repeat):
        found = {}
        for name, tree in trees.items():
            health, events, size, per_cpu = engine_answers(a, tree)
            found[name] = (events, per_cpu)
            print(f"{name} --http {a.http}: GET /health {health:,.0f} answers/s; "
                  f"get_events with 10 events waiting {events:,.0f} answers/s "
                  f"(events of {size} bytes), {_per_cpu(per_cpu)}")
        peer, peer_cpu = nchan_answers(a.seconds, a.connections, size)
        print(f"nchan: GET /sub with 10 messages of {size} bytes waiting {peer:,.0f} answers/s, "
              f"{_per_cpu(peer_cpu)}")
        for name, (events, per_cpu) in found.items():
            ratios[f"{name} answers/s"].append(events / peer)
            line = f"ratio {name} / nchan: ×{events / peer:.2f}"
            if per_cpu is not None and peer_cpu is not None:
                ratios[f"{name} per CPU-second"].append(per_cpu / peer_cpu)
                line += f" (per CPU-second ×{per_cpu / peer_cpu:.2f})"
            print(line)
    if a.repeat > 1:
        for label, found_ratios in ratios.items():
            if found_ratios:
                found_ratios.sort()
                print(f"{label} / nchan, {len(found_ratios)} pairs: ×{found_ratios[0]:.2f} to "
                      f"×{found_ratios[-1]:.2f}, median ×{found_ratios[len(found_ratios) // 2]:.2f}")


def _per_cpu(per_cpu: float | None) -> str:
    return "CPU not measured" if per_cpu is None else f"{per_cpu:,.0f} answers per CPU-second"


if __name__ == "__main__":
    main()
