"""``field: value``: equality the JSON way (``true`` is not ``1``, ``1`` is
``1.0``; ``null`` matches a missing field). Routes by the value, and the
store keeps an index of the field's values (``FieldIndex``, shared with
``in``)."""
from __future__ import annotations

from typing import Any, Callable, Hashable

from pushengine.views.operators.base import (
    Condition, Move, Operator, Predicate, Ref, StoreIndex, bad_param, register, resolve,
    scalar)
from pushengine.views.values import index_key

MAX_STRING = 1000


def check_scalar(name: str, value: object) -> object:
    """A parameter compared with a field (eq, ne): a JSON scalar."""
    if not scalar(value) or (isinstance(value, str) and len(value) > MAX_STRING):
        raise bad_param(name, "a string, number, boolean or null")
    return value


class FieldIndex:
    """The objects of one type by the value of one field (``index_key``)."""

    def __init__(self, field: str) -> None:
        self.field = field
        self.buckets: dict[Hashable, dict[Hashable, dict]] = {}

    def move(self, id_: Hashable, old: dict | None, new: dict | None) -> None:
        field, index = self.field, self.buckets
        was = index_key(old.get(field)) if old is not None else None
        now = index_key(new.get(field)) if new is not None else None
        if was is not None and was != now:
            bucket = index.get(was)
            if bucket is not None:
                bucket.pop(id_, None)
                if not bucket:
                    del index[was]
        if new is not None:
            index.setdefault(now, {})[id_] = new

    def move_many(self, moves: list[Move]) -> None:
        for id_, old, new in moves:
            self.move(id_, old, new)

    def candidates(self, condition: Condition, values: dict[str, Any]) -> list[dict]:
        operand = resolve(condition.operand, values)
        keys = {index_key(v) for v in operand} if condition.kind == "in" \
            else {index_key(operand)}
        return [self.buckets[k] for k in keys if k in self.buckets]


class FieldValueOperator(Operator):
    """eq and in: an index of the field's values serves both."""

    def store_index(self,
                    condition: Condition) -> tuple[Hashable, Callable[[], StoreIndex]] | None:
        if not condition.field:
            return None
        field = condition.field
        return ("field", field), lambda: FieldIndex(field)

    def wants_store_index(self, condition: Condition) -> bool:
        # kept for the fields a parameter picks a value of; a literal
        # (``live: true``) would make an index of two huge buckets
        return bool(condition.field) and isinstance(condition.operand, Ref)

    def object_keys(self, condition: Condition, obj: dict) -> set[Hashable]:
        return {index_key(obj.get(condition.field))}


@register
class Eq(FieldValueOperator):
    name = "eq"
    roles = ("eq",)
    takes_session_user = True
    route_rank = 0

    def check(self, name: str, role: str, value: object) -> object:
        return check_scalar(name, value)

    def bind(self, condition: Condition, values: dict[str, Any]) -> Predicate:
        field, key = condition.field, index_key(resolve(condition.operand, values))
        return lambda obj: index_key(obj.get(field)) == key

    def query_keys(self, condition: Condition, values: dict[str, Any]) -> set[Hashable]:
        return {index_key(resolve(condition.operand, values))}
