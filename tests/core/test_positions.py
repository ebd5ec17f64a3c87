"""WAL positions, the watermark and snapshots (core/positions.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from pushengine.core.positions import (
    LSN_HEADER, PART_HEADER, XID_HEADER, Position, Snapshot, State, Watermark, format_lsn,
    parse_lsn, widen)


@given(st.integers(0, (1 << 64) - 1))
def test_lsn_text_round_trip(lsn):
    assert parse_lsn(format_lsn(lsn)) == lsn


@pytest.mark.parametrize("text", ["", "1", "/1", "1/", "x/1", " 1/2", "+1/2", "1_0/2",
                                  "١/2", "123456789/1", "1/2/3"])
def test_malformed_lsn(text):
    with pytest.raises(ValueError):
        parse_lsn(text)


def test_position_headers_round_trip_and_strict_numbers():
    p = Position(parse_lsn("16/B374D848"), 770, 2)
    assert Position.from_headers(p.headers()) == p
    assert Position.from_headers({}) is None
    assert Position.from_headers(None) is None
    for xid in ("+12", " 12", "1_0", "١٢", "-1", "", str(1 << 64)):
        assert Position.from_headers({LSN_HEADER: "0/1", XID_HEADER: xid}) is None
    assert Position.from_headers({LSN_HEADER: "0/1", XID_HEADER: "5", PART_HEADER: "x"}) is None


def test_the_watermark_drops_what_is_not_past_it():
    w = Watermark()
    assert w.admit(Position(10, 1, 0)) and w.admit(Position(10, 1, 1))
    assert not w.admit(Position(10, 1, 1)) and not w.admit(Position(9, 5, 7))
    assert w.admit(Position(11, 2, 0))
    assert w.dropped == 2


def test_snapshot_visibility():
    s = Snapshot.parse("100:110:102,105")
    assert s.sees(99) and s.sees(101) and s.sees(109)
    assert not s.sees(102) and not s.sees(105) and not s.sees(110) and not s.sees(200)
    assert Snapshot.parse("7:7:") == Snapshot(7, 7, frozenset())


@given(st.integers(1 << 33, 1 << 60), st.integers(-(1 << 30), 1 << 30))
def test_a_32_bit_id_is_widened_to_the_nearest(near, delta):
    full = near + delta
    assert widen(full & 0xFFFFFFFF, near) == full
    snapshot = Snapshot(near - 10, near, frozenset())
    assert snapshot.sees(full & 0xFFFFFFFF) == snapshot.sees(full)


def test_a_state_is_a_list_with_its_snapshot():
    state = State([{"id": 1}], Snapshot(1, 2, frozenset()))
    assert state == [{"id": 1}] and state.snapshot == Snapshot(1, 2, frozenset())
