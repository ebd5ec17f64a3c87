"""A window shown under another key: the subscription entry of a client whose
key is not the window's.

A view bound to ``$session.segments`` has the session's segments in its key;
when they change (``pushengine.segments.reevaluate``), or when a session is
resumed on a node where binding gives another key, the client keeps the key
it was given while it sees another window. A ``Route`` is then one
subscriber in that window's set per (window, client key): it rewrites the
``"key":...`` head of each encoded event once and hands the same rewritten
fragment to all of its sessions. In ``session.subs`` it stands for the
window under the client's key (``state()``, ``reset_fragment()``), so an
overflow or a resume reset stays under that key too.

The session manager makes and drops routes (``SessionManager.install``,
``move``); nothing else holds them.
"""
from __future__ import annotations

import json
from typing import Any

from pushengine.core.events import RESET, Fragment, encode_event
from pushengine.core.interfaces import LiveWindow


def _head(key: str) -> str:
    return '"key":' + json.dumps(key, ensure_ascii=False, separators=(",", ":"))


class Route:
    """The sessions that see ``window`` under ``key`` (theirs)."""

    __slots__ = ("window", "key", "subscribers", "table", "_cut", "_head", "_last")

    def __init__(self, table: dict[tuple[LiveWindow, str], Route], window: LiveWindow,
                 key: str) -> None:
        self.table = table
        self.window = window
        self.key = key
        self.subscribers: set[Any] = set()
        self._cut = len(_head(window.key))
        self._head = _head(key)
        self._last: tuple[Any, Fragment] | None = None

    # -- as a subscriber of the window ----------------------------------------
    def deliver(self, fragment: str, key: str) -> None:
        last = self._last
        if last is not None and last[0] is fragment:
            rewritten = last[1]
        else:
            rewritten = Fragment(self._head + fragment[self._cut:], self.key)
            self._last = (fragment, rewritten)
        for session in list(self.subscribers):
            session.deliver(rewritten, self.key)

    # -- as the window in session.subs ------------------------------------------
    @property
    def query(self) -> Any:
        return getattr(self.window, "query")

    @property
    def limit(self) -> int:
        limit: int = getattr(self.window, "limit")
        return limit

    def state(self) -> list[dict[str, Any]]:
        return self.window.state()

    def reset_fragment(self) -> Fragment:
        return encode_event(self.key, RESET, self.window.state())

    def ping(self) -> None:
        """Nothing: the window pings its subscribers, this route among them."""

    def join(self, session: Any) -> None:
        self.subscribers.add(session)
        self.window.subscribers.add(self)
        self.table[(self.window, self.key)] = self

    def leave(self, session: Any) -> LiveWindow:
        """The session no longer sees the window through this route; the
        real window (for the session manager to close when nobody else holds it)."""
        self.subscribers.discard(session)
        if not self.subscribers:
            self.window.subscribers.discard(self)
            if self.table.get((self.window, self.key)) is self:
                del self.table[(self.window, self.key)]
        return self.window

    def __repr__(self) -> str:
        return f"<Route {self.window.key} as {self.key}: {len(self.subscribers)} sessions>"


def entry_for(table: dict[tuple[LiveWindow, str], Route], window: LiveWindow,
              key: str) -> LiveWindow:
    """What ``session.subs[key]`` holds to show ``window``: the window itself
    under its own key, else the route of (window, key), shared."""
    if window.key == key:
        return window
    route = table.get((window, key))
    return route if route is not None else Route(table, window, key)
