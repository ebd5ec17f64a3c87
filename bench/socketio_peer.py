"""Socket.IO on Node: the second peer of the streaming benchmarks.

    python bench/socketio_peer.py [--port 8070]    # run it in the foreground

nchan is the fastest open server of its kind; Socket.IO is what a team would
pick instead. ``bench/socketio/server.js`` is one Node process (as one engine
process, one nginx worker) with the ``socket.io`` 4.8 package: WebSocket
transport only (no HTTP long-polling, no upgrade), no per-message deflate,
one room per channel, ``POST /pub/CH`` to publish (one message per request,
as nchan's publisher), ``GET /status`` for the sockets connected. Its
packages are those of ``bench/socketio/package-lock.json``, installed with
``npm ci`` into ``bench/socketio/node_modules`` when missing
(``ensure_installed``); Node 18 or later.

What the load generator relies on (checked with socket.io 4.8.x on Node 20):

- ``GET /socket.io/?EIO=4&transport=websocket`` upgrades at once and sends the
  Engine.IO open packet ``0{"sid":...,"pingInterval":25000,...}``;
- ``40`` connects to the default namespace (answered ``40{"sid":...}``);
  ``420["subscribe","CH"]`` joins room CH, acknowledged ``430[true]``;
- a message published to CH reaches every socket of the room as
  ``42["m",MESSAGE]``, one WebSocket frame each (framed once per broadcast);
  MESSAGE is the published JSON re-encoded, its keys in their order;
- the server pings (``2``) every ``--ping-interval`` ms and closes a socket
  whose pong (``3``) has not come within ``--ping-timeout`` ms.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field

from nchan import nofile_limit, terminate, wait_in_foreground, wait_port

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(HERE, "socketio")
SERVER = os.path.join(APP, "server.js")
LOCK = os.path.join(APP, "package-lock.json")
MODULES = os.path.join(APP, "node_modules")
MIN_NODE = 18


def node_binary() -> str | None:
    return shutil.which("node")


def npm_binary() -> str | None:
    return shutil.which("npm")


def node_version() -> str:
    node = node_binary()
    if node is None:
        return ""
    try:
        return subprocess.run([node, "--version"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def available() -> str | None:
    """None when Node (and npm, if the packages are missing) are there, else
    what is missing."""
    version = node_version()
    if not version:
        return "node is not installed"
    try:
        major = int(version.lstrip("v").split(".")[0])
    except ValueError:
        return f"cannot read the node version {version!r}"
    if major < MIN_NODE:
        return f"node {version} is older than {MIN_NODE}"
    if not installed() and npm_binary() is None:
        return "npm is not installed (needed once: npm ci in bench/socketio)"
    return None


def locked_version() -> str:
    """The socket.io version package-lock.json names."""
    with open(LOCK) as f:
        return json.load(f)["packages"]["node_modules/socket.io"]["version"]


def version() -> str:
    """The socket.io version installed, or "" when it is not."""
    try:
        with open(os.path.join(MODULES, "socket.io", "package.json")) as f:
            return json.load(f)["version"]
    except (OSError, ValueError, KeyError):
        return ""


def installed() -> bool:
    return bool(version()) and version() == locked_version()


def ensure_installed() -> None:
    """``npm ci`` in bench/socketio when its packages are missing or not the
    locked ones."""
    missing = available()
    if missing:
        raise RuntimeError(missing)
    if installed():
        return
    subprocess.run([npm_binary(), "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                   cwd=APP, check=True, timeout=600, stdout=subprocess.DEVNULL)
    if not installed():
        raise RuntimeError(f"npm ci did not install socket.io {locked_version()}")


@dataclass
class SocketIO:
    """A running Socket.IO server; ``pids()`` is its Node process."""
    port: int
    args: list[str] = field(default_factory=list)   # --ping-interval MS, --ping-timeout MS
    proc: subprocess.Popen | None = None

    def start(self) -> "SocketIO":
        ensure_installed()
        nofile_limit()   # inherited by node: its `ulimit -n`
        self.proc = subprocess.Popen([node_binary(), SERVER, "--port", str(self.port),
                                      *self.args],
                                     cwd=APP, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)
        try:
            wait_port(self.port, 15, self.proc)
        except RuntimeError as e:
            err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
            self.stop()
            raise RuntimeError(f"Socket.IO did not start ({e}): {err.strip()[-600:]}") from None
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc is not None else []

    def status(self) -> dict:
        with urllib.request.urlopen(self.url + "/status", timeout=2) as r:
            return json.load(r)

    def stop(self) -> None:
        terminate(self.proc, grace=10)
        self.proc = None

    def __enter__(self) -> "SocketIO":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=8070)
    p.add_argument("--ping-interval", type=int, default=25000, help="ms")
    p.add_argument("--ping-timeout", type=int, default=20000, help="ms")
    a = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))   # stop node on the way out
    args = ["--ping-interval", str(a.ping_interval), "--ping-timeout", str(a.ping_timeout)]
    with SocketIO(a.port, args) as s:
        print(f"socket.io {version()} on {s.url}: subscribe over "
              f"ws://127.0.0.1:{a.port}/socket.io/?EIO=4&transport=websocket, publish POST "
              f"{s.url}/pub/CH (pid {s.pids()}); Ctrl-C stops it", file=sys.stderr)
        wait_in_foreground(s.proc)


if __name__ == "__main__":
    main()
