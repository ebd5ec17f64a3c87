"""/metrics: the engine's figures in the Prometheus text format.

The core keeps plain counters; this collector reads them (and the feed's,
cache's and registry's ``stats()``) at scrape time, so nothing on the hot
path touches prometheus_client.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class EngineCollector:
    def __init__(self, engine: Any, node_id: str, clock: Any,
                 sources: dict[str, Any] | None = None,
                 rpc_errors: dict[int, int] | None = None) -> None:
        self.engine = engine
        self.node_id = node_id
        self.clock = clock
        self.sources = sources or {}
        self.rpc_errors = rpc_errors if rpc_errors is not None else {}

    def collect(self) -> Iterable:
        e, s = self.engine, self.engine.sessions
        node = [self.node_id]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=["node"])
            g.add_metric(node, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=["node"])
            c.add_metric(node, value)
            return c

        yield gauge("pushengine_sessions", "Sessions held by this node", len(s.sessions))
        yield gauge("pushengine_subscriptions", "Subscriptions of all sessions",
                    sum(len(x.subs) for x in s.sessions.values()))
        windows = list(e.registry.windows())
        yield gauge("pushengine_views", "View instances (windows) with subscribers", len(windows))
        yield gauge("pushengine_queries", "Live queries (views by parameters)",
                    len(e.registry.queries))
        yield gauge("pushengine_polls_waiting", "Long-polls parked", s.waiting)
        yield counter("pushengine_changes", "Changes applied from the feed", e.counters.changes_in)
        yield counter("pushengine_change_errors", "Changes that failed to apply",
                      e.counters.change_errors)
        yield counter("pushengine_changes_dropped",
                      "Changes of a type that no view uses, counted and not kept",
                      e.counters.changes_dropped)
        yield counter("pushengine_feed_gaps", "Times the feed lost its queue", e.counters.feed_gaps)
        yield counter("pushengine_events_out", "Events sent to clients", s.events_out)
        yield counter("pushengine_queue_overflows", "Session queues that overflowed", s.overflows)
        yield counter("pushengine_sessions_expired", "Sessions destroyed for not polling",
                      s.expired)
        errors = CounterMetricFamily("pushengine_rpc_errors", "JSON-RPC errors answered",
                                     labels=["node", "code"])
        for code, n in sorted(self.rpc_errors.items()):
            errors.add_metric([self.node_id, str(code)], n)
        yield errors
        if e.counters.last_change_at is not None:
            yield gauge("pushengine_last_change_age_seconds",
                        "Seconds since the last change arrived",
                        self.clock.seconds() - e.counters.last_change_at)
        for prefix, source in self.sources.items():
            stats: Callable[[], dict] | None = getattr(source, "stats", None)
            if stats is None:
                continue
            try:
                figures = stats()
            except Exception:
                continue
            counters = getattr(source, "counter_names", ())
            for name, value in sorted(figures.items()):
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    make = counter if name in counters else gauge
                    yield make(f"pushengine_{prefix}_{name}", f"{prefix} {name}", value)


class Figures:
    """Figures read asynchronously (from memcached) and kept for the next scrape."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def stats(self) -> dict[str, float]:
        return dict(self.values)


def make_registry(collector: EngineCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
