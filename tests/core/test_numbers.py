"""``parse_decimal``: the strict reader of numbers in headers (SPEC section 18)."""
from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from pushengine.core.numbers import parse_decimal

STRICT = re.compile(r"[0-9]+")


@given(st.one_of(st.text(max_size=30), st.text(alphabet="0123456789", max_size=30),
                 st.binary(max_size=30)),
       st.integers(min_value=1, max_value=25))
def test_digits_only_and_bounded(text, max_digits) -> None:
    """Exactly the texts of 1 to max_digits ASCII digits are read, as int()
    reads them; everything else is None, and nothing raises."""
    raw = text.decode("latin-1") if isinstance(text, bytes) else text
    expected = int(raw) if STRICT.fullmatch(raw) and len(raw) <= max_digits else None
    assert parse_decimal(text, max_digits) == expected


@given(st.integers(min_value=0, max_value=10 ** 18))
def test_round_trip(n) -> None:
    assert parse_decimal(str(n), 19) == n
    assert parse_decimal(str(n).encode(), 19) == n


def test_the_lenient_forms_are_refused() -> None:
    for text in ("²", "١٢٣", " 12", "12 ", "+12", "-1", "1_000", "0x10", "1e3", "", "٣",
                 "1" * 5000, "12\n", "１２"):
        assert parse_decimal(text, 16) is None, text
    assert parse_decimal("0042", 4) == 42
    assert parse_decimal("12345", 4) is None
