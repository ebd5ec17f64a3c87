"""``field: {in: [...]}``: the field equals one of the values."""
from __future__ import annotations

from typing import Any, Hashable

from pushengine.views.operators.base import (
    Condition, Predicate, bad_param, register, resolve, scalar)
from pushengine.views.operators.eq import FieldValueOperator
from pushengine.views.values import index_key

MAX_IN_VALUES = 100


@register
class In(FieldValueOperator):
    name = "in"
    roles = ("in",)
    takes_session_user = True
    route_rank = 1

    def check(self, name: str, role: str, value: object) -> object:
        if (not isinstance(value, list) or len(value) > MAX_IN_VALUES
                or not all(scalar(v) for v in value)):
            raise bad_param(name, f"a list of at most {MAX_IN_VALUES} scalar values")
        return value

    def bind(self, condition: Condition, values: dict[str, Any]) -> Predicate:
        field = condition.field
        keys = {index_key(v) for v in resolve(condition.operand, values)}
        return lambda obj: index_key(obj.get(field)) in keys

    def query_keys(self, condition: Condition, values: dict[str, Any]) -> set[Hashable]:
        return {index_key(v) for v in resolve(condition.operand, values)}
