"""A view's ``where``, ``order`` and ``limit`` as one SQL query (SPEC 20).

``compile_view`` turns a bound view and the columns of its table into a
``Plan``: a WHERE clause that never drops an object the view would show,
an ORDER BY equal to the engine's order, and the keyset condition that
reads the next page. Equality (``null`` matching NULL), ``in``, ``ne``, the
ranges and ``visible_to`` are exact clauses where the column's type lets
SQL decide as the engine does (numbers with numbers, text with text in
code-point order, booleans with booleans, timestamps through their
fixed-width text); a value of another JSON kind is decided at once (an
equality of a number with a text column is false). The rest (``has_word``,
``similar``, ``audience``, json/jsonb and array columns) is left to the
engine, which checks every row SQL returns with the view's own predicate;
``near`` adds a bounding box that holds every match. Values are always
parameters; table and column names come from the views file and the
catalog, quoted by ``psycopg.sql``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from psycopg import sql

from pushengine.postgres.rows import (
    ARRAY, BOOL, JSON, NUMBER, STRING, TIMESTAMP, Column, canonical_timestamp)
from pushengine.views.operators import Condition, resolve
from pushengine.views.spec import BoundView, Table

TRUE, FALSE = sql.SQL("TRUE"), sql.SQL("FALSE")
# text types compared and ordered as Python compares str: code point order
TEXT_TYPES = frozenset({"text", "character varying"})
KM_PER_DEGREE = 111.19492664455873   # along a meridian, on the sphere geo.py uses


@dataclass(frozen=True)
class TableInfo:
    """A mapped table as the catalog describes it: its columns and key."""

    table: Table
    id_field: str
    columns: tuple[Column, ...]

    @property
    def by_name(self) -> dict[str, Column]:
        return {c.name: c for c in self.columns}

    def identifier(self) -> sql.Composable:
        if self.table.schema:
            return sql.Identifier(self.table.schema, self.table.name)
        return sql.Identifier(self.table.name)


@dataclass
class Plan:
    """One view's query: ``select`` (the columns as text), ``where`` and its
    parameters, and how to order and page it. ``ordered`` is False when SQL
    cannot give the engine's order (a computed or json order field): every
    row that passes is read and the engine sorts."""

    info: TableInfo
    where: sql.Composable
    params: list[Any]
    order: Column | None          # None: ordered by the id alone
    descending: bool
    ordered: bool = True
    notes: list[str] = field(default_factory=list)

    def select(self) -> sql.Composable:
        # named c0, c1, ...: an output column named as a table column would
        # be what ORDER BY means by that name (its text, not its value)
        return sql.SQL(", ").join(
            sql.SQL("{}::text AS {}").format(sql.Identifier(c.name), sql.Identifier(f"c{i}"))
            for i, c in enumerate(self.info.columns))

    def query(self, after: tuple[str | None, str] | None, page: int
              ) -> tuple[sql.Composable, list[Any]]:
        """The SQL of one page, after the row whose (order, id) texts are
        ``after``, and its parameters."""
        where, params = [self.where], list(self.params)
        if after is not None:
            clause, more = self._after(*after) if self.ordered else self._after_id(after[1])
            where.append(clause)
            params += more
        text = sql.SQL("SELECT {} FROM {} WHERE {} ORDER BY {} LIMIT %s").format(
            self.select(), self.info.identifier(), sql.SQL(" AND ").join(where),
            self.order_by())
        return text, params + [page]

    def order_by(self) -> sql.Composable:
        direction = sql.SQL("DESC") if self.descending and self.ordered else sql.SQL("ASC")
        idx = _ordered_expr(self._id_column())
        if self.order is None or not self.ordered:
            return sql.SQL("{} {}").format(idx, direction)
        nulls = sql.SQL("NULLS LAST") if self.descending else sql.SQL("NULLS FIRST")
        return sql.SQL("{} {} {}, {} {}").format(
            _ordered_expr(self.order), direction, nulls, idx, direction)

    def _id_column(self) -> Column:
        return self.info.by_name[self.info.id_field]

    def _after_id(self, id_text: str) -> tuple[sql.Composable, list[Any]]:
        """Rows after ``id`` in id order (a plan SQL cannot order)."""
        idc = self._id_column()
        return sql.SQL("{} > {}").format(_ordered_expr(idc), _typed_param(idc)), [id_text]

    def _after(self, order_text: str | None, id_text: str) -> tuple[sql.Composable, list[Any]]:
        """Rows after (order value, id) in the view's order."""
        idc = self._id_column()
        idx, id_param = _ordered_expr(idc), _typed_param(idc)
        beyond = sql.SQL("<") if self.descending else sql.SQL(">")
        if self.order is None:
            return sql.SQL("{} {} {}").format(idx, beyond, id_param), [id_text]
        col, param = _ordered_expr(self.order), _typed_param(self.order)
        if order_text is None:
            if self.descending:       # nulls come last: only nulls after a null
                return (sql.SQL("({} IS NULL AND {} < {})").format(col, idx, id_param),
                        [id_text])
            return (sql.SQL("(({} IS NULL AND {} > {}) OR {} IS NOT NULL)").format(
                col, idx, id_param, col), [id_text])
        tail = sql.SQL(" OR {} IS NULL").format(col) if self.descending else sql.SQL("")
        return (sql.SQL("({} {} {} OR ({} = {} AND {} {} {}){})").format(
            col, beyond, param, col, param, idx, beyond, id_param, tail),
            [order_text, order_text, id_text])


def _ordered_expr(column: Column) -> sql.Composable:
    """The column as SQL orders it the engine's way: text in code-point
    order (``COLLATE "C"``), other types by their own order when it is the
    order of their values in the engine, else by their text."""
    ident = sql.Identifier(column.name)
    base = _base(column)
    if base in TEXT_TYPES:
        return sql.SQL('{} COLLATE "C"').format(ident)
    if column.kind in (NUMBER, BOOL, TIMESTAMP) or base in ("date", "uuid"):
        return ident
    return sql.SQL('({}::text) COLLATE "C"').format(ident)


def _typed_param(column: Column) -> sql.Composable:
    """A text parameter cast to the column's type (keyset values are the
    row's own texts)."""
    base = _base(column)
    if base in TEXT_TYPES:
        return sql.SQL('%s COLLATE "C"')
    if column.kind in (NUMBER, BOOL, TIMESTAMP) or base in ("date", "uuid"):
        return sql.SQL("%s::{}").format(sql.SQL(column.type))
    return sql.SQL('%s COLLATE "C"')


def _base(column: Column) -> str:
    name = column.type
    paren = name.find("(")
    return (name[:paren] if paren >= 0 else name).strip()


# -- conditions ----------------------------------------------------------------

def _kind_of_value(value: object) -> str | None:
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, (int, float)):
        return NUMBER
    if isinstance(value, str):
        return STRING
    return None


class _Clauses:
    """The WHERE clauses of one plan, with their parameters in order."""

    def __init__(self, columns: dict[str, Column]) -> None:
        self.columns = columns
        self.parts: list[sql.Composable] = []
        self.params: list[Any] = []
        self.notes: list[str] = []

    def add(self, part: sql.Composable, *params: Any) -> None:
        self.parts.append(part)
        self.params.extend(params)

    def _value(self, column: Column, value: object) -> sql.Composable | None:
        """The parameter SQL for ``value`` compared with ``column`` (appending
        the parameter), or None when the engine never compares the two."""
        kind, vkind = column.kind, _kind_of_value(value)
        if (kind == NUMBER and vkind == NUMBER) or (kind == BOOL and vkind == BOOL):
            self.params.append(value)
            return sql.SQL("%s")
        if kind == STRING and vkind == STRING:
            self.params.append(value)
            return sql.SQL("%s")
        if kind == TIMESTAMP and vkind == STRING and (
                canonical_timestamp(value) or value in ("infinity", "-infinity")):
            self.params.append(value)
            return sql.SQL("%s::{}").format(sql.SQL(column.type))
        return None

    def eq(self, name: str, value: object, negate: bool = False) -> sql.Composable:
        """``field = value`` the engine's way (``negate``: ``ne``)."""
        column = self.columns.get(name)
        if column is None:                       # a field no row has: null
            return (FALSE if value is None else TRUE) if negate else \
                (TRUE if value is None else FALSE)
        ident = sql.Identifier(column.name)
        if value is None:
            return sql.SQL("{} IS NOT NULL" if negate else "{} IS NULL").format(ident)
        if column.kind in (JSON, ARRAY):
            return TRUE                          # the engine decides
        # text types compare as themselves; other types shown as text (date,
        # uuid, time, ...) by their text, as the engine sees them
        expr: sql.Composable = ident if column.kind != STRING or \
            _base(column) in TEXT_TYPES else sql.SQL("({}::text)").format(ident)
        param = self._value(column, value)
        if param is None:
            return TRUE if negate else FALSE
        if negate:
            return sql.SQL("{} IS DISTINCT FROM {}").format(expr, param)
        return sql.SQL("{} = {}").format(expr, param)

    def child(self) -> "_Clauses":
        return _Clauses(self.columns)

    def any_of(self, options: list["tuple[sql.Composable, _Clauses]"]) -> sql.Composable:
        """The disjunction of clauses each built on a child: TRUE when one
        is, FALSE when all are; only the kept parts' parameters are taken."""
        kept = [(part, child) for part, child in options if part is not FALSE]
        if not kept:
            return FALSE
        if any(part is TRUE for part, _ in kept):
            return TRUE
        for _, child in kept:
            self.params.extend(child.params)
        return sql.SQL("({})").format(sql.SQL(" OR ").join(part for part, _ in kept))

    def in_(self, name: str, values: list) -> sql.Composable:
        options = []
        for value in values:
            child = self.child()
            options.append((child.eq(name, value), child))
        return self.any_of(options)

    def compare(self, name: str, op: str, value: object) -> sql.Composable:
        """``field <op> value``: numbers with numbers, text with text in
        code-point order; anything else never matches."""
        column = self.columns.get(name)
        if column is None:
            return FALSE                          # null compares with nothing
        if column.kind in (JSON, ARRAY):
            return TRUE
        if column.kind == TIMESTAMP and isinstance(value, str) and not (
                canonical_timestamp(value) or value in ("infinity", "-infinity")):
            return TRUE                           # text order: the engine decides
        if column.kind == BOOL:
            return FALSE                          # booleans never compare
        param = self._value(column, value)
        if param is None:
            return FALSE
        expr = _ordered_expr(column)
        if column.kind == STRING:
            if _base(column) not in TEXT_TYPES:
                expr = sql.SQL('(({}::text) COLLATE "C")').format(sql.Identifier(column.name))
            param = sql.SQL('{} COLLATE "C"').format(param)
        return sql.SQL("{} {} {}").format(expr, sql.SQL(op), param)

    def public(self) -> sql.Composable:
        """``public`` is true (the only way an object is public)."""
        column = self.columns.get("public")
        if column is None:
            return FALSE
        if column.kind == BOOL:
            return sql.SQL("{} IS TRUE").format(sql.Identifier("public"))
        if column.kind == JSON:
            return TRUE
        return FALSE

    def visible_to(self, user: object) -> sql.Composable:
        """Public, owned by ``user`` (``user_id``) or listed in ``allowed_users``."""
        public = self.child()
        options = [(public.public(), public)]
        if user is not None:
            owner = self.child()
            options.append((owner.eq("user_id", user), owner))
            allowed = self.columns.get("allowed_users")
            listed = self.child()
            if allowed is not None and allowed.kind == JSON:
                options.append((TRUE, listed))
            elif allowed is not None and allowed.kind == ARRAY:
                element = Column(allowed.name, allowed.type[:-2])
                if element.kind in (NUMBER, STRING) and _kind_of_value(user) == element.kind:
                    listed.params.append(user)
                    options.append((sql.SQL("%s::{} = ANY({})").format(
                        sql.SQL(element.type), sql.Identifier(allowed.name)), listed))
        return self.any_of(options)

    def untargeted(self) -> sql.Composable:
        """No ``audience`` (missing or null): objects aimed at a segment
        need an audience condition."""
        column = self.columns.get("audience")
        if column is None:
            return TRUE
        return sql.SQL("{} IS NULL").format(sql.Identifier("audience"))

    def near(self, lat: float, lon: float, km: float) -> sql.Composable:
        """A bounding box holding every point within ``km`` of (lat, lon),
        widened a little: a prefilter only, the engine checks the distance."""
        lat_c, lon_c = self.columns.get("lat"), self.columns.get("lon")
        if lat_c is None or lon_c is None:
            return FALSE                          # no position: never near
        if lat_c.kind != NUMBER or lon_c.kind != NUMBER:
            return TRUE
        span = km / KM_PER_DEGREE * 1.01 + 1e-6
        south, north = lat - span, lat + span
        if south > -89.0 and north < 89.0:
            widest = max(abs(south), abs(north))
            lon_span = span / max(math.cos(math.radians(widest)), 1e-9)
            west, east = lon - lon_span, lon + lon_span
            if lon_span < 179.0 and west >= -180.0 and east <= 180.0:
                # both ways at once: a GiST index on point(lon, lat) serves it
                self.params.extend([west, south, east, north])
                return sql.SQL("point({}, {}) <@ box(point(%s, %s), point(%s, %s))").format(
                    sql.Identifier("lon"), sql.Identifier("lat"))
        self.params.extend([south, north])
        return sql.SQL("{} BETWEEN %s AND %s").format(sql.Identifier("lat"))


def compile_view(bound: BoundView, info: TableInfo) -> Plan:
    """The plan of ``bound`` over its table (see the module docstring)."""
    spec = bound.spec
    clauses = _Clauses(info.by_name)
    values = bound.values
    opens_audience = any(getattr(c.op, "opens_audience", False) for c in spec.conditions)
    parts: list[sql.Composable] = []
    if not opens_audience:
        parts.append(clauses.untargeted())     # objects aimed at a segment
    if not spec.needs_user:
        parts.append(clauses.public())         # no private object without visible_to
    for c in spec.conditions:
        parts.append(_condition(clauses, c, values))
    params = clauses.params
    if any(p is FALSE for p in parts):
        parts, params = [FALSE], []
    parts = [p for p in parts if p is not TRUE] or [TRUE]
    order_name = spec.order_field
    order = info.by_name.get(order_name)
    ordered = True
    if order_name.startswith("_") and order_name in bound.computed():
        ordered, order = False, None
    elif order is not None and order.kind in (JSON, ARRAY):
        ordered, order = False, None
    return Plan(info, sql.SQL(" AND ").join(parts), params, order,
                spec.descending, ordered)


def _condition(clauses: _Clauses, c: Condition, values: dict[str, Any]) -> sql.Composable:
    kind = c.kind
    operand = resolve(c.operand, values) if kind not in ("near", "similar") else None
    if kind == "eq" and c.field:
        return clauses.eq(c.field, operand)
    if kind == "ne" and c.field:
        return clauses.eq(c.field, operand, negate=True)
    if kind == "in" and c.field and isinstance(operand, list):
        return clauses.in_(c.field, operand)
    if kind in _COMPARISONS and c.field:
        return clauses.compare(c.field, _COMPARISONS[kind], operand)
    if kind == "visible_to":
        return clauses.visible_to(operand)
    if kind == "near":
        spec = c.operand
        try:
            lat, lon, km = (float(resolve(spec[k], values)) for k in ("lat", "lon", "km"))
        except (TypeError, KeyError, ValueError):
            return TRUE
        return clauses.near(lat, lon, km)
    return TRUE                                   # has_word, similar, audience, ...


_COMPARISONS = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


def describe(plan: Plan, render: Callable[[sql.Composable], str]) -> str:
    """The plan's first page as SQL text (for docs and EXPLAIN)."""
    text, _ = plan.query(None, 10)
    return render(text)
