"""A real cluster on this machine: memcached, several ``twistd -n pushengine``
nodes on RabbitMQ and Redis, and haproxy in front, rendered from
deploy/haproxy.cfg.in. Used by tests/cluster/test_cluster.py and
bench/cluster_resume.py; everything listens on 127.0.0.1 and every process
is killed by ``Cluster.stop``.

Also the long-polling client the two share: it creates its session through
the balancer, names it in the URL (``?session=``) as the browser client does,
applies events to its own copy of the view and checks the delivery contract
as it goes.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from tests.e2e.conftest import Engine
from tests.services import free_port
from tests.waiting import wait_listening, wait_until

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "deploy" / "haproxy.cfg.in"
AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"


def render(template: str, **values: str) -> str:
    """Fill the ``@NAME@`` placeholders of a deploy/ template (comment lines
    are left as they are)."""
    lines = []
    for line in template.splitlines(keepends=True):
        if not line.lstrip().startswith("#"):
            for name, value in values.items():
                line = line.replace(f"@{name.upper()}@", value)
            if "@" in line:
                raise ValueError(f"a placeholder was left unfilled: {line.strip()}")
        lines.append(line)
    return "".join(lines)


def haproxy_config(bind: str, servers: list[tuple[str, str]], timeout: str = "120s",
                   check_inter: str = "2s", maxconn: int = 4000) -> str:
    lines = "\n".join([f"    server {name} {address}" for name, address in servers] +
                      [f"    server {name}-any {address} backup no-check"
                       for name, address in servers])
    # (the placeholder line keeps its own line end)
    return render(TEMPLATE.read_text("utf-8"), bind=bind, timeout=timeout,
                  check_inter=check_inter, maxconn=str(maxconn), servers=lines)


class Process:
    """A child process to wait for (a port) and to kill."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        self.out = open(log, "wb")
        self.process = subprocess.Popen(args, stdout=self.out, stderr=subprocess.STDOUT)

    def wait_port(self, port: int, what: str, deadline: float = 15.0) -> None:
        why = wait_listening(self.process, port, deadline)
        if why is not None:
            self.kill()
            raise RuntimeError(f"{what} did not listen on {port} ({why}): "
                               f"{self.log.read_text('utf-8', 'replace')[-2000:]}")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.out.close()


class Node(Engine):
    """One engine node (tests/e2e's Engine, with a name and its own directory)."""

    def __init__(self, workdir: Path, name: str, *args: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        super().__init__(workdir, "--node-id", name, *args)

    def sigkill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)


class Cluster:
    """memcached + ``nodes`` engine nodes + haproxy, on free loopback ports."""

    def __init__(self, workdir: Path, nodes: int = 3, redis_db: int = 13,
                 max_timeout: float = 5, check_inter: str = "1s",
                 extra: tuple[str, ...] = ()) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.tag = uuid.uuid4().hex[:8]
        self.exchange = f"pushengine.test.cluster.{self.tag}"
        self.redis_db = redis_db
        self.nodes: list[Node] = []
        self.memcached: Process | None = None
        self.haproxy: Process | None = None
        self.count = nodes
        self.max_timeout = max_timeout
        self.check_inter = check_inter
        self.extra = extra
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"

    def start(self) -> "Cluster":
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        mc_port = free_port()
        args = ["memcached", "-p", str(mc_port), "-l", "127.0.0.1", "-U", "0"]
        if os.geteuid() == 0:
            args += ["-u", "root"]
        self.memcached = Process(args, self.workdir / "memcached.log")
        self.memcached.wait_port(mc_port, "memcached")
        common = ["--amqp", AMQP_URL, "--amqp-exchange", self.exchange,
                  "--memcache", f"127.0.0.1:{mc_port}",
                  "--redis", f"redis://127.0.0.1:6379/{self.redis_db}",
                  "--max-timeout", str(self.max_timeout),
                  # haproxy on this host adds X-Forwarded-For (deploy/haproxy.cfg.in)
                  "--trusted-proxies", "127.0.0.1/32", *self.extra]
        for i in range(self.count):
            name = f"cluster-{self.tag}-n{i + 1}"
            self.nodes.append(Node(self.workdir / name, name, *common))
        for node in self.nodes:
            node.wait_ready()
        config = self.workdir / "haproxy.cfg"
        # the balancer's idle timeout: above the longest poll
        config.write_text(haproxy_config(
            f"127.0.0.1:{self.port}", [(n.name, f"127.0.0.1:{n.port}") for n in self.nodes],
            timeout=f"{int(self.max_timeout) + 10}s", check_inter=self.check_inter))
        self.haproxy = Process(["haproxy", "-f", str(config), "-db"], self.workdir / "haproxy.log")
        self.haproxy.wait_port(self.port, "haproxy")
        self.wait_all_up()

    def wait_all_up(self, deadline: float = 10.0) -> None:
        """Until haproxy's checks passed for every node: calls reach them all."""
        seen: set[str] = set()

        def all_reached() -> bool:
            answer = request(self.base + "/health", None, timeout=5)
            if answer is not None and answer[0] == 200:
                seen.add(answer[2].get("X-Pushengine-Node", ""))
            return seen == {n.name for n in self.nodes}
        try:
            wait_until(all_reached, deadline, "the balancer reaching every node")
        except AssertionError:
            raise RuntimeError(f"the balancer reached only {sorted(seen)}") from None

    def alive(self) -> list[Node]:
        return [n for n in self.nodes if n.process.poll() is None]

    def stop(self) -> None:
        for node in self.nodes:
            if node.process.poll() is None:
                node.process.kill()
                node.process.wait(10)
            if node.process.stdout is not None:
                node.process.stdout.close()
        for proc in (self.haproxy, self.memcached):
            if proc is not None:
                proc.kill()
        self._forget_broker_state()

    def _forget_broker_state(self) -> None:
        """The test's exchange and the nodes' queues (they would expire in an hour)."""
        try:
            import pika
            conn = pika.BlockingConnection(pika.URLParameters(
                AMQP_URL + "%2F?connection_attempts=1&socket_timeout=3"))
        except Exception:
            return
        try:
            channel = conn.channel()
            for node in self.nodes:
                channel.queue_delete(queue=f"pushengine.node.{node.name}")
            channel.exchange_delete(exchange=self.exchange)
        except Exception:
            pass
        finally:
            try:
                conn.close()
            except Exception:
                pass


# -- HTTP ---------------------------------------------------------------------
def request(url: str, body: Any, timeout: float = 10) -> tuple[int, Any, Any] | None:
    """POST JSON (or GET without a body): ``(status, decoded body, headers)``,
    None when the connection failed."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw, status, headers = r.read(), r.status, r.headers
    except urllib.error.HTTPError as e:
        with e:
            raw, status, headers = e.read(), e.code, e.headers
    except (OSError, ValueError):
        return None
    try:
        decoded = json.loads(raw) if raw else None
    except ValueError:
        decoded = raw
    return status, decoded, headers


class RpcFailure(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)
        self.code = code


def call(base: str, method: str, params: list, session: str | None = None,
         timeout: float = 10, retry_for: float = 10.0) -> tuple[Any, str]:
    """One JSON-RPC call through ``base``, retried on transport errors (a
    node dying under the balancer) for ``retry_for`` seconds; fires with
    (result, the node that answered). JSON-RPC errors raise RpcFailure."""
    url = base + "/api/jsonrpc" + (f"?session={session}" if session else "")
    last: list = [None]

    def answered() -> tuple[Any, str] | None:
        answer = last[0] = request(
            url, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, timeout)
        if answer is not None and answer[0] == 200 and isinstance(answer[1], dict):
            body = answer[1]
            if "error" in body:
                raise RpcFailure(body["error"]["code"], body["error"]["message"])
            return body["result"], answer[2].get("X-Pushengine-Node", "")
        return None
    try:
        return wait_until(answered, retry_for, method, interval=0.05)
    except AssertionError:
        raise RuntimeError(f"{method} failed for {retry_for} s: {last[0]!r}") from None


def publish(base: str, changes: list[dict], retry_for: float = 10.0) -> None:
    """Publish until accepted (a change is a whole state: sending it twice is harmless)."""
    last: list = [None]

    def accepted() -> bool:
        answer = last[0] = request(base + "/api/publish", changes)
        return answer is not None and answer[0] == 200
    try:
        wait_until(accepted, retry_for, "the publication accepted", interval=0.05)
    except AssertionError:
        raise RuntimeError(f"publishing failed for {retry_for} s: {last[0]!r}") from None


def traffic(base: str, world: "World", seconds: float) -> None:
    """Changes of ``world`` published through ``base`` for ``seconds``, 25 a
    second (a pace for the test's traffic, not a wait)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        publish(base, [world.change()])
        time.sleep(0.04)


# -- the model: what each view must hold --------------------------------------
class World:
    """The objects as published, and the views computed from them."""

    def __init__(self, seed: int = 7) -> None:
        self.objects: dict[int, dict] = {}
        self.random = random.Random(seed)
        self.next_id = 1
        self.clock = 0

    def change(self) -> dict:
        r = self.random
        if self.objects and r.random() < 0.15:
            obj = self.objects.pop(r.choice(sorted(self.objects)))
            return {"type": "Stream", "action": "delete", "obj": {"id": obj["id"]}}
        if self.objects and r.random() < 0.5:
            obj = dict(self.objects[r.choice(sorted(self.objects))])
            obj["live"] = r.random() < 0.7
            obj["viewers"] = r.randrange(1000)
        else:
            self.clock += 1
            t = self.clock
            obj = {"id": self.next_id, "user_id": r.randint(1, 3), "live": r.random() < 0.7,
                   "public": r.random() < 0.9, "title": f"stream {self.next_id}",
                   "viewers": 0,
                   "created_at": f"2026-11-30T{t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d}Z"}
            self.next_id += 1
        self.objects[obj["id"]] = obj
        return {"type": "Stream", "action": "upsert", "obj": obj}

    def view(self, name: str, params: dict, limit: int) -> list[dict]:
        if name == "PublicLiveStreamView":
            match = [o for o in self.objects.values() if o["live"] and o["public"]]
        elif name == "UserStreamView":
            match = [o for o in self.objects.values()
                     if o["user_id"] == params["user_id"] and o["public"]]
        else:
            raise ValueError(name)
        match.sort(key=lambda o: (o["created_at"], o["id"]), reverse=True)
        return match[:limit]


# -- the client -----------------------------------------------------------------
class Client(threading.Thread):
    """One browser-like client: a session, one subscription, a poll loop."""

    def __init__(self, base: str, view: str, method: str, params: dict, limit: int,
                 poll_timeout: float = 2.0) -> None:
        super().__init__(daemon=True)
        self.base = base
        self.view = view
        self.method = method
        self.params = params        # in the alias's declared order, limit last
        self.limit = limit
        self.poll_timeout = poll_timeout
        self.stopping = threading.Event()
        self.ready = threading.Event()
        self.lock = threading.Lock()
        self.sid: str | None = None
        self.key: str | None = None
        self.items: dict[Any, dict] = {}
        self.last_seq = 0
        self.nodes: list[tuple[float, str]] = []     # (time, node) at each change of node
        self.resets: list[tuple[float, int]] = []    # (time received, seq)
        self.violations: list[str] = []
        self.rpc_errors: list[int] = []
        self.error: BaseException | None = None

    def truth(self, world: "World") -> list[dict]:
        return world.view(self.view, self.params, self.limit)

    def state(self) -> list[dict]:
        with self.lock:
            items = list(self.items.values())
        items.sort(key=lambda o: (o["created_at"], o["id"]), reverse=True)
        return items

    def node(self) -> str:
        return self.nodes[-1][1] if self.nodes else ""

    def _served(self, node: str) -> None:
        if node and (not self.nodes or self.nodes[-1][1] != node):
            self.nodes.append((time.monotonic(), node))

    def run(self) -> None:
        try:
            self.sid, node = call(self.base, "session.create", [])
            (self.key, state), node = call(self.base, self.method,
                                           [self.sid, *self.params.values(), self.limit],
                                           session=self.sid)
            self._served(node)
            with self.lock:
                self.items = {o["id"]: o for o in state}
            self.ready.set()
            while not self.stopping.is_set():
                self.poll()
        except BaseException as e:  # handed to the test
            self.error = e
            self.ready.set()

    def poll(self) -> None:
        try:
            events, node = call(self.base, "session.get_events",
                                [self.sid, self.poll_timeout, self.last_seq], session=self.sid,
                                timeout=self.poll_timeout + 10, retry_for=30)
        except RpcFailure as e:
            self.rpc_errors.append(e.code)
            time.sleep(0.2)         # a client's back-off before it polls again
            return
        self._served(node)
        for event in events:
            self.apply(event)

    def apply(self, e: dict) -> None:
        seq = e["seq"]
        if seq <= self.last_seq:
            self.violations.append(f"seq {seq} after {self.last_seq}")
            return
        self.last_seq = seq
        if e["key"] != self.key:
            self.violations.append(f"event for another key {e['key']}")
            return
        action, obj = e["action"], e.get("obj")
        with self.lock:
            items = self.items
            if action == "insert":
                if obj["id"] in items:
                    self.violations.append(f"insert of present {obj['id']} (seq {seq})")
                items[obj["id"]] = obj
            elif action == "update":
                if items.get(obj["id"]) != e.get("old"):
                    self.violations.append(f"update of {obj['id']}: old differs (seq {seq})")
                items[obj["id"]] = obj
            elif action == "delete":
                if items.pop(obj["id"], None) is None:
                    self.violations.append(f"delete of absent {obj['id']} (seq {seq})")
            elif action == "reset":
                self.items = {o["id"]: o for o in obj}
                self.resets.append((time.monotonic(), seq))
            elif action != "ping":
                self.violations.append(f"unknown action {action}")
            if len(self.items) > self.limit:
                self.violations.append(f"{len(self.items)} objects in a view of {self.limit}")
