"""Twisted's memcached protocol, adjusted for the client.

``twisted.protocols.memcache.MemCacheProtocol`` answers NOT_FOUND, NOT_STORED
and EXISTS all with ``False``; the client needs to tell them apart to fail
with NotFound or KeyExists, so this subclass answers with distinct markers.
It also replaces the protocol's idle timeout (which uses the global reactor)
with a per-command deadline checked on the injected clock: the oldest
pending command not answered by its deadline drops the connection, which
fails every pending command, since a memcached connection cannot skip an
answer and stay in step.
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Protocol, cast

from twisted.internet.interfaces import IAddress, IDelayedCall, IReactorTime, ITCPTransport
from twisted.internet.protocol import Factory, connectionDone
from twisted.protocols.memcache import ClientError, MemCacheProtocol, ServerError
from twisted.python.failure import Failure

from pushengine.memcache.errors import CacheTimeout


class Answer:
    """A marker answer (its name is the memcached reply)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NOT_FOUND = Answer("NOT_FOUND")
NOT_STORED = Answer("NOT_STORED")
EXISTS = Answer("EXISTS")


class ConnectionOwner(Protocol):
    """Who a connection reports to (the client's ServerConnection)."""

    def connected(self, protocol: WireProtocol) -> None: ...

    def lost(self, protocol: WireProtocol, reason: Failure) -> None: ...

    def timed_out(self, protocol: WireProtocol) -> None: ...


class WireProtocol(MemCacheProtocol):
    """One connection to one memcached server."""

    def __init__(self, clock: IReactorTime, owner: ConnectionOwner | None = None) -> None:
        super().__init__(timeOut=None)
        self.clock = clock
        self.owner = owner
        self._deadlines: deque[float] = deque()
        self._watchdog: IDelayedCall | None = None

    # the idle timer of TimeoutMixin must not reach for the global reactor
    def callLater(self, period: float, func: Callable[[], object]) -> IDelayedCall:  # noqa: N802
        return self.clock.callLater(period, func)

    # -- per-command deadlines ---------------------------------------------

    def pending(self) -> int:
        return len(self._current)

    def track(self, deadline: float) -> None:
        """The command just queued must be answered by ``deadline``."""
        self._deadlines.append(deadline)
        if self._watchdog is None:
            self._arm(deadline)

    def _arm(self, deadline: float) -> None:
        delay = max(0.0, deadline - self.clock.seconds())
        self._watchdog = self.clock.callLater(delay, self._check)

    def _check(self) -> None:
        self._watchdog = None
        # answered commands left _current from the front; drop their deadlines
        while len(self._deadlines) > len(self._current):
            self._deadlines.popleft()
        if not self._deadlines:
            return
        if self._deadlines[0] <= self.clock.seconds():
            self.timeoutConnection()
        else:
            self._arm(self._deadlines[0])

    def timeoutConnection(self) -> None:  # noqa: N802 (Twisted's name)
        self._deadlines.clear()
        if self.owner is not None:
            self.owner.timed_out(self)
        self._cancelCommands(CacheTimeout("memcached did not answer in time"))
        if self.transport is not None:
            cast(ITCPTransport, self.transport).abortConnection()

    # -- connection state ---------------------------------------------------

    def connectionMade(self) -> None:  # noqa: N802
        super().connectionMade()
        if self.owner is not None:
            self.owner.connected(self)

    def connectionLost(self, reason: Failure = connectionDone) -> None:  # noqa: N802
        if self._watchdog is not None and self._watchdog.active():
            self._watchdog.cancel()
        self._watchdog = None
        self._deadlines.clear()
        super().connectionLost(reason)
        if self.owner is not None:
            self.owner.lost(self, reason)

    # -- answers ------------------------------------------------------------

    def cmd_NOT_FOUND(self) -> None:  # noqa: N802
        self._current.popleft().success(NOT_FOUND)

    def cmd_NOT_STORED(self) -> None:  # noqa: N802
        self._current.popleft().success(NOT_STORED)

    def cmd_EXISTS(self) -> None:  # noqa: N802
        self._current.popleft().success(EXISTS)

    # the base class reports these through the legacy log as errors; here
    # they are answers to the caller, who decides what they mean
    def cmd_CLIENT_ERROR(self, text: bytes) -> None:  # noqa: N802
        self._current.popleft().fail(ClientError(text.decode("latin-1")))

    def cmd_SERVER_ERROR(self, text: bytes) -> None:  # noqa: N802
        self._current.popleft().fail(ServerError(text.decode("latin-1")))

    def cmd_ERROR(self) -> None:  # noqa: N802
        self._current.popleft().fail(ClientError("unknown command"))


class WireFactory(Factory):
    """Builds a :class:`WireProtocol` that reports to ``owner``."""

    def __init__(self, clock: IReactorTime, owner: ConnectionOwner) -> None:
        self.clock = clock
        self.owner = owner

    def buildProtocol(self, addr: IAddress | None) -> WireProtocol:  # noqa: N802
        return WireProtocol(self.clock, self.owner)
