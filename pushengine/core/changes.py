"""Change messages: the one format every feed carries (SPEC section 2).

A message body is UTF-8 JSON holding one change or a JSON array of changes::

    {"type": "Stream", "action": "upsert", "obj": {"id": 1, ...}}

``decode_changes`` turns a body into validated ``Change`` values and a list of
errors, one per bad change, so a feed can apply the good ones and count the bad,
and ``/api/publish`` can refuse a batch that holds any bad change.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping, TypeAlias, TypeGuard

from pushengine.core import strictjson
from pushengine.core.strictjson import JsonObject

UPSERT = "upsert"
DELETE = "delete"
ACTIONS = {"upsert": UPSERT, "insert": UPSERT, "update": UPSERT, "delete": DELETE}
DEFAULT_ID_FIELD = "id"
# an object's id: a non-empty string, or an integer within ±2**53 (valid_id)
ObjectId: TypeAlias = str | int


class MalformedChange(ValueError):
    """A message or one change in it cannot be applied; the text says why."""


@dataclass(frozen=True, slots=True)
class Change:
    """One object change: ``action`` is ``upsert`` (whole new state) or ``delete``.
    ``was``: the previous values of fields that changed, when the publisher
    says them (a feed that routes by interest sends the change to the nodes
    of the old routing values too, docs/amqp.md)."""

    type: str
    action: str
    id: ObjectId
    obj: JsonObject
    was: JsonObject | None = None
    # the transaction that made it, for a change read from PostgreSQL's WAL
    # (core/positions.py): a view whose initial state saw it skips it
    xid: int | None = None

    def to_json(self) -> JsonObject:
        if self.was is not None:
            return {"type": self.type, "action": self.action, "obj": self.obj,
                    "was": self.was}
        return {"type": self.type, "action": self.action, "obj": self.obj}


def valid_id(value: object) -> TypeGuard[ObjectId]:
    """Object ids are non-empty strings of at most 256 characters or integers
    within ±2**53 (not booleans): what every JSON client reads exactly."""
    if isinstance(value, str):
        return 0 < len(value) <= 256
    return strictjson.safe_id(value)


def parse_change(item: object, id_fields: Mapping[str, str] | None = None,
                 checked: bool = False) -> Change:
    """Validate one decoded change; raise MalformedChange with the reason.
    ``checked``: the value is known to pass ``strictjson.problem`` already."""
    if not isinstance(item, dict):
        raise MalformedChange("a change must be a JSON object")
    if not checked:
        why = strictjson.problem(item)
        if why is not None:
            raise MalformedChange(why)
    type_ = item.get("type")
    if not isinstance(type_, str) or not type_:
        raise MalformedChange("'type' must be a non-empty string")
    action_ = item.get("action")
    action = ACTIONS.get(action_) if isinstance(action_, str) else None
    if action is None:
        raise MalformedChange(
            "'action' must be one of upsert, insert, update, delete")
    obj = item.get("obj")
    if not isinstance(obj, dict):
        raise MalformedChange("'obj' must be a JSON object")
    id_field = (id_fields or {}).get(type_, DEFAULT_ID_FIELD)
    id_ = obj.get(id_field)
    if not valid_id(id_):
        raise MalformedChange(
            f"'obj.{id_field}' must be a non-empty string or an integer within ±2**53")
    was = item.get("was")
    if was is not None and not isinstance(was, dict):
        raise MalformedChange("'was' must be a JSON object (the old values of changed fields)")
    return Change(type_, action, id_, obj, was)


def decode_json(body: bytes | str) -> tuple[object, bool]:
    """Decode a UTF-8 JSON body: ``(value, checked)``, where ``checked`` says
    the text could not hold anything ``strictjson`` refuses; raise
    MalformedChange when it is not JSON at all. Values are judged change by
    change (``parse_change``), so a bad change names its place in a batch."""
    try:
        value, suspect = strictjson.decode(body)
    except strictjson.UnsafeJSON as e:
        raise MalformedChange(f"the body is {e}" if str(e).startswith("not ")
                              else str(e)) from None
    return value, not suspect


def decode_changes(body: bytes | str,
                   id_fields: Mapping[str, str] | None = None
                   ) -> tuple[list[Change], list[str]]:
    """Decode a message body into (good changes, error texts).

    A body that is not JSON at all yields no change and one error; in a batch,
    each bad element yields an error naming its index.
    """
    try:
        data, checked = decode_json(body)
    except MalformedChange as e:
        return [], [str(e)]
    return changes_from_json(data, id_fields, checked)


def changes_from_json(data: object, id_fields: Mapping[str, str] | None = None,
                      checked: bool = False) -> tuple[list[Change], list[str]]:
    """Like decode_changes, for an already decoded value (``checked``: known
    to pass ``strictjson.problem``)."""
    if isinstance(data, list):
        changes, errors = [], []
        for i, item in enumerate(data):
            try:
                changes.append(parse_change(item, id_fields, checked))
            except MalformedChange as e:
                errors.append(f"change {i}: {e}")
        return changes, errors
    try:
        return [parse_change(data, id_fields, checked)], []
    except MalformedChange as e:
        return [], [str(e)]


def encode_changes(changes: list[Change]) -> bytes:
    """The wire form of a batch: a UTF-8 JSON array of change objects."""
    return json.dumps([c.to_json() for c in changes], allow_nan=False,
                      separators=(",", ":"), ensure_ascii=False).encode("utf-8")
