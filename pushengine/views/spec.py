"""View definitions (the views file) and their binding to subscribe parameters.

A ``ViewSpec`` is one declared view; ``ViewSpec.bind`` checks a client's
parameters and yields a ``BoundView``: the predicate, the shared key and the
routing keys of one live query.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

import yaml

from pushengine.views import morphology
from pushengine.views.conditions import (
    SESSION_USER, Condition, ParamError, Predicate, Ref, ViewDefinitionError,
    bind_all, check_param, is_private, parse_where)
from pushengine.views.values import index_key

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_METHOD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")
ALL = None  # routing: an object that concerns every instance of a view


def _key_value(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class IndexRule:
    """How instances of one view are found from an object: by the value of
    one field (eq/in), by the words of a text (has_word) or by who may see it."""

    kind: str
    field: str | None
    ref: Ref

    def query_keys(self, values: dict[str, Any]) -> set:
        value = values[self.ref.name]
        if self.kind == "eq":
            return {index_key(value)}
        if self.kind == "in":
            return {index_key(v) for v in value}
        if self.kind == "has_word":
            return set(morphology.word_forms(morphology.single_word(value) or value))
        return {index_key(value)}  # visible_to: the user

    def object_keys(self, obj: dict) -> set | None:
        if self.kind in ("eq", "in"):
            return {index_key(obj.get(self.field))}
        if self.kind == "has_word":
            text = obj.get(self.field)
            return set(morphology.text_forms(text)) if isinstance(text, str) else set()
        if not is_private(obj):
            return ALL
        keys = {index_key(obj.get("user_id"))}
        allowed = obj.get("allowed_users")
        if isinstance(allowed, list):
            keys.update(index_key(u) for u in allowed)
        return keys


def _choose_index(conditions: list[Condition]) -> IndexRule | None:
    for kind in ("eq", "in", "has_word", "visible_to"):
        for c in conditions:
            if c.kind == kind and isinstance(c.operand, Ref):
                return IndexRule(kind, c.field, c.operand)
    return None


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

    @property
    def value_params(self) -> list[str]:
        """Declared parameters other than ``limit``."""
        return [p for p in self.params if p != "limit"]

    def check_limit(self, limit: Any) -> int:
        if limit is None:
            return self.limit_default
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= self.limit_max:
            raise ParamError(f"limit must be an integer from 1 to {self.limit_max}")
        return limit

    def bind(self, params: Any, user: Any, limit: Any) -> "BoundView":
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
        limit = self.check_limit(limit)
        if self.needs_user:
            values[SESSION_USER] = user
        return BoundView(self, values, limit)


@dataclass
class BoundView:
    """One view with its parameters bound: a live query plus a limit."""

    spec: ViewSpec
    values: dict[str, Any]
    limit: int

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

    def index_keys(self) -> set | None:
        rule = self.spec.index
        return None if rule is None else rule.query_keys(self.values)

    @property
    def params(self) -> dict[str, Any]:
        """The client-supplied parameters (without the session user)."""
        return {k: v for k, v in self.values.items() if k != SESSION_USER}


class Catalog:
    """Every declared view, by name, alias method and object type."""

    def __init__(self, specs: Iterable[ViewSpec], id_fields: dict[str, str]) -> None:
        self.views: dict[str, ViewSpec] = {}
        self.methods: dict[str, ViewSpec] = {}
        self.by_type: dict[str, list[ViewSpec]] = {}
        self.id_fields = dict(id_fields)
        for spec in specs:
            self.views[spec.name] = spec
            if spec.method:
                if spec.method in self.methods:
                    raise ViewDefinitionError(f"method {spec.method} declared twice")
                self.methods[spec.method] = spec
            self.by_type.setdefault(spec.type, []).append(spec)
        # the types a node keeps: those views show and those the file declares;
        # a change of any other type is counted and dropped
        self.types = set(self.by_type) | set(self.id_fields)


def _order(value: Any, view: str) -> tuple[str, bool]:
    if not isinstance(value, str) or not value.lstrip("-"):
        raise ViewDefinitionError(f"{view}: 'order' must be a field name, '-' for descending")
    return value.lstrip("-"), value.startswith("-")


def _limits(value: Any, view: str) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = {"default": value, "max": value}
    if not isinstance(value, dict):
        raise ViewDefinitionError(f"{view}: 'limit' must be a number or {{default, max}}")
    default, max_ = value.get("default", 10), value.get("max", value.get("default", 10))
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (default, max_)) \
            or default > max_:
        raise ViewDefinitionError(f"{view}: limits must be integers, 1 <= default <= max")
    return default, max_


def parse_catalog(data: Any) -> Catalog:
    """Build a Catalog from the decoded views file."""
    if not isinstance(data, dict) or not isinstance(data.get("views"), dict):
        raise ViewDefinitionError("the views file needs a 'views' mapping")
    types = data.get("types") or {}
    if not isinstance(types, dict):
        raise ViewDefinitionError("'types' must be a mapping")
    id_fields = {}
    for name, t in types.items():
        id_fields[name] = (t or {}).get("id", "id") if isinstance(t, (dict, type(None))) else "id"
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
        if method is not None and (not isinstance(method, str) or not _METHOD.match(method)
                                   or method.startswith(("session.", "stats."))):
            raise ViewDefinitionError(f"{name}: bad method name {method!r}")
        params = v.get("params") or []
        if not isinstance(params, list) or not all(isinstance(p, str) for p in params) \
                or len(set(params)) != len(params):
            raise ViewDefinitionError(f"{name}: 'params' must be a list of distinct names")
        conditions = parse_where(v.get("where"), name)
        roles: dict[str, str] = {}
        needs_user = False
        for c in conditions:
            for ref, role in c.refs():
                if ref.name == SESSION_USER:
                    needs_user = True
                    continue
                if ref.name not in params:
                    raise ViewDefinitionError(f"{name}: ${ref.name} is not in 'params'")
                if roles.setdefault(ref.name, role) != role:
                    raise ViewDefinitionError(f"{name}: ${ref.name} used in two roles")
        unused = [p for p in params if p != "limit" and p not in roles]
        if unused or SESSION_USER in params:
            raise ViewDefinitionError(f"{name}: parameter {(unused or [SESSION_USER])[0]!r} is not used")
        order_field, descending = _order(v.get("order", "id"), name)
        default, max_ = _limits(v.get("limit", {"default": 10, "max": 50}), name)
        specs.append(ViewSpec(
            name=name, type=type_, method=method, params=params, conditions=conditions,
            order_field=order_field, descending=descending, limit_default=default,
            limit_max=max_, id_field=id_fields.get(type_, "id"), roles=roles,
            needs_user=needs_user, index=_choose_index(conditions)))
    return Catalog(specs, id_fields)


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Load a views file (YAML or JSON); None loads the default one."""
    if path is None:
        text = resources.files("pushengine").joinpath("default_views.yaml").read_text("utf-8")
    else:
        text = Path(path).read_text("utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ViewDefinitionError(f"the views file is not valid YAML/JSON: {e}") from None
    return parse_catalog(data)
