"""/metrics: the engine's figures in the Prometheus text format.

The core keeps plain counters and histograms (``core/timings.py``); this
collector reads them (and the feed's, cache's and registry's ``stats()``) at
scrape time, so nothing on the hot path touches prometheus_client. Beside
them: the process's own series (``process_*``: CPU, memory, descriptors) and
``pushengine_build_info``.
"""
from __future__ import annotations

from typing import Callable, Collection, Iterable, Iterator, cast

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric)
from prometheus_client.utils import floatToGoString
from twisted.internet.interfaces import IReactorTime

from pushengine.core.engine import Engine
from pushengine.core.timings import Timings
from pushengine.views.registry import ViewRegistry

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
COUNTER, GAUGE = "counter", "gauge"

# The figures of the sources (``Node.sources``: the ``stats()`` of the feed,
# the memcached layer, the registry...), each written by hand: (source,
# figure) -> (kind, series name or None for pushengine_<source>_<figure>, help).
# What only grows is a counter (its series ends in ``_total``); the rest are
# gauges, whose names never end in ``_total``. docs/api.md lists every series.
FIGURES: dict[tuple[str, str], tuple[str, str | None, str]] = {
    # the in-process feed
    ("feed", "messages"): (COUNTER, None, "Changes published into the in-process feed"),
    ("feed", "connected"): (GAUGE, None, "1 while the feed delivers changes, else 0"),
    # the AMQP feed
    ("feed", "messages_received"): (COUNTER, None, "AMQP messages received from this node's "
                                                   "queue"),
    ("feed", "changes_applied"): (COUNTER, None, "Changes from AMQP messages applied to the "
                                                 "engine"),
    ("feed", "malformed_messages"): (COUNTER, None, "AMQP messages dropped as malformed (not "
                                                    "JSON, no change in them)"),
    ("feed", "bad_headers"): (COUNTER, None, "AMQP messages whose timestamp_ms header was not "
                                             "ASCII digits of bounded length (ignored)"),
    ("feed", "malformed_changes"): (COUNTER, None, "Changes dropped as malformed from AMQP "
                                                   "messages"),
    ("feed", "sink_errors"): (COUNTER, None, "Batches of AMQP messages whose changes the "
                                             "engine failed to apply"),
    ("feed", "reconnects"): (COUNTER, None, "Connections to RabbitMQ made again after one was "
                                            "lost"),
    ("feed", "connect_failures"): (COUNTER, None, "Attempts to connect to RabbitMQ that failed"),
    ("feed", "gaps"): (COUNTER, "pushengine_feed_queue_gaps",
                       "Times the AMQP feed found its queue declared afresh: changes may have "
                       "been missed"),
    ("feed", "changes_published"): (COUNTER, None, "Changes this node published to the "
                                                   "exchange (POST /api/publish)"),
    ("feed", "messages_published"): (COUNTER, None, "AMQP messages this node published "
                                                    "(interest mode: one per routing key)"),
    ("feed", "duplicate_copies"): (COUNTER, None, "Second copies of a message published under "
                                                  "two routing keys, dropped (interest mode)"),
    ("feed", "redeliveries_dropped"): (COUNTER, None, "Messages the broker delivered again after "
                                                      "a lost connection whose id this node had "
                                                      "applied already, dropped"),
    ("feed", "wal_copies_dropped"): (COUNTER, None, "AMQP messages at or below the last WAL "
                                                    "position applied (a relay's or Debezium's "
                                                    "copies sent again), dropped"),
    ("feed", "unmapped_events"): (COUNTER, None, "Debezium events of tables no type of the "
                                                 "views file maps to, dropped"),
    ("feed", "ignored_events"): (COUNTER, None, "Debezium tombstones, heartbeats, transaction "
                                                "boundaries and truncates, ignored"),
    ("feed", "batches"): (COUNTER, None, "Batches of AMQP messages applied together (the "
                                         "messages of one read from the broker)"),
    ("feed", "acks"): (COUNTER, None, "basic.ack frames sent for consumed AMQP messages (one "
                                      "per batch, multiple)"),
    ("feed", "bindings"): (GAUGE, "pushengine_feed_bindings",
                           "Routing keys the node's queue is bound to (interest mode)"),
    ("feed", "binding_keys_wanted"): (GAUGE, "pushengine_feed_binding_keys_wanted",
                                      "Routing keys the node's views need (interest mode)"),
    ("feed", "binds"): (COUNTER, None, "Queue bindings the broker confirmed (interest mode)"),
    ("feed", "unbinds"): (COUNTER, None, "Queue bindings removed (interest mode)"),
    ("feed", "binding_failures"): (COUNTER, None, "Bindings or unbindings that failed "
                                                  "(interest mode)"),
    ("feed", "feed_lag_seconds"): (GAUGE, "pushengine_feed_lag_seconds",
                                   "Seconds between the publishing and the receipt of the last "
                                   "AMQP message"),
    # the memcached layer (memcached servers or the in-process store)
    ("memcache", "ops"): (COUNTER, None, "Commands sent to memcached"),
    ("memcache", "hits"): (COUNTER, None, "Keys read from memcached that were there"),
    ("memcache", "misses"): (COUNTER, None, "Keys read from memcached that were not there"),
    ("memcache", "errors"): (COUNTER, None, "memcached commands that failed"),
    ("memcache", "timeouts"): (COUNTER, None, "memcached commands that got no answer in time"),
    ("memcache", "evictions"): (COUNTER, None, "Items the in-process memcached store evicted "
                                               "for room"),
    ("memcache", "items"): (GAUGE, None, "Items held by the in-process memcached store"),
    ("memcache", "servers_up"): (GAUGE, None, "memcached servers taking commands now"),
    ("memcache", "servers_total"): (GAUGE, "pushengine_memcache_servers",
                                    "memcached servers configured"),
    # online counters (memcached)
    ("online", "sessions_counted"): (GAUGE, None, "Sessions this node counts online in the "
                                                  "current period"),
    ("online", "errors"): (COUNTER, None, "Online counter updates that failed (memcached "
                                          "down)"),
    ("cluster", "online_sessions"): (GAUGE, None, "Sessions online in the whole service, as "
                                                  "last read from memcached"),
    # the session registry (--redis)
    ("redis", "writes"): (COUNTER, None, "Session records written to the registry"),
    ("redis", "refreshes"): (COUNTER, None, "Session records whose expiry was renewed"),
    ("redis", "deletes"): (COUNTER, None, "Session records removed"),
    ("redis", "lookups"): (COUNTER, None, "Session records looked up (sessions unknown here)"),
    ("redis", "errors"): (COUNTER, None, "Registry commands that failed"),
    ("redis", "writes_dropped"): (COUNTER, None, "Registry writes dropped while Redis was "
                                                 "unavailable"),
    ("redis", "resumes"): (COUNTER, None, "Sessions resumed here from another node's record"),
    ("redis", "resume_misses"): (COUNTER, None, "Unknown sessions with no record to resume "
                                                "from"),
    ("redis", "resume_failures"): (COUNTER, None, "Resumes that failed (registry "
                                                  "unavailable)"),
    ("redis", "moved_in"): (COUNTER, None, "Sessions taken over from another node"),
    ("redis", "moved_out"): (COUNTER, None, "Sessions another node took over from this one"),
    ("redis", "connects"): (COUNTER, None, "Connections made to Redis"),
    ("redis", "disconnects"): (COUNTER, None, "Connections to Redis lost"),
    ("redis", "connected"): (GAUGE, None, "1 while the registry's Redis connection is up, "
                                          "else 0"),
    ("redis", "subscribed"): (GAUGE, None, "1 while this node listens for sessions moved away "
                                           "from it, else 0"),
    # backend webhooks (--webhook-url)
    ("webhooks", "sent"): (COUNTER, None, "Webhook POSTs the backend accepted (2xx)"),
    ("webhooks", "failed"): (COUNTER, None, "Webhook POSTs that failed (no answer, timeout, "
                                            "not 2xx); each is retried"),
    ("webhooks", "retries"): (COUNTER, None, "Webhook events queued again after a failed "
                                             "POST"),
    ("webhooks", "dropped"): (COUNTER, None, "Webhook events dropped because the queue was "
                                             "full (--webhook-queue)"),
    ("webhooks", "queued"): (GAUGE, None, "Webhook events waiting to be sent"),
    ("webhooks", "in_flight"): (GAUGE, None, "Webhook POSTs in flight"),
    ("webhooks", "timeouts"): (COUNTER, None, "Webhook POSTs cut after the timeout without a "
                                              "whole answer"),
    ("webhooks", "clients"): (GAUGE, None, "Clients with webhook events queued"),
    ("webhooks", "oldest_in_flight_seconds"): (GAUGE, None, "Seconds the oldest webhook POST "
                                                            "in flight has waited"),
    ("webhooks", "failing"): (GAUGE, None, "1 while webhook POSTs fail or hang (one waited "
                                           "half the timeout), else 0"),
    # presence (presence.list, presence: true views)
    ("presence", "rooms"): (GAUGE, None, "Views (with their parameters) where this node has "
                                         "authorized users present"),
    ("presence", "watched_rooms"): (GAUGE, None, "Views with presence: true whose join and "
                                                 "leave this node sends"),
    ("presence", "joins"): (COUNTER, None, "Users announced as joining a presence view"),
    ("presence", "leaves"): (COUNTER, None, "Users announced as leaving a presence view"),
    ("presence", "errors"): (COUNTER, None, "Presence reads and writes in the cache that "
                                            "failed"),
    # the operator's view (--admin-key)
    ("admin", "stats_published"): (COUNTER, None, "NodeStats objects this node published "
                                                  "through the feed"),
    ("admin", "stats_failed"): (COUNTER, None, "NodeStats publications the feed refused"),
    ("admin", "stats_received"): (COUNTER, None, "NodeStats objects of every node received, "
                                                 "signed with the admin key"),
    ("admin", "stats_forged"): (COUNTER, None, "NodeStats objects ignored: not signed with "
                                               "this node's admin key"),
    ("admin", "stats_ignored"): (COUNTER, None, "NodeStats objects dropped by a node without "
                                                "--admin-key"),
    ("admin", "key_refusals"): (COUNTER, None, "admin.* calls refused for a wrong or missing "
                                               "admin key"),
    ("admin", "events_delivered"): (COUNTER, None, "Statistics events queued to admin pages"),
    ("admin", "disconnect_sessions_ended"): (COUNTER, None, "Sessions ended by admin.disconnect, "
                                                            "here or on another node's word"),
    ("admin", "disconnects_received"): (COUNTER, None, "Signed disconnects of other nodes "
                                                       "applied"),
    ("admin", "disconnects_forged"): (COUNTER, None, "Disconnect objects ignored: not signed "
                                                     "with this node's admin key"),
    ("admin", "disconnects_replayed"): (COUNTER, None, "Signed disconnects ignored: seen before "
                                                       "or outside their time window"),
    ("admin", "nodes"): (GAUGE, None, "Nodes whose statistics the admin hub holds"),
    ("admin", "pages"): (GAUGE, None, "Sessions of admin pages subscribed to the statistics"),
    # the streams' heartbeats
    ("pings", "sse"): (COUNTER, None, "': ping' comments written to SSE streams after "
                                      "--sse-ping seconds of silence"),
    ("pings", "ws"): (COUNTER, None, "Ping frames sent to WebSockets after --ws-ping seconds "
                                     "of silence"),
    # per-client limits
    ("clients", "rate_limited"): (COUNTER, None, "Requests refused because their client passed "
                                                 "--client-rate"),
    ("clients", "session_cap_refused"): (COUNTER, None, "Sessions refused because their client "
                                                        "held --max-client-sessions"),
    ("clients", "tracked"): (GAUGE, None, "Client addresses whose call rate is being tracked"),
    # public profiles
    ("profiles", "asked"): (COUNTER, None, "User profiles asked for (user.public_profile(s))"),
    # Bloom filters
    ("bloom", "commands"): (COUNTER, None, "Bloom filter commands run"),
    ("bloom", "errors"): (COUNTER, None, "Bloom filter commands that failed in Redis"),
    ("bloom", "unavailable"): (COUNTER, None, "Bloom filter commands refused while Redis was "
                                              "unavailable"),
    ("bloom", "connects"): (COUNTER, None, "Connections made to the Bloom filters' Redis"),
    ("bloom", "connected"): (GAUGE, None, "1 while the Bloom filters' Redis connection is up, "
                                          "else 0"),
    ("bloom", "filters"): (GAUGE, None, "Bloom filters counted against --bloom-max-bytes"),
    ("bloom", "bytes"): (GAUGE, None, "Bytes of the Bloom filters counted against "
                                      "--bloom-max-bytes (in Redis: those this node knows)"),
    ("bloom", "max_bytes"): (GAUGE, None, "--bloom-max-bytes: the bytes all Bloom filters of "
                                          "this node may take together"),
    ("unique", "added"): (COUNTER, None, "Users added to the unique-users filters of view "
                                         "keys"),
    ("unique", "errors"): (COUNTER, None, "Unique-user additions that failed"),
    ("seen", "asked"): (COUNTER, None, "Objects checked against once_per_user filters"),
    ("seen", "admitted"): (COUNTER, None, "Objects shown for the first time to a user "
                                          "(once_per_user)"),
    ("seen", "refused"): (COUNTER, None, "Objects held back as already seen (once_per_user)"),
    ("seen", "failed_open"): (COUNTER, None, "Objects shown because the once_per_user filter "
                                             "could not be read"),
}


def describe(prefix: str, figure: str,
             counter_names: Collection[str] = ()) -> tuple[str, str, str]:
    """``(kind, series name, help)`` of a source's figure. A figure that
    FIGURES does not describe is still exported (a counter when the source
    lists it in ``counter_names``), with a help text that says so; a test
    keeps every figure of a complete node described."""
    known = FIGURES.get((prefix, figure))
    if known is not None:
        kind, name, doc = known
        return kind, name or f"pushengine_{prefix}_{figure}", doc
    kind = COUNTER if figure in counter_names else GAUGE
    name = f"pushengine_{prefix}_{figure}"
    if kind == GAUGE and name.endswith("_total"):
        name = name[: -len("_total")]
    return kind, name, f"The {prefix} source's figure {figure} (not described yet)"


def histogram(name: str, doc: str, node_id: str, timings: Timings) -> HistogramMetricFamily:
    """``timings`` as one Prometheus histogram, a series per label value seen."""
    family = HistogramMetricFamily(name, doc, labels=["node", timings.label])
    for value, h in timings:
        family.add_metric([node_id, value],
                          [(floatToGoString(bound), count) for bound, count in h.cumulative()],
                          h.sum)
    return family


class EngineCollector:
    def __init__(self, engine: Engine, node_id: str, clock: IReactorTime,
                 sources: dict[str, object] | None = None,
                 rpc_errors: dict[int, int] | None = None,
                 histograms: Iterable[tuple[str, str, Timings]] = ()) -> None:
        """``sources``: by prefix, the objects whose ``stats()`` figures are
        exported (``counter_names``: those of them that are counters);
        ``histograms``: ``(series name, help, timings)``."""
        self.engine = engine
        self.node_id = node_id
        self.clock = clock
        self.sources = sources or {}
        self.rpc_errors = rpc_errors if rpc_errors is not None else {}
        self.histograms = list(histograms)

    def collect(self) -> Iterator[Metric]:
        e, s = self.engine, self.engine.sessions
        # the node's view registry (the core holds it by its ViewSource protocol)
        registry = cast(ViewRegistry, e.registry)
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
        windows = list(registry.windows())
        yield gauge("pushengine_views", "View instances (windows) with subscribers", len(windows))
        yield gauge("pushengine_queries", "Live queries (views by parameters)",
                    len(registry.queries))
        yield gauge("pushengine_polls_waiting", "Long-polls parked", s.waiting)
        yield gauge("pushengine_streams", "Streams attached (SSE and WebSocket)", s.streams)
        yield counter("pushengine_stream_replays",
                      "Streams reattached with a last seq: replayed or reset", s.replays)
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
        for name, doc, timings in self.histograms:
            yield histogram(name, doc, self.node_id, timings)
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
            for figure, value in sorted(figures.items()):
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    kind, name, doc = describe(prefix, figure, counters)
                    yield (counter if kind == COUNTER else gauge)(name, doc, value)


class Figures:
    """Figures read asynchronously (from memcached) and kept for the next scrape."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def stats(self) -> dict[str, float]:
        return dict(self.values)


class BuildInfo:
    """``pushengine_build_info{version}``: 1, the package's version."""

    def __init__(self, node_id: str, version: str) -> None:
        self.node_id = node_id
        self.version = version

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily("pushengine_build_info", "The engine's version (always 1)",
                              labels=["node", "version"])
        g.add_metric([self.node_id, self.version], 1)
        yield g


class NodeProcess:
    """prometheus_client's ``process_*`` series (CPU seconds, resident and
    virtual memory, open and maximum descriptors, start time; read from
    /proc at scrape time, absent where there is none), with the ``node``
    label every series of the node has."""

    def __init__(self, node_id: str, process: ProcessCollector | None = None) -> None:
        self.node_id = node_id
        self.process = process if process is not None else ProcessCollector(registry=None)

    def collect(self) -> Iterator[Metric]:
        for family in self.process.collect():
            family.samples = [s._replace(labels={"node": self.node_id, **s.labels})
                              for s in family.samples]
            yield family


def make_registry(collector: EngineCollector, version: str | None = None,
                  process: bool = False) -> CollectorRegistry:
    """The node's registry: the engine's figures, and with ``version`` the
    build info, with ``process`` the process's series."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    if version is not None:
        registry.register(BuildInfo(collector.node_id, version))
    if process:
        registry.register(NodeProcess(collector.node_id))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
