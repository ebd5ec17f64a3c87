"""What the fast front writes in one reactor turn, sent at the end of the turn.

A node answering polls as fast as it can spends as much time in the kernel as
in Python, and most of the kernel's part is waking the reader: a ``send``
right after each answer wakes a client that is waiting in ``epoll``, then the
next answer wakes it again. Writing every answer of a turn at its end (one
``send`` per connection, however many answers it got: pipelined requests
share it) lets each client find all its answers at once. Measured with wrk
(50 connections, events waiting): 23,000 answers/s sending at once, 33,000
sending at the end of the turn; a flush that answers 10,000 parked polls
sends them after the loop, as one burst.

The turn ends with a ``callLater(0)`` made by its first write: the reactor
runs it as soon as the events of the turn are handled. Data is sent with
``send_now`` (at once when the socket's buffer is empty, else through
Twisted's buffer). Only TCP connections wait here; any other transport (TLS,
a test's StringTransport) is written at once. Whoever closes a connection
flushes it first (``close``), so nothing queued is lost.
"""
from __future__ import annotations

from twisted.internet.interfaces import ITCPTransport, ITransport
from twisted.internet.tcp import Connection
from twisted.logger import Logger

from pushengine.web.sendnow import send_now
from pushengine.web.timing import Clock, Timer

log = Logger()


class Outbox:
    """Writes per connection until the end of the reactor turn."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.pending: dict[ITransport, list[bytes]] = {}
        self.call: Timer | None = None

    def write(self, transport: ITransport, data: bytes) -> None:
        """Queue ``data`` for ``transport``, after whatever it has queued."""
        if not isinstance(transport, Connection):
            transport.write(data)
            return
        parts = self.pending.get(transport)
        if parts is None:
            self.pending[transport] = [data]
        else:
            parts.append(data)
        if self.call is None:
            self.call = self.clock.callLater(0, self.flush)

    def flush(self) -> None:
        """The end of the turn: send everything queued, one send per connection."""
        self.call = None
        pending, self.pending = self.pending, {}
        for transport, parts in pending.items():
            try:
                send_now(transport, parts[0] if len(parts) == 1 else b"".join(parts))
            except Exception:
                log.failure("sending to a client failed")

    def flush_one(self, transport: ITransport) -> None:
        """Send what ``transport`` has queued now (it is about to close)."""
        parts = self.pending.pop(transport, None)
        if parts:
            send_now(transport, b"".join(parts))

    def close(self, transport: ITransport) -> None:
        """Close ``transport`` once what it has queued is written."""
        self.flush_one(transport)
        transport.loseConnection()

    def abort(self, transport: ITCPTransport) -> None:
        """Drop ``transport`` and whatever it has queued."""
        self.pending.pop(transport, None)
        transport.abortConnection()

    def forget(self, transport: ITransport) -> None:
        """``transport`` is gone: nothing queued for it can be sent."""
        self.pending.pop(transport, None)
