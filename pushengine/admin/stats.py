"""Each node's figures, published once a second as a ``NodeStats`` object.

The object (id: the node id) holds what the admin page draws: sessions,
streams attached, polls waiting, subscriptions, view instances, changes in
and events out (totals and per second), the busiest views with their
subscriber counts, and the state of the feed, memcached and Redis. It goes
through the change feed like any change, so that with ``--amqp`` every
node's hub receives every node's figures. When the feed refuses it (the
broker is down), the node hands it to its own hub, so the page of that node
still shows it, with the feed down.

Events out per second leave out the events sent to admin pages themselves,
so that watching the figure does not change it.
"""
from __future__ import annotations

import heapq
import math
from typing import Any, Callable

from twisted.internet.defer import maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.admin import ADMIN_TYPE
from pushengine.admin.disconnect import Disconnector
from pushengine.admin.hub import AdminHub, AdminSink
from pushengine.admin.methods import AdminKey
from pushengine.core.changes import UPSERT, Change
from pushengine.core.engine import Engine
from pushengine.core.interfaces import ChangeFeed

log = Logger()
MAX_TEXT = 200


class StatsPublisher:
    """The body of the node's one-second timer (``service.timer``)."""

    def __init__(self, node_id: str, engine: Engine, feed: ChangeFeed, hub: AdminHub,
                 clock: IReactorTime, health: Callable[[], dict], top: int = 10) -> None:
        self.node_id = node_id
        self.engine = engine
        self.feed = feed
        self.hub = hub
        self.clock = clock
        self.health = health
        self.top = top
        self.started = clock.seconds()
        self.published = self.failed = 0
        self._last: tuple[float, int, int, int] | None = None
        self._feed_down = False

    def snapshot(self) -> dict[str, Any]:
        """This node's figures now (rates since the previous snapshot)."""
        now = self.clock.seconds()
        engine, sessions = self.engine, self.engine.sessions
        changes_in = engine.counters.changes_in
        events_out = sessions.events_out
        admin_out = self.hub.delivered
        in_rate = out_rate = 0.0
        if self._last is not None:
            then, last_in, last_out, last_admin = self._last
            elapsed = now - then
            if elapsed > 0:
                in_rate = max(0, changes_in - last_in) / elapsed
                out = (events_out - last_out) - (admin_out - last_admin)
                out_rate = max(0, out) / elapsed
        self._last = (now, changes_in, events_out, admin_out)
        windows = list(engine.registry.windows())
        busiest = heapq.nlargest(self.top, ((len(w.subscribers), w.key) for w in windows))
        report = self._health()
        return {
            "id": self.node_id, "node": self.node_id, "time": round(now, 3),
            "started": round(self.started, 3),
            "sessions": len(sessions.sessions), "streams": sessions.streams,
            "waiting": sessions.waiting,
            "subscriptions": sum(len(s.subs) for s in sessions.sessions.values()),
            "views": len(windows), "admin_pages": len(self.hub.subscribers),
            "events_in": changes_in, "events_out": events_out,
            "in_rate": round(in_rate, 2), "out_rate": round(out_rate, 2),
            "busiest": [{"key": key[:MAX_TEXT], "subscribers": n} for n, key in busiest if n],
            "status": report.get("status", "ok"),
            "feed": _feed(report.get("feed")),
            "memcache": _summary(report.get("memcache")),
            "redis": _summary(report.get("redis")),
        }

    def _health(self) -> dict:
        try:
            return self.health()
        except Exception:
            log.failure("reading the node's health for the admin statistics failed")
            return {}

    def tick(self) -> None:
        """Publish this node's figures; forget the nodes gone quiet."""
        self.hub.expire()
        obj = self.snapshot()
        change = Change(ADMIN_TYPE, UPSERT, self.node_id, self.hub.sign(obj))
        d = maybeDeferred(self.feed.publish, [change])

        def published(_: object) -> None:
            self.published += 1
            if self._feed_down:
                self._feed_down = False
                log.info("node statistics are published on the feed again")

        def refused(failure: Failure) -> None:
            self.failed += 1
            if not self._feed_down:
                self._feed_down = True
                # (at start-up, while the broker connection is made, that is no news)
                say = log.warn if self.published else log.info
                say("node statistics cannot be published on the feed ({error}); "
                         "shown on this node only until it is back",
                         error=failure.getErrorMessage())
            self.hub.apply([change])
        d.addCallbacks(published, refused)
        d.addErrback(lambda f: log.failure("showing node statistics failed", f))


def _feed(report: object) -> dict[str, Any]:
    """The feed's health, named: ``memory`` or ``amqp``."""
    out = _summary(report)
    if "kind" not in out and "state" in out:
        out["kind"] = "amqp" if "broker" in out else "feed"
    return out


def _summary(report: object) -> dict[str, Any]:
    """A component's health, flat: its scalar fields (texts shortened), and
    of a list of servers how many are up."""
    if not isinstance(report, dict):
        return {"up": False, "kind": "none"}
    out: dict[str, Any] = {}
    for name, value in report.items():
        if isinstance(value, bool) or isinstance(value, int) \
                or isinstance(value, float) and math.isfinite(value):
            out[name] = value
        elif isinstance(value, str):
            out[name] = value[:MAX_TEXT]
        elif name == "servers" and isinstance(value, dict):
            up = sum(1 for s in value.values() if isinstance(s, dict) and s.get("up"))
            out["servers_up"], out["servers_total"] = up, len(value)
    out["up"] = bool(report.get("up"))
    return out


class AdminFigures:
    """The admin parts' counters, for /metrics (the ``admin`` source)."""

    counter_names = ("stats_published", "stats_failed", "stats_received", "stats_forged",
                     "stats_ignored", "key_refusals", "events_delivered",
                     "disconnect_sessions_ended", "disconnects_received", "disconnects_forged",
                     "disconnects_replayed")

    def __init__(self, sink: AdminSink, hub: AdminHub | None,
                 publisher: StatsPublisher | None, key: AdminKey,
                 disconnector: Disconnector | None = None) -> None:
        self.sink = sink
        self.hub = hub
        self.publisher = publisher
        self.key = key
        self.disconnector = disconnector

    def stats(self) -> dict[str, int]:
        out = {"stats_ignored": self.sink.ignored, "key_refusals": self.key.refused}
        if self.hub is not None:
            out.update(stats_received=self.hub.received, stats_forged=self.hub.forged,
                       events_delivered=self.hub.delivered, nodes=len(self.hub.nodes),
                       pages=len(self.hub.subscribers))
        if self.publisher is not None:
            out.update(stats_published=self.publisher.published,
                       stats_failed=self.publisher.failed)
        if self.disconnector is not None:
            out.update(self.disconnector.stats())
        return out
