"""``twistd -n pushengine --otlp-endpoint URL`` sends its spans over OTLP/HTTP
(SPEC 21): a small collector on a loopback port records every POST, whose
protobuf bodies are decoded with opentelemetry-proto."""
from __future__ import annotations

import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest)

from tests.e2e.conftest import ROOT, Engine, start, twistd_command
from tests.services import free_port
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
SAMPLED = f"00-{TRACE}-{PARENT}-01"


class Collector:
    """An OTLP/HTTP trace receiver that keeps what it was sent."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, str, bytes]] = []     # path, content type, body
        received = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                received.append((self.path, self.headers.get("Content-Type", ""), body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def spans(self) -> list[tuple[Any, Any]]:
        """(resource, span) of every span received so far."""
        out = []
        for _, _, body in list(self.posts):
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource_spans in request.resource_spans:
                for scope in resource_spans.scope_spans:
                    out += [(resource_spans.resource, span) for span in scope.spans]
        return out

    def named(self, name: str) -> list[Any]:
        return [span for _, span in self.spans() if span.name == name]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def attributes(item: Any) -> dict[str, Any]:
    out = {}
    for kv in item.attributes:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value"))
    return out


def call(engine: Engine, method: str, *params: Any, traceparent: str | None = None) -> Any:
    headers = {"Content-Type": "application/json"}
    if traceparent is not None:
        headers["traceparent"] = traceparent
    engine.ids += 1
    body = json.dumps({"jsonrpc": "2.0", "id": engine.ids, "method": method,
                       "params": list(params)}).encode()
    answer = engine.request("POST", "/api/jsonrpc", body, headers).json()
    assert "error" not in answer, answer
    return answer["result"]


@pytest.fixture
def collector() -> Collector:
    c = Collector()
    yield c
    c.close()


def test_a_call_with_a_traceparent_is_sent_to_the_collector(tmp_path: Path,
                                                            collector: Collector) -> None:
    engine = start(tmp_path, "--otlp-endpoint", collector.url, "--trace-sample", "1")
    try:
        sid = call(engine, "session.create", traceparent=SAMPLED)
        call(engine, "stream.subscribe_public_live", sid, 5, traceparent=SAMPLED)
        [span] = wait_until(lambda: collector.named("stream.subscribe_public_live"), 15,
                            "the subscription's span at the collector")
        path, content_type, _ = collector.posts[0]
        assert path == "/v1/traces" and content_type == "application/x-protobuf"
        assert span.trace_id.hex() == TRACE and span.parent_span_id.hex() == PARENT
        assert attributes(span)["rpc.method"] == "stream.subscribe_public_live"
        [read] = wait_until(lambda: collector.named("view.initial_state"), 15, "the read's span")
        assert read.parent_span_id == span.span_id and read.trace_id == span.trace_id
        assert attributes(read)["pushengine.view"] == "PublicLiveStreamView"
        resource = attributes(collector.spans()[0][0])
        assert resource["service.name"] == "pushengine"
        assert resource["service.instance.id"] == "e2e"
        # a publish and the changes' application, the latter its child
        answer = engine.request("POST", "/api/publish", json.dumps([{
            "type": "Stream", "action": "upsert", "obj": {
                "id": 1, "title": "one", "user_id": 1, "live": True, "public": True,
                "created_at": "2026-01-01T00:00:01Z"}}]).encode(),
            {"Content-Type": "application/json", "traceparent": SAMPLED})
        assert answer.code == 200
        [publish] = wait_until(lambda: collector.named("publish"), 15, "the publish span")
        [apply] = wait_until(lambda: collector.named("changes.apply"), 15, "the apply span")
        assert apply.parent_span_id == publish.span_id
        assert attributes(apply)["pushengine.changes"] == 1
        # what is still queued when the node stops is sent before it exits
        call(engine, "stats.online", traceparent=SAMPLED)
    finally:
        engine.stop()
    # twistd exits by SIGTERM once its services stopped: the exporter's too
    assert "Server Shut Down" in engine.log_text()
    assert collector.named("stats.online"), "the last span was not sent at shutdown"
    assert "Traceback" not in engine.log_text()


def test_at_ratio_zero_only_a_sampled_callers_trace_is_sent(tmp_path: Path,
                                                            collector: Collector) -> None:
    engine = start(tmp_path, "--otlp-endpoint", collector.url, "--trace-sample", "0")
    try:
        sid = call(engine, "session.create")
        call(engine, "stream.subscribe_public_live", sid, 5)
        call(engine, "session.get_events", sid, 0)
        # the marker: a sampled caller's call, sent after the others
        call(engine, "stats.online", traceparent=SAMPLED)
        wait_until(lambda: collector.named("stats.online"), 15, "the marker's span")
        assert [span.name for _, span in collector.spans()] == ["stats.online"]
    finally:
        engine.stop()


def test_an_endpoint_that_is_no_url_is_a_usage_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUSHENGINE_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([*twistd_command(), "-n", "--pidfile=", "pushengine",
                           "--otlp-endpoint", "collector:4318"], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--otlp-endpoint must be an http(s):// URL" in done.stdout + done.stderr
