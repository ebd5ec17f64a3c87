"""The ``where`` clause: conditions parsed from the views file, bound to a
subscription's parameters, and matched against objects.

Each key of ``where`` is a field with a value (equality) or with one
operator (``title: {has_word: $word}``), or an operator written as a key of
its own (``near``, ``visible_to``, ``similar``). Every operator is one class
in the registry of views/operators/ (one module each): this module only
dispatches to it. An operand is a literal, a subscribe parameter (``$name``)
or the session's user (``$session.user``), which a client can never supply.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from pushengine.views.operators import (  # noqa: F401 - the names this module always had
    OPERATORS, ROLES, SESSION_USER, Condition, ParamError, Predicate, Ref,
    ViewDefinitionError, field_operators, finite as _finite, parse_operand,
    scalar as _scalar)
from pushengine.views.operators.in_ import MAX_IN_VALUES  # noqa: F401
from pushengine.views.operators.visible_to import is_private, visible_to  # noqa: F401
from pushengine.views.operators.audience import untargeted

if TYPE_CHECKING:
    from pushengine.views.spec import ViewSpec

# the field operators of the first release (the registry may hold more)
FIELD_OPERATORS = ("in", "ne", "gt", "gte", "lt", "lte", "has_word")


def parse_where(where: object, view: str) -> list[Condition]:
    if where is None:
        return []
    if not isinstance(where, dict):
        raise ViewDefinitionError(f"{view}: 'where' must be a mapping")
    conditions = []
    for field, spec in where.items():
        op = OPERATORS.get(field)
        if op is not None and op.own_key:
            conditions.append(op.parse(None, spec, view))
        elif isinstance(spec, dict):
            names = field_operators()
            name = next(iter(spec), None) if len(spec) == 1 else None
            if name not in names:
                raise ViewDefinitionError(
                    f"{view}: field {field!r} needs one operator of {', '.join(names)}")
            conditions.append(OPERATORS[name].parse(field, spec[name], view))
        else:
            conditions.append(OPERATORS["eq"].parse(field, spec, view))
    for c in conditions:
        for ref, _ in c.refs():
            if ref.name == SESSION_USER and not c.op.takes_session_user:
                raise ViewDefinitionError(f"{view}: $session.user used with {c.kind}")
    return conditions


def check_param(name: str, role: str, value: object) -> object:
    """Validate one parameter for the role it plays; return the value to bind."""
    return ROLES[role].check(name, role, value)


def validate(conditions: list[Condition], values: dict[str, Any]) -> None:
    """The checks that look at a condition's settings or several parameters."""
    for c in conditions:
        c.op.validate(c, values)


def bind(condition: Condition, values: dict[str, Any]) -> Predicate:
    """A predicate for ``condition`` with references resolved from ``values``."""
    return condition.op.bind(condition, values)


def bind_all(conditions: list[Condition], values: dict[str, Any],
             private_allowed: bool, opens_audience: bool | None = None) -> Predicate:
    """The conjunction of ``conditions``; without a visible_to condition a
    view never shows a private object (nor, without an audience condition,
    ``opens_audience``, a targeted one)."""
    predicates = [bind(c, values)
                  for c in sorted(conditions, key=lambda c: c.op.cost)]
    if not private_allowed:
        predicates.insert(0, lambda obj: not is_private(obj))
    if opens_audience is None:
        opens_audience = any(getattr(c.op, "opens_audience", False) for c in conditions)
    if not opens_audience:
        # an object aimed at a segment needs an audience condition (SPEC 15)
        predicates.insert(0, untargeted)
    if len(predicates) == 1:
        return predicates[0]

    def match(obj: dict) -> bool:
        for p in predicates:
            if not p(obj):
                return False
        return True
    return match


def required(conditions: list[Condition], private_allowed: bool,
             skip: Condition | None = None) -> Predicate:
    """What every binding of ``conditions`` asks of an object: the
    conditions without a parameter (but ``skip``) and the rules ``bind_all``
    adds (no private object without ``visible_to``, no targeted one without
    ``audience``). An object that fails it is shown by no subscription."""
    fixed = [c for c in conditions if c is not skip and not c.refs()]
    return bind_all(fixed, {}, private_allowed, opens_audience=any(
        getattr(c.op, "opens_audience", False) for c in conditions))


def computed_fields(conditions: list[Condition],
                    values: dict[str, Any]) -> dict[str, Callable[[dict], Any]]:
    """The fields the conditions compute (``_similarity``), as functions of
    a matching object."""
    found: dict[str, Callable[[dict], Any]] = {}
    for c in conditions:
        if c.op.computes:
            found.update(c.op.computed(c, values))
    return found


def check_order(order_field: str, conditions: list[Condition], view: str) -> None:
    """A computed field (``_similarity``) can be an order only in a view
    with the condition that computes it, once."""
    if not order_field.startswith("_"):
        return
    computing = [c for c in conditions if order_field in c.op.computes]
    if len(computing) != 1:
        owners = sorted(name for name, op in OPERATORS.items() if order_field in op.computes)
        if not owners:
            return      # an ordinary field whose name starts with "_"
        raise ViewDefinitionError(
            f"{view}: order {order_field} needs exactly one {' or '.join(owners)} condition")


def link_operators(specs: list[ViewSpec]) -> None:
    """Let each operator see all its uses in the views file (``similar``
    chooses one LSH banding per shared index)."""
    uses: dict[str, list[tuple[str, Condition]]] = {}
    for spec in specs:
        kinds = [c.kind for c in spec.conditions]
        for c in spec.conditions:
            if c.op.once_per_view and kinds.count(c.kind) > 1:
                raise ViewDefinitionError(f"{spec.name}: at most one {c.kind} condition")
            uses.setdefault(c.kind, []).append((spec.type, c))
    views = {spec.name: spec for spec in specs}
    for kind, found in uses.items():
        OPERATORS[kind].link(found, views)
