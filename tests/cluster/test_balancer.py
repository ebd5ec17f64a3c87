"""The shipped balancer configuration (deploy/haproxy.cfg.in) with two
stand-in nodes whose /health answers what the test says: a node whose check
fails is taken out and its sessions go to the other; when every node fails
at once (the feed down for all of them), the nodes still serve, as
backups, instead of every call getting haproxy's 503; when one passes
again, it serves as before."""
from __future__ import annotations

import subprocess
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.cluster.processes import haproxy_config
from tests.services import free_port, require_program, stop_process
from tests.waiting import wait_listening, wait_until

SESSIONS = [f"s{i}" for i in range(40)]


class StandIn:
    """A node: 200 or 503 on /health, 200 on anything else."""

    def __init__(self) -> None:
        self.healthy = True
        node = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                ok = node.healthy or not self.path.startswith("/health")
                body = b'{"ok": true}' if ok else b'{"feed": {"up": false}}'
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def balanced(tmp_path: Path):
    haproxy = require_program("haproxy")
    nodes = {"n1": StandIn(), "n2": StandIn()}
    port = free_port()
    config = tmp_path / "haproxy.cfg"
    config.write_text(haproxy_config(f"127.0.0.1:{port}",
                                     [(name, n.address) for name, n in nodes.items()],
                                     timeout="10s", check_inter="200ms", maxconn=100))
    process = subprocess.Popen([haproxy, "-db", "-f", str(config)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        why = wait_listening(process, port, 15.0)
        assert why is None, f"haproxy did not listen: {why}"
        yield nodes, port
    finally:
        stop_process(process)
        for node in nodes.values():
            node.stop()


def served_by(port: int) -> dict[str, tuple[int, str]]:
    """Each session's answer: its status and the server haproxy chose.

    A request in flight on a node at the moment haproxy marks it down is cut
    (``on-marked-down shutdown-sessions``, as the configuration intends); it
    is recorded as status 0, so that a wait for a state looks again."""
    out = {}
    for sid in SESSIONS:
        try:
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/api/events?session={sid}", timeout=5) as r:
                out[sid] = (r.status, r.headers.get("X-Pushengine-Node", ""))
        except urllib.error.HTTPError as e:
            out[sid] = (e.code, e.headers.get("X-Pushengine-Node", ""))
        except ConnectionError:
            out[sid] = (0, "")
    return out


def answers_when(port: int, ok) -> dict[str, tuple[int, str]] | None:
    """The sessions' answers when every one passes ``ok(status, server)``."""
    answers = served_by(port)
    return answers if all(ok(*v) for v in answers.values()) else None


def test_the_nodes_serve_as_backups_when_every_check_fails(balanced) -> None:
    nodes, port = balanced
    first = served_by(port)
    assert {status for status, _ in first.values()} == {200}
    assert {server for _, server in first.values()} == {"n1", "n2"}
    assert served_by(port) == first                       # each session keeps its node

    nodes["n1"].healthy = False                           # one node's feed is down
    wait_until(lambda: answers_when(port, lambda status, server: (status, server) == (200, "n2")),
               15, "n1 to be taken out")

    nodes["n2"].healthy = False                           # every node's feed is down
    backups = wait_until(lambda: answers_when(port, lambda status, server: server.endswith("-any")),
                         15, "the backups to serve")
    assert {status for status, _ in backups.values()} == {200}
    assert {server for _, server in backups.values()} == {"n1-any", "n2-any"}

    nodes["n1"].healthy = nodes["n2"].healthy = True      # the feed is back
    wait_until(lambda: served_by(port) == first, 15, "each session back on its node")
