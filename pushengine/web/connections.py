"""The HTTP connections a front holds, for the node's graceful shutdown (SPEC 21).

Both fronts add each connection they accept (``FastChannel``,
``DeadlineChannel``) and discard it when it ends, or when a stream takes it
over (a stream's end is its transport's business:
``transports/closing.py``). When the node shuts down, ``close_all`` tells
every one of them to finish up: a connection between requests closes at
once; one answering a request (a call in flight, a parked poll) closes
after that answer, which says ``Connection: close``. ``close_all``'s
Deferred fires when the last one is gone; ``abort_all`` cuts what is left
when the shutdown's deadline passes.
"""
from __future__ import annotations

from typing import Any, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger

log = Logger()


class Finishing(Protocol):
    """A connection of a front."""

    def finish_up(self) -> None:
        """Close now if idle, else after the answer being made (and those
        of requests already read)."""

    def abort(self) -> None:
        """Cut the connection now."""


class OpenConnections:
    """The connections a node's fronts hold (not those streams took over)."""

    __slots__ = ("open", "closing", "_waiters")

    def __init__(self) -> None:
        self.open: set[Any] = set()
        self.closing = False
        self._waiters: list[Deferred[None]] = []

    def __len__(self) -> int:
        return len(self.open)

    def add(self, connection: Finishing) -> None:
        self.open.add(connection)
        if self.closing:                # accepted while the node shuts down
            connection.finish_up()

    def discard(self, connection: Finishing) -> None:
        open_ = self.open
        if connection in open_:
            open_.discard(connection)
            if not open_ and self._waiters:
                waiters, self._waiters = self._waiters, []
                for d in waiters:
                    d.callback(None)

    def close_all(self, reason: str = "the node is shutting down") -> Deferred[None]:
        """Every connection finishes up (see the module); fires once none is open."""
        self.closing = True
        connections = list(self.open)
        if connections:
            log.info("closing {count} HTTP connections as they finish: {reason}",
                     count=len(connections), reason=reason)
        for connection in connections:
            try:
                connection.finish_up()
            except Exception:
                log.failure("closing an HTTP connection failed")
        if not self.open:
            return succeed(None)
        d: Deferred[None] = Deferred()
        self._waiters.append(d)
        return d

    def abort_all(self) -> None:
        """Cut every connection still open (the shutdown's deadline passed)."""
        for connection in list(self.open):
            try:
                connection.abort()
            except Exception:
                pass
