"""The ``where`` clause: conditions parsed from the views file, bound to a
subscription's parameters, and matched against objects.

A condition names a field and an operator (eq, in, ne, gt, gte, lt, lte,
has_word), or looks at the whole object (near, visible_to). An operand is a
literal, a subscribe parameter (``$name``) or the session's user
(``$session.user``), which a client can never supply.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from pushengine.views import morphology
from pushengine.views.geo import distance_km
from pushengine.views.values import comparable, index_key, json_equal

SESSION_USER = "session.user"
FIELD_OPERATORS = ("in", "ne", "gt", "gte", "lt", "lte", "has_word")
MAX_IN_VALUES = 100


class ViewDefinitionError(ValueError):
    """The views file is wrong; the text says where."""


class ParamError(ValueError):
    """A subscribe parameter has the wrong type or value."""


@dataclass(frozen=True)
class Ref:
    """A reference to a subscribe parameter or to ``session.user``."""

    name: str


def parse_operand(value: Any) -> Any:
    if isinstance(value, str) and value.startswith("$"):
        return Ref(value[1:])
    return value


@dataclass(frozen=True)
class Condition:
    kind: str               # eq, in, ne, gt, gte, lt, lte, has_word, near, visible_to
    field: str | None       # None for near / visible_to
    operand: Any            # literal, Ref, or for near a dict of operands

    def refs(self) -> list[tuple[Ref, str]]:
        """(reference, role) pairs: the role tells what type a parameter needs."""
        if self.kind == "near":
            return [(v, k) for k, v in self.operand.items() if isinstance(v, Ref)]
        if isinstance(self.operand, Ref):
            return [(self.operand, self.kind)]
        return []


def parse_where(where: Any, view: str) -> list[Condition]:
    if where is None:
        return []
    if not isinstance(where, dict):
        raise ViewDefinitionError(f"{view}: 'where' must be a mapping")
    conditions = []
    for field, spec in where.items():
        if field == "near":
            if not isinstance(spec, dict) or set(spec) != {"lat", "lon", "km"}:
                raise ViewDefinitionError(f"{view}: 'near' needs lat, lon and km")
            conditions.append(Condition("near", None,
                                        {k: parse_operand(v) for k, v in spec.items()}))
        elif field == "visible_to":
            operand = parse_operand(spec)
            if operand != Ref(SESSION_USER):
                raise ViewDefinitionError(f"{view}: 'visible_to' takes $session.user")
            conditions.append(Condition("visible_to", None, operand))
        elif isinstance(spec, dict):
            if len(spec) != 1 or next(iter(spec)) not in FIELD_OPERATORS:
                raise ViewDefinitionError(
                    f"{view}: field {field!r} needs one operator of {', '.join(FIELD_OPERATORS)}")
            op, value = next(iter(spec.items()))
            conditions.append(Condition(op, field, parse_operand(value)))
        else:
            conditions.append(Condition("eq", field, parse_operand(spec)))
    for c in conditions:
        for ref, _ in c.refs():
            if ref.name == SESSION_USER and c.kind not in ("visible_to", "eq", "in"):
                raise ViewDefinitionError(f"{view}: $session.user used with {c.kind}")
    return conditions


# --- parameter validation -------------------------------------------------

def _finite(value: Any) -> bool:
    """A number that is finite as a float too (an integer of 400 digits is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _scalar(value: Any) -> bool:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _finite(value)
    return value is None or isinstance(value, (bool, str))


def check_param(name: str, role: str, value: Any) -> Any:
    """Validate one parameter for the role it plays; return the value to bind."""
    def bad(what: str) -> ParamError:
        return ParamError(f"parameter {name!r} must be {what}")

    if role in ("eq", "ne"):
        if not _scalar(value) or (isinstance(value, str) and len(value) > 1000):
            raise bad("a string, number, boolean or null")
        return value
    if role == "in":
        if (not isinstance(value, list) or len(value) > MAX_IN_VALUES
                or not all(_scalar(v) for v in value)):
            raise bad(f"a list of at most {MAX_IN_VALUES} scalar values")
        return value
    if role in ("gt", "gte", "lt", "lte"):
        if isinstance(value, bool) or not isinstance(value, (int, float, str)) \
                or (not isinstance(value, str) and not _finite(value)):
            raise bad("a number or a string")
        return value
    if role == "has_word":
        if not isinstance(value, str) or len(value) > 100 or morphology.single_word(value) is None:
            raise bad("a single word")
        return value
    if role in ("lat", "lon", "km"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not _finite(value):
            raise bad("a number")
        limit = {"lat": (-90, 90), "lon": (-180, 180), "km": (0, 20040)}[role]
        if not limit[0] <= value <= limit[1] or (role == "km" and value == 0):
            raise bad(f"between {limit[0]} and {limit[1]}")
        return float(value)
    raise bad("valid")  # pragma: no cover - roles are closed


# --- binding and matching --------------------------------------------------

Predicate = Callable[[dict], bool]


def _resolve(operand: Any, values: dict[str, Any]) -> Any:
    return values[operand.name] if isinstance(operand, Ref) else operand


def visible_to(obj: dict, user: Any) -> bool:
    """Public, owned by the user, or listing the user in ``allowed_users``.
    Privacy fails closed: only ``public: true`` is public."""
    if obj.get("public") is True:
        return True
    if user is None:
        return False
    if json_equal(obj.get("user_id"), user):
        return True
    allowed = obj.get("allowed_users")
    return isinstance(allowed, list) and any(json_equal(u, user) for u in allowed)


def is_private(obj: dict) -> bool:
    """Anything but ``public: true`` (false, 0, "false", null, missing) is private."""
    return obj.get("public") is not True


def bind(condition: Condition, values: dict[str, Any]) -> Predicate:
    """A predicate for ``condition`` with references resolved from ``values``."""
    kind, field = condition.kind, condition.field
    if kind == "near":
        o = condition.operand
        lat, lon, km = (_resolve(o[k], values) for k in ("lat", "lon", "km"))

        def near(obj: dict) -> bool:
            a, b = obj.get("lat"), obj.get("lon")
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)):
                return False
            return distance_km(lat, lon, a, b) <= km
        return near
    value = _resolve(condition.operand, values)
    if kind == "visible_to":
        return lambda obj: visible_to(obj, value)
    if kind == "eq":
        key = index_key(value)
        return lambda obj: index_key(obj.get(field)) == key
    if kind == "ne":
        key = index_key(value)
        return lambda obj: index_key(obj.get(field)) != key
    if kind == "in":
        keys = {index_key(v) for v in value}
        return lambda obj: index_key(obj.get(field)) in keys
    if kind == "has_word":
        wanted = morphology.word_forms(morphology.single_word(value) or value)

        def has_word(obj: dict) -> bool:
            text = obj.get(field)
            return isinstance(text, str) and not wanted.isdisjoint(morphology.text_forms(text))
        return has_word
    compare = {"gt": lambda a, b: a > b, "gte": lambda a, b: a >= b,
               "lt": lambda a, b: a < b, "lte": lambda a, b: a <= b}[kind]

    def ordered(obj: dict) -> bool:
        v = obj.get(field)
        return comparable(v, value) and compare(v, value)
    return ordered


def bind_all(conditions: list[Condition], values: dict[str, Any],
             private_allowed: bool) -> Predicate:
    """The conjunction of ``conditions``; without a visible_to condition a
    view never shows a private object."""
    predicates = [bind(c, values) for c in conditions]
    if not private_allowed:
        predicates.insert(0, lambda obj: not is_private(obj))
    if len(predicates) == 1:
        return predicates[0]

    def match(obj: dict) -> bool:
        for p in predicates:
            if not p(obj):
                return False
        return True
    return match
