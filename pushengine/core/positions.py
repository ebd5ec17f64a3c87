"""Where a change stands in its database's history (SPEC 20's hand-off).

A change read from PostgreSQL's WAL carries its transaction id and the
commit position (LSN) of that transaction; an initial state read from
PostgreSQL carries the snapshot it was read in. Together they make the
hand-off exact: a change whose transaction the snapshot already sees is in
the state and is not applied to it again; any other change is newer and is
applied. ``Watermark`` drops a change at or below the last position applied
(a relay that restarts sends its last changes again), so that no object
ever goes back to an older version.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from pushengine.core.numbers import parse_decimal

# the headers a relay puts on each message (docs/postgres.md)
LSN_HEADER = "pushengine-lsn"     # the commit LSN of the transaction, "X/Y" as PostgreSQL writes it
XID_HEADER = "pushengine-xid"     # the transaction id (64-bit, decimal)
PART_HEADER = "pushengine-part"   # the message's number within the transaction, from 0
# a message of no change that says the stream has a gap (a TRUNCATE, a slot
# made afresh): a node reads its views again
GAP_HEADER = "pushengine-gap"


_LSN = re.compile(r"^([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})$")


def parse_lsn(text: str) -> int:
    """``16/B374D848`` -> its 64-bit position; ValueError when it is not one
    (ASCII hexadecimal digits only: no sign, space or underscore)."""
    m = _LSN.match(text) if text.isascii() else None
    if m is None:
        raise ValueError(f"not an LSN: {text[:40]!r}")
    return (int(m.group(1), 16) << 32) | int(m.group(2), 16)


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


@dataclass(frozen=True, slots=True)
class Position:
    """A message's place in the WAL: its transaction's commit LSN, the
    transaction id, and the message's number within the transaction."""

    lsn: int
    xid: int
    part: int = 0

    def headers(self) -> dict[str, str]:
        return {LSN_HEADER: format_lsn(self.lsn), XID_HEADER: str(self.xid),
                PART_HEADER: str(self.part)}

    @classmethod
    def from_headers(cls, headers: Mapping[str, Any] | None) -> "Position | None":
        """The position in a message's headers; None when it has none or a
        malformed one (such a message is applied as any published change)."""
        if not headers or LSN_HEADER not in headers:
            return None
        try:
            lsn = parse_lsn(str(headers[LSN_HEADER]))
        except ValueError:
            return None
        xid = parse_decimal(str(headers.get(XID_HEADER, "")), 20)
        part = parse_decimal(str(headers.get(PART_HEADER, "0")), 9)
        if xid is None or part is None or xid >= 1 << 64:
            return None
        return cls(lsn, xid, part)


class Watermark:
    """The last position applied: a message at or below it is a copy sent
    again (after a relay restart or a redelivery) and is dropped."""

    __slots__ = ("last", "dropped")

    def __init__(self) -> None:
        self.last: tuple[int, int] | None = None
        self.dropped = 0

    def admit(self, position: Position) -> bool:
        """Whether a message at ``position`` is new; records it if so."""
        here = (position.lsn, position.part)
        if self.last is not None and here <= self.last:
            self.dropped += 1
            return False
        self.last = here
        return True


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A PostgreSQL snapshot (``pg_current_snapshot()``, ``xmin:xmax:xip,...``,
    64-bit transaction ids): which transactions a read saw."""

    xmin: int
    xmax: int
    xip: frozenset[int]

    @classmethod
    def parse(cls, text: str) -> "Snapshot":
        xmin, xmax, xip = text.split(":")
        return cls(int(xmin), int(xmax), frozenset(int(x) for x in xip.split(",") if x))

    def sees(self, xid: int) -> bool:
        """Whether a transaction committed with ``xid`` is visible in the
        snapshot. A 32-bit id (from a source that does not widen them, such
        as Debezium's streaming events) is widened first, to the 64-bit id
        nearest ``xmax``: PostgreSQL keeps every live id within 2**31 of
        the newest."""
        if xid < 1 << 32 <= self.xmax:
            xid = widen(xid, self.xmax)
        if xid < self.xmin:
            return True
        return xid < self.xmax and xid not in self.xip


def widen(xid32: int, near: int) -> int:
    """The 64-bit transaction id whose low 32 bits are ``xid32``, nearest
    the 64-bit id ``near``."""
    candidate = (near & ~0xFFFFFFFF) | xid32
    if candidate - near > 1 << 31:
        candidate -= 1 << 32
    elif near - candidate > 1 << 31:
        candidate += 1 << 32
    return candidate


class State(list[Any]):
    """An initial state: the objects in view order, with the snapshot they
    were read in (None when the store has none)."""

    def __init__(self, objects: Iterable[dict[str, Any]] = (),
                 snapshot: Snapshot | None = None) -> None:
        super().__init__(objects)
        self.snapshot = snapshot
