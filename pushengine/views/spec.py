"""View definitions (the views file) and their binding to subscribe parameters.

A ``ViewSpec`` is one declared view; ``ViewSpec.bind`` checks a client's
parameters and yields a ``BoundView``: the predicate, the shared key and the
routing keys of one live query.
"""
from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, TypeGuard

import yaml
from twisted.logger import Logger

from pushengine.core.topics import ANY, Pin, Topic, pin
from pushengine.views.conditions import (
    SESSION_USER, Condition, ParamError, Predicate, ViewDefinitionError,
    bind_all, check_order, check_param, computed_fields, link_operators, parse_where, required,
    validate)
from pushengine.views import extra
from pushengine.views.distinct import DistinctSpec, parse_distinct
from pushengine.views.operators.audience import SESSION_SEGMENTS, relevant_segments
from pushengine.views.operators.base import resolve

log = Logger()
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# a method name: two or more dotted parts (``stream.subscribe_live``,
# ``qik.stream.subscribe_public_live``)
_METHOD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
# the engine's own method families: a view's alias never takes one of these names
RESERVED_PREFIXES = ("session.", "stats.")
MAX_PUBLIC_FIELDS = 100
# routing fields a type may declare (``route: [user_id]``): each is one word
# of an AMQP routing key, which holds at most 255 bytes
MAX_ROUTE_FIELDS = 4
# topics one query may need (``user_id: {in: $users}`` needs one per user);
# beyond, the field with the most values is left unpinned (more changes
# reach the node, none is missed)
MAX_TOPICS = 100
ALL = None  # routing: an object that concerns every instance of a view


def _key_value(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class IndexRule:
    """How instances of one view are found from an object: through one
    condition's operator (the value of a field for eq/in, the words of a
    text for has_word, the bands of a text for similar, who may see it for
    visible_to)."""

    condition: Condition

    @property
    def kind(self) -> str:
        return self.condition.kind

    @property
    def field(self) -> str | None:
        return self.condition.field

    def query_keys(self, values: dict[str, Any]) -> set[Hashable]:
        return self.condition.op.query_keys(self.condition, values)

    def object_keys(self, obj: dict) -> set[Hashable] | None:
        return self.condition.op.object_keys(self.condition, obj)


def _choose_index(conditions: list[Condition]) -> IndexRule | None:
    """The routable condition of the lowest rank (eq, in, has_word, similar,
    visible_to), the first written among equals."""
    routable = [c for c in conditions if c.op.routable(c)]
    if not routable:
        return None
    return IndexRule(min(routable, key=_rank))


def _rank(condition: Condition) -> float:
    rank = condition.op.route_rank
    return float("inf") if rank is None else rank


@dataclass
class ViewSpec:
    name: str
    type: str
    method: str | None
    params: list[str]              # declared order; may include "limit"
    conditions: list[Condition]
    order_field: str
    descending: bool
    limit_default: int
    limit_max: int
    id_field: str = "id"
    roles: dict[str, str] = field(default_factory=dict)
    needs_user: bool = False
    index: IndexRule | None = None
    once_per_user: bool = False    # an object enters at most once per user (views/once.py)
    distinct: DistinctSpec | None = None   # near-duplicate suppression (views/distinct.py)
    needs_segments: bool = False   # bound to $session.segments (audience, in_segment)
    presence: bool = False         # join / leave events to its subscribers (presence.py)
    route: list[str] = field(default_factory=list)   # the type's routing fields

    def pinned(self, values: dict[str, Any]) -> list[set[Pin] | None]:
        """Per routing field, the values a subscription with ``values``
        pins it to (an equality or ``in`` on the field), None when unpinned."""
        out: list[set[Pin] | None] = []
        for name in self.route:
            found: set[Pin] | None = None
            for c in self.conditions:
                if c.field != name or c.kind not in ("eq", "in"):
                    continue
                operand = resolve(c.operand, values)
                if c.kind == "eq":
                    found = {pin(operand)}
                elif isinstance(operand, list):
                    found = {pin(v) for v in operand}
                break
            out.append(found)
        return out

    def could_show(self, skip: Condition | None = None) -> Predicate:
        """Whether some subscription of the view could show an object: what
        its conditions without a parameter (but ``skip``) ask of it."""
        return required(self.conditions, self.needs_user, skip)

    @property
    def value_params(self) -> list[str]:
        """Declared parameters other than ``limit``."""
        return [p for p in self.params if p != "limit"]

    def check_limit(self, limit: object) -> int:
        if limit is None:
            return self.limit_default
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= self.limit_max:
            raise ParamError(f"limit must be an integer from 1 to {self.limit_max}")
        return limit

    def bind(self, params: object, user: object, limit: object,
             segments: Iterable[str] | None = None) -> "BoundView":
        """Validate a client's parameters; ParamError says what is wrong."""
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise ParamError("params must be an object")
        names = set(self.value_params)
        unknown = sorted(set(params) - names)
        if unknown:
            raise ParamError(f"view {self.name} has no parameter {unknown[0]!r}")
        missing = [p for p in self.value_params if p not in params]
        if missing:
            raise ParamError(f"view {self.name} needs parameter {missing[0]!r}")
        values = {p: check_param(p, self.roles[p], params[p]) for p in self.value_params}
        validate(self.conditions, values)
        limit = self.check_limit(limit)
        if self.needs_user:
            values[SESSION_USER] = user
        if self.needs_segments:
            values[SESSION_SEGMENTS] = relevant_segments(self.conditions, segments)
        return BoundView(self, values, limit)


@dataclass
class BoundView:
    """One view with its parameters bound: a live query plus a limit."""

    spec: ViewSpec
    values: dict[str, Any]
    limit: int

    @property
    def needs_user(self) -> bool:
        """Whether the binding holds the session's user (``$session.user``):
        such a subscription ends when the session's authorization does."""
        return self.spec.needs_user

    @property
    def query_key(self) -> str:
        parts = [f"{k}={_key_value(self.values[k])}" for k in sorted(self.values)]
        return f"{self.spec.name}({';'.join(parts)})"

    @property
    def key(self) -> str:
        parts = [f"{k}={_key_value(self.values[k])}" for k in sorted(self.values)]
        parts.append(f"limit={self.limit}")
        return f"{self.spec.name}({';'.join(parts)})"

    def predicate(self) -> Predicate:
        return bind_all(self.spec.conditions, self.values,
                        private_allowed=self.spec.needs_user)

    def index_keys(self) -> set[Hashable] | None:
        rule = self.spec.index
        return None if rule is None else rule.query_keys(self.values)

    def topics(self) -> set[Topic]:
        """The topics this query needs of a feed that routes by interest:
        one per combination of the values its conditions pin the type's
        routing fields to (``ANY`` for a field it does not pin); none for a
        type without routing fields, whose changes reach every node."""
        spec = self.spec
        if not spec.route:
            return set()
        pinned = spec.pinned(self.values)
        sizes = [len(p) if p is not None else 1 for p in pinned]
        while _product(sizes) > MAX_TOPICS:
            widest = max(range(len(sizes)), key=lambda i: sizes[i])
            pinned[widest], sizes[widest] = None, 1
        choices = [sorted(p, key=repr) if p is not None else [ANY] for p in pinned]
        return {Topic(spec.type, tuple(combo)) for combo in itertools.product(*choices)}

    def computed(self) -> dict[str, Callable[[dict], Any]]:
        """The fields the view's conditions compute (``_similarity``)."""
        return computed_fields(self.spec.conditions, self.values)

    def order_value(self) -> Callable[[dict], Any]:
        """The function giving an object's value of the view's order field
        (a computed field such as ``_similarity`` included)."""
        field = self.spec.order_field
        found = self.computed().get(field) if field.startswith("_") else None
        return found if found is not None else (lambda obj: obj.get(field))

    def decorator(self) -> Callable[[dict], dict] | None:
        """None, or the function that adds the computed fields to an object
        the view shows (``{..., "_similarity": 0.75}``)."""
        computed = self.computed()
        if not computed:
            return None
        items = list(computed.items())

        def decorate(obj: dict) -> dict:
            shown = dict(obj)
            for name, value in items:
                shown[name] = value(obj)
            return shown
        return decorate

    @property
    def params(self) -> dict[str, Any]:
        """The client-supplied parameters (without the session user)."""
        return {k: v for k, v in self.values.items()
                if k not in (SESSION_USER, SESSION_SEGMENTS)}


def _product(sizes: list[int]) -> int:
    total = 1
    for size in sizes:
        total *= size
    return total


class Catalog:
    """Every declared view, by name, alias method and object type."""

    def __init__(self, specs: Iterable[ViewSpec], id_fields: dict[str, str],
                 public: dict[str, list[str]] | None = None,
                 routes: dict[str, list[str]] | None = None,
                 tables: dict[str, "Table"] | None = None) -> None:
        """``public``: per type, the fields a sessionless profile method may
        answer (``types: {User: {public: [id, name, avatar]}}``); ``routes``:
        per type, its routing fields (``route: [user_id]``); ``tables``: per
        type, the database table it maps to (``table: streams``, SPEC 20)."""
        self.views: dict[str, ViewSpec] = {}
        self.methods: dict[str, ViewSpec] = {}
        self.by_type: dict[str, list[ViewSpec]] = {}
        self.id_fields = dict(id_fields)
        self.public_fields: dict[str, list[str]] = dict(public or {})
        self.routes: dict[str, list[str]] = {t: list(f) for t, f in (routes or {}).items()}
        self.tables: dict[str, Table] = dict(tables or {})
        for spec in specs:
            self.views[spec.name] = spec
            if spec.method:
                if spec.method in self.methods:
                    raise ViewDefinitionError(
                        f"{spec.name}: method {spec.method} is already the alias of "
                        f"{self.methods[spec.method].name}")
                self.methods[spec.method] = spec
            self.by_type.setdefault(spec.type, []).append(spec)
            spec.route = list(self.routes.get(spec.type, ()))
        # the types a node keeps: those views show and those the file declares;
        # a change of any other type is counted and dropped
        self.types = set(self.by_type) | set(self.id_fields)


@dataclass(frozen=True)
class Table:
    """The database table a type maps to (``table: streams``, optionally
    ``schema: public``): one row is one object, its columns the fields."""

    name: str
    schema: str | None = None


_TABLE_NAME = re.compile(r"^[^\x00]{1,63}$")


def _table(t: dict, name: str) -> Table | None:
    if "table" not in t:
        if "schema" in t:
            raise ViewDefinitionError(f"types: {name}: 'schema' needs 'table'")
        return None
    table, schema = t["table"], t.get("schema")
    for what, value in (("table", table), ("schema", schema)):
        if value is None and what == "schema":
            continue
        if not isinstance(value, str) or not _TABLE_NAME.match(value):
            raise ViewDefinitionError(f"types: {name}: '{what}' must be a name of 1 to 63 "
                                      f"characters")
    return Table(table, schema)


def _types(types: dict[object, object]
           ) -> tuple[dict[str, str], dict[str, list[str]], dict[str, list[str]],
                      dict[str, Table]]:
    """The id field of every declared type, and the public fields, routing
    fields and table of those that declare them."""
    id_fields: dict[str, str] = {}
    public: dict[str, list[str]] = {}
    routes: dict[str, list[str]] = {}
    tables: dict[str, Table] = {}
    for name, t in types.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise ViewDefinitionError(f"types: bad type name {str(name)[:100]!r}")
        if t is None:
            t = {}
        if not isinstance(t, dict):
            raise ViewDefinitionError(f"types: {name}: must be a mapping such as "
                                      f"{{id: id, public: [id, name]}}")
        unknown = sorted(str(k) for k in t
                         if k not in ("id", "public", "route", "table", "schema"))
        if unknown:
            raise ViewDefinitionError(f"types: {name}: unknown key {unknown[0][:100]!r} "
                                      f"(a type declares id, public, route, table and schema)")
        id_field = t.get("id", "id")
        if not isinstance(id_field, str) or not id_field:
            raise ViewDefinitionError(f"types: {name}: 'id' must be a field name")
        id_fields[name] = id_field
        if "public" in t:
            fields = t["public"]
            if not isinstance(fields, list) or not fields \
                    or not all(isinstance(f, str) and f for f in fields) \
                    or len(set(fields)) != len(fields) or len(fields) > MAX_PUBLIC_FIELDS:
                raise ViewDefinitionError(
                    f"types: {name}: 'public' must be a list of distinct field names "
                    f"(1 to {MAX_PUBLIC_FIELDS})")
            public[name] = list(fields)
        if "route" in t:
            routes[name] = _route(t["route"], name)
        table = _table(t, name)
        if table is not None:
            tables[name] = table
    return id_fields, public, routes, tables


def _route(fields: object, type_: str) -> list[str]:
    """A type's routing fields: a list of 1 to MAX_ROUTE_FIELDS distinct
    field names (a single name is accepted for a list of one)."""
    if isinstance(fields, str):
        fields = [fields]
    if not isinstance(fields, list) or not fields \
            or not all(isinstance(f, str) and f and len(f) <= 100 for f in fields) \
            or len(set(fields)) != len(fields) or len(fields) > MAX_ROUTE_FIELDS:
        raise ViewDefinitionError(
            f"types: {type_}: 'route' must be a list of 1 to {MAX_ROUTE_FIELDS} distinct "
            f"field names, such as [user_id]")
    return list(fields)


def _once_per_user(value: object, view: str, needs_user: bool) -> bool:
    if not isinstance(value, bool):
        raise ViewDefinitionError(f"{view}: 'once_per_user' must be true or false")
    if value and not needs_user:
        raise ViewDefinitionError(f"{view}: 'once_per_user' needs a view bound to "
                                  f"$session.user (e.g. visible_to: $session.user)")
    return value


def _presence(value: object, view: str) -> bool:
    if not isinstance(value, bool):
        raise ViewDefinitionError(f"{view}: 'presence' must be true or false")
    return value


def _order(value: object, view: str) -> tuple[str, bool]:
    if not isinstance(value, str) or not value.lstrip("-"):
        raise ViewDefinitionError(f"{view}: 'order' must be a field name, '-' for descending")
    return value.lstrip("-"), value.startswith("-")


def _limits(value: object, view: str) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = {"default": value, "max": value}
    if not isinstance(value, dict):
        raise ViewDefinitionError(f"{view}: 'limit' must be a number or {{default, max}}")
    default, max_ = value.get("default", 10), value.get("max", value.get("default", 10))
    if not (_count(default) and _count(max_)) or default > max_:
        raise ViewDefinitionError(f"{view}: limits must be integers, 1 <= default <= max")
    return default, max_


def _count(value: object) -> TypeGuard[int]:
    """An integer of at least 1 (not a boolean)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def parse_catalog(data: object) -> Catalog:
    """Build a Catalog from the decoded views file."""
    if not isinstance(data, dict) or not isinstance(data.get("views"), dict):
        raise ViewDefinitionError("the views file needs a 'views' mapping")
    types = data.get("types") or {}
    if not isinstance(types, dict):
        raise ViewDefinitionError("'types' must be a mapping")
    id_fields, public, routes, tables = _types(types)
    specs = []
    for name, v in data["views"].items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise ViewDefinitionError(f"bad view name {name!r}")
        if not isinstance(v, dict):
            raise ViewDefinitionError(f"{name}: must be a mapping")
        type_ = v.get("type")
        if not isinstance(type_, str) or not type_:
            raise ViewDefinitionError(f"{name}: 'type' is required")
        method = v.get("method")
        if method is not None and (not isinstance(method, str) or not _METHOD.match(method)):
            raise ViewDefinitionError(
                f"{name}: bad method name {str(method)[:100]!r} (dotted names such as "
                f"stream.subscribe_live or qik.stream.subscribe_live)")
        if method is not None and method.startswith(RESERVED_PREFIXES):
            raise ViewDefinitionError(
                f"{name}: bad method name {method!r}: {method.partition('.')[0]}.* names "
                f"are the engine's own")
        params = v.get("params") or []
        if not isinstance(params, list) or not all(isinstance(p, str) for p in params) \
                or len(set(params)) != len(params):
            raise ViewDefinitionError(f"{name}: 'params' must be a list of distinct names")
        conditions = parse_where(v.get("where"), name)
        roles: dict[str, str] = {}
        needs_user = needs_segments = False
        for c in conditions:
            for ref, role in c.refs():
                if ref.name == SESSION_USER:
                    needs_user = True
                    continue
                if ref.name == SESSION_SEGMENTS:
                    if not getattr(c.op, "takes_session_segments", False):
                        raise ViewDefinitionError(
                            f"{name}: $session.segments used with {c.kind}")
                    needs_segments = True
                    continue
                if ref.name not in params:
                    raise ViewDefinitionError(f"{name}: ${ref.name} is not in 'params'")
                if roles.setdefault(ref.name, role) != role:
                    raise ViewDefinitionError(f"{name}: ${ref.name} used in two roles")
        unused = [p for p in params if p != "limit" and p not in roles]
        if unused or SESSION_USER in params:
            raise ViewDefinitionError(f"{name}: parameter {(unused or [SESSION_USER])[0]!r} is not used")
        order_field, descending = _order(v.get("order", "id"), name)
        check_order(order_field, conditions, name)
        default, max_ = _limits(v.get("limit", {"default": 10, "max": 50}), name)
        specs.append(ViewSpec(
            name=name, type=type_, method=method, params=params, conditions=conditions,
            order_field=order_field, descending=descending, limit_default=default,
            limit_max=max_, id_field=id_fields.get(type_, "id"), roles=roles,
            needs_user=needs_user, index=_choose_index(conditions),
            needs_segments=needs_segments,
            once_per_user=_once_per_user(v.get("once_per_user", False), name, needs_user),
            distinct=parse_distinct(v.get("distinct"), name),
            presence=_presence(v.get("presence", False), name)))
    link_operators(specs)
    return Catalog(specs, id_fields, public, routes, tables)


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Load a views file (YAML or JSON); None loads the default one."""
    if path is None:
        text = resources.files("pushengine").joinpath("default_views.yaml").read_text("utf-8")
    else:
        try:
            text = Path(path).read_text("utf-8")
        except UnicodeDecodeError as e:
            raise ViewDefinitionError(f"the views file is not UTF-8 text "
                                      f"(byte {e.start})") from None
        except OSError as e:
            raise ViewDefinitionError(f"the views file cannot be read: "
                                      f"{e.strerror or e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ViewDefinitionError(f"the views file is not valid YAML/JSON: "
                                  f"{_yaml_problem(e)}") from None
    except RecursionError:
        raise ViewDefinitionError("the views file is nested too deeply") from None
    if path is None:
        data = _without_similar(data)
    try:
        return parse_catalog(data)
    except ViewDefinitionError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, RecursionError) as e:
        # a shape no check foresaw: still one line that says where
        raise ViewDefinitionError(f"the views file has an unexpected shape "
                                  f"({type(e).__name__}: {e})") from None


def _uses_similar(where: object) -> bool:
    """Whether a view's ``where`` has a ``similar`` condition (at any depth)."""
    if isinstance(where, dict):
        return "similar" in where or any(_uses_similar(v) for v in where.values())
    if isinstance(where, list):
        return any(_uses_similar(v) for v in where)
    return False


def _without_similar(data: Any) -> Any:
    """The built-in views, less the ``similar`` ones when the similar extra
    is not installed (one log line names it): the built-in views and the
    example pages work without it. A views file of one's own that declares
    a ``similar`` view is refused instead (operators/similar.py)."""
    if extra.available() or not isinstance(data, dict) or not isinstance(data.get("views"), dict):
        return data
    views = data["views"]
    left_out = [name for name, v in views.items()
                if isinstance(v, dict) and _uses_similar(v.get("where"))]
    if not left_out:
        return data
    log.info("Left out of the built-in views: {views} (a similar view needs the {extra} "
             "extra: {install})", views=", ".join(left_out), extra=extra.NAME,
             install=extra.INSTALL)
    return {**data, "views": {k: v for k, v in views.items() if k not in left_out}}


def _yaml_problem(error: yaml.YAMLError) -> str:
    """One line: what the YAML parser found wrong, and where."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or getattr(error, "context", None) or str(error)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + " ".join(str(problem).split())
