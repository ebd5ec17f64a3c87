"""The small interfaces between the core and its adapters.

The core (sessions, views, windows, events) speaks only these; the HTTP,
AMQP, memcached and Redis adapters implement them, and ``pushengine.tap``
chooses the implementations in one place when the service is built.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

from twisted.internet.defer import Deferred

from pushengine.changes import Change


class FeedUnavailable(Exception):
    """The feed cannot take changes now (not connected, not confirmed);
    the caller may retry. Feeds raise subclasses of it."""


@runtime_checkable
class ChangeSink(Protocol):
    """What a feed delivers into (the engine core)."""

    def apply_changes(self, changes: Sequence[Change]) -> None:
        """Apply changes in order; never raises for a bad object."""

    def feed_gap(self) -> None:
        """Changes may have been missed (the feed's queue was lost):
        re-read what can be re-read and tell subscribers with ``reset``."""


@runtime_checkable
class ChangeFeed(Protocol):
    """A source of changes: the in-process feed or RabbitMQ."""

    def start(self, sink: ChangeSink) -> None:
        """Begin delivering changes into ``sink``."""

    def stop(self) -> Deferred | None:
        """Stop delivering; may return a Deferred that fires when stopped."""

    def publish(self, changes: Sequence[Change]) -> Deferred:
        """Publish changes to every node; fires with their number once the
        feed has them (for AMQP: once the broker confirmed)."""

    def health(self) -> dict[str, Any]:
        """A JSON-able state for /health; must hold ``"up": bool``."""


@runtime_checkable
class ObjectStore(Protocol):
    """Where a new view instance gets its initial state."""

    def query(self, view: Any, params: dict[str, Any], limit: int) -> Deferred:
        """Fire with the objects matching ``view`` under ``params``, in view
        order; at least the first ``limit`` of them (more is welcome: the
        view keeps them as candidates to refill its window)."""

    def apply_changes(self, changes: Sequence[Change]) -> None:
        """See every change (the in-process store keeps them; others ignore)."""
