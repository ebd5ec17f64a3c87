"""The relay's logic (``pushengine-cdc``, SPEC 20): committed transactions of
the WAL in, change messages out, positions confirmed to PostgreSQL in order.

``Relay`` knows no broker: it is given ``publish(body, keys, headers)`` (a
Deferred that fires once the broker confirmed the message under every one of
``keys``, and fails otherwise) and ``route(change)`` (the routing keys of a
change; None for fanout, where every message goes out once with the key
``""``). ``app/cdc.py`` gives it RabbitMQ; the tests give it fakes.

A transaction becomes messages of at most ``max_changes`` changes, each a
JSON array (``encode_changes``) with its position in the headers
(``Position(commit_lsn, xid, part)``, parts numbered from 0 in publish order).
In fanout mode the transaction is cut only by size. With routing keys, the
changes are grouped by their keys, in order of first appearance, so that a
transaction of many rows of a few users is a few messages; an object whose
keys change within the transaction (it moved) first closes every open group,
so that a node bound to several keys still receives each object's changes in
WAL order (the order between different objects of one transaction may
differ). A change with two keys (an object that moved, ``was``) is one
message published under both, its copies sharing one position.

The reader's ``confirm`` gets a transaction's ``end_lsn`` only once every
message of it and of every transaction before it was confirmed by the broker.
A failed publish (a ``basic.nack``, a lost connection) stops sending: the
relay keeps every unconfirmed transaction in memory and, once the broker is
back (``broker_ready``) or after a back-off, publishes them all again from the
first unconfirmed one, in order. Messages the broker had confirmed after the
failure are sent twice; the nodes drop a copy by its position. The memory this
takes is bounded: above ``max_messages`` unconfirmed messages (or
``max_pending_changes`` changes) the reader is paused, below half resumed.

Everything runs in the reactor thread: the reader calls ``deliver`` there.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, Protocol, Sequence

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.core.changes import Change, ObjectId, encode_changes
from pushengine.core.positions import GAP_HEADER, Position, format_lsn

log = Logger()

# the one key of a message in fanout mode
FANOUT_KEYS: tuple[str, ...] = ("",)
DEFAULT_MAX_CHANGES = 500
DEFAULT_MAX_MESSAGES = 1000
DEFAULT_MAX_PENDING_CHANGES = 100_000
# on stop: how long to wait for the reader to tell PostgreSQL the last
# position, and how often to look
FLUSH_WAIT = 2.0
FLUSH_LOOK = 0.05

SENDING = "sending"
HOLDING = "holding"      # no broker, or a failed publish: nothing goes out
STOPPED = "stopped"

Publish = Callable[[bytes, Sequence[str], dict[str, str]], "Deferred[Any]"]
Route = Callable[[Change], Sequence[str]]


class Transaction(Protocol):
    """What the relay reads of a transaction the WAL reader delivers
    (``postgres.wal.Transaction``)."""

    @property
    def xid(self) -> int: ...

    @property
    def commit_lsn(self) -> int: ...

    @property
    def end_lsn(self) -> int: ...

    @property
    def changes(self) -> list[Change]: ...


class Reader(Protocol):
    """What the relay uses of the WAL reader (``postgres.wal.WalReader``)."""

    def confirm(self, lsn: int) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def stop(self) -> "Deferred[Any]": ...

    @property
    def sent_lsn(self) -> int | None:
        """The last position the reader told PostgreSQL."""


# one message: body, routing keys, headers, number of changes
Message = tuple[bytes, Sequence[str], dict[str, str], int]


class _Gap:
    """The place of a gap message among the transactions: after the last
    one taken, confirming nothing new."""

    __slots__ = ("xid", "commit_lsn", "end_lsn", "changes")

    def __init__(self, lsn: int) -> None:
        self.xid = 0
        self.commit_lsn = self.end_lsn = lsn
        self.changes: list[Change] = []


class _Pending:
    """A transaction taken from the reader and not yet wholly confirmed."""

    __slots__ = ("end_lsn", "commit_lsn", "messages", "outstanding", "changes")

    def __init__(self, txn: Transaction, messages: list[Message]) -> None:
        self.end_lsn = txn.end_lsn
        self.commit_lsn = txn.commit_lsn
        self.messages = messages
        self.outstanding = len(messages)      # messages the broker has not confirmed
        self.changes = len(txn.changes)


class Relay:
    """Publishes the reader's transactions in commit order and confirms their
    positions to the reader in that order once the broker has them.

    Wiring: ``attach(reader)`` (a reader built with ``deliver=relay.deliver``),
    then ``broker_ready()`` whenever the broker (re)connects and
    ``broker_lost()`` when it goes: until the first ``broker_ready`` the relay
    holds what it receives. ``stop()`` drains and stops the reader.
    """

    def __init__(self, publish: Publish, route: Route | None = None, *,
                 clock: IReactorTime, reader: Reader | None = None,
                 max_changes: int = DEFAULT_MAX_CHANGES,
                 max_messages: int = DEFAULT_MAX_MESSAGES,
                 max_pending_changes: int = DEFAULT_MAX_PENDING_CHANGES,
                 retry: float = 1.0, max_retry: float = 30.0,
                 gap_keys: Sequence[str] = FANOUT_KEYS) -> None:
        """``gap_keys``: the routing keys every node binds (fanout: ``""``;
        interest: the broadcast key), for the message that says the stream
        has a gap."""
        if max_changes < 1 or max_messages < 1 or max_pending_changes < 1:
            raise ValueError("max_changes, max_messages and max_pending_changes must be >= 1")
        self._publish = publish
        self._route = route
        self.gap_keys = tuple(gap_keys)
        self.clock = clock
        self.reader = reader
        self.max_changes = max_changes
        self.max_messages = max_messages
        self.max_pending_changes = max_pending_changes
        self.retry = retry
        self.max_retry = max_retry

        self._pending: deque[_Pending] = deque()
        self._state = HOLDING
        self._connected = False
        self._stopping = False
        self._epoch = 0               # bumped on each failure: older answers are ignored
        self._attempts = 0            # failed attempts in a row (the back-off)
        self._timer: IDelayedCall | None = None
        self._drained: list[Deferred[None]] = []
        self._accepted_lsn = -1       # end_lsn of the last transaction taken
        self.paused = False

        # figures (health, metrics)
        self.transactions = 0         # wholly confirmed
        self.messages = 0             # confirmed by the broker (a message under two keys: 1)
        self.changes = 0              # in confirmed messages
        self.confirmed_lsn = 0        # the last end_lsn given to reader.confirm
        self.unconfirmed = 0          # messages taken and not confirmed (sent or held)
        self.unconfirmed_changes = 0
        self.failures = 0             # publishes that failed (once per failure episode)
        self.resends = 0              # times the unconfirmed transactions were sent again
        self.skipped = 0              # transactions the reader delivered again
        self.pauses = 0
        self.gaps = 0                 # gap messages published

    def attach(self, reader: Reader) -> None:
        self.reader = reader

    # the reader's side

    def deliver(self, txn: Transaction) -> None:
        """Take one committed transaction (the reader's ``deliver``)."""
        if self._state == STOPPED:
            return
        if txn.end_lsn <= self._accepted_lsn:
            # a reader that reconnected streams again from the slot's
            # confirmed position: these are held or confirmed already
            self.skipped += 1
            return
        self._accepted_lsn = txn.end_lsn
        pending = _Pending(txn, self._messages(txn))
        self._pending.append(pending)
        self.unconfirmed += pending.outstanding
        self.unconfirmed_changes += pending.changes
        if not pending.messages:
            if self._pending[0] is pending:
                self._advance()
            return
        if self._state == SENDING:
            self._send(pending, self._epoch)
        self._check_pause()

    def gap(self) -> None:
        """The reader says its stream has a gap (a TRUNCATE of a mapped
        table, a slot made afresh): publish, in order after what came
        before, a message of no change with the gap header, so that every
        node reads its views again."""
        if self._state == STOPPED:
            return
        self.gaps += 1
        lsn = max(self._accepted_lsn, 0)
        pending = _Pending(_Gap(lsn), [(b"[]", self.gap_keys, {GAP_HEADER: "1"}, 0)])
        self._pending.append(pending)
        self.unconfirmed += 1
        if self._state == SENDING:
            self._send(pending, self._epoch)

    def _messages(self, txn: Transaction) -> list[Message]:
        """The messages of one transaction, in publish order."""
        changes = txn.changes
        size = self.max_changes
        out: list[Message] = []
        lsn, xid = txn.commit_lsn, txn.xid
        route = self._route
        if route is None:
            for start in range(0, len(changes), size):
                chunk = changes[start:start + size]
                out.append((encode_changes(chunk), FANOUT_KEYS,
                            Position(lsn, xid, len(out)).headers(), len(chunk)))
            return out
        # per routing keys in order of first appearance; an object whose
        # keys change (it moved) closes every open group first, so that each
        # object's changes stay in WAL order for a node bound to several keys
        groups: dict[tuple[str, ...], list[Change]] = {}
        where: dict[tuple[str, ObjectId], tuple[str, ...]] = {}

        def emit(keys: tuple[str, ...], run: list[Change]) -> None:
            out.append((encode_changes(run), keys, Position(lsn, xid, len(out)).headers(),
                        len(run)))

        for change in changes:
            keys = tuple(route(change))
            ident = (change.type, change.id)
            before = where.get(ident)
            if before is not None and before != keys:
                for open_keys, open_run in groups.items():
                    emit(open_keys, open_run)
                groups.clear()
                where.clear()
            group = groups.get(keys)
            if group is None:
                group = groups[keys] = []
            group.append(change)
            where[ident] = keys
            if len(group) >= size:
                emit(keys, group)
                del groups[keys]
        for open_keys, run in groups.items():
            emit(open_keys, run)
        return out

    # the broker's side

    def broker_ready(self) -> None:
        """The broker is connected (again): send everything unconfirmed."""
        self._connected = True
        if self._state == HOLDING and not self._stopped:
            self._cancel_timer()
            self._resend()

    def broker_lost(self) -> None:
        """The broker connection is gone: hold until ``broker_ready``."""
        self._connected = False
        if self._state == SENDING:
            self._hold()

    @property
    def _stopped(self) -> bool:
        return self._state == STOPPED

    def _send(self, pending: _Pending, epoch: int) -> bool:
        """Publish a transaction's messages; False when a publish failed at
        once (the relay then holds)."""
        publish = self._publish
        for body, keys, headers, count in pending.messages:
            try:
                d = publish(body, keys, headers)
            except Exception:
                self._failed(Failure(), epoch)
                return False
            d.addCallbacks(self._confirmed, self._failed,
                           callbackArgs=(pending, epoch, count), errbackArgs=(epoch,))
            d.addErrback(self._bug)
            if self._epoch != epoch:     # it failed at once
                return False
        return True

    def _confirmed(self, _: object, pending: _Pending, epoch: int, count: int) -> None:
        if epoch != self._epoch:
            return          # an answer from before a failure: sent again since
        self._attempts = 0
        pending.outstanding -= 1
        self.unconfirmed -= 1
        self.unconfirmed_changes -= count
        self.messages += 1
        self.changes += count
        if pending.outstanding == 0 and self._pending and self._pending[0] is pending:
            self._advance()
        if self.paused:
            self._check_resume()

    def _advance(self) -> None:
        """Drop the wholly confirmed transactions at the front; confirm the
        last one's end to the reader."""
        queue = self._pending
        lsn = -1
        while queue and queue[0].outstanding == 0:
            done = queue.popleft()
            lsn = done.end_lsn
            self.transactions += 1
        if lsn > self.confirmed_lsn:
            self.confirmed_lsn = lsn
            if self.reader is not None:
                self.reader.confirm(lsn)
        if not queue and self._drained:
            waiting, self._drained = self._drained, []
            for d in waiting:
                if not d.called:
                    d.callback(None)

    def _failed(self, failure: Failure, epoch: int) -> None:
        if epoch != self._epoch:
            return          # this failure's episode is handled already
        self.failures += 1
        self._attempts += 1
        first = self._pending[0] if self._pending else None
        log.warn("relay: the broker did not confirm a message ({why}); holding "
                 "{count} transaction(s), to be published again from {lsn}",
                 why=_reason(failure), count=len(self._pending),
                 lsn=format_lsn(first.commit_lsn) if first else "-")
        self._hold()
        if self._connected:
            # the connection is up (a refusal): try again after a back-off
            delay = min(self.retry * (2 ** (self._attempts - 1)), self.max_retry)
            self._cancel_timer()
            self._timer = self.clock.callLater(delay, self._retry)

    def _hold(self) -> None:
        """Stop sending; every message of every pending transaction counts as
        unconfirmed again (they are all sent again)."""
        self._epoch += 1
        self._state = HOLDING
        self._recount()
        self._check_pause()

    def _recount(self) -> None:
        self.unconfirmed = sum(len(p.messages) for p in self._pending)
        self.unconfirmed_changes = sum(p.changes for p in self._pending)

    def _retry(self) -> None:
        self._timer = None
        if self._state == HOLDING and self._connected:
            self._resend()

    def _resend(self) -> None:
        """Send every pending transaction, from the first, in order."""
        self._epoch += 1
        epoch = self._epoch
        self._state = SENDING
        if self._pending:
            self.resends += 1
        for pending in self._pending:
            pending.outstanding = len(pending.messages)
        self._recount()
        for pending in list(self._pending):
            if not self._send(pending, epoch):
                return
        self._advance()

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    # flow control

    def _check_pause(self) -> None:
        if not self.paused and (self.unconfirmed > self.max_messages
                                or self.unconfirmed_changes > self.max_pending_changes):
            self.paused = True
            self.pauses += 1
            if self.reader is not None:
                self.reader.pause()

    def _check_resume(self) -> None:
        if self._stopping:
            return
        if (self.unconfirmed <= self.max_messages // 2
                and self.unconfirmed_changes <= self.max_pending_changes // 2):
            self.paused = False
            if self.reader is not None:
                self.reader.resume()

    # stopping

    def stop(self, timeout: float = 10.0) -> "Deferred[None]":
        """Pause the reader, wait (up to ``timeout`` s) for the broker to
        confirm what is in flight and confirm it to the reader, give the
        reader up to ``FLUSH_WAIT`` s to tell PostgreSQL (so that the next
        relay on the slot starts after it), then stop the reader. What is
        still unconfirmed then is sent again by the next relay."""
        if self._stopping:
            return succeed(None)
        self._stopping = True
        if not self.paused:
            self.paused = True
            if self.reader is not None:
                self.reader.pause()
        drained: Deferred[None] = Deferred()
        if self._pending:
            self._drained.append(drained)
            drained.addTimeout(timeout, self.clock)
        else:
            drained.callback(None)

        def unconfirmed(failure: Failure) -> None:
            log.warn("relay: stopping with {count} unconfirmed transaction(s) from "
                     "{lsn}: the next relay on the slot sends them again",
                     count=len(self._pending),
                     lsn=format_lsn(self._pending[0].commit_lsn) if self._pending else "-")

        def stop_reader(_: object) -> "Deferred[Any] | None":
            self._cancel_timer()
            self._state = STOPPED
            self._epoch += 1
            return self.reader.stop() if self.reader is not None else None

        drained.addCallback(lambda _: self._told_postgres())
        drained.addErrback(unconfirmed)
        drained.addCallback(stop_reader)
        drained.addCallback(lambda _: None)
        drained.addErrback(lambda f: log.failure("relay: stopping failed", f))
        return drained

    def _told_postgres(self) -> "Deferred[None]":
        """Fires once the reader has sent PostgreSQL the last position
        confirmed (it sends them at most twice a second), or after
        ``FLUSH_WAIT`` s."""
        done: Deferred[None] = Deferred()
        deadline = self.clock.seconds() + FLUSH_WAIT

        def look() -> None:
            reader = self.reader
            sent = reader.sent_lsn if reader is not None else None
            if reader is None or self.confirmed_lsn == 0 or (
                    sent is not None and sent >= self.confirmed_lsn) \
                    or self.clock.seconds() >= deadline:
                done.callback(None)
            else:
                self.clock.callLater(FLUSH_LOOK, look)

        look()
        return done

    # figures

    @property
    def state(self) -> str:
        return self._state

    def health(self) -> dict[str, Any]:
        first = self._pending[0] if self._pending else None
        return {
            "state": self._state,
            "broker": "connected" if self._connected else "disconnected",
            "paused": self.paused,
            "confirmed_lsn": format_lsn(self.confirmed_lsn),
            "first_unconfirmed_lsn": format_lsn(first.commit_lsn) if first else None,
            "unconfirmed_transactions": len(self._pending),
            "unconfirmed_messages": self.unconfirmed,
        }

    def stats(self) -> dict[str, float]:
        return {
            "transactions": self.transactions,
            "messages": self.messages,
            "changes": self.changes,
            "confirmed_lsn": self.confirmed_lsn,
            "unconfirmed_transactions": len(self._pending),
            "unconfirmed_messages": self.unconfirmed,
            "unconfirmed_changes": self.unconfirmed_changes,
            "failures": self.failures,
            "resends": self.resends,
            "skipped_transactions": self.skipped,
            "pauses": self.pauses,
            "paused": 1 if self.paused else 0,
        }

    def _bug(self, failure: Failure) -> None:
        log.failure("relay: handling a broker answer failed", failure)


def _reason(failure: Failure) -> str:
    error = failure.value
    return str(error) or type(error).__name__
