"""``field: {ne: value}``: the field is not JSON-equal to the value (a
missing field is not equal)."""
from __future__ import annotations

from typing import Any

from pushengine.views.operators.base import (
    Condition, Operator, Predicate, register, resolve)
from pushengine.views.operators.eq import check_scalar
from pushengine.views.values import index_key


@register
class Ne(Operator):
    name = "ne"
    roles = ("ne",)

    def check(self, name: str, role: str, value: object) -> object:
        return check_scalar(name, value)

    def bind(self, condition: Condition, values: dict[str, Any]) -> Predicate:
        field, key = condition.field, index_key(resolve(condition.operand, values))
        return lambda obj: index_key(obj.get(field)) != key
