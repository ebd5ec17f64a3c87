"""The pgoutput parser on hand-built messages (protocol version 1)."""
import struct

import pytest
from hypothesis import given, strategies as st

from pushengine.postgres import pgoutput
from pushengine.postgres.pgoutput import (
    UNCHANGED, Begin, Commit, Delete, Insert, Message, Origin, ProtocolError, Relation,
    RelationColumn, Truncate, Type, Update, parse)


def s(text):
    return text.encode() + b"\0"


def tup(*values):
    out = struct.pack(">h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is UNCHANGED:
            out += b"u"
        else:
            raw = v.encode()
            out += b"t" + struct.pack(">i", len(raw)) + raw
    return out


def test_begin():
    data = b"B" + struct.pack(">QqI", 0x16B374D848, 757_000_000_000_000, 4_000_000_123)
    assert parse(data) == Begin(0x16B374D848, 757_000_000_000_000, 4_000_000_123)
    assert pgoutput.timestamp(0).isoformat() == "2000-01-01T00:00:00+00:00"


def test_commit():
    data = b"C" + struct.pack(">bQQq", 0, 100, 140, 5)
    assert parse(data) == Commit(0, 100, 140, 5)


def test_origin():
    assert parse(b"O" + struct.pack(">Q", 7) + s("upstream")) == Origin(7, "upstream")


def test_relation():
    data = (b"R" + struct.pack(">I", 16390) + s("public") + s("streams") + b"f"
            + struct.pack(">h", 2)
            + b"\x01" + s("id") + struct.pack(">Ii", 20, -1)
            + b"\x00" + s("title") + struct.pack(">Ii", 1043, 104))
    message = parse(data)
    assert message == Relation(16390, "public", "streams", "f", (
        RelationColumn(1, "id", 20, -1), RelationColumn(0, "title", 1043, 104)))
    assert message.columns[0].key and not message.columns[1].key


def test_type():
    assert parse(b"Y" + struct.pack(">I", 90001) + s("public") + s("mood")) == \
        Type(90001, "public", "mood")


def test_insert_with_null_and_text():
    data = b"I" + struct.pack(">I", 5) + b"N" + tup("1", None, "héllo")
    assert parse(data) == Insert(5, ("1", None, "héllo"))


def test_update_without_old_tuple():
    data = b"U" + struct.pack(">I", 5) + b"N" + tup("1", UNCHANGED)
    assert parse(data) == Update(5, ("1", UNCHANGED), None, False)


@pytest.mark.parametrize("marker,is_key", [(b"O", False), (b"K", True)])
def test_update_with_old_tuple(marker, is_key):
    data = b"U" + struct.pack(">I", 5) + marker + tup("1", "old") + b"N" + tup("1", "new")
    assert parse(data) == Update(5, ("1", "new"), ("1", "old"), is_key)


@pytest.mark.parametrize("marker,is_key", [(b"O", False), (b"K", True)])
def test_delete(marker, is_key):
    data = b"D" + struct.pack(">I", 5) + marker + tup("1", None)
    assert parse(data) == Delete(5, ("1", None), is_key)


def test_truncate():
    data = b"T" + struct.pack(">ib", 2, 3) + struct.pack(">II", 5, 6)
    message = parse(data)
    assert message == Truncate(3, (5, 6))
    assert message.options & pgoutput.TRUNCATE_CASCADE
    assert message.options & pgoutput.TRUNCATE_RESTART_IDENTITY


def test_logical_message():
    data = b"M" + b"\x01" + struct.pack(">Q", 9) + s("app") + struct.pack(">i", 3) + b"abc"
    assert parse(data) == Message(True, 9, "app", b"abc")


def test_text_that_is_not_utf8_is_replaced_not_refused():
    data = b"I" + struct.pack(">I", 5) + b"N" + struct.pack(">h", 1) + b"t" \
        + struct.pack(">i", 2) + b"\xff\xfe"
    assert parse(data) == Insert(5, ("\ufffd\ufffd",))


@pytest.mark.parametrize("data,why", [
    (b"", "empty"),
    (b"Z", "unknown pgoutput message type"),
    (b"B" + b"\0" * 10, "ends early"),
    (b"C" + struct.pack(">bQQq", 0, 1, 2, 3) + b"x", "left after"),
    (b"I" + struct.pack(">I", 5) + b"X" + tup("1"), "new tuple"),
    (b"U" + struct.pack(">I", 5) + b"Q" + tup("1"), "new tuple"),
    (b"D" + struct.pack(">I", 5) + b"N" + tup("1"), "old tuple"),
    (b"I" + struct.pack(">I", 5) + b"N" + struct.pack(">h", 1) + b"b"
     + struct.pack(">i", 1) + b"x", "tuple value kind"),
    (b"I" + struct.pack(">I", 5) + b"N" + struct.pack(">h", -1), "columns"),
    (b"I" + struct.pack(">I", 5) + b"N" + struct.pack(">h", 1) + b"t"
     + struct.pack(">i", 10) + b"x", "ends early"),
    (b"O" + struct.pack(">Q", 7) + b"no end", "terminating zero"),
    (b"T" + struct.pack(">ib", -1, 0), "truncate"),
])
def test_malformed_messages_are_refused(data, why):
    with pytest.raises(ProtocolError, match=why):
        parse(data)


values = st.one_of(st.none(), st.just(UNCHANGED), st.text(max_size=30))


@given(st.integers(0, 2**32 - 1), st.lists(values, max_size=8), st.lists(values, max_size=8))
def test_any_update_reads_back(relation, old, new):
    data = b"U" + struct.pack(">I", relation) + b"O" + tup(*old) + b"N" + tup(*new)
    assert parse(data) == Update(relation, tuple(new), tuple(old), False)


@given(st.binary(max_size=40))
def test_any_bytes_give_a_message_or_a_protocol_error(data):
    try:
        parse(data)
    except ProtocolError:
        pass
