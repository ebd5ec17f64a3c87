"""The engine core: the change sink that feeds views and wakes sessions.

It knows nothing of HTTP, AMQP or memcached: a feed calls ``apply_changes``,
the API layer calls the session manager, and timers call ``ping``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from pushengine.core.changes import Change
from pushengine.core.hooks import Hooks
from pushengine.core.sessions import SessionManager, SessionSettings
from pushengine.core.interfaces import TypeCatalog, ViewSource
from pushengine.core.tracing import Tracer, active

log = Logger()


@dataclass
class EngineCounters:
    changes_in: int = 0
    change_errors: int = 0
    changes_dropped: int = 0         # of a type no view uses: not kept
    feed_gaps: int = 0
    last_change_at: float | None = None
    extra: dict[str, int] = field(default_factory=dict)


class Engine:
    def __init__(self, clock: IReactorTime, catalog: TypeCatalog, store: Any,
                 registry: ViewSource, settings: SessionSettings | None = None,
                 hooks: Hooks | None = None, tracer: Tracer | None = None) -> None:
        """``registry`` holds the live views over ``store``
        (``pushengine.views.registry.ViewRegistry``; built with the engine by
        ``pushengine.app.engine.build_engine``, which has it answer the polls
        its resets wake through ``sessions.flush``); ``hooks``: the node's
        session hooks (``core.hooks``), given to the session manager;
        ``tracer``: a span per batch of changes applied (``apply_changes``)."""
        self.clock = clock
        self.catalog = catalog
        self.store = store
        self.registry = registry
        self.sessions = SessionManager(clock, self.registry, settings, hooks)
        self.counters = EngineCounters()
        self.tracer = active(tracer)

    # -- ChangeSink --------------------------------------------------------
    def apply_changes(self, changes: Sequence[Change]) -> None:
        """Apply changes in order, then answer the polls they woke. A change
        of a type that no view uses (nor the views file declares) is counted
        and dropped: nothing would ever read it back. The time from here to
        each delivery's events is counted (``SessionManager.flush``).
        With a tracer the batch is a span (``_apply_traced``)."""
        if self.tracer is not None:
            self._apply_traced(changes, self.tracer)
            return
        arrived = self.clock.seconds()
        self._apply(changes)
        self.sessions.flush(arrived)

    def _apply(self, changes: Sequence[Change]) -> tuple[Sequence[Change], int]:
        """Apply the changes of types some view uses to the store and the
        views: (those changes, the queries they reached)."""
        types = self.catalog.types
        if any(c.type not in types for c in changes):
            kept = [c for c in changes if c.type in types]
            self.counters.changes_dropped += len(changes) - len(kept)
            changes = kept
        try:
            self.store.apply_changes(changes)
        except Exception:
            log.failure("the store failed to apply changes")
        reached = 0
        for change in changes:
            try:
                reached += self.registry.apply(change) or 0
            except Exception:
                self.counters.change_errors += 1
                log.failure("applying {type} {id} failed", type=change.type, id=change.id)
        self.counters.changes_in += len(changes)
        self.counters.last_change_at = self.clock.seconds()
        return changes, reached

    def _apply_traced(self, changes: Sequence[Change], tracer: Tracer) -> None:
        """``apply_changes`` as a span from the batch's arrival to the last
        delivery it woke written: the child of the call that published it
        (``POST /api/publish`` on the in-process feed), else a trace's root.
        Its attributes: the types, the number of changes (and of those
        dropped), the queries they reached, the sessions that got events."""
        span = tracer.start("changes.apply", kind="consumer")
        previous = tracer.enter(span)
        try:
            arrived = self.clock.seconds()
            applied, reached = self._apply(changes)
            woken = len(self.sessions.dirty)
            self.sessions.flush(arrived)
            if span.is_recording():
                span.set_attribute("pushengine.change.types",
                                   ",".join(sorted({c.type for c in applied}))[:200])
                span.set_attribute("pushengine.changes", len(applied))
                span.set_attribute("pushengine.changes.dropped", len(changes) - len(applied))
                span.set_attribute("pushengine.queries", reached)
                span.set_attribute("pushengine.sessions", woken)
        finally:
            tracer.leave(previous)
            span.end()

    def feed_gap(self) -> None:
        """Changes were missed: re-read every view and reset what changed."""
        self.counters.feed_gaps += 1
        log.warn("the change feed lost its queue: changes may have been missed; "
                 "re-reading every view from the store")

        def done(count: int) -> None:
            log.info("after the feed gap {count} views were reset", count=count)
            self.sessions.flush()

        d = self.registry.reload()
        d.addCallback(done)
        d.addErrback(lambda f: log.failure("re-reading views after a gap failed", f))

    # -- timers ----------------------------------------------------------------
    def ping(self) -> None:
        """Every view that said nothing since the last ping says ``ping``."""
        for window in list(self.registry.windows()):
            window.ping()
        self.sessions.flush()
