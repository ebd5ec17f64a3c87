"""Processes for the fault, soak and one-node-per-core benchmarks
(bench/faults.py, bench/soak.py, bench/cores.py).

A private Redis and a private memcached on ports of their own, in a temporary
directory (so that restarting or killing them touches nobody else's), engine
nodes started as ``twistd -n pushengine`` with this checkout first on
``PYTHONPATH``, haproxy from deploy/haproxy.cfg.in, the RSS and CPU of a
process from ``/proc``, and the errors a node wrote to its log. Everything
listens on 127.0.0.1.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_port(port: int, deadline: float, what: str, up: bool = True) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if listening(port) == up:
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not {'listen' if up else 'stop listening'} on {port}")


class PrivateRedis:
    """A redis-server of our own: no persistence, as the shared one runs."""

    def __init__(self, port: int, workdir: Path) -> None:
        self.port = port
        self.dir = workdir / f"redis-{port}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.url = f"redis://127.0.0.1:{port}/0"

    def start(self) -> None:
        if listening(self.port):
            raise RuntimeError(f"port {self.port} is taken: choose another with --redis-port")
        subprocess.run(["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1",
                        "--port", str(self.port), "--save", "", "--appendonly", "no",
                        "--dir", str(self.dir), "--logfile", str(self.dir / "redis.log"),
                        "--pidfile", str(self.dir / "redis.pid")], check=True)
        wait_port(self.port, 10, "redis-server")

    def stop(self) -> None:
        """SHUTDOWN NOSAVE, the port free again."""
        if listening(self.port):
            subprocess.run(["redis-cli", "-p", str(self.port), "shutdown", "nosave"],
                           capture_output=True, timeout=10)
            wait_port(self.port, 10, "redis-server", up=False)


class PrivateMemcached:
    def __init__(self, port: int) -> None:
        self.port = port
        self.process: subprocess.Popen | None = None
        self.address = f"127.0.0.1:{port}"

    def start(self) -> None:
        if listening(self.port):
            raise RuntimeError(f"port {self.port} is taken: choose another with --memcache-port")
        args = ["memcached", "-l", "127.0.0.1", "-p", str(self.port), "-U", "0", "-m", "64"]
        if os.geteuid() == 0:
            args += ["-u", "root"]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        wait_port(self.port, 10, "memcached")

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
        self.process = None


def twistd() -> str:
    path = Path(sys.executable).with_name("twistd")
    return str(path) if path.exists() else shutil.which("twistd") or "twistd"


class EngineNode:
    """One ``twistd -n pushengine`` on a fixed port; started again on the
    same port and node id after a kill."""

    def __init__(self, workdir: Path, name: str, port: int, *args: str) -> None:
        self.name = name
        self.port = port
        self.dir = workdir / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = self.dir / "twistd.log"
        self.args = list(args)
        self.process: subprocess.Popen | None = None
        self.out = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PUSHENGINE_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.out = open(self.dir / "stdout.log", "ab")
        self.process = subprocess.Popen(
            [twistd(), "-n", "--pidfile=", f"--logfile={self.log}", "pushengine",
             "--port", f"tcp:{self.port}:backlog=4096:interface=127.0.0.1",
             "--node-id", self.name, *self.args],
            cwd=str(self.dir), env=env, stdout=self.out, stderr=subprocess.STDOUT)

    def wait_ready(self, deadline: float = 30.0) -> None:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health",
                                            timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} not healthy in {deadline} s: {self.log_text()[-2000:]}")

    def sigkill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self.out is not None:
            self.out.close()
            self.out = None

    def log_text(self) -> str:
        try:
            return self.log.read_text("utf-8", "replace")
        except OSError:
            return ""


def haproxy_config(bind: str, servers: list[tuple[str, str]], timeout: str,
                   check_inter: str = "2s", maxconn: int = 8000) -> str:
    """deploy/haproxy.cfg.in filled in (the same rendering as the cluster test)."""
    sys.path.insert(0, str(ROOT))
    from tests.cluster.processes import haproxy_config as render
    return render(bind, servers, timeout=timeout, check_inter=check_inter, maxconn=maxconn)


# -- /proc -----------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mb(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20


# -- the log ---------------------------------------------------------------------
# twistd's text log writes "[namespace#level]" for every event of a Logger
ERROR_LINE = re.compile(r"#(error|critical)\]|Traceback|Unhandled [Ee]rror")


def log_errors(texts: list[str]) -> list[str]:
    """The lines at error or critical level, and those with a traceback."""
    return [line for text in texts for line in text.splitlines() if ERROR_LINE.search(line)]
