"""Streams across nodes: SSE and WebSocket clients behind haproxy keep their
sessions when the node holding them is killed (SPEC sections 8 and 10).

Each client opens its stream through the balancer with ``?session=`` (so the
balancer keeps it on one node); when the stream breaks it reconnects saying
the last seq it received (SSE: ``Last-Event-ID``; WebSocket:
``session.attach(sid, last_seq)``). A node that does not hold the session
resumes it from Redis: same session, a reset per view, then events again.
"""
from __future__ import annotations

import json
import socket
import time

import pytest

from tests.cluster.processes import Client, call, publish, traffic
from tests.cluster.test_cluster import VIEWS, cluster, metric, wait_until  # noqa: F401
from tests.transports.wsclient import WsClient

pytestmark = [pytest.mark.service, pytest.mark.e2e]


class StreamClient(Client):
    """A Client whose events come over a stream instead of polls."""

    kind = ""

    def __init__(self, base: str, *args, **kwargs) -> None:
        super().__init__(base, *args, **kwargs)
        self.port = int(base.rsplit(":", 1)[1])
        self.reconnects = 0

    def poll(self) -> None:
        try:
            self.follow()
        except (OSError, ConnectionError, ValueError, AssertionError):
            self.reconnects += 1
            time.sleep(0.1)         # a client's back-off before it connects again

    def follow(self) -> None:
        raise NotImplementedError


class SseClient(StreamClient):
    kind = "sse"

    def follow(self) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=3)
        try:
            sock.sendall((f"GET /api/events?session={self.sid} HTTP/1.1\r\n"
                          f"Host: 127.0.0.1\r\nLast-Event-ID: {self.last_seq}\r\n\r\n").encode())
            buffer = b""
            while b"\r\n\r\n" not in buffer:
                data = sock.recv(65536)
                if not data:
                    raise ConnectionError("closed before the head")
                buffer += data
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            if b" 200 " not in head.split(b"\r\n")[0]:
                raise ConnectionError(head.split(b"\r\n")[0].decode())
            for line in head.decode("latin-1").split("\r\n"):
                if line.lower().startswith("x-pushengine-node:"):
                    self._served(line.split(":", 1)[1].strip())
            text = ""
            while not self.stopping.is_set():
                while True:   # whole chunks of the chunked body
                    size, sep, rest = buffer.partition(b"\r\n")
                    if not sep or len(rest) < int(size, 16) + 2:
                        break
                    n = int(size, 16)
                    text += rest[:n].decode("utf-8")
                    buffer = rest[n + 2:]
                while "\n\n" in text:
                    block, text = text.split("\n\n", 1)
                    for line in block.split("\n"):
                        if line.startswith("data: "):
                            self.apply(json.loads(line[6:]))
                try:
                    data = sock.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    raise ConnectionError("stream closed")
                buffer += data
        finally:
            sock.close()


class WebSocketClient(StreamClient):
    kind = "ws"

    def follow(self) -> None:
        ws = WsClient(self.port, f"/api/ws?session={self.sid}", timeout=3)
        try:
            if ws.rejected:
                raise ConnectionError(f"rejected {ws.rejected}")
            answer = ws.call("session.attach", self.sid, self.last_seq)
            if "error" in answer:
                self.rpc_errors.append(answer["error"]["code"])
                raise ConnectionError(answer["error"]["message"])
            while not self.stopping.is_set():
                try:
                    for event in ws.events(1):
                        self.apply(event)
                except socket.timeout:
                    continue
        finally:
            ws.close()


def test_streams_move_to_another_node_when_theirs_dies(cluster) -> None:  # noqa: F811
    from tests.cluster.processes import World
    world = World(seed=5)
    publish(cluster.base, [world.change() for _ in range(30)])
    clients = [(SseClient if i % 2 else WebSocketClient)(cluster.base, *VIEWS[i % len(VIEWS)])
               for i in range(12)]
    for c in clients:
        c.start()
    for c in clients:
        assert c.ready.wait(20), "a client did not get going"
        assert c.error is None, c.error
    wait_until(lambda: sum(metric(n, "pushengine_streams") for n in cluster.nodes) == 12,
               15, "every stream attached")

    traffic(cluster.base, world, 2)
    held = {n.name: metric(n, "pushengine_streams") for n in cluster.nodes}
    victim = max(cluster.nodes, key=lambda n: metric(n, "pushengine_streams"))
    assert held[victim.name] > 0, held
    sessions_before = {c.sid for c in clients}
    killed_at = time.monotonic()
    victim.sigkill()
    traffic(cluster.base, world, 4)
    wait_until(lambda: all(c.state() == c.truth(world) for c in clients), 25,
               "every client's view equal to the truth")
    moved = [c for c in clients if any(t >= killed_at for t, _ in c.resets)]
    assert moved, "no stream moved"
    assert any(c.kind == "sse" for c in moved) or any(c.kind == "ws" for c in moved)
    for c in clients:
        assert c.error is None, c.error
        assert c.violations == [], (c.kind, c.sid, c.violations)
        assert 1001 not in c.rpc_errors, (c.kind, c.rpc_errors)
    assert {c.sid for c in clients} == sessions_before          # the same sessions
    survivors = cluster.alive()
    wait_until(lambda: sum(metric(n, "pushengine_streams") for n in survivors) == 12,
               15, "every stream attached to a survivor")
    online, _ = call(cluster.base, "stats.online", [])
    assert online == 12
    for c in clients:
        c.stopping.set()
