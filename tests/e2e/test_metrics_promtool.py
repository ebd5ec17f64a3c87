"""``promtool check metrics`` on the /metrics of a real node with every source
present: the AMQP feed (RabbitMQ), memcached, the Redis registry, online
counters, per-client limits and profiles, after some traffic (SPEC section 11);
and the histograms, the process's series and the build info (SPEC section
21), with a change delivered to a parked poll, an SSE stream and a WebSocket."""
from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pushengine import __version__
from tests.e2e.conftest import start
from tests.services import require_program, require_service
from tests.transports.test_streams_process import Sse
from tests.transports.wsclient import WsClient
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.service]


class ThreadedCall:
    """A blocking JSON-RPC call in a thread of its own (a poll that parks)."""

    def __init__(self, engine, method: str, *params) -> None:
        import threading
        self.out: list = []
        self.thread = threading.Thread(
            target=lambda: self.out.append(engine.call(method, *params, timeout=60)),
            daemon=True)
        self.thread.start()

    def result(self, timeout: float):
        self.thread.join(timeout)
        assert self.out, "no answer"
        return self.out[0]


def test_promtool_on_a_node_with_every_source(tmp_path) -> None:
    promtool = require_program("promtool")
    require_service("RabbitMQ", "127.0.0.1", 5672)
    require_service("memcached", "127.0.0.1", 11211)
    require_service("Redis", "127.0.0.1", 6379)
    tag = uuid.uuid4().hex[:8]
    node_id = f"promtool-{tag}"
    engine = start(tmp_path, "--amqp", "amqp://guest:guest@127.0.0.1:5672/",
                   "--amqp-exchange", f"e2e.promtool.{tag}", "--node-id", node_id,
                   "--memcache", "127.0.0.1:11211", "--redis", "redis://127.0.0.1:6379/5",
                   "--max-timeout", "5")
    try:
        wait_until(lambda: engine.get("/health").json()["feed"].get("state") == "connected",
                   30, "the feed connected", interval=0.1)
        sid = engine.call("session.create")
        engine.call("stream.subscribe_public_live", sid, 5)
        # a stream of each kind on the same view, and a poll parked behind the change
        streamed = engine.call("session.create")
        engine.call("stream.subscribe_public_live", streamed, 5)
        sse = Sse(engine.port, f"session={streamed}")
        ws = WsClient(engine.port)
        ws_sid = ws.call("session.create")["result"]
        ws.call("stream.subscribe_public_live", ws_sid, 5)
        polled = engine.call("session.create")
        engine.call("stream.subscribe_public_live", polled, 5)
        parked = ThreadedCall(engine, "session.get_events", polled, 30, 0)
        wait_until(lambda: engine.metric("pushengine_polls_waiting") == 1, 10, "a parked poll")
        assert engine.publish(
            {"type": "User", "action": "upsert", "obj": {"id": 5, "name": "Vera"}},
            {"type": "Stream", "action": "upsert", "obj": {
                "id": 1, "title": "promtool", "user_id": 5, "live": True, "public": True,
                "created_at": "2030-01-01T00:00:00Z"}}).code == 200
        wait_until(lambda: engine.call("session.get_events", sid, 2, 0), 15, "the events")
        assert parked.result(15)
        assert sse.messages(1) and ws.events(1)
        sse.close()
        ws.close()
        assert engine.call("user.public_profile", 5) == {"id": 5, "name": "Vera"}
        engine.post("/api/jsonrpc", {"jsonrpc": "2.0", "method": "no.such", "id": 1})
        text = engine.get("/metrics").body.decode("utf-8")
    finally:
        engine.stop()
        ctl = shutil.which("rabbitmqctl")
        if ctl:
            subprocess.run([ctl, "-q", "delete_queue", f"pushengine.node.{node_id}"],
                           capture_output=True, timeout=30)
            subprocess.run([ctl, "-q", "delete_exchange", f"e2e.promtool.{tag}"],
                           capture_output=True, timeout=30)
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr + text
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    for name in ("pushengine_feed_messages_received_total", "pushengine_memcache_ops_total",
                 "pushengine_memcache_servers", "pushengine_redis_writes_total",
                 "pushengine_online_sessions_counted", "pushengine_clients_tracked",
                 "pushengine_profiles_asked_total", "pushengine_feed_lag_seconds",
                 "process_cpu_seconds_total", "process_resident_memory_bytes",
                 "process_open_fds", "process_max_fds", "pushengine_build_info"):
        assert name in names, name
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}

    def value(name: str, **labels: str) -> float | None:
        return samples.get((name, tuple(sorted({"node": node_id, **labels}.items()))))
    assert value("pushengine_build_info", version=__version__) == 1
    for method in ("session.create", "stream.subscribe_public_live", "session.get_events",
                   "user.public_profile", "other"):
        assert value("pushengine_rpc_call_seconds_count", method=method) >= 1, method
    assert value("pushengine_rpc_call_seconds_bucket", method="other", le="+Inf") == 1
    assert value("pushengine_initial_state_seconds_count", store="memory") >= 4
    for transport in ("longpoll", "sse", "websocket"):
        assert value("pushengine_delivery_seconds_count", transport=transport) >= 1, transport
    assert "Traceback" not in engine.log_text()
