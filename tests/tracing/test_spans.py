"""Traces (SPEC 21) on a Clock: the node's spans of calls, initial-state reads
and change applications, through the OpenTelemetry adapter the node uses
(``pushengine/tracing/otel.py``) with an in-memory exporter instead of
OTLP/HTTP; the W3C ``traceparent`` on both HTTP fronts and a WebSocket."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.trace import SpanKind, StatusCode
from twisted.python import usage
from wsproto.events import TextMessage

from pushengine.api.rpc import UNKNOWN_METHOD, session_hash
from pushengine.app import tap
from pushengine.core.changes import Change
from pushengine.core.tracing import NO_SPAN, NO_TRACER, active
from pushengine.tracing.otel import MAX_ATTRIBUTE, build_tracer
from tests.http.harness import ClockNode, Http, Raw, Rpc, http_request, options
from tests.transports.test_ws_raw import Client

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
SAMPLED = f"00-{TRACE}-{PARENT}-01"
NOT_SAMPLED = f"00-{TRACE}-{PARENT}-00"
ENDPOINT = "http://127.0.0.1:9/v1/traces"


class TracedNode(ClockNode):
    """A node with ``--otlp-endpoint``, whose tracer (the same adapter)
    exports to memory as each span ends."""

    def __init__(self, *argv: str, sample: str = "1", **kwargs: Any) -> None:
        self.exporter = InMemorySpanExporter()
        super().__init__("--otlp-endpoint", ENDPOINT, "--trace-sample", sample, *argv, **kwargs)

    def _tracer(self) -> Any:
        return build_tracer(None, self.options["trace-sample"], self.options["node-id"],
                            exporter=self.exporter, processor=SimpleSpanProcessor)

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if name is None or s.name == name]

    def clear(self) -> None:
        self.exporter.clear()


def stream(i: int) -> dict:
    return {"id": i, "title": f"stream {i}", "user_id": 1, "live": True, "public": True,
            "created_at": f"2026-01-01T00:00:{i % 60:02d}Z"}


def rpc_body(method: str, *params: Any, **extra: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params),
                       **extra}).encode()


def twisted_web_call(node: TracedNode, body: bytes, headers: dict | None = None) -> dict:
    reply = Http(node.web.resource()).post("/api/jsonrpc", body, headers)
    assert reply.code == 200, reply
    return reply.json()


def fast_call(node: TracedNode, body: bytes, headers: dict | None = None) -> dict:
    raw = Raw(node.http_factory())
    raw.send(http_request("POST", "/api/jsonrpc", body,
                          {"Content-Type": "application/json", **(headers or {})}))
    node.clock.advance(0)
    reply = raw.response()
    assert reply.code == 200, reply
    return reply.json()


FRONTS = {"twisted.web": twisted_web_call, "fast": fast_call}


def is_child_of_caller(span: ReadableSpan) -> bool:
    return (span.context.trace_id == int(TRACE, 16) and span.parent is not None
            and span.parent.span_id == int(PARENT, 16) and span.parent.is_remote)


# -- calls ---------------------------------------------------------------------------

@pytest.mark.parametrize("front", FRONTS)
def test_a_call_with_a_traceparent_continues_the_callers_trace(front: str) -> None:
    node = TracedNode()
    sid = FRONTS[front](node, rpc_body("session.create"), {"traceparent": SAMPLED})["result"]
    assert FRONTS[front](node, rpc_body("session.get_events", sid, 0),
                         {"traceparent": SAMPLED})["result"] == []
    create, poll = node.spans("session.create"), node.spans("session.get_events")
    assert len(create) == len(poll) == 1
    for span in (create[0], poll[0]):
        assert is_child_of_caller(span) and span.kind == SpanKind.SERVER
        assert span.attributes["rpc.system"] == "jsonrpc"
        # a hash of the session, the same for both calls, never the id itself
        assert span.attributes["pushengine.session"] == session_hash(sid) != sid
        assert sid not in json.dumps(dict(span.attributes))
    assert poll[0].attributes["rpc.method"] == "session.get_events"
    assert poll[0].status.status_code is StatusCode.UNSET


def test_a_call_without_a_traceparent_starts_a_trace_and_a_failure_says_its_code() -> None:
    node = TracedNode()
    answer = fast_call(node, rpc_body("session.get_events", "no-such-session", 0))
    assert answer["error"]["code"] == 1001
    [span] = node.spans("session.get_events")
    assert span.parent is None and span.context.trace_id != int(TRACE, 16)
    assert span.attributes["rpc.jsonrpc.error_code"] == 1001
    assert span.status.status_code is StatusCode.ERROR


def test_the_calls_own_traceparent_member_wins_over_the_header() -> None:
    node = TracedNode()
    other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    fast_call(node, rpc_body("session.create", traceparent=SAMPLED), {"traceparent": other})
    [span] = node.spans("session.create")
    assert is_child_of_caller(span)


def test_a_caller_whose_trace_is_not_sampled_gets_no_span_even_at_ratio_one() -> None:
    node = TracedNode(sample="1")
    fast_call(node, rpc_body("session.create"), {"traceparent": NOT_SAMPLED})
    assert node.spans() == []


def test_a_sampled_caller_is_traced_at_ratio_zero_and_nothing_else_is() -> None:
    node = TracedNode(sample="0")
    rpc = Rpc(Http(node.web.resource()))
    sid = rpc("session.create")
    rpc("stream.subscribe_public_live", sid, 5)
    node.feed.publish([Change("Stream", "upsert", 1, stream(1))])
    rpc("session.get_events", sid, 0)
    assert node.spans() == []
    fast_call(node, rpc_body("stream.subscribe_user", sid, 7), {"traceparent": SAMPLED})
    [call] = node.spans("stream.subscribe_user")
    [read] = node.spans("view.initial_state")
    assert is_child_of_caller(call) and read.parent.span_id == call.context.span_id


def test_a_batch_makes_a_span_per_call() -> None:
    node = TracedNode()
    body = json.dumps([{"jsonrpc": "2.0", "id": i, "method": "session.create"}
                       for i in range(3)]).encode()
    assert len(fast_call(node, body, {"traceparent": SAMPLED})) == 3
    spans = node.spans("session.create")
    assert len(spans) == 3 and all(is_child_of_caller(s) for s in spans)


# -- initial-state reads and changes -------------------------------------------------

def test_a_subscription_reads_its_initial_state_in_a_span_under_its_call() -> None:
    node = TracedNode()
    node.engine.apply_changes([Change("Stream", "upsert", i, stream(i)) for i in range(1, 4)])
    sid = fast_call(node, rpc_body("session.create"))["result"]
    node.clear()
    fast_call(node, rpc_body("stream.subscribe_public_live", sid, 10), {"traceparent": SAMPLED})
    [call] = node.spans("stream.subscribe_public_live")
    [read] = node.spans("view.initial_state")
    assert read.parent.span_id == call.context.span_id
    assert read.context.trace_id == call.context.trace_id == int(TRACE, 16)
    assert read.attributes["pushengine.view"] == "PublicLiveStreamView"
    assert read.attributes["pushengine.store"] == "memory"
    assert read.attributes["pushengine.rows"] == 3
    assert read.attributes["pushengine.limit"] == 10
    # the same view again: no read
    sid2 = fast_call(node, rpc_body("session.create"))["result"]
    fast_call(node, rpc_body("stream.subscribe_public_live", sid2, 10))
    assert len(node.spans("view.initial_state")) == 1


def test_a_failed_read_ends_its_span_as_an_error() -> None:
    from twisted.internet.defer import fail

    class Broken:
        kind = "http"

        def query(self, view: Any, params: Any, limit: int) -> Any:
            return fail(RuntimeError("the backend is away"))

        def apply_changes(self, changes: Any) -> None:
            pass

    node = TracedNode(store=Broken())
    sid = fast_call(node, rpc_body("session.create"))["result"]
    answer = fast_call(node, rpc_body("stream.subscribe_public_live", sid, 10))
    assert "error" in answer
    [read] = node.spans("view.initial_state")
    assert read.status.status_code is StatusCode.ERROR
    assert read.attributes["pushengine.store"] == "http"
    assert "RuntimeError" in read.status.description
    [call] = node.spans("stream.subscribe_public_live")
    assert call.status.status_code is StatusCode.ERROR


@pytest.mark.parametrize("front", ["twisted", "fast"])
def test_a_publish_with_a_traceparent_carries_the_changes_application(front: str) -> None:
    node = TracedNode("--http", front)
    sids = [fast_call(node, rpc_body("session.create"))["result"] for _ in range(2)]
    polls = []
    for sid in sids:
        fast_call(node, rpc_body("stream.subscribe_public_live", sid, 10))
        polls.append(Raw(node.http_factory()))
        polls[-1].send(http_request("POST", "/api/jsonrpc", rpc_body("session.get_events",
                                                                     sid, 30, 0),
                                    {"Content-Type": "application/json"}))
    node.clock.advance(0)
    node.clear()
    body = json.dumps([{"type": "Stream", "action": "upsert", "obj": stream(i)}
                       for i in (1, 2)]).encode()
    raw = Raw(node.http_factory())
    raw.send(http_request("POST", "/api/publish", body,
                          {"Content-Type": "application/json", "traceparent": SAMPLED}))
    node.clock.advance(0)
    assert raw.response().code == 200, raw.response()
    [publish] = node.spans("publish")
    [apply] = node.spans("changes.apply")
    assert is_child_of_caller(publish) and publish.kind == SpanKind.SERVER
    assert publish.attributes["pushengine.changes"] == 2
    assert publish.attributes["http.response.status_code"] == 200
    assert apply.parent.span_id == publish.context.span_id and apply.kind == SpanKind.CONSUMER
    assert apply.attributes["pushengine.change.types"] == "Stream"
    assert apply.attributes["pushengine.changes"] == 2
    assert apply.attributes["pushengine.changes.dropped"] == 0
    assert apply.attributes["pushengine.queries"] >= 1
    assert apply.attributes["pushengine.sessions"] == 2          # both polls woken
    assert all(poll.response().code == 200 for poll in polls)
    # from arrival to the last write: it ends within the publish
    assert publish.start_time <= apply.start_time <= apply.end_time <= publish.end_time


def test_changes_from_a_feed_start_their_own_trace() -> None:
    node = TracedNode()
    node.engine.apply_changes([Change("Stream", "upsert", 1, stream(1)),
                               Change("Nothing", "upsert", 1, {"id": 1})])
    [apply] = node.spans("changes.apply")
    assert apply.parent is None
    assert apply.attributes["pushengine.changes"] == 1
    assert apply.attributes["pushengine.changes.dropped"] == 1
    assert apply.attributes["pushengine.sessions"] == 0


def test_a_refused_publish_is_a_failed_span() -> None:
    node = TracedNode("--publish-key", "k" * 20)
    raw = Raw(node.http_factory())
    raw.send(http_request("POST", "/api/publish", b"[]",
                          {"Content-Type": "application/json", "traceparent": SAMPLED}))
    node.clock.advance(0)
    assert raw.response().code == 401
    [publish] = node.spans("publish")
    assert publish.attributes["http.response.status_code"] == 401
    assert publish.status.status_code is StatusCode.ERROR


# -- the WebSocket -------------------------------------------------------------------

def test_calls_over_a_websocket_continue_its_upgrade_requests_trace() -> None:
    node = TracedNode()
    c = Client(node, headers={"traceparent": SAMPLED})
    sid = c.call("session.create")["result"]
    c.call("stream.subscribe_public_live", sid, 5)
    create, subscribe = node.spans("session.create"), node.spans("stream.subscribe_public_live")
    assert len(create) == len(subscribe) == 1
    assert is_child_of_caller(create[0]) and is_child_of_caller(subscribe[0])
    # a call's own member: its own trace
    own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    c.raw.transport.protocol.dataReceived(c.ws.send(TextMessage(json.dumps(
        {"jsonrpc": "2.0", "id": 99, "method": "stats.online", "traceparent": own}))))
    node.clock.advance(0)
    [online] = node.spans("stats.online")
    assert online.context.trace_id == int("0af7651916cd43dd8448eb211c80319c", 16)


# -- what a client sends ---------------------------------------------------------------

BAD = ["", "garbage", "00-" + "0" * 32 + "-" + PARENT + "-01",   # zero trace id
       f"00-{TRACE}-{'0' * 16}-01",                                 # zero parent id
       f"ff-{TRACE}-{PARENT}-01",                                   # version ff
       f"00-{TRACE.upper()}-{PARENT}-01",                           # upper case
       f"00-{TRACE}-{PARENT}-01-extra",                             # 00 with more
       f"0-{TRACE}-{PARENT}-01", f"00-{TRACE[:-1]}-{PARENT}-01",
       "00-" + "a" * 10_000, SAMPLED + " " * 600, "\x00" * 55]


@pytest.mark.parametrize("value", BAD, ids=range(len(BAD)))
def test_a_bad_traceparent_is_ignored_and_the_call_answers(value: str) -> None:
    node = TracedNode()
    for send in (lambda: fast_call(node, rpc_body("session.create", traceparent=value)),
                 lambda: fast_call(node, rpc_body("session.create"),
                                   {"traceparent": value.encode("latin-1", "replace")
                                    .decode("latin-1").replace("\x00", "")[:8000]})):
        assert isinstance(send()["result"], str)
    spans = node.spans("session.create")
    assert len(spans) == 2
    assert all(s.parent is None and s.context.trace_id != int(TRACE, 16) for s in spans)


@pytest.mark.parametrize("value", [7, None, {"a": 1}, [SAMPLED], True])
def test_a_traceparent_member_that_is_no_string_is_ignored(value: Any) -> None:
    node = TracedNode()
    fast_call(node, rpc_body("session.create", traceparent=value), {"traceparent": SAMPLED})
    [span] = node.spans("session.create")
    assert is_child_of_caller(span)     # the header's, not the member's


def test_two_traceparent_headers_are_ignored() -> None:
    node = TracedNode()
    raw = Raw(node.http_factory())
    body = rpc_body("session.create")
    raw.send(b"POST /api/jsonrpc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"traceparent: " + SAMPLED.encode() + b"\r\ntraceparent: " + SAMPLED.encode()
             + b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    node.clock.advance(0)
    assert raw.response().code == 200
    [span] = node.spans("session.create")
    assert span.parent is None


def test_what_a_client_names_cannot_grow_a_span() -> None:
    node = TracedNode()
    name = "x" * 5000
    answer = fast_call(node, rpc_body(name))
    assert answer["error"]["code"] == -32601
    [span] = node.spans(UNKNOWN_METHOD)
    assert len(span.attributes["rpc.method"]) <= 100
    assert all(len(v) <= MAX_ATTRIBUTE for v in span.attributes.values() if isinstance(v, str))
    assert len(span.attributes["rpc.jsonrpc.error_message"]) <= 200
    # a session id longer than any the node makes is not hashed
    fast_call(node, rpc_body("session.get_events", "s" * 5000, 0))
    [poll] = node.spans("session.get_events")
    assert "pushengine.session" not in poll.attributes


def test_a_parked_poll_is_one_span_from_its_call_to_its_answer() -> None:
    node = TracedNode("--max-timeout", "60")
    sid = fast_call(node, rpc_body("session.create"))["result"]
    fast_call(node, rpc_body("stream.subscribe_public_live", sid, 5))
    raw = Raw(node.http_factory())
    raw.send(http_request("POST", "/api/jsonrpc", rpc_body("session.get_events", sid, 30, 0),
                          {"Content-Type": "application/json", "traceparent": SAMPLED}))
    node.clock.advance(0)
    assert node.spans("session.get_events") == []        # parked: not answered yet
    node.engine.apply_changes([Change("Stream", "upsert", 1, stream(1))])
    assert raw.response().json()["result"][0]["obj"]["id"] == 1
    [poll] = node.spans("session.get_events")
    [apply] = node.spans("changes.apply")
    assert is_child_of_caller(poll)
    # answered inside the change's application, which is not its parent
    assert apply.parent is None and poll.end_time <= apply.end_time


# -- sampling --------------------------------------------------------------------------

def test_roots_are_sampled_by_their_trace_id_as_the_ratio_says() -> None:
    node = TracedNode("--max-client-sessions", "0", "--max-client-connections", "0",
                      sample="0.3")
    for _ in range(300):
        fast_call(node, rpc_body("session.create"))
    spans = node.spans("session.create")
    bound = TraceIdRatioBased.get_bound_for_rate(0.3)
    assert 30 < len(spans) < 180          # about 90; far outside: the ratio is wrong
    assert all(s.context.trace_id & TraceIdRatioBased.TRACE_ID_LIMIT < bound for s in spans)


def test_the_children_of_a_span_sampled_out_are_sampled_out() -> None:
    tracer = build_tracer(None, 0.0, "n", exporter=InMemorySpanExporter(),
                          processor=SimpleSpanProcessor)
    root = tracer.start("root")
    assert root is NO_SPAN
    previous = tracer.enter(root)
    assert tracer.start("child") is NO_SPAN
    tracer.leave(previous)
    assert tracer.start("other", traceparent=SAMPLED).is_recording()


# -- without tracing -------------------------------------------------------------------

def test_without_an_endpoint_nothing_is_traced_and_opentelemetry_is_not_imported() -> None:
    node = ClockNode()
    assert node.tracer is NO_TRACER and active(node.tracer) is None
    assert node.dispatcher.tracer is None and node.engine.tracer is None
    assert node.engine.registry.tracer is None and node.publisher.tracer is None
    assert not node.policy.traces
    script = ("import sys\n"
              "from tests.http.harness import ClockNode\n"
              "node = ClockNode()\n"
              "sid = node.api.session_create()\n"
              "assert not [m for m in sys.modules if m.startswith('opentelemetry')], "
              "sorted(m for m in sys.modules if m.startswith('opentelemetry'))[:5]\n")
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run([sys.executable, "-c", script], check=True, cwd=root, timeout=120,
                   env={**os.environ, "PYTHONPATH": root})


def test_a_traceparent_is_not_read_without_tracing() -> None:
    node = ClockNode()
    caller = node.policy.caller("127.0.0.1", {b"traceparent": [SAMPLED.encode()]})
    assert caller.traceparent is None
    assert b"traceparent" not in node.policy.caller_headers


# -- options ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["--trace-sample", "1.5"], "--trace-sample must be a number from 0 to 1"),
    (["--trace-sample", "-0.1"], "--trace-sample must be a number from 0 to 1"),
    (["--trace-sample", "nan"], "--trace-sample must be a number from 0 to 1"),
    (["--otlp-endpoint", "collector:4318"], "--otlp-endpoint must be an http(s):// URL"),
])
def test_bad_tracing_options_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(usage.UsageError, match=re.escape(message)):
        options(*argv)


def test_tracing_options_are_read_with_their_defaults() -> None:
    o = options()
    assert o["otlp-endpoint"] is None and o["trace-sample"] == 0.01
    o = options("--otlp-endpoint", ENDPOINT, "--trace-sample", "1")
    assert o["otlp-endpoint"] == ENDPOINT and o["trace-sample"] == 1.0


def test_an_endpoint_without_the_otel_extra_names_the_extra(monkeypatch) -> None:
    monkeypatch.setattr(tap, "tracing_missing", lambda: "opentelemetry.sdk.trace")
    with pytest.raises(usage.UsageError, match=r"install the otel extra, pip install "
                                               r"'pushengine\[otel\]'"):
        options("--otlp-endpoint", ENDPOINT)


# -- the SDK's own log -------------------------------------------------------------------

def test_the_sdks_warnings_reach_the_log_once_a_minute_each() -> None:
    import logging
    said: list[dict] = []

    def call_from_thread(f: Any, format: str, **kwargs: Any) -> None:
        said.append(kwargs)

    build_tracer(None, 1.0, "n", exporter=InMemorySpanExporter(),
                 processor=SimpleSpanProcessor, call_from_thread=call_from_thread)
    exporter = logging.getLogger("opentelemetry.exporter.otlp.proto.http")
    for delay in (0.5, 1.0, 2.0):
        exporter.warning("Transient error %s encountered, retrying in %.2fs.", "refused", delay)
    logging.getLogger("opentelemetry.sdk.trace").error("Failed to export %s batch", "spans")
    assert [k["text"] for k in said] == ["Transient error refused encountered, retrying in 0.50s.",
                                         "Failed to export spans batch"]


def test_a_websocket_upgraded_by_twisted_web_carries_its_traceparent() -> None:
    from twisted.web.test.requesthelper import DummyRequest
    node = TracedNode()
    request = DummyRequest([b"api", b"ws"])
    request.requestHeaders.addRawHeader(b"traceparent", SAMPLED.encode())
    channel = object()
    caller = node.policy.request_caller(request, channel)
    assert caller.channel is channel and caller.traceparent == SAMPLED
    fast = node.policy.channel_caller("127.0.0.1", {b"traceparent": [SAMPLED.encode()]}, channel)
    assert fast.channel is channel and fast.traceparent == SAMPLED
