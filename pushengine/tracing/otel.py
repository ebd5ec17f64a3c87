"""The node's tracer on the OpenTelemetry SDK, its spans sent over OTLP/HTTP.

Library: opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http 1.x
(setup.cfg's ``otel`` extra), through their public API: a ``TracerProvider``
with the sampler ``ParentBased(TraceIdRatioBased(--trace-sample))`` and
``SpanLimits``, a ``BatchSpanProcessor`` (its own thread: the reactor only
puts an ended span on its queue; the thread encodes and POSTs batches), the
OTLP/HTTP protobuf exporter, and the W3C ``TraceContextTextMapPropagator``
that reads a ``traceparent``. Nothing else of the node imports OpenTelemetry.

``OtelTracer`` is ``core.tracing.Tracer``. Sampling is the SDK sampler's:
a span under a remote parent (a valid ``traceparent``) is sampled when the
parent's sampled flag is set; a span started inside another (``enter``)
follows it; a root is sampled when its trace id falls under the ratio's
bound (``TraceIdRatioBased``). The tracer takes the cheap decisions first,
so that a span the sampler would drop is never built: a remote parent not
sampled, a current span not sampled, and a root whose trace id, drawn here
and then handed to the SDK (``_PresetIds``), is above the bound. The SDK
then decides exactly as it would have, and at ``--trace-sample 0.01`` 99
calls in 100 cost a random number and a comparison.

What a client sends cannot grow a span: a ``traceparent`` longer than
``MAX_TRACEPARENT`` is not read, one the propagator does not accept is
ignored (the span starts a trace), span names are cut at ``MAX_NAME``
characters, string attributes at ``MAX_ATTRIBUTE`` (``SpanLimits``), a span
holds at most ``MAX_ATTRIBUTES``; the batch queue holds at most
``MAX_QUEUE`` ended spans and drops the oldest beyond (the SDK logs it; its
warnings reach the node's log at most once a minute each: ``_SdkLog``).
"""
from __future__ import annotations

import logging
import time
from random import getrandbits as _bits
from typing import Any, Callable, Mapping, cast

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from twisted.logger import Logger

from pushengine.core.tracing import NO_SPAN, Attribute, Span

log = Logger()

MAX_TRACEPARENT = 512       # characters of a traceparent read at most (version 00: 55)
MAX_NAME = 100              # characters of a span's name
MAX_ATTRIBUTE = 256         # characters of a string attribute
MAX_ATTRIBUTES = 32         # attributes of one span
MAX_QUEUE = 4096            # ended spans waiting for the exporter's thread
BATCH = 512                 # spans per OTLP request at most
DELAY_MS = 1000             # the exporter's thread sends what waits at least this often
TIMEOUT = 10.0              # seconds one export (its retries included) may take
LOG_EVERY = 60.0            # seconds between two log lines of the same SDK message

_KINDS = {"server": SpanKind.SERVER, "consumer": SpanKind.CONSUMER,
          "internal": SpanKind.INTERNAL}
_LIMIT = TraceIdRatioBased.TRACE_ID_LIMIT


class _PresetIds(RandomIdGenerator):
    """The SDK's random ids, but a root's trace id may be drawn first (by
    the tracer, which judged it) and then taken by the SDK (``preset``)."""

    def __init__(self) -> None:
        self.preset = 0

    def generate_trace_id(self) -> int:
        trace_id, self.preset = self.preset, 0
        return trace_id or super().generate_trace_id()


class OtelTracer:
    """``core.tracing.Tracer`` over a ``TracerProvider`` (see the module
    docstring); ``build_tracer`` makes one."""

    def __init__(self, provider: TracerProvider, ids: _PresetIds, ratio: float) -> None:
        from pushengine import __version__
        self.provider = provider
        self._tracer = provider.get_tracer("pushengine", __version__)
        self._ids = ids
        self.ratio = ratio
        self._bound = TraceIdRatioBased.get_bound_for_rate(ratio)
        self._propagator = TraceContextTextMapPropagator()
        self._current: Span | None = None

    @property
    def enabled(self) -> bool:
        return True

    def start(self, name: str, attributes: Mapping[str, Attribute] | None = None,
              traceparent: str | None = None, kind: str = "internal") -> Span:
        context = None
        if traceparent is not None:
            parent = self.remote(traceparent)
            if parent is not None:
                if not parent.trace_flags.sampled:
                    return NO_SPAN          # ParentBased: the caller's trace is not sampled
                context = trace.set_span_in_context(NonRecordingSpan(parent))
        if context is None:
            current = self._current
            if current is None:
                # a root: TraceIdRatioBased's rule on the trace id's low 64
                # bits, drawn first; the SDK then takes the same id
                low = _bits(64)
                if low >= self._bound:
                    return NO_SPAN          # a root the ratio leaves out
                self._ids.preset = (_bits(64) << 64) | low or 1 << 64
            elif current is NO_SPAN:
                return NO_SPAN              # inside a span sampled out
            else:
                context = trace.set_span_in_context(cast(trace.Span, current))
        span: Span = self._tracer.start_span(name[:MAX_NAME], context,
                                             _KINDS.get(kind, SpanKind.INTERNAL),
                                             cast(Any, attributes))
        return span

    def remote(self, traceparent: str) -> SpanContext | None:
        """The caller's span of a W3C ``traceparent`` value, or None when the
        value is not one (too long, malformed, version ff, zero ids)."""
        if type(traceparent) is not str or len(traceparent) > MAX_TRACEPARENT:
            return None
        try:
            context = self._propagator.extract({"traceparent": traceparent})
        except Exception:
            return None
        parent = trace.get_current_span(context).get_span_context()
        return parent if parent.is_valid and parent.is_remote else None

    def enter(self, span: Span) -> Span | None:
        previous, self._current = self._current, span
        return previous

    def leave(self, previous: Span | None) -> None:
        self._current = previous

    def failed(self, span: Span, description: str) -> None:
        if span.is_recording():
            cast(trace.Span, span).set_status(Status(StatusCode.ERROR,
                                                     description[:MAX_ATTRIBUTE]))

    def force_flush(self) -> bool:
        """Export what waits now (tests, benchmarks); blocks."""
        return bool(self.provider.force_flush())

    def shutdown(self) -> None:
        """Export what waits and stop the exporter's thread; blocks for up to
        the export timeout (``app`` runs it in a thread at shutdown)."""
        self.provider.shutdown()


def build_tracer(endpoint: str | None, ratio: float, node_id: str,
                 exporter: SpanExporter | None = None, processor: Any = None,
                 call_from_thread: Callable[..., Any] | None = None) -> OtelTracer:
    """A tracer sending its sampled spans (``ratio`` of the roots, 0 to 1)
    to the OTLP/HTTP ``endpoint`` (``http://collector:4318/v1/traces``),
    or to ``exporter`` (tests give an in-memory one), through a
    ``BatchSpanProcessor`` unless ``processor`` (a class taking the
    exporter) says otherwise. ``call_from_thread``: the reactor's, to log
    the SDK's warnings from its thread (at most one a minute per message)."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError("the sampling ratio must be from 0 to 1")
    from pushengine import __version__
    if exporter is None:
        if endpoint is None:
            raise ValueError("an OTLP endpoint or an exporter is needed")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        exporter = OTLPSpanExporter(endpoint=endpoint, timeout=TIMEOUT)
    ids = _PresetIds()
    provider = TracerProvider(
        sampler=ParentBased(TraceIdRatioBased(ratio)),
        resource=Resource.create({"service.name": "pushengine", "service.version": __version__,
                                  "service.instance.id": node_id}),
        span_limits=SpanLimits(max_attributes=MAX_ATTRIBUTES, max_attribute_length=MAX_ATTRIBUTE,
                               max_span_attributes=MAX_ATTRIBUTES,
                               max_span_attribute_length=MAX_ATTRIBUTE),
        id_generator=ids)
    if processor is None:
        provider.add_span_processor(BatchSpanProcessor(
            exporter, max_queue_size=MAX_QUEUE, schedule_delay_millis=DELAY_MS,
            max_export_batch_size=BATCH))
    else:
        provider.add_span_processor(processor(exporter))
    tracer = OtelTracer(provider, ids, ratio)
    if call_from_thread is not None:
        _SdkLog.install(call_from_thread)
    return tracer


class _SdkLog(logging.Handler):
    """The SDK's own log (an export failed, the queue is full) into the
    node's, from whichever thread (through the reactor), at most once per
    message a minute."""

    def __init__(self, call_from_thread: Callable[..., Any]) -> None:
        super().__init__(logging.WARNING)
        self.call_from_thread = call_from_thread
        self.last: dict[str, float] = {}

    @classmethod
    def install(cls, call_from_thread: Callable[..., Any]) -> None:
        sdk = logging.getLogger("opentelemetry")
        for old in [h for h in sdk.handlers if isinstance(h, cls)]:
            sdk.removeHandler(old)
        sdk.addHandler(cls(call_from_thread))
        sdk.propagate = False

    def emit(self, record: logging.LogRecord) -> None:
        template = str(record.msg)
        now = time.monotonic()
        if now - self.last.get(template, -LOG_EVERY) < LOG_EVERY:
            return
        self.last[template] = now
        try:
            text = record.getMessage()[:500]
        except Exception:
            text = template[:500]
        self.call_from_thread(log.warn, "traces: {text}", text=text)
