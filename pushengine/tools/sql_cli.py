"""``pushengine-sql``: the SQL side of a views file.

    pushengine-sql indexes [--views FILE] [--database postgresql://...]
        the CREATE INDEX statements that serve each view's query
    pushengine-sql query VIEW [--views FILE] [--database URL] [--param NAME=JSON ...]
        the SQL of one view's first page, with its parameters

With ``--database`` the tables' columns are read from the database (text
order columns get ``COLLATE "C"``, missing fields are left out); without
it every field is taken for a column of its name.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from pushengine.postgres.indexes import render
from pushengine.postgres.rows import Column
from pushengine.views.spec import BoundView, Catalog, ViewDefinitionError, load_catalog


def _columns(url: str, catalog: Catalog) -> dict[str, dict[str, Column]]:
    import psycopg

    from pushengine.postgres.store import COLUMNS_SQL, qualified
    found: dict[str, dict[str, Column]] = {}
    with psycopg.connect(url, connect_timeout=10) as conn:
        for type_, table in catalog.tables.items():
            rows = conn.execute(COLUMNS_SQL, [qualified(table)]).fetchall()
            if not rows:
                raise SystemExit(f"pushengine-sql: table {qualified(table)} (type {type_}) "
                                 f"does not exist in the database")
            found[type_] = {name: Column(name, type_name) for name, type_name in rows}
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pushengine-sql", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_ in (("indexes", "print the CREATE INDEX statements of the views"),
                        ("query", "print the SQL of one view's first page")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--views", help="views file (default: the built-in views)")
        p.add_argument("--database", help="postgresql:// URL to read the tables' columns from")
        if name == "query":
            p.add_argument("view")
            p.add_argument("--param", action="append", default=[], metavar="NAME=JSON")
            p.add_argument("--limit", type=int, default=None)
    args = parser.parse_args(argv)
    try:
        catalog = load_catalog(args.views)
    except ViewDefinitionError as e:
        parser.exit(1, f"pushengine-sql: {e}\n")
    if not catalog.tables:
        parser.exit(1, "pushengine-sql: the views file maps no type to a table "
                       "(types: {Stream: {id: id, table: streams}})\n")
    columns = _columns(args.database, catalog) if args.database else None
    if args.command == "indexes":
        sys.stdout.write(render(catalog, columns))
        return 0
    return _query(args, catalog, columns, parser)


def _query(args: argparse.Namespace, catalog: Catalog,
           columns: dict[str, dict[str, Column]] | None,
           parser: argparse.ArgumentParser) -> int:
    from pushengine.postgres.sql import TableInfo, compile_view
    spec = catalog.views.get(args.view)
    if spec is None:
        parser.exit(1, f"pushengine-sql: no view {args.view!r}\n")
    assert spec is not None
    values = {}
    for item in args.param:
        name, sep, text = item.partition("=")
        if not sep:
            parser.exit(1, f"pushengine-sql: --param {item!r} is not NAME=JSON\n")
        try:
            values[name] = json.loads(text)
        except ValueError:
            values[name] = text
    if columns is None or spec.type not in columns:
        parser.exit(1, "pushengine-sql: query needs --database (the columns' types decide "
                       "the SQL)\n")
    assert columns is not None
    table = catalog.tables[spec.type]
    info = TableInfo(table, spec.id_field, tuple(columns[spec.type].values()))
    bound = BoundView(spec, values, args.limit or spec.limit_default)
    plan = compile_view(bound, info)
    import psycopg
    with psycopg.connect(args.database, connect_timeout=10) as conn:
        text, params = plan.query(None, max(bound.limit, spec.limit_max))
        print(text.as_string(conn) + ";")
        print(f"-- parameters: {json.dumps(params, ensure_ascii=False, default=str)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
