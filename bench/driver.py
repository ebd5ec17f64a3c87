"""Benchmark driver: pushengine side by side with nginx+nchan and Socket.IO.

    python bench/driver.py                      # the full suite (~50 min on 2 cores)
    python bench/driver.py --suite quick        # smaller N, a few minutes
    python bench/driver.py --suite targets      # issue 10: 10,000 streams, held streams
    python bench/driver.py --suite longpoll-targets   # the lean HTTP path's targets
    python bench/driver.py --suite peers        # WebSocket fan-out on the three servers
    python bench/driver.py --transports sse,ws   # only the streaming runs (longpoll, sse, ws)
    python bench/driver.py --only fanout        # a group: held, answers, fanout, users, amqp
    python bench/driver.py --only held --sessions 10000
    python bench/driver.py --profile            # the engine under py-spy (scenarios 2, 3)
    python bench/driver.py --suite longpoll-targets --only fanout --targets pushengine \
        --server-cpus 0 --loadgen-cpus 0 --spy  # a slowed engine, profiled: see below

For every run it starts the server afresh (``twistd -n pushengine`` with a
temporary log, nginx+nchan from ``bench/nchan.py``, or Socket.IO on Node from
``bench/socketio_peer.py``), samples its RSS and CPU from /proc every 0.25 s
(the server's own figures -- the engine's /metrics, nchan's stub status,
Socket.IO's /status -- every second in the held runs, else at each phase),
runs ``bench/loadgen.py`` as a separate process, stops everything, and prints
a row. At the end it prints each pushengine figure with its ratio to each
peer's, the deliveries per second at saturation of every server, and the
targets with what each reached, then writes ``bench/results/<time>.json``
(and ``latest.json``); ``bench/plot.py`` draws them.

``--server-cpus`` and ``--loadgen-cpus`` pin the server (every process and
thread of it) and the load generator (its processes inherit it) to CPU lists
in taskset's form ("0", "0,2", "1-3"): the engine put on a core that the
load generator shares runs as on a slower machine, where fan-out falls
behind (×6.05 of nchan's p99 on one machine, ×1.30 on a faster one).
``--spy`` runs ``py-spy record`` on the engine during each run's measured
window (publishing; the answers of an answers run; the wait of a held run)
and prints its hottest functions; the speedscope file goes to
``bench/results/profile-<time>/``.

``--repeat N`` runs the whole list N times over, in rounds (each scenario's
servers one after the other within a round, as without it). Each pushengine
run is compared with its peers' runs of the same round, and a target is
judged on the median round, with every round's figure and in how many it
was met printed beside it: one run's p99 ratio can swing by ×2 on a shared
two-core machine.

Ratios are pushengine / peer: below 1 is better for memory, latency and CPU,
above 1 is better for answers and deliveries per second. A run where a
loadgen process passed 60 % of a core is marked LOADGEN-BOUND: its figures
may be the loadgen's, and no target is judged on it.
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import nchan as nchan_mod  # noqa: E402
from loadgen import LOADGEN_BOUND_PCT, proc_sample  # noqa: E402
import socketio_peer as sio_mod  # noqa: E402
from scenarios import (NCHAN, PEERS, PUSHENGINE, SOCKETIO, Run, Target,  # noqa: E402
                       profile_suite, suite, targets as all_targets)

RESULTS = os.path.join(HERE, "results")
LIVE: list = []   # servers and loadgen processes running now: stopped on any exit
AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


_PORTS_GIVEN: set[int] = set()


def free_port() -> int:
    """A port nothing listens on and that this process has not handed out
    before: servers made together (bench/routing.py's nodes) are given
    their ports before any of them binds, and the kernel may offer one
    twice."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _PORTS_GIVEN:
            _PORTS_GIVEN.add(port)
            return port


def cpu_list(text: str) -> set[int]:
    """taskset's CPU list form: "0", "0,2", "1-3", "0-1,3" (empty: none)."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"not a CPU list: {text!r}")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"not a CPU list: {text!r}")
        cpus.update(range(first, last + 1))
    return cpus


def pin(pid: int, cpus: set[int]) -> None:
    """Put every thread of process ``pid`` on ``cpus`` (taskset -a -p)."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:
            pass                         # a thread that ended meanwhile


def engine_env() -> dict[str, str]:
    """The engine runs from this checkout, not from whatever version of the
    package is installed beside twistd: PYTHONPATH puts the work tree first."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    return env


def engine_source() -> str:
    """Where the engine process imports ``pushengine`` from (with engine_env)."""
    try:
        return subprocess.run([sys.executable, "-c",
                               "import pushengine, os; "
                               "print(os.path.dirname(pushengine.__file__))"],
                              env=engine_env(), cwd=tempfile.gettempdir(),
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def port_open(port: int) -> bool:
    """Something accepts connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_http(url: str, seconds: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {seconds} s")


# ---------------------------------------------------------------------------
# servers


class EngineServer:
    """``twistd -n pushengine`` on a free port, with a temporary log."""

    name = PUSHENGINE

    def __init__(self, extra: list[str] | None = None, timeout: float = 30.0) -> None:
        self.port = free_port()
        self.extra = extra or []
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        self.tmp = tempfile.TemporaryDirectory(prefix="pushengine-bench-")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        twistd = shutil.which("twistd", path=os.path.dirname(sys.executable)) or "twistd"
        return [twistd, "-n", "--pidfile=", f"--logfile={self.tmp.name}/engine.log",
                "pushengine", "--port", f"tcp:{self.port}:backlog=4096:interface=127.0.0.1",
                "--max-timeout", f"{max(60, self.timeout + 10):g}",
                "--session-timeout", "120", "--ping-interval", "3600",
                # every simulated client shares 127.0.0.1: the per-client
                # limits (docs/hardening.md) would measure themselves
                "--client-rate", "0", "--max-client-sessions", "0",
                "--max-client-connections", "0", *self.extra]

    def start(self) -> "EngineServer":
        raise_nofile()  # inherited by the child: its `ulimit -n`
        while port_open(self.port):     # taken since: another server would answer /health
            self.port = free_port()
        self.proc = subprocess.Popen(self.command(), cwd=self.tmp.name, env=engine_env(),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        try:
            wait_http(self.url + "/health", 30, self.proc)
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited with {self.proc.returncode}")
        except RuntimeError as e:
            err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
            log = self.log_tail()
            self.stop()
            raise RuntimeError(f"the engine did not start ({e}): {err.strip()[-600:]}"
                               f" {log.strip()[-600:]}") from None
        return self

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc is not None else []

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        try:
            text = urllib.request.urlopen(self.url + "/metrics", timeout=2).read().decode()
        except OSError:
            return out
        for line in text.splitlines():
            if line.startswith("pushengine_") and "{" in line:
                name, _, rest = line.partition("{")
                try:
                    out[name] = out.get(name, 0.0) + float(rest.rsplit(" ", 1)[1])
                except ValueError:
                    pass
        if "pushengine_polls_waiting" in out:
            out["polls_waiting"] = out["pushengine_polls_waiting"]
        if "pushengine_streams" in out:
            out["streams_open"] = out["pushengine_streams"]
        return out

    def log_tail(self) -> str:
        try:
            with open(os.path.join(self.tmp.name, "engine.log")) as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def stop(self) -> None:
        nchan_mod.terminate(self.proc, grace=15)
        self.proc = None
        self.tmp.cleanup()


class PeerServer:
    """A peer (nginx+nchan, Socket.IO) on a free port: what the driver needs
    of a server, from the peer's own module."""

    name = ""

    def __init__(self, peer) -> None:
        self.peer = peer

    @property
    def url(self) -> str:
        return self.peer.url

    def start(self) -> "PeerServer":
        self.peer.start()
        return self

    def pids(self) -> list[int]:
        return self.peer.pids()

    def stop(self) -> None:
        self.peer.stop()


class NchanServer(PeerServer):
    name = NCHAN

    def __init__(self, timeout: float, workers: int = 1) -> None:
        super().__init__(nchan_mod.Nchan(free_port(), timeout=timeout, workers=workers))

    def metrics(self) -> dict[str, float]:
        """nchan_stub_status figures, named like the engine's where they match."""
        try:
            text = urllib.request.urlopen(self.url + "/nchan_status", timeout=2).read().decode()
        except OSError:
            return {}
        out = {}
        for line in text.splitlines():
            name, _, value = line.partition(":")
            try:
                out["nchan_" + name.strip().replace(" ", "_")] = float(value.split()[0])
            except (ValueError, IndexError):
                pass
        if "nchan_subscribers" in out:
            # every kind of subscriber: long-polls, EventSource and WebSocket
            out["polls_waiting"] = out["streams_open"] = out["nchan_subscribers"]
        return out


class SocketioServer(PeerServer):
    name = SOCKETIO

    def __init__(self, args: list[str] | None = None) -> None:
        super().__init__(sio_mod.SocketIO(free_port(), list(args or [])))

    def metrics(self) -> dict[str, float]:
        """Socket.IO's /status, named like the engine's where they match."""
        try:
            status = self.peer.status()
        except (OSError, ValueError):
            return {}
        out = {f"socketio_{k}": float(v) for k, v in status.items()
               if isinstance(v, (int, float))}
        if "socketio_subscribers" in out:
            out["polls_waiting"] = out["streams_open"] = out["socketio_subscribers"]
        return out


def make_server(run: Run, amqp: tuple[str, str] | None):
    if run.target == NCHAN:
        return NchanServer(run.timeout)
    if run.target == SOCKETIO:
        return SocketioServer(run.peer_args)
    return EngineServer(run.engine_args + (amqp_engine_args(*amqp) if amqp else []),
                        timeout=run.timeout)


_amqp_runs = 0


def amqp_names() -> tuple[str, str]:
    """A throw-away exchange and node id: the bench never publishes into the
    exchange other engines on this broker use."""
    global _amqp_runs
    _amqp_runs += 1
    tag = f"{os.getpid()}-{int(time.time())}-{_amqp_runs}"
    return f"pushengine.bench.{tag}", f"bench-{tag}"


def amqp_cleanup(exchange: str, *nodes: str) -> None:
    """Delete the run's exchange and its nodes' queues (pushengine.node.<node>)."""
    try:
        import pika
        conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
        ch = conn.channel()
        for node in nodes:
            ch.queue_delete(f"pushengine.node.{node}")
        ch.exchange_delete(exchange)
        conn.close()
    except Exception as e:  # best effort: the queue expires by itself
        print(f"  (could not delete {exchange}: {e!r})", file=sys.stderr)


def amqp_engine_args(exchange: str, node: str) -> list[str]:
    return ["--amqp", AMQP_URL, "--amqp-exchange", exchange, "--node-id", node]


def amqp_unavailable() -> str | None:
    """Why the AMQP scenario cannot run here, or None."""
    try:
        import pika  # noqa: F401
    except ImportError:
        return "pika is not installed (pip install pika)"
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=1).close()
    except OSError:
        return "RabbitMQ is not reachable on 127.0.0.1:5672"
    exchange, node = amqp_names()
    probe = EngineServer(amqp_engine_args(exchange, node))
    try:
        probe.start()
    except RuntimeError as e:
        return f"the engine's --amqp does not work in this build ({str(e)[-200:]})"
    finally:
        probe.stop()
        amqp_cleanup(exchange, node)
    return None


# ---------------------------------------------------------------------------
# sampling


class Sampler(threading.Thread):
    """Samples the server's processes (RSS, CPU) and the engine's metrics."""

    def __init__(self, server, interval: float = 0.25, metrics_every: float = 1.0,
                 until: tuple[str, float] | None = None) -> None:
        super().__init__(daemon=True)
        self.server = server
        # /metrics costs the engine a walk over its sessions and views: scraped
        # every second only where needed (held: when are all polls parked),
        # else at phases; with ``until`` (a gauge and a value), no more once
        # the gauge reached it, so that an idle window measures no scrapes
        self.metrics_every = metrics_every
        self.until = until
        self.lock = threading.Lock()
        self.client_pid: int | None = None     # the loadgen, and its workers
        # (at, CPU seconds of all the loadgen's processes, of each)
        self.client: list[tuple[float, float, dict[int, float]]] = []
        self.interval = interval
        self.samples: list[tuple[float, int, float]] = []
        self.metrics: list[tuple[float, dict]] = []
        self.stopped = threading.Event()

    def sample(self) -> tuple[float, int, float]:
        rss = 0
        cpu = 0.0
        for pid in self.server.pids():
            s = proc_sample(pid)
            if s:
                rss += s[0]
                cpu += s[1]
        return time.time(), rss, cpu

    def run(self) -> None:
        last_metrics = 0.0
        while not self.stopped.is_set():
            if self.metrics_every and time.time() - last_metrics >= self.metrics_every:
                last_metrics = time.time()
                self.snap_metrics()
            self.samples.append(self.sample())
            if self.client_pid:
                each = {}
                for p in [self.client_pid, *nchan_mod.children(self.client_pid)]:
                    s = proc_sample(p)
                    if s:
                        each[p] = s[1]
                self.client.append((time.time(), sum(each.values()), each))
            self.stopped.wait(self.interval)

    def snap_metrics(self) -> None:
        at = time.time()
        m = self.server.metrics()
        if m:
            with self.lock:
                self.metrics.append((at, m))
                self.metrics.sort(key=lambda x: x[0])
            if self.until is not None and m.get(self.until[0], -1) >= self.until[1]:
                self.metrics_every = 0.0

    def stop(self) -> None:
        self.stopped.set()
        self.join(5)

    # -- figures ------------------------------------------------------------------
    def cpu_pct(self, start: float | None, end: float | None) -> float | None:
        if start is None or end is None or end <= start:
            return None
        pts = [s for s in self.samples if start <= s[0] <= end]
        if len(pts) < 2:
            return None
        return 100.0 * (pts[-1][2] - pts[0][2]) / (pts[-1][0] - pts[0][0])

    def cpu_seconds(self, start: float, end: float) -> float | None:
        """The server's CPU seconds between two instants (nearest samples
        outside them)."""
        before = [s for s in self.samples if s[0] <= start]
        after = [s for s in self.samples if s[0] >= end]
        first = before[-1] if before else (self.samples[0] if self.samples else None)
        last = after[0] if after else (self.samples[-1] if self.samples else None)
        if first is None or last is None or last[0] <= first[0]:
            return None
        return last[2] - first[2]

    def client_cpu_pct(self, start: float | None, end: float | None) -> float | None:
        if start is None or end is None:
            return None
        pts = [s for s in self.client if start <= s[0] <= end]
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            return None
        return 100.0 * (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])

    def client_cpu_max_pct(self, start: float | None, end: float | None) -> float | None:
        """The busiest loadgen process's percent of a core between two instants."""
        if start is None or end is None:
            return None
        pts = [s for s in self.client if start <= s[0] <= end]
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            return None
        first, last = pts[0][2], pts[-1][2]
        span = pts[-1][0] - pts[0][0]
        shares = [100.0 * (last[p] - first[p]) / span for p in last if p in first]
        return max(shares) if shares else None

    def rss_kb(self, start: float | None, end: float | None) -> int | None:
        if start is None or end is None:
            return None
        pts = [s[1] for s in self.samples if start <= s[0] <= end]
        return max(pts) if pts else None

    def reached(self, name: str, value: float, start: float, end: float) -> float | None:
        """When a metric first reached ``value`` between two instants."""
        for t, m in self.metrics:
            if start <= t <= end and m.get(name, -1) >= value:
                return t
        return None

    def metric_rate(self, name: str, start: float | None, end: float | None) -> float | None:
        if start is None or end is None:
            return None
        pts = [(t, m[name]) for t, m in self.metrics if start - 1 <= t <= end + 1 and name in m]
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            return None
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


# ---------------------------------------------------------------------------
# one run


class Profiler:
    """py-spy attached to the engine during a run's measured window."""

    def __init__(self, pid: int, path: str, seconds: float) -> None:
        self.pid, self.path, self.seconds = pid, path, seconds
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        spy = shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy")
        if spy is None:
            print("  (py-spy is not installed: pip install py-spy; no profile)", file=sys.stderr)
            return
        self.proc = subprocess.Popen(
            [spy, "record", "--pid", str(self.pid), "--duration", str(int(self.seconds)),
             "--rate", "100", "--native", "--format", "speedscope", "-o", self.path],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait(self) -> str | None:
        if self.proc is None:
            return None
        try:
            self.proc.wait(self.seconds + 30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        return self.path if os.path.exists(self.path) else None


def stop_everything() -> None:
    while LIVE:
        thing = LIVE.pop()
        try:
            if isinstance(thing, subprocess.Popen):
                if thing.poll() is None:
                    thing.terminate()
                    thing.wait(10)
            else:
                thing.stop()
        except Exception as e:  # keep stopping the others
            print(f"  (stopping {thing}: {e})", file=sys.stderr)


def exit_on_signal(signum, frame) -> None:
    raise SystemExit(128 + signum)


LOADGEN = os.path.join(HERE, "loadgen.py")


def spy_window(run: Run) -> tuple[str, float]:
    """The loadgen phase that starts a run's measured window, and its length."""
    if run.group == "answers":
        return "connected", run.duration
    if run.group == "held":
        return "set_up", run.timeout + 2
    return "publish_start", run.duration


def run_one(run: Run, quiet: bool = False, profile_dir: str | None = None,
            loadgen: str = LOADGEN, server=None, server_cpus: str = "",
            loadgen_cpus: str = "", spy: bool = False) -> dict[str, Any]:
    """One run: its server started fresh, sampled while ``loadgen`` (this
    checkout's, or another version's to compare) makes the load. ``server``:
    a server not started yet, instead of the run's own (``url``, ``start``,
    ``stop``, ``pids``, ``metrics``: bench/cores.py's cluster).
    ``server_cpus``, ``loadgen_cpus``: CPU lists to pin each to (``cpu_list``);
    ``spy``: py-spy on the engine during the measured window (``spy_window``),
    its file in ``profile_dir``."""
    server_set = cpu_list(server_cpus)
    loadgen_set = cpu_list(loadgen_cpus)
    amqp = amqp_names() if run.group == "amqp" and server is None else None
    if server is None:
        server = make_server(run, amqp)
    LIVE.append(server)
    try:
        server.start()
    except BaseException:
        LIVE.remove(server)
        if amqp:
            amqp_cleanup(*amqp)
        raise
    if server_set:
        for pid in server.pids():
            pin(pid, server_set)
    held_gauge = "polls_waiting" if run.transport == "longpoll" else "streams_open"
    sampler = Sampler(server, metrics_every=1.0 if run.group == "held" else 0.0,
                      until=(held_gauge, run.sessions) if run.group == "held" else None)
    result: dict[str, Any] = {"name": run.name, "group": run.group, "target": run.target,
                              "transport": run.transport, "loadgen_path": loadgen,
                              "sessions": run.sessions, "subs": run.subs, "rate": run.rate,
                              "batch": run.batch, "note": run.note,
                              # the machine is shared: how busy it was around the run
                              "loadavg_before": os.getloadavg()[0]}
    if server_set:
        # as the kernel has it, not as asked
        result["server_cpus"] = sorted(set().union(
            *(os.sched_getaffinity(pid) for pid in server.pids())))
    if loadgen_set:
        result["loadgen_cpus"] = sorted(loadgen_set)
    profiler: Profiler | None = None
    spying = (spy or run.profile) and profile_dir is not None and run.target == PUSHENGINE
    spy_phase, spy_seconds = spy_window(run) if spy else ("publish_start", run.duration)
    pause = 0.2 if run.fast else 1.0
    try:
        time.sleep(pause)
        sampler.start()
        time.sleep(pause)
        base = sampler.sample()
        with tempfile.TemporaryDirectory(prefix="loadgen-") as tmp:
            out = os.path.join(tmp, "result.json")
            cmd = [sys.executable, loadgen,
                   *run.loadgen_args(server.url), "--json-out", out, "--phase-lines"]
            if amqp:
                cmd += ["--amqp", AMQP_URL, "--exchange", amqp[0]]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL if quiet else None, text=True,
                                    # its worker processes inherit the pinning
                                    preexec_fn=(lambda: os.sched_setaffinity(0, loadgen_set))
                                    if loadgen_set else None)
            sampler.client_pid = proc.pid
            LIVE.append(proc)
            for line in proc.stdout:
                if line.startswith("PHASE"):
                    sampler.snap_metrics()   # the figures at each phase boundary
                if spying and profiler is None and line.startswith(f"PHASE {spy_phase} "):
                    assert profile_dir is not None
                    safe = run.name.replace("/s", "ps").replace("/", "-")
                    path = os.path.join(profile_dir, f"{safe}.speedscope.json")
                    profiler = Profiler(server.pids()[0], path, max(1.0, spy_seconds))
                    profiler.start()
            proc.wait()
            LIVE.remove(proc)
            if proc.returncode != 0 or not os.path.exists(out):
                raise RuntimeError(f"the loadgen failed with {proc.returncode}")
            with open(out) as f:
                lg = json.load(f)
        time.sleep(0.1 if run.fast else 0.3)
    finally:
        if sampler.is_alive():
            sampler.stop()
        metrics_end = server.metrics()
        stop_everything()
        if amqp:
            amqp_cleanup(*amqp)
    result["loadavg_after"] = os.getloadavg()[0]
    if profiler is not None:
        result["profile"] = profiler.wait()
    ph = lg["phases"]
    result["loadgen"] = lg
    result["rss_base_kb"] = base[1]
    if run.group == "answers":
        result["cpu_pct"] = sampler.cpu_pct(ph["connected"], ph["answers_end"])
        lg["loadgen_cpu_pct"] = sampler.client_cpu_pct(ph["connected"], ph["answers_end"])
    elif run.group == "held":
        # idle once the server has parked every poll / taken every stream (its
        # own count says so)
        parked = sampler.reached(held_gauge, lg["connected"], ph["set_up"], ph["idle_to"])
        result["parked_seconds"] = parked - ph["set_up"] if parked else None
        if parked:
            ph["idle_from"] = max(ph["idle_from"], parked + 0.5)
        else:
            ph["idle_from"] = ph["idle_to"]   # never all parked: no idle window
        rss = sampler.rss_kb(ph["connected"], ph.get("idle_to"))
        result["rss_held_kb"] = rss
        result["bytes_per_session"] = ((rss - base[1]) * 1024 / max(1, lg["connected"])
                                       if rss else None)
        result["cpu_idle_pct"] = sampler.cpu_pct(ph.get("idle_from"), ph.get("idle_to"))
        result["cpu_setup_pct"] = sampler.cpu_pct(ph["start"], ph["connected"])
        h = lg["held"]
        if run.transport == "longpoll":
            result["held_ok"] = h["on_time"] == lg["connected"] == run.sessions
        else:
            result["held_ok"] = h["open"] == lg["connected"] == run.sessions
    else:
        start, end = ph.get("publish_start"), ph.get("publish_end")
        result["cpu_pct"] = sampler.cpu_pct(start, end)
        result["rss_peak_kb"] = sampler.rss_kb(ph["start"], ph["end"])
        result["bytes_per_session"] = (((result["rss_peak_kb"] or 0) - base[1]) * 1024
                                       / max(1, lg["connected"]))
        result["changes_per_s"] = sampler.metric_rate("pushengine_changes_total", start, end)
        result["events_out_per_s"] = sampler.metric_rate("pushengine_events_out_total",
                                                         start, ph.get("drained"))
        # the server's CPU from the first change to the last event received,
        # and the events delivered per CPU-second it spent on them
        last = lg.get("last_event_at") or 0
        if start and last > start:
            cpu_s = sampler.cpu_seconds(start, last)
            result["server_cpu_seconds"] = cpu_s
            result["events_per_cpu_s"] = lg["events"] / cpu_s if cpu_s else None
        # the loadgen's processes, from /proc (percent of one core)
        lg["loadgen_cpu_pct"] = sampler.client_cpu_pct(start, end)
    if "loadgen_processes" not in lg:
        # a loadgen that does not measure its own processes (an older
        # version, to compare): the busiest of them from the driver's samples
        window = {"answers": ("connected", "answers_end"),
                  "held": ("connected", "answered")}.get(run.group,
                                                         ("publish_start", "publish_end"))
        top = sampler.client_cpu_max_pct(ph.get(window[0]), ph.get(window[1]))
        lg["loadgen_cpu_max_pct"] = top
        lg["loadgen_bound"] = top is not None and top > LOADGEN_BOUND_PCT
    result["metrics_end"] = metrics_end
    return result


# ---------------------------------------------------------------------------
# reporting


def ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 1000:,.1f} ms" if v < 10 else f"{v:,.1f} s"


def num(v: float | None, fmt: str = ",.0f") -> str:
    return "-" if v is None else format(v, fmt)


def row_figures(r: dict) -> dict[str, float | None]:
    """The figures compared between the servers, by run group."""
    lg = r.get("loadgen", {})
    lat = lg.get("latency", {})
    if r["group"] == "held":
        out = {"KB/session": (r["bytes_per_session"] or 0) / 1024,
               "idle CPU %": r.get("cpu_idle_pct"),
               "setup s": lg.get("setup_seconds")}
        h = lg.get("held", {})
        if not is_stream(r) and h.get("max") is not None:
            out["last late s"] = h["max"] - lg.get("timeout", 0)
        return out
    if r["group"] == "answers":
        return {"answers/s": lg.get("answers_per_s"), "CPU %": r.get("cpu_pct"),
                "loadgen CPU %": lg.get("loadgen_cpu_pct")}
    if r["group"] in ("users", "amqp"):
        return {"p50": lat.get("p50"), "p99": lat.get("p99"), "lost": lg.get("lost"),
                "published/s": lg.get("publish_rate"),
                "changes delivered/s": lg.get("events_per_s"),
                "answers/s": lg.get("answers_per_s"), "CPU %": r.get("cpu_pct")}
    per_cpu = r.get("events_per_cpu_s")
    return {"p50": lat.get("p50"), "p99": lat.get("p99"), "max": lat.get("max"),
            "lost": lg.get("lost"), "CPU %": r.get("cpu_pct"),
            "answers/s": lg.get("answers_per_s"),
            "events/s": lg.get("events_per_s"),
            "peak events/s": lg.get("delivered_per_s_peak"),
            "events/CPU-s": per_cpu,
            "CPU us/event": 1e6 / per_cpu if per_cpu else None,
            "changes/s": lg.get("publish_rate"),
            "setup s": lg.get("setup_seconds")}


def loadgen_note(lg: dict) -> str:
    """The loadgen's busiest process, and the flag when it may be the figure."""
    top = lg.get("loadgen_cpu_max_pct")
    text = f" | loadgen CPU {num(lg.get('loadgen_cpu_pct'), '.0f')} %"
    if top is not None:
        text += f" (busiest process {top:.0f} %)"
    if lg.get("loadgen_bound"):
        text += " LOADGEN-BOUND"
    if lg.get("setup_loadgen_bound"):
        text += " (set-up loadgen-bound)"
    return text


def describe(r: dict) -> str:
    if "error" in r:
        return f"{r['target']:<10} {r['name']:<24} FAILED: {r['error']}"
    lg = r["loadgen"]
    if r["group"] == "answers":
        return (f"{r['target']:<10} {r['name']:<24} {lg['connected']:,} sessions"
                f" | {num(lg.get('answers_per_s'))} answers/s with events waiting"
                f" ({num(lg.get('answer_bytes'))} bytes each)"
                f" | CPU {num(r.get('cpu_pct'), '.0f')} %" + loadgen_note(lg))
    if r["group"] == "held" and is_stream(r):
        h = lg["held"]
        return (f"{r['target']:<10} {r['name']:<24} held {lg['connected']:,}/{r['sessions']:,}"
                f" streams | still open after {h['seconds']:.0f} s: {h['open']:,}"
                f" (closed by the server {h['closed']:,})"
                f" | {num((r['bytes_per_session'] or 0) / 1024, ',.1f')} KB/stream"
                f" | idle CPU {num(r['cpu_idle_pct'], '.1f')} %"
                f" | all taken after {num(r.get('parked_seconds'), '.1f')} s"
                f" | setup {lg['setup_seconds']:.1f} s" + loadgen_note(lg))
    if r["group"] == "held":
        h = lg["held"]
        return (f"{r['target']:<10} {r['name']:<24} held {lg['connected']:,}/{r['sessions']:,}"
                f" | answered at timeout {h['on_time']:,} (early {h['early']}, late {h['late']},"
                f" {num(h['min'], '.2f')}-{num(h['max'], '.2f')} s)"
                f" | {num((r['bytes_per_session'] or 0) / 1024, ',.1f')} KB/session"
                f" | idle CPU {num(r['cpu_idle_pct'], '.1f')} %"
                f" | setup {lg['setup_seconds']:.1f} s" + loadgen_note(lg))
    lat = lg["latency"]
    rate = lg.get("publish_rate")
    behind = " FELL BEHIND" if lg.get("saturated") else ""
    return (f"{r['target']:<10} {r['name']:<24} {lg['connected']:,} sessions"
            f" (set up in {lg['setup_seconds']:.1f} s)"
            f" | published {num(rate, ',.1f' if (rate or 0) < 10 else ',.0f')}/s"
            f" | p50 {ms(lat['p50'])} p99 {ms(lat['p99'])} max {ms(lat['max'])}"
            f" | lost {lg.get('lost', 0):,} dup {lg['duplicates']:,} resets {lg['resets']:,}"
            f" | CPU {num(r.get('cpu_pct'), '.0f')} %"
            f" | answers {num(lg.get('answers_per_s'), ',.0f')}/s"
            f" | delivered {num(lg.get('events_per_s'), ',.0f')}/s"
            f" (peak {num(lg.get('delivered_per_s_peak'), ',.0f')}/s{behind};"
            f" {num(r.get('events_per_cpu_s'), ',.0f')}/CPU-s)" + loadgen_note(lg))


def is_stream(r: dict) -> bool:
    return r.get("transport", "longpoll") != "longpoll"


def run_key(r: dict) -> tuple:
    """What a pushengine run and its peers' runs have in common (Run.key),
    and the round of ``--repeat`` it belongs to: a pushengine run is
    compared with its peers' runs of the same round."""
    return (r["group"], r.get("transport", "longpoll"), r["sessions"], r["subs"],
            r["rate"], r["batch"], r.get("repeat", 0))


def peer_runs(results: list[dict]) -> dict[tuple, dict]:
    """The peers' runs that did not fail, by (server, run key)."""
    return {(r["target"], run_key(r)): r for r in results
            if r["target"] in PEERS and "error" not in r}


def compare(results: list[dict]) -> list[dict]:
    """Each pushengine run with its peers' (nchan, Socket.IO): figures and
    ratios (``ratios[peer]``; ``ratio`` is nchan's)."""
    peers = peer_runs(results)
    rows = []
    for r in results:
        if r["target"] != PUSHENGINE or "error" in r:
            continue
        mine = row_figures(r)
        row: dict[str, Any] = {"name": r["name"] + (f" #{r['repeat'] + 1}" if r.get("repeat")
                                                    is not None else ""),
                               "group": r["group"],
                               "transport": r.get("transport", "longpoll"),
                               "pushengine": mine, "ratios": {},
                               "loadgen_bound": [PUSHENGINE] if r["loadgen"].get(
                                   "loadgen_bound") else []}
        for peer in PEERS:
            other = peers.get((peer, run_key(r)))
            theirs = row_figures(other) if other else {}
            ratios = {}
            for k, v in mine.items():
                o = theirs.get(k)
                if isinstance(v, (int, float)) and isinstance(o, (int, float)) and o:
                    ratios[k] = v / o
            row[peer] = theirs
            row["ratios"][peer] = ratios
            if other and other["loadgen"].get("loadgen_bound"):
                row["loadgen_bound"].append(peer)
        row["ratio"] = row["ratios"][NCHAN]
        rows.append(row)
    return rows


def fmt_fig(k: str, v: Any) -> str:
    if v is None:
        return "-"
    if k in ("p50", "p99", "max"):
        return ms(v)
    if k in ("lost",):
        return f"{int(v):,}"
    if k in ("KB/session", "idle CPU %", "CPU %", "setup s", "loadgen CPU %", "last late s",
             "CPU us/event"):
        return f"{v:,.1f}"
    return f"{v:,.0f}"


def print_comparison(rows: list[dict]) -> None:
    print("\npushengine vs its peers (ratio = pushengine / peer)")
    for row in rows:
        parts = []
        for k, v in row["pushengine"].items():
            cell = f"{k} {fmt_fig(k, v)}"
            peers = []
            for peer in PEERS:
                if not row.get(peer):
                    continue
                text = f"{peer} {fmt_fig(k, row[peer].get(k))}"
                if k in row["ratios"][peer]:
                    text += f" x{row['ratios'][peer][k]:.2f}"
                peers.append(text)
            if peers:
                cell += " [" + ", ".join(peers) + "]"
            parts.append(cell)
        bound = (f" (LOADGEN-BOUND: {', '.join(row['loadgen_bound'])})"
                 if row.get("loadgen_bound") else "")
        print(f"  {row['name']:<28}{bound} " + " | ".join(parts))


def saturation(results: list[dict]) -> list[dict]:
    """Per server and transport: the most events delivered per second in any
    fan-out run (a server that fell behind there delivered all it could: its
    rate at saturation), the server's CPU per delivered event in that run,
    idle memory per connection in its largest held run, and how long its
    largest fan-out took to set up."""
    out = []
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in results:
        if "error" not in r and r["group"] in ("fanout", "held"):
            groups[(r["target"], r.get("transport", "longpoll"))].append(r)
    for (target, transport), runs in sorted(groups.items()):
        fan = [r for r in runs if r["group"] == "fanout"]
        held = [r for r in runs if r["group"] == "held"]
        row: dict[str, Any] = {"target": target, "transport": transport}
        if fan:
            best = max(fan, key=lambda r: r["loadgen"].get("events_per_s") or 0)
            peak = max(fan, key=lambda r: r["loadgen"].get("delivered_per_s_peak") or 0)
            largest = max(fan, key=lambda r: (r["sessions"], r["rate"]))
            per_cpu = best.get("events_per_cpu_s")
            row.update({
                "delivered_per_s": best["loadgen"].get("events_per_s"), "in": best["name"],
                "peak_per_s": peak["loadgen"].get("delivered_per_s_peak"),
                "peak_in": peak["name"],
                "saturated": best["loadgen"].get("saturated"),
                "fell_behind_in": [r["name"] for r in fan if r["loadgen"].get("saturated")],
                "cpu_us_per_event": 1e6 / per_cpu if per_cpu else None,
                "loadgen_bound_in": [r["name"] for r in fan if r["loadgen"].get("loadgen_bound")],
                "setup_seconds": largest["loadgen"].get("setup_seconds"),
                "setup_sessions": largest["sessions"]})
        if held:
            big = max(held, key=lambda r: r["sessions"])
            row.update({"held_kb": (big.get("bytes_per_session") or 0) / 1024,
                        "held_sessions": big["sessions"],
                        "held_setup_seconds": big["loadgen"].get("setup_seconds")})
        out.append(row)
    return out


def print_saturation(rows: list[dict]) -> None:
    print("\ndeliveries per second at saturation (the most in any fan-out run; a server that"
          " fell behind there delivered all it could)")
    for row in rows:
        parts = []
        if "delivered_per_s" in row:
            state = ("fell behind" if row["saturated"] else "kept up")
            parts.append(f"{num(row['delivered_per_s'])}/s in {row['in']} ({state};"
                         f" 2-s peak {num(row['peak_per_s'])}/s in {row['peak_in']})"
                         f" | server CPU {num(row['cpu_us_per_event'], ',.1f')} us/event"
                         f" | {row['setup_sessions']:,} set up in"
                         f" {num(row['setup_seconds'], ',.1f')} s")
            if row["fell_behind_in"]:
                parts.append("fell behind in " + ", ".join(row["fell_behind_in"]))
            if row["loadgen_bound_in"]:
                parts.append("LOADGEN-BOUND in " + ", ".join(row["loadgen_bound_in"]))
        if "held_kb" in row:
            parts.append(f"idle {row['held_kb']:,.1f} KB/connection at"
                         f" {row['held_sessions']:,} held")
        print(f"  {row['transport']:<8} {row['target']:<10} " + " | ".join(parts))


def hold_targets(results: list[dict], targets: list[Target]) -> list[dict]:
    """Every target whose run is in the results: the figure reached, the
    peers' figures of the same run, and whether it is met. A run (or the
    peer run a ratio needs) whose loadgen was the bottleneck is not judged.
    With ``--repeat``, every round of the run is held to the target with
    its peers' runs of the same round, and the verdict is the median's
    (``rounds``: each round's value; ``met_in``: in how many it was met)."""
    peers = peer_runs(results)
    out = []
    for t in targets:
        rounds = [judge(t, run, peers) for run in results
                  if "error" not in run and t.matches(run)]
        if not rounds:
            continue
        if len(rounds) == 1:
            out.append(rounds[0])
            continue
        judged = [r for r in rounds if r["verdict"] in ("met", "missed")]
        row = dict(rounds[0])
        row["rounds"] = [r["ratio"] if t.versus else r["value"] for r in rounds]
        row["met_in"] = f"{sum(r['verdict'] == 'met' for r in judged)} of {len(judged)}"
        if judged:
            middle = sorted(judged, key=lambda r: r["ratio"] if t.versus else r["value"])
            median = middle[(len(middle) - 1) // 2] if len(middle) % 2 else None
            if median is None:      # an even count: the mean of the middle two
                a, b = middle[len(middle) // 2 - 1], middle[len(middle) // 2]
                key = "ratio" if t.versus else "value"
                median = dict(a, **{key: (a[key] + b[key]) / 2})
                value = median[key]
                met = value >= t.limit if t.above else value < t.limit
                median["verdict"] = "met" if met else "missed"
            lost = sum(r["lost"] or 0 for r in judged) if t.nothing_lost else None
            row.update(value=median["value"], ratio=median["ratio"], lost=lost,
                       peers=median["peers"], run=median["run"],
                       verdict="missed" if lost else median["verdict"])
        out.append(row)
    return out


def judge(t: Target, run: dict, peers: dict[tuple, dict]) -> dict:
    """One run held to one target, with its peers' runs of the same round."""
    figure = row_figures(run).get(t.figure)
    value = figure
    others = {p: peers.get((p, run_key(run))) for p in PEERS}
    versus = others.get(t.versus) if t.versus else None
    if t.versus:
        theirs = row_figures(versus).get(t.figure) if versus else None
        value = figure / theirs if figure is not None and theirs else None
    lost = run["loadgen"].get("lost")
    bound = [r["target"] for r in (run, versus)
             if r is not None and r["loadgen"].get("loadgen_bound")]
    if value is None:
        verdict = "not measured"
    elif bound:
        verdict = f"not judged: loadgen-bound ({', '.join(bound)})"
    else:
        met = value >= t.limit if t.above else value < t.limit
        if t.nothing_lost and lost:
            met = False
        verdict = "met" if met else "missed"
    return {"target": t.text, "run": run["name"], "figure": t.figure,
            "value": figure, "ratio_to": t.versus or None,
            "ratio": value if t.versus else None, "limit": t.limit,
            "lost": lost if t.nothing_lost else None, "verdict": verdict,
            "peers": {p: row_figures(o).get(t.figure) for p, o in others.items() if o}}


def print_targets(rows: list[dict]) -> None:
    if not rows:
        return
    print("\ntargets (a run whose loadgen was the bottleneck is not judged)")
    for row in rows:
        reached = f"{row['figure']} {fmt_fig(row['figure'], row['value'])}"
        if row["ratio_to"]:
            reached += f" (x{row['ratio']:.2f} {row['ratio_to']}'s)" if row["ratio"] else ""
        if row["lost"] is not None:
            reached += f", lost {row['lost']:,}"
        peers = ", ".join(f"{p} {fmt_fig(row['figure'], v)}" for p, v in row["peers"].items())
        if row.get("rounds"):
            each = ", ".join("-" if v is None else (f"x{v:.2f}" if row["ratio_to"]
                                                     else fmt_fig(row["figure"], v))
                             for v in row["rounds"])
            reached = (f"median of {len(row['rounds'])} rounds: {reached}; each: {each}; "
                       f"met in {row['met_in']}")
        print(f"  {row['target']}: {reached} -> {row['verdict']}"
              + (f" [{peers}]" if peers else "") + f"  ({row['run']})")


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"cores": os.cpu_count(), "python": platform.python_version(),
                            "kernel": platform.release()}
    try:
        import twisted
        info["twisted"] = twisted.__version__
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as f:
            info["memory_gib"] = round(int(f.readline().split()[1]) / 1024 / 1024, 1)
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((line.split(":", 1)[1].strip() for line in f
                                if line.startswith("model name")), "")
    except OSError:
        pass
    try:
        info["nginx"] = subprocess.run(["nginx", "-v"], capture_output=True,
                                       text=True).stderr.strip().split("/")[-1]
        info["nchan"] = subprocess.run(["dpkg-query", "-W", "-f=${Version}",
                                        "libnginx-mod-nchan"], capture_output=True,
                                       text=True).stdout.strip()
    except OSError:
        pass
    info["node"] = sio_mod.node_version()
    info["socketio"] = sio_mod.version()
    try:
        import loadgen
        info["loadgen_event_loop"] = loadgen.event_loop_name()
    except ImportError:
        pass
    info["nofile_hard"] = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    info["engine_source"] = engine_source()
    try:
        info["engine_commit"] = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
            text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return info


# ---------------------------------------------------------------------------
# profiles


def top_functions(speedscope_path: str, n: int = 15) -> dict[str, Any]:
    """Self and inclusive share of the samples per function of a py-spy
    profile, and for the hottest ones the nearest pushengine caller."""
    with open(speedscope_path) as f:
        data = json.load(f)
    frames = data["shared"]["frames"]

    def label(i: int) -> str:
        fr = frames[i]
        file = fr.get("file", "")
        if "pushengine/" in file:
            file = "pushengine/" + file.rsplit("pushengine/", 1)[1]
        else:
            for marker in ("site-packages/", "/lib/python3.11/"):
                if marker in file:
                    file = file.split(marker, 1)[1]
        return f"{file}:{fr['name']}"
    labels = [label(i) for i in range(len(frames))]
    ours = [lb.startswith("pushengine/") for lb in labels]
    self_c: Counter = Counter()
    incl: Counter = Counter()
    callers: dict[str, Counter] = defaultdict(Counter)
    total = 0.0
    for prof in data["profiles"]:
        for stack, w in zip(prof["samples"], prof["weights"]):
            if not stack:
                continue
            total += w
            leaf = labels[stack[-1]]
            self_c[leaf] += w
            for name in {labels[i] for i in stack}:
                incl[name] += w
            caller = next((labels[i] for i in reversed(stack[:-1]) if ours[i]), None)
            if caller:
                callers[leaf][caller] += w
    total = total or 1.0
    return {"seconds_sampled": total,
            "self": [(k, 100.0 * v / total,
                      [(c, 100.0 * cv / total) for c, cv in callers[k].most_common(2)])
                     for k, v in self_c.most_common(n)],
            "inclusive": [(k, 100.0 * v / total) for k, v in incl.most_common(n * 4)],
            "pushengine_inclusive": [(k, 100.0 * v / total) for k, v in incl.most_common()
                                     if k.startswith("pushengine/")][:n * 2]}


# ---------------------------------------------------------------------------


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", choices=["full", "quick", "targets", "longpoll-targets", "peers",
                                       "smoke"], default="full")
    p.add_argument("--only", default="", help="groups to run, comma-separated")
    p.add_argument("--targets", default="pushengine,nchan,socketio",
                   help="servers to run, comma-separated")
    p.add_argument("--transports", default="longpoll,sse,ws",
                   help="how sessions receive events: longpoll, sse, ws (comma-separated)")
    p.add_argument("--sessions", type=int, default=0, help="only runs with this many sessions")
    p.add_argument("--rates", default="", help="only runs at these changes/s, comma-separated")
    p.add_argument("--profile", action="store_true",
                   help="run the profile scenarios with py-spy attached to the engine")
    p.add_argument("--server-cpus", default="",
                   help="pin the server to these CPUs (taskset's list form: 0, 0-1, 0,2)")
    p.add_argument("--loadgen-cpus", default="",
                   help="pin the load generator to these CPUs")
    p.add_argument("--spy", action="store_true",
                   help="run py-spy record on the engine during each run's measured window")
    p.add_argument("--out", default="", help="results file (default bench/results/<time>.json)")
    p.add_argument("--quiet", action="store_true", help="no live line from the loadgen")
    p.add_argument("--repeat", type=int, default=1,
                   help="run the whole list N times over, in rounds; targets are judged "
                        "on the median round, each round against its peers' runs")
    p.add_argument("--loadgen", default=LOADGEN,
                   help="the load generator to run (another version's loadgen.py, to compare)")
    p.add_argument("--merge-into", default="",
                   help="put these runs into an earlier results file (replacing runs of "
                        "the same name and server) instead of a new one")
    a = p.parse_args()
    if a.repeat < 1:
        p.error("--repeat must be 1 or more")
    try:
        cpu_list(a.server_cpus), cpu_list(a.loadgen_cpus)
    except ValueError as e:
        p.error(str(e))
    raise_nofile()
    # Ctrl-C or a kill: every server and loadgen of the run is stopped on the way out
    signal.signal(signal.SIGTERM, exit_on_signal)
    atexit.register(stop_everything)
    runs = profile_suite() if a.profile else suite(a.suite)
    groups = {g for g in a.only.split(",") if g}
    targets = {t for t in a.targets.split(",") if t}
    transports = {t for t in a.transports.split(",") if t}
    try:
        rates = {float(x) for x in a.rates.split(",") if x}
    except ValueError:
        p.error("--rates takes numbers, comma-separated")
    runs = [r for r in runs if (not groups or r.group in groups) and r.target in targets
            and r.transport in transports and (not a.sessions or r.sessions == a.sessions)
            and (not rates or float(r.rate) in rates)]
    os.makedirs(RESULTS, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = a.out or os.path.join(RESULTS, f"{stamp}{'-profile' if a.profile else ''}.json")
    profile_dir = os.path.join(RESULTS, f"profile-{stamp}") if a.profile or a.spy else None
    if profile_dir:
        os.makedirs(profile_dir, exist_ok=True)

    skip: dict[str, str] = {}
    if any(r.target == NCHAN for r in runs):
        try:
            nchan_mod.ensure_installed()
        except (RuntimeError, subprocess.CalledProcessError) as e:
            skip[NCHAN] = f"nchan unavailable: {e}"
    if any(r.target == SOCKETIO for r in runs):
        try:
            sio_mod.ensure_installed()
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            skip[SOCKETIO] = f"Socket.IO unavailable: {e}"
    if any(r.group == "amqp" for r in runs):
        why = amqp_unavailable()
        if why:
            skip["amqp"] = why
    for k, why in skip.items():
        print(f"skipping the {k} runs: {why}", file=sys.stderr)
    source = engine_source()
    print(f"the engine runs from {source or '(pushengine cannot be imported)'}",
          file=sys.stderr)

    results: list[dict] = []
    doc: dict[str, Any] = {"machine": machine(), "suite": "profile" if a.profile else a.suite,
                           "started": stamp, "skipped": skip, "runs": results}
    t0 = time.time()
    rounds = [(i, run) for i in range(a.repeat) for run in runs]
    for i, run in rounds:
        if run.target in skip or run.group in skip:
            continue
        print(f"== {run.target} {run.name}" + (f" ({run.note})" if run.note else "")
              + (f" [round {i + 1} of {a.repeat}]" if a.repeat > 1 else ""),
              file=sys.stderr, flush=True)
        try:
            r = run_one(run, quiet=a.quiet, profile_dir=profile_dir, loadgen=a.loadgen,
                        server_cpus=a.server_cpus, loadgen_cpus=a.loadgen_cpus, spy=a.spy)
        except Exception as e:  # a failed run is a row, not the end of the suite
            r = {"name": run.name, "group": run.group, "target": run.target,
                 "transport": run.transport,
                 "sessions": run.sessions, "subs": run.subs, "rate": run.rate,
                 "batch": run.batch, "error": f"{type(e).__name__}: {e}"}
        if a.repeat > 1:
            r["repeat"] = i
        results.append(r)
        print(describe(r), flush=True)
        if r.get("profile"):
            r["top"] = top_functions(r["profile"])
            print(f"  profile {r['profile']}; hottest functions (self time, nearest"
                  f" pushengine caller):")
            for name, pct, via in r["top"]["self"][:12]:
                how = "; ".join(f"{c} {p:.1f} %" for c, p in via)
                print(f"    {pct:5.1f} %  {name}" + (f"  <- {how}" if how else ""))
            print("  pushengine functions (inclusive):")
            for name, pct in r["top"]["pushengine_inclusive"][:15]:
                print(f"    {pct:5.1f} %  {name}")
        with open(out, "w") as f:
            json.dump(doc, f, indent=1, default=str)
    doc["seconds"] = time.time() - t0
    if a.merge_into:
        with open(a.merge_into) as f:
            old = json.load(f)
        fresh = {(r["name"], r["target"], r.get("repeat")) for r in results}
        old["runs"] = [r for r in old["runs"]
                       if (r["name"], r["target"], r.get("repeat")) not in fresh]
        old["runs"] += results
        old.setdefault("merged", []).append({"started": stamp, "runs": sorted(fresh)})
        doc, out = old, a.merge_into
    doc["comparison"] = compare(doc["runs"])
    print_comparison(doc["comparison"])
    doc["saturation"] = saturation(doc["runs"])
    print_saturation(doc["saturation"])
    doc["targets"] = hold_targets(doc["runs"], all_targets())
    print_targets(doc["targets"])
    with open(out, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    if not a.profile and not a.merge_into:
        with open(os.path.join(RESULTS, "latest.json"), "w") as f:
            json.dump(doc, f, indent=1, default=str)
    print(f"\nresults: {out} ({doc['seconds'] / 60:.1f} min)")


if __name__ == "__main__":
    main()
