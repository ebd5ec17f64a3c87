"""Many nodes: how fast the clients of a dead node get going again, and what
the session registry costs a poll.

    python bench/cluster_resume.py [--clients 50] [--rounds 3] [--seconds 10]

1. Failover. Three ``twistd -n pushengine`` nodes (RabbitMQ, memcached,
   Redis) behind haproxy as deploy/haproxy.cfg.in configures it; ``--clients``
   long-polling clients (threads, tests/cluster/processes.py) subscribe
   through the balancer with ``?session=``; a publisher sends a change every
   50 ms. The node holding the most sessions is killed with SIGKILL; for each
   of its clients the time from the kill to the ``reset`` it receives from
   the node it moved to. ``--rounds`` fresh clusters; median and max over all
   moved clients. Also: whether every client's copy ended equal to the truth.

2. Cost. One node, 1,000 sessions with 10 events waiting each; wrk POSTs
   ``session.get_events(sid, 0, 0)`` cycling over the sessions (``ack`` 0
   keeps the events, so every answer carries them) for ``--seconds``:
   without ``--redis``; with it (the TTL refreshed at most every 10 s per
   session, the default); and with a refresh on every poll (what writing on
   every poll would cost). Each configuration runs ``--repeats`` times, in
   turns, each time on a fresh node alone (this machine's load drifts), and
   the medians are reported:
   answers per second, wrk's mean latency, the node's CPU time per answer
   (steadier than the rate on a shared machine), and the Redis commands per
   second the node caused. Then the hooks' own cost per poll measured in
   process (no HTTP, no Redis traffic), where it is not lost in the noise.

Needs RabbitMQ (127.0.0.1:5672), Redis (127.0.0.1:6379; databases 14 and 15
are flushed), memcached, haproxy and wrk. Everything listens on 127.0.0.1.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.http_roundtrip import free_port, rpc, start_engine  # noqa: E402
from bench.http_roundtrip import publish as publish_direct  # noqa: E402
from tests.cluster.processes import Client, Cluster, World, publish  # noqa: E402
from tests.cluster.resp import Resp  # noqa: E402

FAILOVER_DB, COST_DB = 14, 15


def failover_round(clients: int, workdir: Path) -> tuple[list[float], bool, int]:
    with Resp(db=FAILOVER_DB) as r:
        r("FLUSHDB")
    cluster = Cluster(workdir, nodes=3, redis_db=FAILOVER_DB, max_timeout=10,
                      extra=("--ping-interval", "3600"))
    cluster.start()
    try:
        world = World(seed=int(time.time()))
        publish(cluster.base, [world.change() for _ in range(40)])
        views = [("PublicLiveStreamView", "stream.subscribe_public_live", {}, 10),
                 ("UserStreamView", "stream.subscribe_user", {"user_id": 1}, 5),
                 ("UserStreamView", "stream.subscribe_user", {"user_id": 2}, 5)]
        pool = [Client(cluster.base, *views[i % 3], poll_timeout=8) for i in range(clients)]
        for c in pool:
            c.start()
        for c in pool:
            c.ready.wait(30)
        time.sleep(1.0)  # every client has a poll parked

        def stream(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                publish(cluster.base, [world.change()])
                time.sleep(0.05)
        stream(2)
        held = {n.name: n.metric("pushengine_sessions") for n in cluster.nodes}
        victim = max(cluster.nodes, key=lambda n: held[n.name])
        moving = [c for c in pool if c.node() == victim.name]
        killed = time.monotonic()
        victim.sigkill()
        stream(3)
        deadline = time.monotonic() + 20
        converged = False
        while time.monotonic() < deadline:
            if all(c.state() == c.truth(world) for c in pool):
                converged = True
                break
            time.sleep(0.1)
        delays = []
        for c in moving:
            after = [t for t, _ in c.resets if t >= killed]
            delays.append(min(after) - killed if after else float("inf"))
        errors = sum(len(c.rpc_errors) + len(c.violations) for c in pool)
        for c in pool:
            c.stopping.set()
        return delays, converged and errors == 0, len(moving)
    finally:
        cluster.stop()


def wrk_run(url: str, seconds: int, connections: int, script: str) -> tuple[float, float, int]:
    """Answers per second, mean latency (ms), answers."""
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", script, url],
                         capture_output=True, text=True, check=True).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    value, unit = re.search(r"Latency\s+([\d.]+)(us|ms|s)", out).groups()
    latency_ms = float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
    answers = int(re.search(r"(\d+) requests in", out).group(1))
    return rate, latency_ms, answers


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cost(seconds: int, connections: int, sessions: int, workdir: str,
         repeats: int) -> list[tuple]:
    """Each configuration ``repeats`` times, in turns, each time on a fresh
    node alone on the machine (this machine's load drifts, and even which of
    several idle nodes was started first showed in the figures); medians."""
    configs = [("without --redis", None),
               ("--redis, TTL refresh every 10 s", f"redis://127.0.0.1:6379/{COST_DB}"),
               ("--redis, refresh on every poll",
                f"redis://127.0.0.1:6379/{COST_DB}?refresh=0.000001")]
    results: dict[str, list[tuple[float, ...]]] = {c[0]: [] for c in configs}
    for turn in range(repeats):
        for label, redis in configs[turn % 3:] + configs[:turn % 3]:  # rotated
            results[label].append(measure(redis, seconds, connections, sessions, workdir))
    return [(label, *(statistics.median(r[i] for r in runs) for i in range(4)))
            for label, runs in results.items()]


def measure(redis: str | None, seconds: int, connections: int, sessions: int,
            workdir: str) -> tuple[float, ...]:
    """One fresh node: (answers/s, mean latency ms, Redis commands/s, CPU us/answer)."""
    with Resp(db=COST_DB) as r:
        r("FLUSHDB")
    port = free_port()
    extra = ["--ping-interval", "3600", "--node-id", f"bench-{port}"]
    if redis:
        extra += ["--redis", redis]
    node_dir = os.path.join(workdir, str(port))
    os.mkdir(node_dir)
    proc = start_engine(port, node_dir, *extra)
    try:
        time.sleep(0.5)
        sids = [rpc(port, "session.create") for _ in range(sessions)]
        for sid in sids:
            rpc(port, "stream.subscribe_public_live", sid, 50)
        publish_direct(port, [{"type": "Stream", "action": "upsert", "obj": {
            "id": i, "title": f"stream {i}", "user_id": 1, "live": True, "public": True,
            "created_at": f"2026-11-30T00:00:{i:02d}Z", "viewers": i}} for i in range(10)])
        script = os.path.join(node_dir, "poll.lua")
        with open(script, "w") as f:
            f.write("local sids = %s\nlocal i = 0\n"
                    "request = function()\n  i = i %% #sids + 1\n"
                    "  return wrk.format('POST', '/api/jsonrpc', "
                    "{['Content-Type'] = 'application/json'}, "
                    "'{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session.get_events\","
                    "\"params\":[\"' .. sids[i] .. '\",0,0]}')\nend\n"
                    % ("{" + ",".join(json.dumps(s) for s in sids) + "}"))
        before, cpu_before = redis_commands(), cpu_seconds(proc.pid)
        started = time.monotonic()
        rate, latency, answers = wrk_run(f"http://127.0.0.1:{port}/api/jsonrpc", seconds,
                                         connections, script)
        commands = (redis_commands() - before - 1) / (time.monotonic() - started)
        cpu_us = (cpu_seconds(proc.pid) - cpu_before) / max(1, answers) * 1e6
        return rate, latency, commands if redis else 0.0, cpu_us
    finally:
        proc.terminate()
        proc.wait(10)


def hook_cost(rounds: int = 15, polls: int = 50_000) -> tuple[float, float]:
    """The registry hooks' own CPU per poll, in process: ``get_events`` on a
    node without a registry and on one with the in-process registry (no
    refresh due), best of ``rounds`` interleaved runs, microseconds."""
    from tests.cluster.nodes import MemoryCluster
    from tests.http.harness import ClockNode

    def run(node) -> float:
        api = node.api
        sid = api.session_create()
        if not isinstance(sid, str):
            out: list = []
            sid.addCallback(out.append)
            sid = out[0]
        api.session_subscribe(sid, "PublicLiveStreamView", {}, 5)
        started = time.perf_counter()
        for _ in range(polls):
            api.session_get_events(None, sid, 0, None)
        return (time.perf_counter() - started) / polls * 1e6
    plain, clustered = ClockNode(), MemoryCluster(1).nodes[0]
    a, b = [], []
    for _ in range(rounds):
        a.append(run(plain))
        b.append(run(clustered))
    return min(a), min(b)


def redis_commands() -> int:
    """Commands Redis processed so far (those its scripts run included)."""
    with Resp() as r:
        return int(re.search(r"total_commands_processed:(\d+)", r("INFO", "stats")).group(1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--connections", type=int, default=10)
    p.add_argument("--sessions", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-failover", action="store_true")
    p.add_argument("--skip-cost", action="store_true")
    a = p.parse_args()
    for program in ("haproxy", "memcached", "wrk"):
        if not shutil.which(program):
            raise SystemExit(f"{program} is not installed")
    with tempfile.TemporaryDirectory() as workdir:
        if not a.skip_failover:
            delays: list[float] = []
            for n in range(a.rounds):
                d, ok, moved = failover_round(a.clients, Path(workdir) / f"round{n}")
                delays += d
                print(f"round {n + 1}: {moved} of {a.clients} clients on the killed node; "
                      f"reset after median {statistics.median(d) * 1000:.0f} ms, "
                      f"max {max(d) * 1000:.0f} ms; every copy equal to the truth: {ok}")
            print(f"failover over {len(delays)} moved clients: median "
                  f"{statistics.median(delays) * 1000:.0f} ms, max {max(delays) * 1000:.0f} ms")
        if not a.skip_cost:
            rows = cost(a.seconds, a.connections, a.sessions, workdir, a.repeats)
            print(f"get_events round trips, {a.sessions} sessions, {a.connections} connections, "
                  f"median of {a.repeats} turns of {a.seconds} s (Redis commands: those its "
                  f"scripts run included):")
            for label, rate, latency, commands, cpu_us in rows:
                print(f"  {label:32s} {rate:7,.0f} answers/s, mean {latency:5.2f} ms, "
                      f"node CPU {cpu_us:5.0f} us/answer ({cpu_us / rows[0][4]:5.1%}), "
                      f"Redis {commands:6,.0f} commands/s")
            plain, hooked = hook_cost()
            print(f"the hooks' check per poll, in process (API call, no HTTP): "
                  f"{plain:.2f} us without a registry, {hooked:.2f} us with one "
                  f"(+{hooked - plain:.2f} us)")


if __name__ == "__main__":
    main()
