"""Every transport through the shipped balancer configurations (SPEC 21):
long-poll, SSE and WebSocket through haproxy (deploy/haproxy.cfg.in, as the
cluster test renders it, and deploy/haproxy-cores.cfg) and through nginx
(deploy/nginx.conf), beside the node reached directly. Each transport's
events must arrive, in order, and a client that reconnects through the
balancer must resume with what it missed; the median time from a publish to
the event's arrival through a balancer must stay under 50 ms (Nagle's
algorithm made it ~210 ms through haproxy before ``option http-no-delay``).

deploy/haproxy.cfg is the template rendered for three nodes: a test checks
that it says what the template says, so that the fix reaches it too.

    pytest tests/cluster/test_balancer_latency.py -s   # prints the medians
"""
from __future__ import annotations

import re
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.cluster.processes import ROOT, haproxy_config, render
from tests.e2e.conftest import Engine, start
from tests.services import free_port, require_program, stop_process
from tests.transports.test_streams_process import Sse
from tests.transports.wsclient import WsClient
from tests.waiting import wait_listening, wait_until

pytestmark = pytest.mark.e2e

DEPLOY = ROOT / "deploy"
EVENTS = 15                     # measured per transport and route
LIMIT_MS = 50.0                 # the median through a balancer, at most
ROUTES = ["direct", "haproxy.cfg.in", "haproxy-cores.cfg", "nginx.conf"]
TRANSPORTS = ["longpoll", "sse", "websocket"]
MEDIANS: dict[tuple[str, str], float] = {}


def change(n: int) -> dict:
    """The same live stream, its title changed: one ``update`` event each."""
    return {"type": "Stream", "action": "upsert", "obj": {
        "id": 1, "title": f"title {n}", "user_id": 1, "live": True, "public": True,
        "created_at": "2026-01-01T00:00:00Z"}}


# -- the balancers, from the shipped files --------------------------------------------

def haproxy_template(bind: str, node: str) -> str:
    return haproxy_config(bind, [("n1", node)], timeout="120s", check_inter="2s",
                          maxconn=4000)


def haproxy_cores(bind: str, node: str) -> str:
    text = (DEPLOY / "haproxy-cores.cfg").read_text("utf-8")
    assert "bind *:8080" in text and "127.0.0.1:8081" in text
    # both cores are the one node here: the hash picks either, the node is the same
    return (text.replace("bind *:8080", f"bind {bind}")
            .replace("127.0.0.1:8081", node).replace("127.0.0.1:8082", node))


def nginx(bind: str, node: str) -> str:
    text = (DEPLOY / "nginx.conf").read_text("utf-8")
    servers = re.findall(r"^\s+server 10\.0\.0\.\d+:8080 .*;\n", text, re.M)
    assert len(servers) == 3 and "listen 80;" in text
    text = text.replace(servers[0], servers[0].replace(
        re.search(r"10\.0\.0\.\d+:8080", servers[0]).group(), node))
    for line in servers[1:]:
        text = text.replace(line, "")
    return text.replace("listen 80;", f"listen {bind};")


class Balancer:
    def __init__(self, route: str, node: Engine, workdir: Path) -> None:
        self.port = free_port()
        bind, address = f"127.0.0.1:{self.port}", f"127.0.0.1:{node.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / route.replace(".in", "")
        if route.startswith("haproxy"):
            program = require_program("haproxy")
            make = haproxy_template if route == "haproxy.cfg.in" else haproxy_cores
            config.write_text(make(bind, address), "utf-8")
            command = [program, "-db", "-f", str(config)]
        else:
            program = require_program("nginx")
            config.write_text(nginx(bind, address), "utf-8")
            command = [program, "-p", str(workdir), "-c", str(config), "-e", "stderr",
                       "-g", f"daemon off; pid {workdir}/nginx.pid;"]
        self.log = workdir / "balancer.log"
        self.out = self.log.open("wb")
        self.process = subprocess.Popen(command, stdout=self.out, stderr=subprocess.STDOUT)
        why = wait_listening(self.process, self.port, 15.0)
        assert why is None, f"{route} did not listen ({why}): {self.log.read_text()}"
        # haproxy takes the node in once its first check passed
        wait_until(lambda: _get(self.port, "/health/ready") == 200, 15,
                   f"/health/ready through {route}")

    def stop(self) -> None:
        stop_process(self.process)
        self.out.close()


def _get(port: int, path: str) -> int:
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[Engine]:
    require_program("haproxy")
    require_program("nginx")
    engine = start(tmp_path_factory.mktemp("latency"), "--trusted-proxies", "127.0.0.1/32",
                   "--client-rate", "0", "--max-timeout", "60")
    assert engine.publish(change(0)).code == 200
    yield engine
    engine.stop()


@pytest.fixture(scope="module", params=ROUTES)
def route(request, node: Engine, tmp_path_factory) -> Iterator[tuple[str, int]]:
    name = request.param
    if name == "direct":
        yield name, node.port
        return
    balancer = Balancer(name, node, tmp_path_factory.mktemp(name.replace(".", "-")))
    try:
        yield name, balancer.port
    finally:
        balancer.stop()


def publish(node: Engine, n: int) -> tuple[float, threading.Thread]:
    """Publish ``change(n)`` to the node directly, from a thread (the
    client reads its event meanwhile); when it began, and the thread."""
    answers: list[int] = []
    thread = threading.Thread(target=lambda: answers.append(node.publish(change(n)).code),
                              daemon=True)
    start = time.perf_counter()
    thread.start()
    return start, thread


# -- the clients ------------------------------------------------------------------------

class Poller:
    """Long-polls through ``port``, the session named in the URL."""

    def __init__(self, node: Engine, port: int) -> None:
        self.node = node
        self.rpc = Engine.__new__(Engine)          # the e2e client, on another port
        self.rpc.base, self.rpc.ids = f"http://127.0.0.1:{port}", 0
        self.sid = self.rpc.call("session.create")
        self.path = f"/api/jsonrpc?session={self.sid}"
        self.call("stream.subscribe_public_live", self.sid, 5)
        self.ack = 0

    def call(self, method: str, *params):
        self.rpc.ids += 1
        answer = self.rpc.post(self.path, {"jsonrpc": "2.0", "method": method,
                                           "params": list(params), "id": self.rpc.ids},
                               timeout=60).json()
        assert "error" not in answer, answer
        return answer["result"]

    def poll(self) -> list[dict]:
        events = self.call("session.get_events", self.sid, 30, self.ack)
        if events:
            self.ack = events[-1]["seq"]
        return events

    def measure(self, n: int) -> tuple[float, list[dict]]:
        got: list = []

        def run() -> None:
            got.append(self.poll())
            got.append(time.perf_counter())
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        wait_until(lambda: self.node.metric("pushengine_polls_waiting") == 1, 10,
                   "the poll parked")
        start, publishing = publish(self.node, n)
        thread.join(30)
        publishing.join(30)
        assert len(got) == 2, "no answer"
        return got[1] - start, got[0]

    def resume(self, first: int) -> list[dict]:
        """Missed while not polling: two changes, then one poll on a new connection."""
        assert self.node.publish(change(first)).code == 200
        assert self.node.publish(change(first + 1)).code == 200
        events = self.poll()
        if len(events) < 2:
            events += self.poll()
        return events

    def close(self) -> None:
        pass


class Streamer:
    """An SSE stream through ``port``."""

    def __init__(self, node: Engine, port: int) -> None:
        self.node, self.port = node, port
        self.poller = Poller(node, port)            # session and subscription over HTTP
        self.sid = self.poller.sid
        self.sse = Sse(port, f"session={self.sid}")
        assert self.sse.status == 200
        self.seen = 0
        self.last_id = 0

    def _next(self, count: int) -> list[dict]:
        messages = self.sse.messages(self.seen + count)[self.seen:]
        self.seen += count
        self.last_id = messages[-1]["id"]
        return [m["data"] for m in messages]

    def measure(self, n: int) -> tuple[float, list[dict]]:
        start, publishing = publish(self.node, n)
        events = self._next(1)
        arrived = time.perf_counter()
        publishing.join(30)
        return arrived - start, events

    def resume(self, first: int) -> list[dict]:
        self.sse.close()
        assert self.node.publish(change(first)).code == 200
        assert self.node.publish(change(first + 1)).code == 200
        self.sse = Sse(self.port, f"session={self.sid}", {"Last-Event-ID": str(self.last_id)})
        assert self.sse.status == 200
        self.seen = 0
        return self._next(2)

    def close(self) -> None:
        self.sse.close()


class Socket:
    """A WebSocket through ``port``: the session made and subscribed on it."""

    def __init__(self, node: Engine, port: int) -> None:
        self.node, self.port = node, port
        self.ws = WsClient(port)
        self.sid = self.ws.call("session.create")["result"]
        assert "result" in self.ws.call("stream.subscribe_public_live", self.sid, 5)
        self.last = 0

    def measure(self, n: int) -> tuple[float, list[dict]]:
        start, publishing = publish(self.node, n)
        events = self.ws.events(1)
        arrived = time.perf_counter()
        publishing.join(30)
        self.last = events[-1]["seq"]
        return arrived - start, events

    def resume(self, first: int) -> list[dict]:
        self.ws.close()
        # (published whether or not the node has seen the socket go: the
        # session's replay buffer gives them to the new socket either way)
        assert self.node.publish(change(first)).code == 200
        assert self.node.publish(change(first + 1)).code == 200
        self.ws = WsClient(self.port)
        assert self.ws.call("session.attach", self.sid, self.last)["result"] is True
        return self.ws.events(2)

    def close(self) -> None:
        self.ws.close()


CLIENTS: dict[str, Callable[[Engine, int], object]] = {
    "longpoll": Poller, "sse": Streamer, "websocket": Socket}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_events_arrive_at_once_and_resume_through_the_balancer(node: Engine, route,
                                                               transport: str) -> None:
    name, port = route
    client = CLIENTS[transport](node, port)
    try:
        latencies = []
        titles = []
        for n in range(1, EVENTS + 1):
            seconds, events = client.measure(n)        # type: ignore[attr-defined]
            assert [e["action"] for e in events] == ["update"], events
            titles.append(events[0]["obj"]["title"])
            latencies.append(seconds * 1000)
        assert titles == [f"title {n}" for n in range(1, EVENTS + 1)]
        missed = client.resume(EVENTS + 1)             # type: ignore[attr-defined]
        assert [e["obj"]["title"] for e in missed] == [f"title {EVENTS + 1}",
                                                       f"title {EVENTS + 2}"], missed
        seqs = [e["seq"] for e in missed]
        assert seqs == sorted(seqs) and len(set(seqs)) == 2
    finally:
        client.close()                                 # type: ignore[attr-defined]
    median = statistics.median(latencies)
    MEDIANS[(name, transport)] = median
    print(f"\n{transport} through {name}: median {median:.1f} ms, "
          f"max {max(latencies):.1f} ms over {EVENTS} events")
    assert median < LIMIT_MS, (name, transport, latencies)


def test_haproxy_cfg_is_the_template_rendered() -> None:
    """deploy/haproxy.cfg and haproxy-cores.cfg are the template with its
    placeholders filled: whatever the template says (http-no-delay, the
    check on /health/ready), they say too."""
    template = (DEPLOY / "haproxy.cfg.in").read_text("utf-8")
    for name, values in (
            ("haproxy.cfg", dict(bind="*:80", timeout="120s", check_inter="2s",
                                 maxconn="200000")),
            ("haproxy-cores.cfg", dict(bind="*:8080", timeout="120s", check_inter="2s",
                                       maxconn="9000"))):
        shipped = (DEPLOY / name).read_text("utf-8")
        servers = "".join(line for line in shipped.splitlines(keepends=True)
                          if line.startswith("    server "))
        assert servers, name
        assert shipped == render(template, servers=servers.rstrip("\n"), **values), name
        assert "option http-no-delay" in shipped
        assert "option httpchk GET /health/ready" in shipped
