"""``WalFeed``: a node that follows its database's WAL itself, without a
broker (``--feed-url postgresql://...``, SPEC 20 "One node without RabbitMQ").

It is a ``ChangeFeed`` over a ``WalReader`` with a temporary replication slot
named after the node (``pushengine_node_<node id>``): PostgreSQL drops the
slot when the node's connection ends, which suits a node, since a node that
restarts reads its views from the database again anyway. Each committed
transaction's changes go to the sink in commit order, then the transaction's
end is confirmed to the slot. A lost connection makes a new slot, which
starts at the present: the changes in between are missed, so the node
re-reads its views (``sink.feed_gap()``), as it does after a TRUNCATE.

``publish`` (``POST /api/publish``) applies changes to this node's views at
once: such a change is not in the database, so it reaches only this node and
is gone after a restart or a re-read. Changes meant to last are written to
the tables.
"""
from __future__ import annotations

import hashlib
import re
import socket
from typing import Any, Sequence

from twisted.application.service import Service
from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger

from pushengine.core.changes import Change
from pushengine.core.interfaces import ChangeSink, FeedUnavailable
from pushengine.core.feedservice import FeedService
from pushengine.core.positions import Position, Watermark
from pushengine.postgres.wal import Transaction, WalReader
from pushengine.views.spec import Catalog

log = Logger()

SLOT_PREFIX = "pushengine_node_"


class FeedNotStarted(FeedUnavailable):
    """``publish`` before ``start`` (or after ``stop``)."""


def slot_name(node_id: str) -> str:
    """``pushengine_node_<node id>``: a slot name is at most 63 of a-z, 0-9
    and _, so another character becomes _ and the id, when it had to change
    or is long, ends with 8 hex digits of its hash, which keeps two ids
    apart that would read alike."""
    clean = re.sub(r"[^a-z0-9_]", "_", node_id.lower())
    room = 63 - len(SLOT_PREFIX)
    if clean == node_id and 0 < len(clean) <= room:
        return SLOT_PREFIX + clean
    digest = hashlib.sha1(node_id.encode("utf-8")).hexdigest()[:8]
    return f"{SLOT_PREFIX}{clean[:room - 9]}_{digest}"


class WalFeed:
    """The change feed of a node on its database's WAL (module docstring).

    ``dsn``: a libpq URL or key=value string; ``catalog``: the views file
    (its ``types`` map tables to types); ``node_id``: stable and unique per
    node, the host name by default. Start it with ``start(sink)`` or run it
    as ``as_service(sink)``. ``check()`` refuses unusable tables before
    starting (a MappingError naming the table and the fix); ``start`` alone
    logs such an error, shows it in ``health()`` and keeps trying.
    """

    def __init__(self, reactor: Any, dsn: str, catalog: Catalog, node_id: str | None = None,
                 *, publication: str = "pushengine", retry: float = 2.0,
                 status_interval: float = 10.0) -> None:
        self.reactor = reactor
        self.node_id = node_id or socket.gethostname()
        self.slot = slot_name(self.node_id)
        self.sink: ChangeSink | None = None
        self.watermark = Watermark()
        self.published = 0
        self.applied = 0
        self.sink_errors = 0
        self.reader = WalReader(reactor, dsn, catalog, slot=self.slot,
                                publication=publication, temporary=True,
                                deliver=self._deliver, on_gap=self._gap, retry=retry,
                                status_interval=status_interval)

    # ChangeFeed

    def start(self, sink: ChangeSink) -> None:
        """Follow the WAL into ``sink`` (retrying until it works)."""
        self.sink = sink
        self.reader.start()

    def stop(self) -> Deferred:
        """Stop following; fires once the connection is closed (the slot
        goes with it)."""
        self.sink = None
        d = self.reader.stop()
        d.addErrback(lambda f: log.failure("WAL feed: stopping failed", f))
        return d

    def publish(self, changes: Sequence[Change]) -> Deferred:
        """Apply ``changes`` to this node's views only (module docstring)."""
        if self.sink is None:
            return fail(FeedNotStarted("the WAL feed is not running"))
        changes = list(changes)
        self.published += len(changes)
        self.sink.apply_changes(changes)
        return succeed(len(changes))

    def check(self) -> Deferred:
        """Check the mapped tables and create the publication; fails with
        ``wal.MappingError`` (see ``WalReader.check``)."""
        return self.reader.check()

    def health(self) -> dict[str, Any]:
        return {**self.reader.health(), "kind": "postgresql", "node_id": self.node_id,
                "up": self.reader.up and self.sink is not None}

    # the figures of stats() that are counters (metrics/prometheus.py)
    counter_names = ("changes_applied", "changes_published", "sink_errors",
                     "wal_copies_dropped", "wal_transactions", "wal_changes",
                     "wal_skipped_rows", "wal_gaps", "wal_reconnects")

    def stats(self) -> dict[str, float]:
        """Figures for /metrics: the feed's, and the reader's under ``wal_``."""
        reader = self.reader.stats()
        return {"connected": int(self.health()["up"]), "changes_applied": self.applied,
                "changes_published": self.published, "sink_errors": self.sink_errors,
                "wal_copies_dropped": self.watermark.dropped,
                **{f"wal_{k}": v for k, v in reader.items()
                   if k in ("transactions", "changes", "skipped_rows", "gaps", "reconnects",
                            "waiting", "unconfirmed_bytes")}}

    def as_service(self, sink: ChangeSink) -> Service:
        """An IService that runs this feed into ``sink`` (for a MultiService)."""
        return FeedService(self, sink)

    # from the reader (reactor thread)

    def _deliver(self, transaction: Transaction) -> None:
        sink = self.sink
        if sink is None:
            return     # stopped: not confirmed, so never lost from a slot that lives on
        if self.watermark.admit(Position(transaction.commit_lsn, transaction.xid)) \
                and transaction.changes:
            try:
                sink.apply_changes(transaction.changes)
                self.applied += len(transaction.changes)
            except Exception:
                self.sink_errors += 1
                log.failure("WAL feed: the sink failed on transaction {xid}",
                            xid=transaction.xid)
        self.reader.confirm(transaction.end_lsn)

    def _gap(self) -> None:
        sink = self.sink
        if sink is None:
            return
        try:
            sink.feed_gap()
        except Exception:
            log.failure("WAL feed: the sink failed on feed_gap")
