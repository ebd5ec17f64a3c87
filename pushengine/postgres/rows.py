"""One row of a mapped table as the object the engine keeps (SPEC 20).

Both paths read a row's values in PostgreSQL's text form: the store selects
``column::text`` and logical replication (pgoutput) sends text, so the same
row is the same object whichever way it came. ``to_value`` turns one text
value into JSON by the column's type:

- booleans, integers, numerics and floats as JSON numbers (a numeric with no
  fraction as an integer; NaN and infinities, which JSON cannot carry, as null);
- json and jsonb as the nested JSON they hold;
- arrays as lists, their elements converted by the element type;
- ``timestamptz`` and ``timestamp`` (read as UTC) as
  ``YYYY-MM-DDTHH:MM:SS.ffffffZ``: one fixed width, so their text order is
  their time order; ``date`` as ``YYYY-MM-DD``;
- everything else (text, varchar, uuid, time, interval, ...) as its text.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Sequence

from pushengine.core import strictjson

# the kinds a column's values take in the engine, by type name
INTEGER_TYPES = frozenset({"smallint", "integer", "bigint", "int2", "int4", "int8"})
FLOAT_TYPES = frozenset({"real", "double precision", "float4", "float8"})
NUMERIC_TYPES = frozenset({"numeric", "decimal"})
BOOL_TYPES = frozenset({"boolean", "bool"})
JSON_TYPES = frozenset({"json", "jsonb"})
TIMESTAMP_TYPES = frozenset({"timestamp with time zone", "timestamptz",
                             "timestamp without time zone", "timestamp"})

# a column's kind: what JSON values its objects' field holds
NUMBER, BOOL, STRING, TIMESTAMP, JSON, ARRAY = (
    "number", "bool", "string", "timestamp", "json", "array")

_TIMESTAMP = re.compile(
    r"^(\d{4,})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?"
    r"(?:([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?|Z)?( BC)?$")
CANONICAL_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@dataclass(frozen=True)
class Column:
    """A column of a mapped table: its name and its type as PostgreSQL names
    it (``format_type``: ``integer``, ``text[]``, ``timestamp with time zone``)."""

    name: str
    type: str

    @property
    def kind(self) -> str:
        return kind_of(self.type)


def kind_of(type_name: str) -> str:
    """The JSON kind of a column of type ``type_name``."""
    base = _base(type_name)
    if type_name.endswith("[]"):
        return ARRAY
    if base in INTEGER_TYPES or base in FLOAT_TYPES or base in NUMERIC_TYPES:
        return NUMBER
    if base in BOOL_TYPES:
        return BOOL
    if base in JSON_TYPES:
        return JSON
    if base in TIMESTAMP_TYPES:
        return TIMESTAMP
    return STRING


def _base(type_name: str) -> str:
    """``numeric(10,2)`` -> ``numeric``; ``character varying(20)[]`` ->
    ``character varying``."""
    name = type_name[:-2] if type_name.endswith("[]") else type_name
    name = re.sub(r"\(.*?\)", "", name).strip()
    if name.startswith("timestamp"):
        return "timestamp with time zone" if "with time zone" in name else "timestamp"
    return name


def to_value(type_name: str, text: str | None) -> Any:
    """One value in PostgreSQL's text form as the engine's JSON value."""
    if text is None:
        return None
    return converter(type_name)(text)


@lru_cache(maxsize=1024)
def converter(type_name: str) -> Callable[[str], Any]:
    """The function from a non-null text of ``type_name`` to its value."""
    if type_name.endswith("[]"):
        element = type_name[:-2]
        return lambda text: _array(text, lambda item: to_value(element, item))
    return _converter(_base(type_name))


def _number(text: str) -> Any:
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    if value == value.to_integral_value() and "e" not in text.lower():
        return int(value)
    as_float = float(value)
    return as_float if as_float not in (float("inf"), float("-inf")) else None


def _float(text: str) -> Any:
    try:
        value = float(text)
    except ValueError:
        return None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    return value


def _integer(text: str) -> Any:
    return int(text)


def _bool(text: str) -> Any:
    return text in ("t", "true")


def _json(text: str) -> Any:
    try:
        return strictjson.loads(text)
    except (strictjson.UnsafeJSON, ValueError):
        return None


def timestamp_text(text: str) -> str:
    """A timestamp in PostgreSQL's text form (any DateStyle ISO output, with
    or without an offset) as the fixed-width UTC form; ``infinity`` and
    ``-infinity`` stay as they are."""
    m = _TIMESTAMP.match(text)
    if m is None:
        return text
    year, month, day, hour, minute, second, fraction, sign, oh, om, os_, bc = m.groups()
    if bc or len(year) > 4:
        return text         # outside what the fixed width can order: kept as text
    micro = int((fraction or "0").ljust(6, "0"))
    moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                      micro, tzinfo=timezone.utc)
    if sign is not None:
        offset = int(oh) * 3600 + int(om or 0) * 60 + int(os_ or 0)
        from datetime import timedelta
        moment -= timedelta(seconds=offset if sign == "+" else -offset)
    return (f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}:"
            f"{moment.minute:02d}:{moment.second:02d}.{moment.microsecond:06d}Z")


def _date(text: str) -> Any:
    return text


_CONVERTERS: dict[str, Callable[[str], Any]] = {
    **{t: _integer for t in INTEGER_TYPES},
    **{t: _float for t in FLOAT_TYPES},
    **{t: _number for t in NUMERIC_TYPES},
    **{t: _bool for t in BOOL_TYPES},
    **{t: _json for t in JSON_TYPES},
    **{t: timestamp_text for t in TIMESTAMP_TYPES},
}


def _converter(base: str) -> Callable[[str], Any]:
    return _CONVERTERS.get(base, _text)


def _text(text: str) -> Any:
    return text


def _array(text: str, element: Callable[[str | None], Any]) -> Any:
    """A PostgreSQL array literal (``{1,2,NULL}``, ``{"a b","c"}``,
    ``{{1,2},{3,4}}``, with an optional ``[1:2]=`` bounds prefix) as a list."""
    if text.startswith("["):
        text = text[text.index("=") + 1:]
    pos = 0

    def parse() -> list:
        nonlocal pos
        assert text[pos] == "{"
        pos += 1
        items: list = []
        if text[pos] == "}":
            pos += 1
            return items
        while True:
            if text[pos] == "{":
                items.append(parse())
            elif text[pos] == '"':
                pos += 1
                chars: list[str] = []
                while text[pos] != '"':
                    if text[pos] == "\\":
                        pos += 1
                    chars.append(text[pos])
                    pos += 1
                pos += 1
                items.append(element("".join(chars)))
            else:
                end = pos
                while text[end] not in ",}":
                    end += 1
                raw = text[pos:end].strip()
                pos = end
                items.append(None if raw == "NULL" else element(raw))
            if text[pos] == ",":
                pos += 1
                continue
            assert text[pos] == "}"
            pos += 1
            return items
    try:
        return parse()
    except (AssertionError, IndexError):
        return None


def row_object(columns: Sequence[Column], texts: Sequence[str | None]) -> dict[str, Any]:
    """The object of one row: each column's value under its name (a NULL
    column is null, so ``null`` equality matches it as a missing field)."""
    return {c.name: None if t is None else converter(c.type)(t)
            for c, t in zip(columns, texts)}


def canonical_timestamp(value: object) -> bool:
    """Whether ``value`` is a timestamp exactly as ``row_object`` writes one."""
    return isinstance(value, str) and CANONICAL_TIMESTAMP.match(value) is not None


def json_dumps(value: Any) -> str:
    """JSON text for a bound jsonb parameter."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
