"""A window: the first ``limit`` objects of a live query, with its subscribers.

Every session subscribed to the same view, parameters and limit shares one
window and one key. The window turns the query's changes into events and
hands each encoded event to every subscriber.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from pushengine.core.events import DELETE, INSERT, PING, RESET, UPDATE, Fragment, encode_event

if TYPE_CHECKING:
    from pushengine.views.query import Query


class Subscriber(Protocol):
    def deliver(self, fragment: Fragment, key: str) -> None:
        """Queue one encoded event."""


class Window:
    def __init__(self, query: Query, key: str, limit: int) -> None:
        self.query = query
        self.key = key
        self.limit = limit
        self.subscribers: set[Subscriber] = set()
        self.busy = False          # emitted something since the last ping

    def state(self) -> list[dict]:
        return self.query.top(self.limit)

    def _emit(self, action: str, obj: dict | list[dict] | None = None,
              old: dict | None = None) -> None:
        self.busy = True
        if not self.subscribers:
            return
        fragment = encode_event(self.key, action, obj, old)
        key = self.key
        for s in self.subscribers:
            s.deliver(fragment, key)

    def inserted(self, obj: dict) -> None:
        self._emit(INSERT, obj)

    def updated(self, obj: dict, old: dict) -> None:
        self._emit(UPDATE, obj, old)

    def deleted(self, obj: dict) -> None:
        self._emit(DELETE, obj)

    def reset(self) -> None:
        self._emit(RESET, self.state())

    def reset_fragment(self) -> Fragment:
        """A reset event for one session (after its queue overflowed)."""
        return encode_event(self.key, RESET, self.state())

    def leave(self, session: Subscriber) -> Window:
        """``session`` no longer sees this window; the window to close when
        nobody else holds it: itself (a ``core.routes.Route`` gives the
        window it routes)."""
        self.subscribers.discard(session)
        return self

    def ping(self) -> None:
        """Send a ping unless the view spoke since the last one."""
        if not self.busy:
            self._emit(PING)
        self.busy = False
