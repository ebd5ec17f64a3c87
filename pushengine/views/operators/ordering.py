"""``field: {gt / gte / lt / lte: value}``: numbers compare with numbers,
strings with strings; other types never match. Four operators, one family."""
from __future__ import annotations

import operator
from typing import Any, Callable, ClassVar

from pushengine.views.operators.base import (
    Condition, Operator, Predicate, bad_param, finite, register, resolve)
from pushengine.views.values import comparable


class Comparison(Operator):
    compare: ClassVar[Callable[[Any, Any], bool]]

    def check(self, name: str, role: str, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)) \
                or (not isinstance(value, str) and not finite(value)):
            raise bad_param(name, "a number or a string")
        return value

    def bind(self, condition: Condition, values: dict[str, Any]) -> Predicate:
        field, value, compare = condition.field, resolve(condition.operand, values), \
            type(self).compare

        def ordered(obj: dict) -> bool:
            v = obj.get(field)
            return comparable(v, value) and compare(v, value)
        return ordered


@register
class Gt(Comparison):
    name, roles, compare = "gt", ("gt",), operator.gt


@register
class Gte(Comparison):
    name, roles, compare = "gte", ("gte",), operator.ge


@register
class Lt(Comparison):
    name, roles, compare = "lt", ("lt",), operator.lt


@register
class Lte(Comparison):
    name, roles, compare = "lte", ("lte",), operator.le
