"""nginx with the nchan module: the peer the benchmarks compare pushengine with.

    python bench/nchan.py [--port 8090] [--timeout 20] [--workers 1]   # in the foreground

Generates a configuration from ``bench/nchan.conf.in`` in a temporary
directory (one worker process unless told more, worker_connections and worker_rlimit_nofile
raised to the file limit, a long-poll subscriber location ``/sub/CHANNEL`` and
a publisher location ``/pub/CHANNEL``) and starts ``nginx -g 'daemon off;'``
on it. Installs the Debian packages ``nginx`` and ``libnginx-mod-nchan`` when
they are missing (``ensure_installed``; needs root).

Semantics the load generator relies on (checked with nchan 1.3.6):

- a subscriber ``GET /sub/ch`` without ``If-Modified-Since`` / ``If-None-Match``
  waits for the next message published (``nchan_subscriber_first_message
  newest``); each answer carries ``Last-Modified`` and ``Etag``, which the next
  ``GET`` sends back to receive the messages after it;
- with ``nchan_longpoll_multipart_response raw`` one answer holds every message
  waiting, separated by a newline (messages must not contain one);
- a long-poll that sees no message within the subscriber timeout is answered
  ``408``; the loadgen keeps its ``If-*`` headers and polls again;
- a publisher ``POST /pub/ch`` answers ``202`` (no subscriber) or ``201``.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "nchan.conf.in")
MODULE_PATHS = ("/usr/lib/nginx/modules/ngx_nchan_module.so",
                "/usr/share/nginx/modules/ngx_nchan_module.so")
PACKAGES = ("nginx", "libnginx-mod-nchan")


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.path.exists(p)), None)


def module_path() -> str | None:
    return next((p for p in MODULE_PATHS if os.path.exists(p)), None)


def available() -> str | None:
    """None when nginx and the nchan module are there, else what is missing."""
    if nginx_binary() is None:
        return "nginx is not installed"
    if module_path() is None:
        return "the nchan module (libnginx-mod-nchan) is not installed"
    return None


def ensure_installed() -> None:
    """apt-get install nginx libnginx-mod-nchan when missing (root only)."""
    if available() is None:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise RuntimeError(f"{available()}; install the Debian packages "
                           f"{' '.join(PACKAGES)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", *PACKAGES], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    if available() is not None:
        raise RuntimeError(available())


def nofile_limit() -> int:
    """Raise this process's RLIMIT_NOFILE to its hard limit; return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def render(port: int, workdir: str, timeout: float, buffer: int = 1000,
           workers: int = 1) -> str:
    limit = nofile_limit()
    with open(TEMPLATE) as f:
        text = f.read()
    # worker_connections above the file limit: with exactly as many slots as
    # files, nchan ran out ("worker_connections are not enough, reusing
    # connections") and closed held polls at 19,900 subscribers
    values = {"MODULE": module_path() or MODULE_PATHS[0], "DIR": workdir, "PORT": str(port),
              "NOFILE": str(limit), "CONNECTIONS": str(max(1024, 2 * limit)),
              "TIMEOUT": str(max(1, int(round(timeout)))), "BUFFER": str(buffer),
              "WORKERS": str(workers),
              # several workers: one listening socket each (SO_REUSEPORT), so
              # that the kernel spreads the connections evenly between them
              "REUSEPORT": " reuseport" if workers > 1 else ""}
    for k, v in values.items():
        text = text.replace(f"@{k}@", v)
    if os.geteuid() == 0:
        # the workers would otherwise run as nobody, who cannot use the temp dir
        text = text.replace("daemon off;", "daemon off;\nuser root;", 1)
    return text


def wait_port(port: int, seconds: float = 15.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {seconds} s")


def terminate(proc: "subprocess.Popen | None", grace: float) -> None:
    """Stop a server process: SIGTERM, SIGKILL after ``grace`` seconds."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    if proc.stderr is not None:
        proc.stderr.close()


@dataclass
class Nchan:
    """A running nginx+nchan; ``pids()`` are the master and its workers."""
    port: int
    timeout: float = 20.0
    buffer: int = 1000
    workers: int = 1
    workdir: str = ""
    proc: subprocess.Popen | None = None
    _tmp: tempfile.TemporaryDirectory | None = field(default=None, repr=False)

    def start(self) -> "Nchan":
        missing = available()
        if missing:
            raise RuntimeError(missing)
        self._tmp = tempfile.TemporaryDirectory(prefix="nchan-bench-")
        self.workdir = self._tmp.name
        conf = os.path.join(self.workdir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(render(self.port, self.workdir, self.timeout, self.buffer, self.workers))
        nofile_limit()
        self.proc = subprocess.Popen([nginx_binary(), "-p", self.workdir, "-c", conf],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        try:
            wait_port(self.port, 15, self.proc)
        except RuntimeError:
            self.stop()
            raise RuntimeError("nginx did not start: " + self.error_log()[-2000:]) from None
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def pids(self) -> list[int]:
        if self.proc is None:
            return []
        return [self.proc.pid, *children(self.proc.pid)]

    def error_log(self) -> str:
        try:
            with open(os.path.join(self.workdir, "error.log")) as f:
                return f.read()
        except OSError:
            return ""

    def stop(self) -> None:
        terminate(self.proc, grace=10)
        self.proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> "Nchan":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def wait_in_foreground(proc: subprocess.Popen) -> None:
    """Until the server exits or Ctrl-C (the caller's ``with`` stops it)."""
    try:
        proc.wait()
    except (KeyboardInterrupt, SystemExit):
        pass


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid:
            out.append(int(entry))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=8090)
    p.add_argument("--timeout", type=float, default=20.0, help="subscriber timeout, s")
    p.add_argument("--workers", type=int, default=1, help="nginx worker processes")
    p.add_argument("--install", action="store_true", help="apt-get install when missing")
    p.add_argument("--print-config", action="store_true")
    a = p.parse_args()
    if a.install:
        ensure_installed()
    if a.print_config:
        print(render(a.port, "/tmp/nchan-bench", a.timeout, workers=a.workers))
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))   # stop nginx on the way out
    with Nchan(a.port, a.timeout, workers=a.workers) as n:
        print(f"nchan on {n.url}: subscribe GET {n.url}/sub/CH, publish POST {n.url}/pub/CH "
              f"(pids {n.pids()}); Ctrl-C stops it", file=sys.stderr)
        wait_in_foreground(n.proc)


if __name__ == "__main__":
    main()
