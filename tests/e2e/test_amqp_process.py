"""The engine with --amqp, as it runs: twistd processes and the real RabbitMQ.

Every node binds its own queue to the fanout exchange: a change published on
one node reaches the sessions of every node; a connection closed by the
broker or a broker restart loses nothing and shows nothing twice; malformed
messages are counted and dropped among good ones.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, Engine, start
from tests.services import require_program, require_service
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
BROKER = "amqp://guest:guest@127.0.0.1:5672/"


@pytest.fixture
def cluster(tmp_path):
    """Start engines on one throw-away exchange; remove their queues after."""
    require_service("RabbitMQ", "127.0.0.1", 5672)
    tag = uuid.uuid4().hex[:8]
    exchange = f"e2e.{tag}"
    engines: list[Engine] = []

    def node(name: str, *args: str) -> Engine:
        workdir = tmp_path / name
        workdir.mkdir()
        e = start(workdir, "--amqp", BROKER, "--amqp-exchange", exchange,
                  "--node-id", f"e2e-{tag}-{name}", "--max-timeout", "5", *args)
        engines.append(e)
        return e

    node.exchange = exchange
    node.tag = tag
    yield node
    for e in engines:
        e.stop()
    ctl = shutil.which("rabbitmqctl")
    if ctl:
        for name in ("a", "b"):
            subprocess.run([ctl, "-q", "delete_queue", f"pushengine.node.e2e-{tag}-{name}"],
                           capture_output=True, timeout=30)
    for e in engines:
        log = e.log_text()
        assert "Traceback" not in log, log[-4000:]


def stream(id_: int, n: int = 0) -> dict:
    return {"type": "Stream", "action": "upsert",
            "obj": {"id": id_, "title": f"stream {id_}", "live": True, "public": True,
                    "created_at": f"2026-01-01T00:00:{id_ % 60:02d}Z", "n": n}}


class Client:
    """A session on one engine that keeps its view as a client would."""

    def __init__(self, engine: Engine, limit: int = 50) -> None:
        self.engine = engine
        self.sid = engine.call("session.create")
        self.key, state = engine.call("stream.subscribe_public_live", self.sid, limit)
        self.items = {o["id"]: o for o in state}
        self.ack = 0
        self.seen: list[tuple[int, int]] = []   # (id, n) of every insert/update

    def poll(self, timeout: float = 1) -> list[dict]:
        events = self.engine.call("session.get_events", self.sid, timeout, self.ack,
                                  timeout=timeout + 10)
        for e in events:
            self.ack = e["seq"]
            if e["action"] in ("insert", "update"):
                self.items[e["obj"]["id"]] = e["obj"]
                self.seen.append((e["obj"]["id"], e["obj"].get("n")))
            elif e["action"] == "delete":
                self.items.pop(e["obj"]["id"], None)
            elif e["action"] == "reset":
                self.items = {o["id"]: o for o in e["obj"]}
        return events

    def wait_for(self, check, deadline: float = 20.0, what: str = "events") -> None:
        end = time.monotonic() + deadline
        while not check(self):
            if time.monotonic() > end:
                raise AssertionError(f"{what} not reached; items {sorted(self.items)}")
            self.poll(0.5)


def publish_cli(exchange: str, *changes: dict) -> subprocess.CompletedProcess:
    script = Path(sys.executable).with_name("pushengine-publish")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "pushengine.tools.publish_cli"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    lines = "\n".join(json.dumps(c) for c in changes) + "\n"
    return subprocess.run([*cmd, "--amqp", BROKER, "--exchange", exchange], input=lines,
                          capture_output=True, text=True, timeout=60, env=env)


def test_a_change_published_on_one_node_reaches_every_node(cluster):
    a, b = cluster("a"), cluster("b")
    ca, cb = Client(a), Client(b)
    assert a.publish(stream(1)).json() == {"accepted": 1}
    for c in (ca, cb):
        c.wait_for(lambda c: 1 in c.items, what="the insert of 1")
    done = publish_cli(cluster.exchange, stream(2), stream(3))
    assert done.returncode == 0, done.stderr
    for c in (ca, cb):
        c.wait_for(lambda c: {1, 2, 3} <= set(c.items), what="the CLI's changes")
    health = a.get("/health").json()
    assert health["feed"]["up"] and health["feed"]["state"] == "connected"
    assert a.metric("pushengine_feed_connected") == 1


def test_malformed_messages_are_counted_and_dropped(cluster):
    a = cluster("a")
    client = Client(a)
    bodies = [b"not json", b"\xff\xfe", json.dumps({"type": "Stream"}).encode(),
              json.dumps(stream(10)).encode(),
              json.dumps({"type": "Stream", "action": "merge", "obj": {"id": 1}}).encode(),
              json.dumps([stream(11), {"type": 5, "action": "upsert", "obj": {}}]).encode()]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "tests.e2e.raw_publish", BROKER,
                           cluster.exchange], input="\n".join(b.hex() for b in bodies),
                          capture_output=True, text=True, timeout=60, env=env, cwd=str(ROOT))
    assert done.returncode == 0, done.stderr
    client.wait_for(lambda c: {10, 11} <= set(c.items), what="the good changes")
    assert a.metric("pushengine_feed_malformed_messages_total") >= 4
    assert a.get("/health").code == 200


def test_broker_closing_the_connection_loses_nothing_and_repeats_nothing(cluster):
    require_program("rabbitmqctl")
    a, b = cluster("a"), cluster("b")
    watcher = Client(a, limit=1)
    a.publish(stream(1, n=0))
    watcher.wait_for(lambda c: 1 in c.items)
    for n in range(1, 21):
        # published through node b, whose connection is closed too: a caller
        # told 503 retries, as the answer's Retry-After asks
        wait_until(lambda: b.publish(stream(1, n=n)).code != 503, 30,
                   "node b taking the change again", interval=0.1)
        if n == 8:
            subprocess.run(["rabbitmqctl", "-q", "close_all_connections", "test"],
                           check=True, capture_output=True, timeout=60)
    watcher.wait_for(lambda c: c.items.get(1, {}).get("n") == 20, deadline=40,
                     what="every update after the reconnect")
    ns = [n for id_, n in watcher.seen if id_ == 1]
    assert ns == sorted(set(ns)), f"an update was shown twice or out of order: {ns}"
    assert a.get("/health").json()["feed"]["up"]


def test_broker_restart_then_changes_flow_again(cluster):
    require_program("rabbitmqctl")
    a = cluster("a")
    client = Client(a)
    try:
        subprocess.run(["rabbitmqctl", "-q", "stop_app"], check=True, capture_output=True,
                       timeout=60)
        wait_until(lambda: a.get("/health").code == 503, 20,
                   "/health turning 503 with the broker down", interval=0.1)
        # the session and its long-poll stay open through the outage
        assert client.poll(0.2) == [] or True
    finally:
        subprocess.run(["rabbitmqctl", "-q", "start_app"], check=True, capture_output=True,
                       timeout=120)
    wait_until(lambda: a.get("/health").code == 200, 60,
               "the node reconnected after the restart", interval=0.2)
    assert a.publish(stream(5)).json() == {"accepted": 1}
    client.wait_for(lambda c: 5 in c.items, what="a change after the restart")
    assert a.metric("pushengine_feed_reconnects_total") >= 1
