"""What traces cost the hot paths, in process: off, sampled at 0.01, and at 1.

    python bench/trace_cost.py [--requests 20000] [--polls 2000] [--rounds 5]

Builds a node on a Clock (no sockets), as bench/metrics_cost.py does, three
ways, alternating in each round so that drift hits all alike:

- *off*: no ``--otlp-endpoint`` (the tracer is the no-op one, OpenTelemetry
  is not imported by the node);
- *0.01* and *1*: ``--otlp-endpoint`` with ``--trace-sample`` 0.01 and 1,
  the node's own tracer (``pushengine/tracing/otel.py``: the SDK's
  ``BatchSpanProcessor`` and its thread), whose exporter encodes each batch
  to the OTLP protobuf request, as the OTLP/HTTP exporter does, and drops
  it instead of POSTing it (no collector; what a POST adds per batch of up
  to 512 spans is not counted). What waits is exported before the clock
  stops, so that the exporting thread's CPU is counted: the figures are the
  process's CPU time.

Measured, each as bench/metrics_cost.py measures it:

- *answer*: CPU microseconds per ``session.get_events`` answer with 10
  events waiting, on the fast front, one request per read on 50 keep-alive
  connections (no traceparent: each call is a root, sampled at the ratio);
- *event*: CPU microseconds per woken poll's answer when one change wakes
  ``--polls`` parked polls (the change's span, and each poll's call span).

Prints the medians per way, their differences with off and their ratios,
and the spans exported and dropped (a full queue drops the oldest).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Sequence

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from inprocess_http import never_timer, request, subscribed, waiting_answers  # noqa: E402

WAYS = ("off", "0.01", "1")


class EncodingExporter:
    """An OTLP exporter without the network: each batch encoded to the
    protobuf request the OTLP/HTTP exporter would POST, then dropped."""

    def __init__(self) -> None:
        self.spans = 0
        self.bytes = 0

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        from opentelemetry.sdk.trace.export import SpanExportResult
        self.bytes += len(encode_spans(spans).SerializePartialToString())
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _stream(i: int, **extra: Any) -> Any:
    from pushengine.core.changes import Change
    return Change("Stream", "upsert", i, {
        "id": i, "title": f"stream {i}", "user_id": 1, "live": True, "public": True,
        "created_at": f"2026-11-30T00:00:{i:02d}Z", "viewers": i, **extra})


class Figures:
    """What one way exported and dropped, over every run."""

    def __init__(self) -> None:
        self.exported = 0
        self.dropped = 0


def _node(way: str, figures: Figures) -> Any:
    from opentelemetry.sdk.trace import SpanProcessor

    from tests.http.harness import ClockNode

    class Ended(SpanProcessor):
        """Counts the spans ended (beside the batch processor)."""

        spans = 0

        def on_end(self, span: Any) -> None:
            self.spans += 1

    class Node(ClockNode):
        def _tracer(self) -> Any:
            if way == "off":
                return super()._tracer()
            from pushengine.tracing.otel import build_tracer
            self.exporter = EncodingExporter()
            self.ended = Ended()
            tracer = build_tracer(None, float(way), "bench", exporter=self.exporter,
                                  call_from_thread=lambda *args, **kwargs: None)
            tracer.provider.add_span_processor(self.ended)
            return tracer

    argv = ["--http", "fast", "--client-rate", "0", "--max-client-sessions", "0",
            "--max-client-connections", "0", "--max-sessions", "0"]
    if way != "off":
        argv += ["--otlp-endpoint", "http://127.0.0.1:9/v1/traces", "--trace-sample", way]
    node = Node(*argv)
    node.dispatcher.clock = time.time
    node.figures = figures
    return node


def _flushed(node: Any) -> None:
    """Export what waits (inside the timed stretch: its CPU is counted)."""
    tracer = node.tracer
    if tracer.enabled:
        tracer.force_flush()


def _count(node: Any) -> None:
    tracer = node.tracer
    if tracer.enabled:
        node.figures.exported += node.exporter.spans
        node.figures.dropped += node.ended.spans - node.exporter.spans
        tracer.shutdown()


def answers(way: str, requests: int, figures: Figures) -> float:
    """µs CPU per get_events answer with 10 events waiting."""
    node = _node(way, figures)
    run = waiting_answers(node, [_stream(i) for i in range(10)])
    run(500)
    _flushed(node)
    if way != "off":
        node.exporter.spans = node.ended.spans = 0
    start = time.process_time()
    done = run(requests)
    _flushed(node)
    cpu = time.process_time() - start
    _count(node)
    return cpu / done * 1e6


def events(way: str, polls: int, figures: Figures, changes: int = 5) -> float:
    """µs CPU per woken poll's answer (one change wakes ``polls`` polls)."""
    node = _node(way, figures)
    node.clock.callLater = never_timer          # type: ignore[method-assign]
    node.clock.seconds = time.time              # type: ignore[method-assign]
    factory = node.http_factory()
    conns = subscribed(factory, polls)
    _flushed(node)
    if way != "off":
        node.exporter.spans = node.ended.spans = 0
    cpu = 0.0
    for n in range(changes + 1):
        for protocol, transport, sid in conns:
            protocol.dataReceived(request({"jsonrpc": "2.0", "id": 3,
                                           "method": "session.get_events",
                                           "params": [sid, 30, n]}))
        _flushed(node)
        start = time.process_time()
        node.engine.apply_changes([_stream(1, n=n + 1)])
        _flushed(node)
        woke = time.process_time() - start
        for protocol, transport, sid in conns:
            assert transport.value().count(b"HTTP/1.1 200") == 1
            transport.clear()
        if n:
            cpu += woke
    _count(node)
    return cpu / (changes * polls) * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=20_000)
    p.add_argument("--polls", type=int, default=2_000)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    if a.requests < 50 or a.polls < 1 or a.rounds < 1:
        p.error("--requests must be 50 or more, --polls and --rounds 1 or more")
    from pushengine.app.tap import tune_gc
    tune_gc()
    figures = {way: Figures() for way in WAYS}
    took: dict[str, dict[str, list[float]]] = {
        key: {way: [] for way in WAYS} for key in ("answer", "event")}
    for _ in range(a.rounds):
        for way in WAYS:
            took["answer"][way].append(answers(way, a.requests, figures[way]))
            took["event"][way].append(events(way, a.polls, figures[way]))
    print(f"{a.requests:,} get_events answers with 10 events waiting, {a.polls:,} polls "
          f"woken per change; medians of {a.rounds} rounds")
    for key, label in (("answer", "µs CPU per answer"), ("event", "µs CPU per woken poll")):
        off = statistics.median(took[key]["off"])
        parts = [f"{label}: off {off:.2f}"]
        for way in WAYS[1:]:
            on = statistics.median(took[key][way])
            parts.append(f"sampled {way} {on:.2f} ({on - off:+.2f} µs, ×{on / off:.3f})")
        print(", ".join(parts))
    for way in WAYS[1:]:
        print(f"spans at {way}: {figures[way].exported:,} exported, "
              f"{figures[way].dropped:,} dropped")


if __name__ == "__main__":
    main()
