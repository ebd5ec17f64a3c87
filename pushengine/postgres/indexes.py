"""The indexes that serve each view's query (``pushengine-sql indexes``).

A view's query (postgres/sql.py) filters on its conditions and reads rows
in the view's order, keyset after keyset. One B-tree per view serves it:
its equality and ``in`` fields with parameters first (``user_id``), then
the order field in the view's direction and the id; the conditions with
literal values (``live: true``, ``public: true``) and the implicit
``public IS TRUE`` of a view without ``visible_to`` become the index's
partial predicate, so the index holds only the rows the view can show.
Views that need the same index share one statement.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from pushengine.postgres.rows import Column
from pushengine.postgres.sql import TEXT_TYPES
from pushengine.views.operators import Ref
from pushengine.views.spec import Catalog, ViewSpec

_PLAIN = re.compile(r"^[a-z_][a-z0-9_]*$")


def quote(name: str) -> str:
    """An identifier as PostgreSQL reads it: bare when it can be."""
    return name if _PLAIN.match(name) else '"' + name.replace('"', '""') + '"'


def literal(value: object) -> str | None:
    """A literal of a partial index predicate, or None when it has none."""
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and "'" not in value and len(value) <= 100:
        return "'" + value + "'"
    return None


@dataclass(frozen=True)
class Index:
    table: str
    keys: tuple[str, ...]
    where: tuple[str, ...]
    views: tuple[str, ...]
    method: str = "btree"

    def statement(self) -> str:
        # named after the first view it serves: one name per distinct index
        view = re.sub(r"(?<!^)(?=[A-Z])", "_", self.views[0]).lower()
        name = f"pe_{re.sub(r'[^a-z0-9_]', '', view)}"[:63]
        using = f" USING {self.method}" if self.method != "btree" else ""
        text = (f"CREATE INDEX IF NOT EXISTS {quote(name)} ON {self.table}{using} "
                f"({', '.join(self.keys)})")
        if self.where:
            text += f" WHERE {' AND '.join(self.where)}"
        return text + ";"


def view_index(spec: ViewSpec, catalog: Catalog,
               columns: dict[str, Column] | None = None) -> Index | None:
    """The index of one view (None for a type without a table). ``columns``:
    the table's columns when known (text order columns get ``COLLATE "C"``,
    and fields without a column are left out)."""
    table = catalog.tables.get(spec.type)
    if table is None:
        return None
    table_name = (f"{quote(table.schema)}.{quote(table.name)}" if table.schema
                  else quote(table.name))

    def known(name: str) -> bool:
        return columns is None or name in columns

    leading: list[str] = []
    where: list[str] = []
    if "public" not in {c.field for c in spec.conditions} and not spec.needs_user \
            and known("public"):
        where.append("public IS TRUE")
    if columns is not None and "audience" in columns and not any(
            getattr(c.op, "opens_audience", False) for c in spec.conditions):
        where.append("audience IS NULL")
    for c in spec.conditions:
        if c.field is None or not known(c.field):
            continue
        if c.kind in ("eq", "in") and isinstance(c.operand, Ref):
            leading.append(quote(c.field))
        elif c.kind == "eq":
            value = literal(c.operand)
            if value is not None:
                where.append(f"{quote(c.field)} = {value}" if c.field != "public"
                             or c.operand is not True else "public IS TRUE")
    id_field = spec.id_field
    direction = " DESC NULLS LAST" if spec.descending else ""
    id_direction = " DESC" if spec.descending else ""
    keys = list(dict.fromkeys(leading))
    order = spec.order_field
    if not order.startswith("_") and known(order) and order != id_field:
        collate = ""
        if columns is not None and columns[order].type.split("(")[0] in TEXT_TYPES:
            collate = ' COLLATE "C"'
        keys.append(f"{quote(order)}{collate}{direction}")
    if columns is not None and id_field in columns and \
            columns[id_field].type.split("(")[0] in TEXT_TYPES:
        keys.append(f'{quote(id_field)} COLLATE "C"{id_direction}')
    else:
        keys.append(f"{quote(id_field)}{id_direction}")
    # near: the order index, read with the bounding box as a filter, finds
    # the newest rows of a crowded box at once; a GiST index on point(lon,
    # lat) would serve sparse boxes (docs/postgres.md, "Indexes")
    return Index(table_name, tuple(keys), tuple(dict.fromkeys(where)), (spec.name,))


def indexes(catalog: Catalog, columns: dict[str, dict[str, Column]] | None = None
            ) -> list[Index]:
    """One index per distinct need of the catalog's views, in view order."""
    found: dict[tuple, Index] = {}
    for spec in catalog.views.values():
        index = view_index(spec, catalog, None if columns is None else columns.get(spec.type))
        if index is None:
            continue
        key = (index.table, index.keys, index.where, index.method)
        same = found.get(key)
        found[key] = index if same is None else Index(
            index.table, index.keys, index.where, same.views + index.views, index.method)
    return list(found.values())


def render(catalog: Catalog, columns: dict[str, dict[str, Column]] | None = None) -> str:
    lines = []
    for index in indexes(catalog, columns):
        lines.append(f"-- {', '.join(index.views)}")
        lines.append(index.statement())
    return "\n".join(lines) + ("\n" if lines else "")
