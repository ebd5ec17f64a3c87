"""The engine core with its views: the one way to build it."""
from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import IReactorTime

from pushengine.core.engine import Engine
from pushengine.core.sessions import SessionSettings
from pushengine.views.registry import ViewRegistry
from pushengine.views.spec import Catalog


def build_engine(clock: IReactorTime, catalog: Catalog, store: Any,
                 settings: SessionSettings | None = None, seen: Any = None) -> Engine:
    """An engine over ``store`` with the live views of ``catalog``;
    ``seen``: the seen filters of once-per-user views (``views.once.SeenFilter``)."""
    registry = ViewRegistry(catalog, store, schedule=lambda f: clock.callLater(0, f), seen=seen)
    return Engine(clock, catalog, store, registry, settings)
