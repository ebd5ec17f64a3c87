"""The engine core with its views: the one way to build it."""
from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import IReactorTime

from pushengine.core.engine import Engine
from pushengine.core.hooks import Hooks
from pushengine.core.interfaces import Interest
from pushengine.core.sessions import SessionSettings
from pushengine.core.timings import Timings
from pushengine.core.tracing import Tracer
from pushengine.views.once import SeenFilter
from pushengine.views.registry import ViewRegistry
from pushengine.views.spec import Catalog


def build_engine(clock: IReactorTime, catalog: Catalog, store: Any,
                 settings: SessionSettings | None = None, seen: SeenFilter | None = None,
                 hooks: Hooks | None = None, interest: Interest | None = None,
                 initial_timings: Timings | None = None,
                 delivery_timings: Timings | None = None,
                 tracer: Tracer | None = None) -> Engine:
    """An engine over ``store`` with the live views of ``catalog``;
    ``seen``: the seen filters of once-per-user views (``views.once.SeenFilter``);
    ``hooks``: the node's session hooks (the Api is given the same);
    ``interest``: the feed's bindings when it routes by interest (else none);
    ``initial_timings``: subscriptions' initial-state times, by store kind;
    ``delivery_timings``: from a change's arrival to its events handed to
    each transport (both read the clock); ``tracer``: spans of the
    initial-state reads and of the changes applied (``core.tracing``)."""
    engine: Engine | None = None

    def reset() -> None:
        """Windows were reset outside a change: answer the polls they woke."""
        if engine is not None:
            engine.sessions.flush()
    registry = ViewRegistry(catalog, store, schedule=lambda f: clock.callLater(0, f), seen=seen,
                            on_reset=reset, interest=interest, timings=initial_timings,
                            clock=clock.seconds, tracer=tracer)
    engine = Engine(clock, catalog, store, registry, settings, hooks, tracer=tracer)
    engine.sessions.delivery_timings = delivery_timings
    return engine
