"""The small interfaces between the core and its adapters.

The core (sessions, views, windows, events) speaks only these; the HTTP,
AMQP, memcached and Redis adapters implement them, and ``pushengine.app.tap``
chooses the implementations in one place when the service is built.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol, Sequence, runtime_checkable

from twisted.internet.defer import Deferred

from pushengine.core.changes import Change
from pushengine.core.events import Fragment, RawUTF8
from pushengine.core.topics import Topic

if TYPE_CHECKING:
    from pushengine.core.sessions import Session


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

    # Optionally ``hold(view)`` / ``release(view)``: a query of ``view`` is
    # made / forgotten (the in-process store keeps some indexes only while a
    # view using them is subscribed; the view registry calls them).


class Binding(Protocol):
    """A view bound to its parameters (``views.spec.BoundView``): what a
    session subscribes to."""

    @property
    def key(self) -> str:
        """The subscription's key (the view, its parameters, its limit)."""

    @property
    def query_key(self) -> str:
        """The key without the limit: the query every limit shares."""


class LiveWindow(Protocol):
    """What a subscription shows (``views.window.Window``): the first
    ``limit`` objects of a live query, shared by its subscribers. It is what
    ``Session.subs`` holds under each key: the window itself, or a
    ``core.routes.Route`` that shows a window under the client's key when
    that is not the window's."""

    key: str
    subscribers: set[Any]

    def state(self) -> list[dict[str, Any]]:
        """The objects shown now, in view order."""

    def reset_fragment(self) -> Fragment:
        """A ``reset`` event carrying ``state()``, encoded once."""

    def ping(self) -> None:
        """Say ``ping`` to the subscribers if nothing was said since the last one."""

    def leave(self, session: Any) -> LiveWindow:
        """``session`` no longer holds this entry: it stops receiving
        through it; returns the window to close when nobody else holds it
        (a window gives itself, a route the window it routes)."""


class ViewSource(Protocol):
    """The live views (``views.registry.ViewRegistry``): opens and closes
    shared windows and applies changes to every query."""

    def open(self, bound: Any) -> Deferred:
        """Fire with the shared window of ``bound``."""

    def close(self, window: Any) -> None:
        """A subscriber left ``window``; the last one frees it."""

    def apply(self, change: Change) -> int | None:
        """Apply one change to every query it concerns; how many it reached
        (the engine's trace says it; None: not counted)."""

    def reload(self) -> Deferred:
        """Re-read every query from its store; fire with the number reset."""

    def windows(self) -> Iterable[Any]:
        """Every open window."""


class Interest(Protocol):
    """What this node wants of the change feed (``core.topics``): the view
    registry wants the topics of a query before it reads the query's initial
    state, and releases them when the query goes. A feed that routes by
    interest binds them (``amqp.interest.Bindings``); the others deliver
    everything and answer ``core.topics.NO_INTEREST``."""

    def want(self, topic: Topic) -> Deferred[None]:
        """Fire once every change of ``topic`` published from now on reaches
        this node (for AMQP: once the broker confirmed the binding)."""

    def release(self, topic: Topic) -> None:
        """One holder of ``topic`` no longer needs it (as many releases as
        wants; the last may drop the binding)."""


class TypeCatalog(Protocol):
    """The object types the views file declares (``views.spec.Catalog``)."""

    types: Any


class SessionLookup(Protocol):
    """``lookup(sid, then, caller=...)``: ``then(session)`` for a session this
    node holds, at once, or a Deferred that first resumes it from the cluster
    registry (``Api.with_session``), counted for ``caller``'s client;
    UnknownSession when there is none."""

    def __call__(self, sid: Any, then: Callable[[Session], Any], *,
                 caller: Any = None) -> Any: ...


class SegmentLookup(Protocol):
    """The audience segments of a session (``segments.contacts.SegmentMembership``,
    from the contacts its token carried; SPEC 15)."""

    def segments_of(self, session: Session) -> Deferred[list[str]]:
        """Fire with the names of the segments the session's contacts are
        in (none without contacts); fails when the store cannot answer."""


class Waiting(Protocol):
    """A call that answers later through the reply it was given."""

    def cancel(self) -> None:
        """The caller went away: answer nothing."""


class Poller(Protocol):
    """Long-polling (``pushengine.transports.longpoll.LongPolling``): what
    the API's ``session.get_events`` answers with."""

    def get_events(self, session: "Session", timeout: float,
                   ack: int | None) -> "Deferred[RawUTF8] | RawUTF8":
        """The events waiting (up to ``ack`` dropped first) at once, or a
        Deferred of them when none wait: parked for ``timeout`` seconds."""

    def get_events_to(self, session: "Session", timeout: float, ack: int | None,
                      reply: Callable[["RawUTF8"], object]) -> "RawUTF8 | Waiting":
        """As ``get_events``, a parked poll answering by calling ``reply``
        once (no Deferred per poll): the events at once, or the poll."""
