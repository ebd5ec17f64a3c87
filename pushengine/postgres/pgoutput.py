"""PostgreSQL's ``pgoutput`` logical decoding messages, protocol version 1.

The WAL reader (``wal.py``) asks for ``pgoutput`` rather than ``wal2json``:
it is built into every PostgreSQL from 10 on, managed services included; its
publications choose the tables on the server, so nothing else is sent; and
the server needs no extra package. Values come in PostgreSQL's text form,
which ``rows.to_value`` turns into the engine's JSON as the store does.

``parse(data)`` turns one message (the payload of one XLogData) into one of
the dataclasses below, or raises ``ProtocolError``. A tuple's values are
``str`` (the text form), ``None`` (SQL NULL) or ``UNCHANGED`` (a TOASTed
value the update did not touch and did not send).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Final, Union


class ProtocolError(ValueError):
    """A message that is not pgoutput protocol version 1."""


class _Unchanged:
    """An unchanged TOASTed value ('u'): the update left it as it was and
    did not send it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Final = _Unchanged()

Value = Union[str, None, _Unchanged]
TupleData = tuple[Value, ...]

# timestamps count microseconds from 2000-01-01 00:00 UTC
POSTGRES_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)

# Relation.replica_identity
IDENTITY_DEFAULT, IDENTITY_NOTHING, IDENTITY_FULL, IDENTITY_INDEX = "d", "n", "f", "i"
# Truncate.options bits
TRUNCATE_CASCADE, TRUNCATE_RESTART_IDENTITY = 1, 2
# RelationColumn.flags: the column is part of the replica identity key
COLUMN_KEY = 1


def timestamp(micros: int) -> datetime:
    """A pgoutput timestamp as an aware UTC datetime."""
    return POSTGRES_EPOCH + timedelta(microseconds=micros)


@dataclass(frozen=True, slots=True)
class Begin:
    final_lsn: int        # the LSN of the transaction's commit record
    commit_time: int      # microseconds since 2000-01-01 UTC
    xid: int              # 32 bits: wal.py widens it to the 64-bit xid8


@dataclass(frozen=True, slots=True)
class Commit:
    flags: int
    commit_lsn: int
    end_lsn: int          # the end of the commit record: what a client confirms
    commit_time: int


@dataclass(frozen=True, slots=True)
class Origin:
    lsn: int
    name: str


@dataclass(frozen=True, slots=True)
class RelationColumn:
    flags: int
    name: str
    type_oid: int
    type_modifier: int

    @property
    def key(self) -> bool:
        return bool(self.flags & COLUMN_KEY)


@dataclass(frozen=True, slots=True)
class Relation:
    oid: int
    namespace: str        # "" means pg_catalog
    name: str
    replica_identity: str
    columns: tuple[RelationColumn, ...]


@dataclass(frozen=True, slots=True)
class Type:
    oid: int
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class Insert:
    relation: int
    new: TupleData


@dataclass(frozen=True, slots=True)
class Update:
    relation: int
    new: TupleData
    old: TupleData | None = None   # with REPLICA IDENTITY FULL: the whole old row
    old_is_key: bool = False       # 'K': the old tuple holds only the key columns


@dataclass(frozen=True, slots=True)
class Delete:
    relation: int
    old: TupleData
    old_is_key: bool = False


@dataclass(frozen=True, slots=True)
class Truncate:
    options: int
    relations: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Message:
    """A logical decoding message (``pg_logical_emit_message``); sent only
    when the client asks for them."""

    transactional: bool
    lsn: int
    prefix: str
    content: bytes


PgOutputMessage = Union[Begin, Commit, Origin, Relation, Type, Insert, Update, Delete,
                        Truncate, Message]


class _Reader:
    """Reads the big-endian fields of one message, refusing to run past it."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise ProtocolError(f"message ends early (wanted {n} bytes at {self.pos}, "
                                f"{len(self.data)} in all)")
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk

    def byte(self) -> str:
        return chr(self.take(1)[0])

    def int8(self) -> int:
        return int(self.take(1)[0])

    def int16(self) -> int:
        value: int = struct.unpack(">h", self.take(2))[0]
        return value

    def int32(self) -> int:
        value: int = struct.unpack(">i", self.take(4))[0]
        return value

    def uint32(self) -> int:
        value: int = struct.unpack(">I", self.take(4))[0]
        return value

    def int64(self) -> int:
        value: int = struct.unpack(">q", self.take(8))[0]
        return value

    def uint64(self) -> int:
        value: int = struct.unpack(">Q", self.take(8))[0]
        return value

    def string(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise ProtocolError("a string has no terminating zero byte")
        text = self.data[self.pos:end]
        self.pos = end + 1
        return _text(text)

    def tuple_data(self) -> TupleData:
        count = self.int16()
        if count < 0:
            raise ProtocolError(f"a tuple with {count} columns")
        values: list[Value] = []
        for _ in range(count):
            kind = self.byte()
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append(UNCHANGED)
            elif kind == "t":
                values.append(_text(self.take(self.int32())))
            else:
                raise ProtocolError(f"unknown tuple value kind {kind!r} "
                                    f"(protocol version 1 sends n, u and t)")
        return tuple(values)

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ProtocolError(f"{len(self.data) - self.pos} bytes left after the message")


def _text(raw: bytes) -> str:
    """Text in the connection's encoding (the WAL reader asks for UTF-8);
    a byte that is not UTF-8 becomes U+FFFD rather than stopping the feed."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace")


def parse(data: bytes) -> PgOutputMessage:
    """One pgoutput message; ProtocolError when it is not one."""
    if not data:
        raise ProtocolError("an empty message")
    r = _Reader(bytes(data))
    kind = r.byte()
    message: PgOutputMessage
    if kind == "B":
        message = Begin(r.uint64(), r.int64(), r.uint32())
    elif kind == "C":
        message = Commit(r.int8(), r.uint64(), r.uint64(), r.int64())
    elif kind == "O":
        message = Origin(r.uint64(), r.string())
    elif kind == "R":
        oid, namespace, name = r.uint32(), r.string(), r.string()
        identity = r.byte()
        count = r.int16()
        if count < 0:
            raise ProtocolError(f"a relation with {count} columns")
        columns = tuple(RelationColumn(r.int8(), r.string(), r.uint32(), r.int32())
                        for _ in range(count))
        message = Relation(oid, namespace, name, identity, columns)
    elif kind == "Y":
        message = Type(r.uint32(), r.string(), r.string())
    elif kind == "I":
        relation = r.uint32()
        if r.byte() != "N":
            raise ProtocolError("an insert without its new tuple")
        message = Insert(relation, r.tuple_data())
    elif kind == "U":
        relation = r.uint32()
        marker = r.byte()
        old: TupleData | None = None
        if marker in ("K", "O"):
            old = r.tuple_data()
            old_is_key = marker == "K"
            marker = r.byte()
        else:
            old_is_key = False
        if marker != "N":
            raise ProtocolError(f"an update with {marker!r} where its new tuple should be")
        message = Update(relation, r.tuple_data(), old, old_is_key)
    elif kind == "D":
        relation = r.uint32()
        marker = r.byte()
        if marker not in ("K", "O"):
            raise ProtocolError(f"a delete with {marker!r} where its old tuple should be")
        message = Delete(relation, r.tuple_data(), marker == "K")
    elif kind == "T":
        count = r.int32()
        if count < 0:
            raise ProtocolError(f"a truncate of {count} relations")
        options = r.int8()
        message = Truncate(options, tuple(r.uint32() for _ in range(count)))
    elif kind == "M":
        transactional = r.int8() & 1 == 1
        lsn, prefix = r.uint64(), r.string()
        message = Message(transactional, lsn, prefix, r.take(r.int32()))
    else:
        raise ProtocolError(f"unknown pgoutput message type {kind!r}")
    r.end()
    return message
