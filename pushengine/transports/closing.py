"""The streams of a transport when the node shuts down (SPEC 21).

``app/shutdown.py`` tells each transport to let its clients go
(``close_all``): a stream writes what waits for it, says that the node is
going away (an SSE ``going-away`` message, a WebSocket close frame with code
1001) and ends. ``Departures`` keeps the streams told so until their
connections are gone, and fires ``all_gone()`` when the last one is: the
shutdown waits for that, or cuts what is left at its deadline
(``abort_all``).
"""
from __future__ import annotations

from typing import Any, Protocol

from twisted.internet.defer import Deferred, succeed

#: what a client is told when the node shuts down (a close frame's reason,
#: the SSE ``going-away`` message)
SHUTTING_DOWN = "the node is shutting down"


class Leaving(Protocol):
    """A stream told to go away."""

    def abort(self) -> None:
        """Cut the connection now (the shutdown's deadline passed)."""


class Departures:
    """The streams of one transport that were told to go away (``leave``),
    until each one's connection ends (``gone``). ``closing``: from
    ``close_all`` on, a stream that opens is told to go at once."""

    __slots__ = ("leaving", "closing", "_waiters")

    def __init__(self) -> None:
        self.leaving: set[Any] = set()
        self.closing = False
        self._waiters: list[Deferred[None]] = []

    def __len__(self) -> int:
        return len(self.leaving)

    def leave(self, stream: Leaving) -> None:
        self.leaving.add(stream)

    def gone(self, stream: Leaving) -> None:
        """``stream``'s connection ended (whether it was leaving or not)."""
        leaving = self.leaving
        if stream in leaving:
            leaving.discard(stream)
            if not leaving and self._waiters:
                waiters, self._waiters = self._waiters, []
                for d in waiters:
                    d.callback(None)

    def all_gone(self) -> Deferred[None]:
        """Fires once no stream told to leave is still connected."""
        if not self.leaving:
            return succeed(None)
        d: Deferred[None] = Deferred()
        self._waiters.append(d)
        return d

    def abort_all(self) -> None:
        """Cut every connection still leaving."""
        for stream in list(self.leaving):
            try:
                stream.abort()
            except Exception:
                pass
