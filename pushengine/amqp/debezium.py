"""Debezium's JSON change events as the engine's changes (``--amqp-format
debezium``, SPEC 20).

Debezium Server's RabbitMQ sink publishes one event per message, as
Debezium's JSON converter writes it: with the schema wrapper
(``{"schema": {...}, "payload": {...}}``) or, with
``debezium.format.value.schemas.enable=false``, the payload alone::

    {"before": null, "after": {"id": 1, "title": "cat"},
     "source": {"connector": "postgresql", "db": "app", "schema": "public",
                "table": "streams", "txId": 771, "lsn": 24023128,
                "sequence": "[\\"24023000\\",\\"24023128\\"]", ...},
     "op": "c", "ts_ms": 1717000000123}

- ``op`` ``c`` (create), ``u`` (update) and ``r`` (a row read by a snapshot)
  are upserts of ``after``; ``d`` is a delete of ``before`` (with PostgreSQL's
  default REPLICA IDENTITY, ``before`` holds the primary key only).
- The type is the one the views file maps to the table
  (``types: {Stream: {id: id, table: streams, schema: public}}``), looked up
  by ``source.schema`` (or ``source.db``, for connectors without schemas) and
  ``source.table``; a table no type maps to is dropped (``unmapped``).
- Tombstones (an empty body, ``null``, or the sink's stand-in for a null
  value, ``default``), heartbeats, transaction metadata (``BEGIN``/``END``),
  truncates and logical decoding messages are ``ignored``.
- With the schema wrapper, the values are converted to the engine's forms
  by their semantic type (``_LOGICAL``): Debezium's timestamps (epoch
  milli-, micro- or nanoseconds, ISO text with an offset) become the
  fixed-width UTC text ``YYYY-MM-DDTHH:MM:SS.ffffffZ``, dates (days since
  1970) ``YYYY-MM-DD``, times of day PostgreSQL's ``HH:MM:SS[.ffffff]``,
  ``io.debezium.data.Json`` text nested JSON, decimals (base64 of the
  unscaled value) numbers. Without the schema, nothing says what a number
  means: the values are taken as they are.
- The PostgreSQL connector's ``source.txId`` becomes the change's ``xid``,
  so that the hand-off from a view's initial state is exact, and its
  ``source.sequence`` (the LSN of the last transaction committed before
  this one, and the event's own LSN) its ``Position`` for the feed's
  ``Watermark``. Not ``source.lsn`` alone: that is the LSN of the change
  itself, and transactions interleave in the WAL but arrive in commit
  order, so a later transaction's changes may have lower LSNs than an
  earlier one's.

A JSON array, or an object with ``type``, ``action`` and ``obj``, is a change
message of the engine's own (SPEC 2: what ``/api/publish`` and the node's
statistics publish to the same exchange) and is decoded as such.
"""
from __future__ import annotations

import base64
import binascii
import json
import re
import sys
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Mapping, Protocol

from pushengine.core import strictjson
from pushengine.core.changes import (
    DELETE, UPSERT, Change, MalformedChange, changes_from_json, decode_json, valid_id)
from pushengine.core.positions import Position

# (schema, table) -> (type, id field)
TableMap = Mapping[tuple[str, str], tuple[str, str]]
DEFAULT_SCHEMA = "public"

_UPSERT_OPS = frozenset({"c", "u", "r"})
_IGNORED_OPS = frozenset({"t", "m"})            # truncate, logical decoding message
# what Debezium Server's RabbitMQ sink sends for a null value (a tombstone)
# unless debezium.sink.rabbitmq.null.value says otherwise
_NULL_BODIES = frozenset({b"", b"null", b"default"})
_MAX_64 = 1 << 64
_MAX_FLOAT = sys.float_info.max


class TableName(Protocol):
    """A type's table as the views file declares it (``views.spec.Table``)."""

    @property
    def name(self) -> str: ...

    @property
    def schema(self) -> str | None: ...


def table_map(tables: Mapping[str, TableName], id_fields: Mapping[str, str] | None = None
              ) -> dict[tuple[str, str], tuple[str, str]]:
    """``Catalog.tables`` (type -> table) and ``Catalog.id_fields`` as the
    map the decoder reads: (schema, table) -> (type, id field); a table
    without a schema is in ``public``. ValueError when two types name one
    table."""
    found: dict[tuple[str, str], tuple[str, str]] = {}
    for type_, table in tables.items():
        key = (table.schema or DEFAULT_SCHEMA, table.name)
        if key in found:
            raise ValueError(f"types {found[key][0]} and {type_} both map to the table "
                             f"{key[0]}.{key[1]}")
        found[key] = (type_, (id_fields or {}).get(type_, "id"))
    return found


@dataclass(slots=True)
class Event:
    """One message decoded: its good changes and the reasons for the bad;
    its WAL position, if it says one; ``ignored`` (a tombstone, heartbeat,
    transaction boundary...), ``unmapped`` (the table no type maps to) and
    ``sent_ms`` (when Debezium sent it, POSIX milliseconds)."""

    changes: list[Change] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    position: Position | None = None
    ignored: bool = False
    unmapped: tuple[str, str] | None = None
    sent_ms: int | None = None


def decode_debezium(body: bytes | str, tables: TableMap) -> tuple[list[Change], list[str]]:
    """One Debezium change event as (changes, errors): at most one change,
    with its ``xid``; nothing for an event that is ignored or of a table
    not mapped."""
    event = decode_message(body, tables)
    return event.changes, event.errors


def decode_message(body: bytes | str, tables: TableMap,
                   id_fields: Mapping[str, str] | None = None) -> Event:
    """A message of the exchange in ``--amqp-format debezium``: a Debezium
    event, or a change message of the engine's own (``id_fields`` for those)."""
    raw = body.encode("utf-8") if isinstance(body, str) else body
    if len(raw) <= 16 and raw.strip() in _NULL_BODIES:
        return Event(ignored=True)
    try:
        value, checked = decode_json(raw)
    except MalformedChange as e:
        return Event(errors=[str(e)])
    if isinstance(value, list) or (isinstance(value, dict) and "action" in value
                                   and "obj" in value and "type" in value):
        changes, errors = changes_from_json(value, id_fields, checked)
        return Event(changes, errors)
    if not checked:
        why = strictjson.problem(value)
        if why is not None:
            return Event(errors=[why])
    try:
        return _event(value, tables)
    except MalformedChange as e:
        return Event(errors=[str(e)])


def _event(value: object, tables: TableMap) -> Event:
    schema: object = None
    payload = value
    if isinstance(value, dict) and "payload" in value and "schema" in value:
        schema, payload = value["schema"], value["payload"]
    if payload is None:
        return Event(ignored=True)            # a tombstone with its wrapper
    if not isinstance(payload, dict):
        raise MalformedChange("a Debezium event must be a JSON object")
    sent = payload.get("ts_ms")
    sent_ms = sent if type(sent) is int and sent > 0 else None
    op = payload.get("op")
    if op is None:
        if _heartbeat_or_transaction(payload):
            return Event(ignored=True, sent_ms=sent_ms)
        raise MalformedChange("not a Debezium change event (no 'op')")
    if op in _IGNORED_OPS:
        return Event(ignored=True, sent_ms=sent_ms)
    if op not in _UPSERT_OPS and op != "d":
        raise MalformedChange(f"'op' must be one of c, u, r, d (not {str(op)[:20]!r})")
    source = payload.get("source")
    if not isinstance(source, dict):
        raise MalformedChange("'source' must be a JSON object")
    table, namespace = source.get("table"), source.get("schema") or source.get("db")
    if not isinstance(table, str) or not table or not isinstance(namespace, str):
        raise MalformedChange("'source' must name the event's table "
                              "('schema' or 'db', and 'table')")
    mapped = tables.get((namespace, table))
    if mapped is None:
        return Event(unmapped=(namespace, table), sent_ms=sent_ms)
    type_, id_field = mapped
    part = "after" if op in _UPSERT_OPS else "before"
    row = payload.get(part)
    if not isinstance(row, dict):
        raise MalformedChange(f"'{part}' must be a JSON object"
                              + (" (the table's REPLICA IDENTITY gives deletes no key?)"
                                 if part == "before" else ""))
    if isinstance(schema, dict):
        row = _convert(row, _row_schema(schema, part))
    id_ = row.get(id_field)
    if not valid_id(id_):
        raise MalformedChange(f"'{part}.{id_field}' must be a non-empty string or an "
                              f"integer within ±2**53")
    xid = _xid(source, op)
    change = Change(type_, UPSERT if part == "after" else DELETE, id_, row, xid=xid)
    return Event([change], position=_position(source, op, xid), sent_ms=sent_ms)


def _heartbeat_or_transaction(payload: dict[str, Any]) -> bool:
    """A heartbeat (``{"ts_ms": ...}``) or a transaction's BEGIN or END
    (``provide.transaction.metadata``)."""
    if payload.keys() <= {"ts_ms"}:
        return True
    return payload.get("status") in ("BEGIN", "END") and "id" in payload


def _xid(source: dict[str, Any], op: str) -> int | None:
    """The transaction of the event, when the connector says it: the
    PostgreSQL connector's ``txId``. An incremental snapshot's read says the
    transaction last streamed, not one that wrote the row: none then."""
    if op == "r" and source.get("snapshot") == "incremental":
        return None
    xid = source.get("txId")
    if type(xid) is int and 0 <= xid < _MAX_64:
        return xid
    return None


def _position(source: dict[str, Any], op: str, xid: int | None) -> Position | None:
    """Where a streamed event stands: (the LSN of the last transaction
    committed before its own, its LSN), from ``source.sequence``. None for
    snapshot reads (they share one LSN) and when the connector says no
    sequence (other connectors, the first transaction after a start)."""
    if op == "r":
        return None
    sequence = source.get("sequence")
    if not isinstance(sequence, str):
        return None
    try:
        last_commit, lsn = json.loads(sequence)
        position = Position(int(last_commit), xid or 0, int(lsn))
    except (ValueError, TypeError):
        return None
    if not 0 <= position.lsn < _MAX_64 or not 0 <= position.part < _MAX_64:
        return None
    return position


# Schemas: a field's schema says the semantic type of its values

Converter = Callable[[Any], Any]


def _row_schema(envelope: dict[str, Any], part: str) -> dict[str, Any] | None:
    """The schema of ``before`` or ``after`` in an envelope's schema."""
    for f in envelope.get("fields") or ():
        if isinstance(f, dict) and f.get("field") == part:
            return f
    return None


def _convert(row: dict[str, Any], schema: dict[str, Any] | None) -> dict[str, Any]:
    """``row`` with each value in the engine's form by its field's schema."""
    if schema is None:
        return row
    converters = {}
    for f in schema.get("fields") or ():
        if isinstance(f, dict) and isinstance(f.get("field"), str):
            convert = _converter(f)
            if convert is not None:
                converters[f["field"]] = convert
    if not converters:
        return row
    out = dict(row)
    for name, convert in converters.items():
        value = out.get(name)
        if value is not None:
            out[name] = convert(value)
    return out


def _converter(schema: dict[str, Any]) -> Converter | None:
    """How to convert a value of ``schema``, None when it is kept as it is."""
    if schema.get("type") == "array":
        items = schema.get("items")
        element = _converter(items) if isinstance(items, dict) else None
        if element is None:
            return None
        return lambda values: ([None if v is None else element(v) for v in values]
                               if isinstance(values, list) else values)
    name = schema.get("name")
    make = _LOGICAL.get(name) if isinstance(name, str) else None
    return make(schema) if make is not None else None


def _kept_unless(convert: Callable[[Any], Any | None]) -> Converter:
    """``convert``, keeping the value as it came where it answers None (a
    value not in the form its schema says)."""
    def converted(value: Any) -> Any:
        out = convert(value)
        return value if out is None else out
    return converted


_EPOCH = datetime(1970, 1, 1)
_EPOCH_DAY = date(1970, 1, 1)


def _timestamp_text(moment: datetime) -> str:
    return (f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}:"
            f"{moment.minute:02d}:{moment.second:02d}.{moment.microsecond:06d}Z")


def _epoch(per_second: int) -> Converter:
    """A timestamp as a number of 1/``per_second`` s since 1970 (UTC)."""
    def convert(value: Any) -> str | None:
        if type(value) is not int:
            return None
        try:
            return _timestamp_text(_EPOCH + timedelta(microseconds=value * 1_000_000
                                                      // per_second))
        except OverflowError:
            return None
    return _kept_unless(convert)


_ZONED = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?"
                    r"(?:(Z)|([+-])(\d\d):?(\d\d)(?::?(\d\d))?)$")


def _zoned(value: Any) -> str | None:
    """io.debezium.time.ZonedTimestamp: ISO 8601 text with an offset."""
    if not isinstance(value, str):
        return None
    m = _ZONED.match(value)
    if m is None:
        return None
    year, month, day, hour, minute, second, fraction, _z, sign, oh, om, os_ = m.groups()
    try:
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute),
                          int(second), int((fraction or "0")[:6].ljust(6, "0")))
        if sign is not None:
            offset = timedelta(hours=int(oh), minutes=int(om), seconds=int(os_ or 0))
            moment = moment - offset if sign == "+" else moment + offset
    except (ValueError, OverflowError):
        return None
    return _timestamp_text(moment)


def _days(value: Any) -> str | None:
    """A date as a number of days since 1970-01-01."""
    if type(value) is not int:
        return None
    try:
        return (_EPOCH_DAY + timedelta(days=value)).isoformat()
    except OverflowError:
        return None


def _time_of_day(per_second: int) -> Converter:
    """A time of day as a number of 1/``per_second`` s since midnight, as
    PostgreSQL writes a ``time``: ``HH:MM:SS``, then the fraction if any,
    without its trailing zeros."""
    def convert(value: Any) -> str | None:
        if type(value) is not int or not 0 <= value <= 86_400 * per_second:
            return None
        micros = value * 1_000_000 // per_second
        seconds, micro = divmod(micros, 1_000_000)
        minutes, second = divmod(seconds, 60)
        hour, minute = divmod(minutes, 60)
        text = f"{hour:02d}:{minute:02d}:{second:02d}"
        return text + f".{micro:06d}".rstrip("0") if micro else text
    return _kept_unless(convert)


def _number(value: Decimal) -> int | float | None:
    """A decimal as the engine's number: an integer when it has no fraction,
    else a float; None when JSON cannot carry it."""
    if not value.is_finite():
        return None
    if value == value.to_integral_value():
        whole = int(value)
        return whole if abs(whole) <= _MAX_FLOAT else None
    as_float = float(value)
    return as_float if as_float not in (float("inf"), float("-inf")) else None


def _unscaled(encoded: Any, scale: Any) -> int | float | None:
    """A decimal as Kafka Connect encodes it: the base64 of its unscaled
    value (big-endian two's complement) and its scale."""
    if not isinstance(encoded, str) or type(scale) is not int:
        return None
    try:
        unscaled = int.from_bytes(base64.b64decode(encoded, validate=True), "big",
                                  signed=True)
        return _number(Decimal(unscaled).scaleb(-scale))
    except (binascii.Error, ValueError, InvalidOperation):
        return None


def _decimal(schema: dict[str, Any]) -> Converter:
    """org.apache.kafka.connect.data.Decimal: base64 text, its scale in the
    schema's parameters (a number already with ``decimal.format=NUMERIC``)."""
    parameters = schema.get("parameters")
    try:
        scale = int(parameters.get("scale", 0)) if isinstance(parameters, dict) else 0
    except (TypeError, ValueError):
        scale = 0
    return _kept_unless(lambda value: _unscaled(value, scale))


def _variable_decimal(value: Any) -> int | float | None:
    """io.debezium.data.VariableScaleDecimal: ``{"scale": 2, "value": base64}``."""
    if not isinstance(value, dict):
        return None
    return _unscaled(value.get("value"), value.get("scale"))


def _json_text(value: Any) -> Any:
    """io.debezium.data.Json: JSON as text, nested as the value it holds
    (null when the text is not JSON, as the store reads it)."""
    if not isinstance(value, str):
        return value
    try:
        return strictjson.loads(value)
    except (strictjson.UnsafeJSON, ValueError):
        return None


# semantic type (the schema's ``name``) -> the converter of a field of it
_LOGICAL: dict[str, Callable[[dict[str, Any]], Converter]] = {
    "io.debezium.time.Timestamp": lambda s: _epoch(1_000),
    "io.debezium.time.MicroTimestamp": lambda s: _epoch(1_000_000),
    "io.debezium.time.NanoTimestamp": lambda s: _epoch(1_000_000_000),
    "org.apache.kafka.connect.data.Timestamp": lambda s: _epoch(1_000),
    "io.debezium.time.ZonedTimestamp": lambda s: _kept_unless(_zoned),
    "io.debezium.time.Date": lambda s: _kept_unless(_days),
    "org.apache.kafka.connect.data.Date": lambda s: _kept_unless(_days),
    "io.debezium.time.Time": lambda s: _time_of_day(1_000),
    "io.debezium.time.MicroTime": lambda s: _time_of_day(1_000_000),
    "io.debezium.time.NanoTime": lambda s: _time_of_day(1_000_000_000),
    "org.apache.kafka.connect.data.Time": lambda s: _time_of_day(1_000),
    "org.apache.kafka.connect.data.Decimal": _decimal,
    "io.debezium.data.VariableScaleDecimal": lambda s: _kept_unless(_variable_decimal),
    "io.debezium.data.Json": lambda s: _json_text,
}
