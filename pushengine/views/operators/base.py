"""What every ``where`` operator is: one class, registered by name.

An operator knows its whole life in a view:

- ``parse``: read its part of the views file into a ``Condition`` (literal
  operands are checked here, so a bad one is a ``ViewDefinitionError``);
- ``refs`` / ``check``: which subscribe parameters it takes, in which
  *role*, and what a good value for each role is (a bad one is a
  ``ParamError``, answered -32602);
- ``bind``: the predicate of one subscription, its parameters resolved;
- ``computes`` / ``computed``: fields it computes for the objects a view
  shows (``similar`` computes ``_similarity``, which a view may order by);
- ``query_keys`` / ``object_keys``: the routing index of a view (a change
  is offered to the queries whose keys meet the object's keys);
- ``store_index``: the index the in-process store keeps for it, from which
  a view's initial state is answered instead of a scan (always, or with
  ``store_index_on_demand`` only while a view using it is subscribed);
- ``link``: a look at every use of the operator in the views file once it
  is read (``similar`` shares one LSH index between the views that compare
  the same field the same way).

The built-in operators live one per module next to this one; a new one is a
new module with a subclass of ``Operator`` decorated with ``@register``
(see docs/views.md, "Adding an operator").
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Hashable, Iterable, Mapping, Protocol

SESSION_USER = "session.user"
ALL = None  # object_keys: an object that concerns every query of a view

Predicate = Callable[[dict], bool]
# a store index move: (id, old state, new state), None for absent
Move = tuple[Hashable, dict | None, dict | None]


class ViewDefinitionError(ValueError):
    """The views file is wrong; the text says where."""


class ParamError(ValueError):
    """A subscribe parameter has the wrong type or value."""


@dataclass(frozen=True)
class Ref:
    """A reference to a subscribe parameter or to ``session.user``."""

    name: str


def parse_operand(value: object) -> object:
    """A ``$name`` of the views file as a Ref, any other value as it is."""
    if isinstance(value, str) and value.startswith("$"):
        return Ref(value[1:])
    return value


def resolve(operand: object, values: dict[str, Any]) -> Any:
    """A literal as it is, a reference from the bound values."""
    return values[operand.name] if isinstance(operand, Ref) else operand


@dataclass(frozen=True, eq=False)
class Condition:
    kind: str               # the operator's name: eq, in, near, similar, ...
    field: str | None       # None for an operator that looks at the whole object
    # literal, Ref, or an operator's own structure (a dict of operands for
    # near, a SimilarOperand for similar): what only its operator reads
    operand: Any

    @property
    def op(self) -> "Operator":
        return OPERATORS[self.kind]

    def refs(self) -> list[tuple[Ref, str]]:
        """(reference, role) pairs: the role tells what type a parameter needs."""
        return self.op.refs(self)


class StoreIndex(Protocol):
    """An index the in-process store keeps over the objects of one type."""

    def move(self, id_: Hashable, old: dict | None, new: dict | None) -> None:
        """The object ``id_`` changed from ``old`` to ``new`` (None: absent;
        for an index kept on demand, ``new`` is None too when no view using
        it could show the object, and ``old`` the store's previous state,
        which the index may not hold)."""

    def move_many(self, moves: list[Move]) -> None:
        """Several moves in order (an index may batch its work)."""

    def candidates(self, condition: Condition, values: dict[str, Any]) -> list[dict] | None:
        """Buckets (id -> object) that hold every object the bound condition
        may match, or None when the index cannot narrow it."""


def bad_param(name: str, what: str) -> ParamError:
    return ParamError(f"parameter {name!r} must be {what}")


def finite(value: float) -> bool:
    """A number that is finite as a float too (an integer of 400 digits is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def scalar(value: object) -> bool:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return finite(value)
    return value is None or isinstance(value, (bool, str))


class Operator:
    """One ``where`` operator. Subclasses set ``name`` and override what they
    need; instances are stateless singletons kept in ``OPERATORS``."""

    name: ClassVar[str] = ""
    # Written as a key of its own (``near: {...}``, ``similar: {...}``)
    # rather than under a field (``title: {has_word: $w}``).
    own_key: ClassVar[bool] = False
    # The parameter roles it owns; each role is checked by ``check``.
    roles: ClassVar[tuple[str, ...]] = ()
    # May take ``$session.user`` as its operand.
    takes_session_user: ClassVar[bool] = False
    # Routing: the view's index is the condition whose operator has the
    # lowest rank (and a parameter operand); None: cannot route.
    route_rank: ClassVar[int | None] = None
    # Fields the operator computes for the objects a view shows.
    computes: ClassVar[tuple[str, ...]] = ()
    # At most one condition of this operator in a view.
    once_per_view: ClassVar[bool] = False
    # Relative cost of the predicate: the cheap ones of a view run first.
    cost: ClassVar[int] = 0
    # Check a literal operand with ``check`` when the views file is read
    # (the first operators took any literal, and keep doing so).
    check_literals: ClassVar[bool] = False
    # The in-process store keeps its ``store_index`` only while a view using
    # it is subscribed, over the objects such a view could show (``similar``:
    # a MinHash of every text is too costly to pay for no subscriber).
    store_index_on_demand: ClassVar[bool] = False

    # -- the views file ---------------------------------------------------------
    def parse(self, field: str | None, spec: object, view: str) -> Condition:
        """The condition written ``field: {name: spec}`` (or ``name: spec``
        for an own-key operator). Checks literal operands."""
        operand = parse_operand(spec)
        if self.check_literals and not isinstance(operand, Ref):
            try:
                operand = self.check(f"{self.name} value", self.roles[0], operand)
            except ParamError as e:
                raise ViewDefinitionError(f"{view}: {field or self.name}: {e}") from None
        return Condition(self.name, field, operand)

    def refs(self, condition: Condition) -> list[tuple[Ref, str]]:
        if isinstance(condition.operand, Ref):
            return [(condition.operand, self.roles[0])]
        return []

    def link(self, uses: list[tuple[str, Condition]], views: Mapping[str, object]) -> None:
        """Called once the whole views file is read, with every (view type,
        condition) using this operator and the view specs by name."""

    # -- parameters ---------------------------------------------------------------
    def check(self, name: str, role: str, value: object) -> object:
        """Validate one parameter for ``role``; return the value to bind."""
        raise bad_param(name, "valid")  # pragma: no cover - every operator overrides

    def validate(self, condition: Condition, values: dict[str, Any]) -> None:
        """Checks that need the condition's settings or several parameters
        (``similar``: a text as long as a shingle); raise ParamError."""

    # -- matching -----------------------------------------------------------------
    def bind(self, condition: Condition, values: dict[str, Any]) -> Predicate:
        raise NotImplementedError

    def computed(self, condition: Condition,
                 values: dict[str, Any]) -> dict[str, Callable[[dict], Any]]:
        """For each field in ``computes``: a function of an object (that
        matches) giving its value."""
        return {}

    # -- routing ------------------------------------------------------------------
    def routable(self, condition: Condition) -> bool:
        """Whether the condition can be a view's routing index."""
        return self.route_rank is not None and isinstance(condition.operand, Ref)

    def query_keys(self, condition: Condition, values: dict[str, Any]) -> set[Hashable]:
        """The keys under which a bound query is found."""
        raise NotImplementedError

    def object_keys(self, condition: Condition, obj: dict) -> set[Hashable] | None:
        """The keys of the queries an object may concern (ALL: every query)."""
        raise NotImplementedError

    # -- the in-process store -----------------------------------------------------
    def store_index(self, condition: Condition) -> tuple[Hashable, Callable[[], StoreIndex]] | None:
        """The key of the store index this condition can be answered from,
        and how to make that index; None: no index helps."""
        return None

    def wants_store_index(self, condition: Condition) -> bool:
        """Whether the store should keep that index for this condition."""
        return self.store_index(condition) is not None


class SessionOperand(Operator):
    """An operator written as a key of its own whose operand is always one
    of the session's values (``session_value``: ``$session.user``,
    ``$session.segments``), which a client can never supply."""

    own_key = True
    session_value: ClassVar[str] = ""

    def parse(self, field: str | None, spec: object, view: str) -> Condition:
        operand = parse_operand(spec)
        if operand != Ref(self.session_value):
            raise ViewDefinitionError(f"{view}: '{self.name}' takes ${self.session_value}")
        return Condition(self.name, None, operand)

    def check(self, name: str, role: str, value: object) -> object:  # pragma: no cover
        return value    # only ever bound to the session's own value


OPERATORS: dict[str, Operator] = {}
ROLES: dict[str, Operator] = {}


def register(cls: type[Operator]) -> type[Operator]:
    """Class decorator: make ``cls`` an operator of the views file."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.name in OPERATORS:
        raise ValueError(f"operator {cls.name!r} registered twice")
    instance = cls()
    for role in cls.roles:
        if role in ROLES:
            raise ValueError(f"role {role!r} of {cls.name} is also a role of "
                             f"{ROLES[role].name}")
    OPERATORS[cls.name] = instance
    for role in cls.roles:
        ROLES[role] = instance
    return cls


def field_operators() -> list[str]:
    """The operators written under a field (all but the own-key ones and eq)."""
    return [name for name, op in OPERATORS.items() if not op.own_key and name != "eq"]


def own_key_operators() -> Iterable[str]:
    return [name for name, op in OPERATORS.items() if op.own_key]
