"""One node per core: pushengine on one node and on two nodes behind haproxy,
beside nginx+nchan with one worker and with two, on the same machine and in
the same run.

    python bench/cores.py                       # ~15 minutes on 2 cores
    python bench/cores.py --quick               # small N, a couple of minutes
    python bench/cores.py --configs pushengine:1,pushengine:2 --groups held

Configurations (``--configs``, comma-separated):

- ``pushengine:1``: one ``twistd -n pushengine`` node, the loadgen connecting
  to it directly;
- ``pushengine:2``: two nodes on the same machine behind haproxy, configured
  from deploy/haproxy.cfg.in as docs/deploy.md shows (``balance url_param
  session``, consistent hashing; calls without ``?session=`` -- the
  WebSocket upgrades, ``session.create``, ``/api/publish`` -- go round
  robin);
- ``pushengine:1+haproxy``: one node behind the same haproxy (what haproxy
  alone costs);
- ``nchan:1``, ``nchan:2``: nginx+nchan with ``worker_processes`` 1 and 2
  (two workers listen with ``reuseport``, so the kernel spreads the
  connections between them).

Every pushengine node runs with the same options whatever the configuration:
``--amqp`` (an exchange of the run's own on the RabbitMQ at 127.0.0.1:5672:
two nodes need it to see every change, and one node takes its changes the
same way so that the comparison is fair; ``/api/publish`` on either node
publishes into it), ``--redis`` and ``--memcache`` on a private Redis and a
private memcached that the script starts on ports of its own (sessions
created on one node and called on the other resume from Redis, as in a real
deployment), and the driver's benchmark options (pings off, per-client limits
off).

Groups (``--groups``), each run through ``bench/driver.py``'s ``run_one``
with ``bench/loadgen.py`` as the driver uses it:

- ``held``: N idle WebSocket streams (5,000 and 9,000): memory per stream
  and idle CPU;
- ``fanout``: N WebSocket streams on one shared view (9,000 x 1/s and x
  10/s): p50/p99 latency, lost events, CPU while publishing;

9,000 and not 10,000: haproxy holds two descriptors per stream (the
client's, the node's) and cannot raise its own limit above the hard
``RLIMIT_NOFILE``, 20,000 on this kind of machine, so it takes 9,950 at
most; every configuration runs the same N.
- ``answers``: ``session.get_events`` answers per second with 10 events
  waiting (100 sessions polling back to back; nchan: the same long-poll).

Besides the driver's figures (the server's processes summed: both nodes and
haproxy, or nginx's master and workers), each configuration's processes are
sampled one by one, so that the table says what haproxy costs beside the
nodes. The loadgen's CPU is reported per run and a run where one of its
processes passed 60 % of a core is marked LOADGEN-BOUND, as the driver does.
The load average is printed before and after every run.

The script stops by itself, kills every process it started and deletes its
exchanges and queues. Results: ``bench/results/cores-<time>.json``.
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import driver  # noqa: E402
from fleet import PrivateMemcached, PrivateRedis, haproxy_config, wait_port  # noqa: E402
from loadgen import proc_sample  # noqa: E402
import nchan as nchan_mod  # noqa: E402
from scenarios import NCHAN, PUSHENGINE, Run  # noqa: E402



def haproxy_maxconn() -> int:
    """The most connections haproxy can take here: it needs two descriptors
    for each (the client's and the node's) and cannot raise its limit above
    the hard RLIMIT_NOFILE (20,000 on this kind of machine: 9,950 streams)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        return 100_000
    return max(1000, (hard - 100) // 2)


# -- configurations --------------------------------------------------------------
def parse_configs(text: str) -> list[tuple[str, int, bool]]:
    """``pushengine:2,nchan:1,pushengine:1+haproxy`` -> (server, processes,
    behind haproxy). Two or more engine nodes are always behind haproxy."""
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        server, _, rest = item.partition(":")
        count, plus, extra = rest.partition("+")
        if server not in (PUSHENGINE, NCHAN) or not count.isdigit() or int(count) < 1:
            raise ValueError(f"not a configuration: {item!r} (pushengine:N, nchan:N)")
        if plus and (extra != "haproxy" or server != PUSHENGINE):
            raise ValueError(f"only pushengine:N+haproxy is known, not {item!r}")
        n = int(count)
        out.append((server, n, server == PUSHENGINE and (n > 1 or bool(plus))))
    return out


def config_label(server: str, n: int, balanced: bool) -> str:
    if server == NCHAN:
        return f"nchan:{n}"
    return f"pushengine:{n}" + ("+haproxy" if balanced and n == 1 else "")


class Components(threading.Thread):
    """RSS and CPU of each named process (a name may cover several pids),
    every 0.25 s, to split a configuration's cost between its parts."""

    def __init__(self, parts: dict[str, list[int]]) -> None:
        super().__init__(daemon=True)
        self.parts = parts
        self.samples: list[tuple[float, dict[str, tuple[int, float]]]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            now = time.time()
            each = {}
            for name, pids in self.parts.items():
                got = [s for s in map(proc_sample, pids) if s]
                each[name] = (sum(s[0] for s in got), sum(s[1] for s in got))
            self.samples.append((now, each))
            self.stopped.wait(0.25)

    def stop(self) -> None:
        self.stopped.set()
        self.join(5)

    def window(self, start: float | None, end: float | None) -> dict[str, dict[str, float]]:
        return component_figures(self.samples, start, end)


def component_figures(samples: list[tuple[float, dict[str, tuple[int, float]]]],
                      start: float | None, end: float | None) -> dict[str, dict[str, float]]:
    """Per part: its CPU (percent of a core) between two instants, its RSS
    at the end of them and how much it grew from the first sample."""
    if start is None or end is None or end <= start:
        return {}
    pts = [s for s in samples if start <= s[0] <= end]
    if len(pts) < 2:
        return {}
    first, last = pts[0], pts[-1]
    span = last[0] - first[0]
    out = {}
    for name, (rss, cpu) in last[1].items():
        if name not in first[1]:
            continue
        out[name] = {"cpu_pct": 100.0 * (cpu - first[1][name][1]) / span,
                     "rss_kb": rss, "rss_growth_kb": rss - samples[0][1][name][0]}
    return out


class EngineCluster:
    """``nodes`` engine nodes (driver.EngineServer each, on the run's own
    exchange, the private Redis and memcached), behind haproxy when
    ``balanced``; what driver.run_one needs of a server."""

    name = PUSHENGINE

    def __init__(self, nodes: int, balanced: bool, timeout: float, redis: str,
                 memcache: str) -> None:
        self.exchange, tag = driver.amqp_names()
        self.node_ids = [f"{tag}-n{i + 1}" for i in range(nodes)]
        common = ["--amqp", driver.AMQP_URL, "--amqp-exchange", self.exchange,
                  "--redis", redis, "--memcache", memcache,
                  "--trusted-proxies", "127.0.0.1/32"]
        self.nodes = [driver.EngineServer(common + ["--node-id", nid], timeout=timeout)
                      for nid in self.node_ids]
        self.balanced = balanced
        self.port = driver.free_port() if balanced else self.nodes[0].port
        self.haproxy: subprocess.Popen | None = None
        self.tmp = tempfile.TemporaryDirectory(prefix="cores-haproxy-")
        self.parts: Components | None = None
        self.down: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "EngineCluster":
        try:
            for node in self.nodes:
                node.start()
            if self.balanced:
                self.start_haproxy()
        except BaseException:
            self.stop()
            raise
        parts = {f"node{i + 1}": n.pids() for i, n in enumerate(self.nodes)}
        if self.haproxy is not None:
            parts["haproxy"] = [self.haproxy.pid]
        self.parts = Components(parts)
        self.parts.start()
        return self

    def start_haproxy(self) -> None:
        config = Path(self.tmp.name) / "haproxy.cfg"
        self.haproxy_log = open(Path(self.tmp.name) / "haproxy.log", "wb")
        config.write_text(haproxy_config(
            f"127.0.0.1:{self.port}",
            [(nid, f"127.0.0.1:{n.port}") for nid, n in zip(self.node_ids, self.nodes)],
            timeout="120s", maxconn=haproxy_maxconn()))
        self.haproxy = subprocess.Popen(["haproxy", "-f", str(config), "-db"],
                                        stdout=subprocess.DEVNULL,
                                        stderr=self.haproxy_log,
                                        start_new_session=True)
        wait_port(self.port, 10, "haproxy")
        # until haproxy's checks passed for every node: calls reach them all
        seen: set[str] = set()
        deadline = time.monotonic() + 15
        while seen != set(self.node_ids):
            if time.monotonic() > deadline:
                raise RuntimeError(f"haproxy reached only {sorted(seen)}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    seen.add(r.headers.get("X-Pushengine-Node", ""))
            except OSError:
                time.sleep(0.2)

    def pids(self) -> list[int]:
        pids = [p for n in self.nodes for p in n.pids()]
        return pids + ([self.haproxy.pid] if self.haproxy is not None else [])

    def metrics(self) -> dict[str, float]:
        """The nodes' figures, summed."""
        out: dict[str, float] = {}
        for node in self.nodes:
            for k, v in node.metrics().items():
                out[k] = out.get(k, 0.0) + v
        return out

    def stop(self) -> None:
        if self.parts is not None:
            self.parts.stop()
        if self.haproxy is not None:
            nchan_mod.terminate(self.haproxy, grace=5)
            self.haproxy = None
            self.haproxy_log.close()
            # a node its health checks took out (its streams were cut): say so
            log = (Path(self.tmp.name) / "haproxy.log").read_text("utf-8", "replace")
            self.down = [line.strip() for line in log.splitlines() if " is DOWN" in line]
        for node in self.nodes:
            node.stop()
        driver.amqp_cleanup(self.exchange, *self.node_ids)
        self.tmp.cleanup()


class NchanWorkers(driver.NchanServer):
    """nginx+nchan with ``workers`` worker processes, its processes sampled
    one by one (the master and each worker)."""

    def __init__(self, timeout: float, workers: int) -> None:
        super().__init__(timeout, workers=workers)
        self.parts: Components | None = None

    def start(self) -> "NchanWorkers":
        super().start()
        self.parts = Components({"nginx": self.pids()})
        self.parts.start()
        return self

    def stop(self) -> None:
        if self.parts is not None:
            self.parts.stop()
        super().stop()


# -- runs ------------------------------------------------------------------------
def runs(groups: set[str], quick: bool) -> list[Run]:
    """The loads, as the driver's Runs (their target is set per configuration)."""
    out: list[Run] = []
    held = [1000, 2000] if quick else [5000, 9000]
    fan = [(1000, 10)] if quick else [(9000, 1), (9000, 10)]
    if "held" in groups:
        out += [Run("held", PUSHENGINE, n, transport="ws", timeout=8 if quick else 12)
                for n in held]
    if "fanout" in groups:
        out += [Run("fanout", PUSHENGINE, n, transport="ws", rate=r,
                    duration=5 if quick else 10, timeout=30, drain=15, quiet=4)
                for n, r in fan]
    if "answers" in groups:
        out.append(Run("answers", PUSHENGINE, 100, duration=4 if quick else 8, workers=2,
                       note="10 events waiting, polls back to back"))
    return out


def window(r: dict) -> tuple[float | None, float | None]:
    """The instants a run's figures are taken between (as the driver takes them)."""
    ph = r.get("loadgen", {}).get("phases", {})
    if r["group"] == "held":
        return ph.get("idle_from"), ph.get("idle_to")
    if r["group"] == "answers":
        return ph.get("connected"), ph.get("answers_end")
    return ph.get("publish_start"), ph.get("publish_end")


def figures(r: dict) -> dict[str, float | None]:
    """The figures of one run that the table compares."""
    if "error" in r:
        return {}
    lg = r["loadgen"]
    parts = r.get("parts", {})
    proxy = parts.get("haproxy", {})
    out: dict[str, float | None] = {}
    if r["group"] == "held":
        n = max(1, lg["connected"])
        out["KB/stream"] = (r["bytes_per_session"] or 0) / 1024
        out["haproxy KB/stream"] = (proxy["rss_growth_kb"] / n) if proxy else None
        out["idle CPU %"] = r.get("cpu_idle_pct")
        out["streams open"] = lg["held"]["open"]
        out["setup s"] = lg.get("setup_seconds")
    elif r["group"] == "answers":
        out["answers/s"] = lg.get("answers_per_s")
        out["CPU %"] = r.get("cpu_pct")
    else:
        lat = lg["latency"]
        out["p50 ms"] = None if lat.get("p50") is None else lat["p50"] * 1000
        out["p99 ms"] = None if lat.get("p99") is None else lat["p99"] * 1000
        out["lost"] = lg.get("lost")
        out["events/s"] = lg.get("events_per_s")
        out["CPU %"] = r.get("cpu_pct")
        out["events/CPU-s"] = r.get("events_per_cpu_s")
    if r["group"] != "held":
        out["haproxy CPU %"] = proxy.get("cpu_pct") if proxy else None
    out["loadgen CPU %"] = lg.get("loadgen_cpu_pct")
    return out


# which way is better, for the ratios' reading: figures not listed are counts
LOWER_IS_BETTER = {"KB/stream", "haproxy KB/stream", "idle CPU %", "setup s", "p50 ms",
                   "p99 ms", "lost", "CPU %", "haproxy CPU %", "loadgen CPU %"}
RATIOS = (("pushengine 2:1", "pushengine:2", "pushengine:1"),
          ("nchan 2:1", "nchan:2", "nchan:1"),
          ("pushengine/nchan, 1", "pushengine:1", "nchan:1"),
          ("pushengine/nchan, 2", "pushengine:2", "nchan:2"))


def table(results: list[dict]) -> list[dict]:
    """One row per (run, figure): each configuration's value and the ratios
    (two to one of each server, pushengine to nchan at one and at two
    processes). ``bound`` lists the configurations whose run was loadgen-bound."""
    by_run: dict[str, dict[str, dict]] = {}
    order: list[str] = []
    for r in results:
        if r["name"] not in by_run:
            order.append(r["name"])
        by_run.setdefault(r["name"], {})[r["config"]] = r
    rows = []
    for name in order:
        runs_of = by_run[name]
        figs = {c: figures(r) for c, r in runs_of.items()}
        bound = sorted(c for c, r in runs_of.items()
                       if r.get("loadgen", {}).get("loadgen_bound"))
        failed = sorted(c for c, r in runs_of.items() if "error" in r)
        keys: list[str] = []
        for f in figs.values():
            keys += [k for k in f if k not in keys]
        if not keys:   # every configuration failed: a row that says so
            rows.append({"run": name, "figure": "-", "values": {}, "ratios": {},
                         "bound": bound, "failed": failed})
        for k in keys:
            values = {c: f.get(k) for c, f in figs.items()}
            ratios = {}
            for label, a, b in RATIOS:
                va, vb = values.get(a), values.get(b)
                if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and vb:
                    ratios[label] = va / vb
            rows.append({"run": name, "figure": k, "values": values, "ratios": ratios,
                         "bound": bound, "failed": failed})
    return rows


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:,.1f}" if abs(v) >= 1 or v == 0 else f"{v:.2f}"


def print_table(rows: list[dict], configs: list[str]) -> None:
    labels = [label for label, a, b in RATIOS if a in configs and b in configs]
    head = ["run", "figure", *configs, *labels]
    print("\n| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    last = ""
    for row in rows:
        run = row["run"] if row["run"] != last else ""
        if run and row["bound"]:
            run += f" (LOADGEN-BOUND: {', '.join(row['bound'])})"
        if run and row["failed"]:
            run += f" (FAILED: {', '.join(row['failed'])})"
        last = row["run"]
        cells = [run, row["figure"], *(fmt(row["values"].get(c)) for c in configs),
                 *(("x" + format(row["ratios"][lb], ".2f")) if lb in row["ratios"] else "-"
                   for lb in labels)]
        print("| " + " | ".join(cells) + " |")


# -- main ------------------------------------------------------------------------
def make(server: str, n: int, balanced: bool, run: Run, redis: str, memcache: str):
    if server == NCHAN:
        return NchanWorkers(run.timeout, n)
    return EngineCluster(n, balanced, run.timeout, redis, memcache)


def run_config(run: Run, server: str, n: int, balanced: bool, redis: str,
               memcache: str, quiet: bool) -> dict[str, Any]:
    label = config_label(server, n, balanced)
    run.target = server
    srv = make(server, n, balanced, run, redis, memcache)
    try:
        r = driver.run_one(run, quiet=quiet, server=srv)
    except Exception as e:  # a failed run is a row, not the end of the benchmark
        r = {"name": run.name, "group": run.group, "target": server,
             "transport": run.transport, "error": f"{type(e).__name__}: {e}"}
    r["config"] = label
    if getattr(srv, "down", None):
        r["haproxy_down"] = srv.down
    if "error" not in r and srv.parts is not None:
        r["parts"] = srv.parts.window(*window(r))
    return r


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", default="pushengine:1,pushengine:2,nchan:1,nchan:2")
    p.add_argument("--groups", default="held,fanout,answers")
    p.add_argument("--quick", action="store_true", help="small N, short runs")
    p.add_argument("--out", default="", help="results file (default bench/results/cores-<time>.json)")
    p.add_argument("--quiet", action="store_true", help="no live line from the loadgen")
    p.add_argument("--redis-port", type=int, default=0, help="the private Redis (default: free)")
    p.add_argument("--memcache-port", type=int, default=0)
    a = p.parse_args()
    configs = parse_configs(a.configs)
    labels = [config_label(*c) for c in configs]
    groups = {g for g in a.groups.split(",") if g}
    driver.raise_nofile()
    signal.signal(signal.SIGTERM, driver.exit_on_signal)
    atexit.register(driver.stop_everything)
    if any(s == NCHAN for s, _, _ in configs):
        nchan_mod.ensure_installed()
    if any(s == PUSHENGINE for s, _, _ in configs):
        why = driver.amqp_unavailable()
        if why:
            sys.exit(f"the engine's configurations need RabbitMQ: {why}")
    os.makedirs(driver.RESULTS, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = a.out or os.path.join(driver.RESULTS, f"cores-{stamp}.json")
    workdir = tempfile.TemporaryDirectory(prefix="cores-")
    redis = PrivateRedis(a.redis_port or driver.free_port(), Path(workdir.name))
    memcached = PrivateMemcached(a.memcache_port or driver.free_port())
    results: list[dict] = []
    doc: dict[str, Any] = {"machine": driver.machine(), "configs": labels, "started": stamp,
                           "runs": results}
    t0 = time.time()
    try:
        redis.start()
        memcached.start()
        for run in runs(groups, a.quick):
            for server, n, balanced in configs:
                label = config_label(server, n, balanced)
                print(f"== {label} {run.name} (load average {os.getloadavg()[0]:.2f})",
                      file=sys.stderr, flush=True)
                r = run_config(run, server, n, balanced, redis.url, memcached.address,
                               a.quiet)
                results.append(r)
                print(f"[{label}] " + driver.describe(r)
                      + "".join(f" | {k} CPU {v['cpu_pct']:.0f} %"
                                for k, v in r.get("parts", {}).items())
                      + f" | load average {r.get('loadavg_before', 0):.2f}"
                        f" -> {r.get('loadavg_after', 0):.2f}", flush=True)
                for line in r.get("haproxy_down", []):
                    print(f"  haproxy: {line}", flush=True)
                with open(out, "w") as f:
                    json.dump(doc, f, indent=1, default=str)
    finally:
        driver.stop_everything()
        memcached.kill()
        redis.stop()
        workdir.cleanup()
    doc["seconds"] = time.time() - t0
    doc["table"] = table(results)
    print_table(doc["table"], labels)
    loads = [r[k] for r in results for k in ("loadavg_before", "loadavg_after") if k in r]
    if loads:
        print(f"\nload average over the runs: {min(loads):.2f}-{max(loads):.2f}")
    with open(out, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    print(f"results: {out} ({doc['seconds'] / 60:.1f} min)")


if __name__ == "__main__":
    main()
