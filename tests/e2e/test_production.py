"""Running it in production (SPEC 21) against ``twistd -n pushengine``:
the probes with a feed that cannot connect and with one that goes away, and
``--log-format json``."""
from __future__ import annotations

import json
import select
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.conftest import START_DEADLINE, Engine, start
from tests.services import free_port, require_service
from tests.waiting import wait_serving, wait_until

pytestmark = pytest.mark.e2e


def start_live(workdir: Path, *args: str) -> Engine:
    """A node that serves HTTP whatever its feed does (``start`` waits for
    /health 200, which a node without its feed never answers)."""
    engine = Engine(workdir, *args)
    try:
        wait_serving(engine.process, lambda: engine.get("/health/live").code == 200,
                     START_DEADLINE, engine.log_text, engine.stop)
    except BaseException:
        engine.stop()
        raise
    return engine


def test_a_node_whose_feed_cannot_connect_is_live_and_not_ready(tmp_path) -> None:
    closed = free_port()                 # nothing listens there
    engine = start_live(tmp_path, "--amqp", f"amqp://guest:guest@127.0.0.1:{closed}/",
                        "--ready-grace", "1")
    try:
        assert engine.get("/health/live").code == 200
        ready = wait_until(lambda: (a := engine.get("/health/ready")).code == 503 and a,
                           10, "/health/ready 503")
        assert ready.json()["status"] == "unavailable" and ready.json()["reason"]
        assert ready.headers["Cache-Control"] == "no-store"
        health = engine.get("/health")
        assert health.code == 503
        assert health.json()["live"] is True and health.json()["ready"] is False
        # and it stays so: live, not ready, past the grace
        wait_until(lambda: engine.metric("pushengine_feed_connect_failures_total") >= 2, 30,
                   "two failed connection attempts")
        assert engine.get("/health/live").code == 200
        assert engine.get("/health/ready").code == 503
    finally:
        engine.stop()


class Forwarder:
    """A TCP forwarder on a free loopback port to ``target``; ``cut()``
    closes every connection and stops listening (the broker "goes away")."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.open = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while self.open:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                if not self.open:
                    client.close()
                    upstream.close()
                    return
                self.sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while self.open:
                readable, _, _ = select.select([a, b], [], [], 0.5)
                for s in readable:
                    data = s.recv(65536)
                    if not data:
                        return
                    peers[s].sendall(data)
        except OSError:
            return
        finally:
            a.close()
            b.close()

    def cut(self) -> None:
        with self.lock:
            self.open = False
            self.listener.close()
            for s in self.sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()


def test_ready_rides_out_a_broker_outage_for_the_grace_only(tmp_path) -> None:
    require_service("RabbitMQ", "127.0.0.1", 5672)
    broker = Forwarder(("127.0.0.1", 5672))
    tag = uuid.uuid4().hex[:8]
    grace = 3.0
    engine = start(tmp_path, "--amqp", f"amqp://guest:guest@127.0.0.1:{broker.port}/",
                   "--amqp-exchange", f"e2e.ready.{tag}", "--node-id", f"ready-{tag}",
                   "--ready-grace", str(grace))
    try:
        assert engine.get("/health/ready").code == 200
        broker.cut()
        cut_at = time.monotonic()
        wait_until(lambda: engine.get("/health").code == 503, 30, "the feed seen down")
        assert engine.get("/health/ready").code == 200      # within the grace
        wait_until(lambda: engine.get("/health/ready").code == 503, 30,
                   "/health/ready 503 after the grace")
        assert time.monotonic() - cut_at >= grace
        assert engine.get("/health/live").code == 200
        assert "down for" in engine.get("/health/ready").json()["reason"]
    finally:
        broker.cut()
        engine.stop()
        _delete_rabbit(f"pushengine.node.ready-{tag}", f"e2e.ready.{tag}")


def _delete_rabbit(queue: str, exchange: str) -> None:
    import shutil
    import subprocess
    ctl = shutil.which("rabbitmqctl")
    if ctl:
        subprocess.run([ctl, "-q", "delete_queue", queue], capture_output=True, timeout=30)
        subprocess.run([ctl, "-q", "delete_exchange", exchange], capture_output=True, timeout=30)


def test_log_format_json_writes_one_object_per_line(tmp_path) -> None:
    engine = start(tmp_path, "--log-format", "json", "--access-log")
    try:
        sid = engine.call("session.create")
        assert engine.call("stats.online") >= 0
        engine.get("/health")
        assert sid
        wait_until(lambda: "GET /health" in engine.log_text(), 10, "the access log's line")
    finally:
        engine.stop()
    lines = engine.log_text().splitlines()
    assert len(lines) >= 4, lines
    records = [json.loads(line) for line in lines]        # every line is JSON
    for record in records:
        assert isinstance(record, dict)
        assert {"time", "level", "namespace", "message"} <= set(record), record
        assert record["level"] in ("debug", "info", "warn", "error", "critical")
        assert record["time"].endswith("Z")
    messages = [r["message"] for r in records]
    assert any("starting up" in m for m in messages), messages
    assert any("/health" in m for m in messages), messages   # the access log
    assert any("Server Shut Down" in m for m in messages), messages


def test_log_format_text_stays_twistds(tmp_path) -> None:
    engine = start(tmp_path)
    engine.stop()
    first = engine.log_text().splitlines()[0]
    with pytest.raises(ValueError):
        json.loads(first)
    assert "starting up" in first
