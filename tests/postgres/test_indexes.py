"""``pushengine-sql indexes``: the statements run, and PostgreSQL's planner
uses them for the views' queries (EXPLAIN on a table of 20,000 rows)."""
from __future__ import annotations

import json

import psycopg
import pytest

from pushengine.postgres.rows import Column
from pushengine.postgres.sql import TableInfo, compile_view
from pushengine.postgres.writer import DEMO_SCHEMA
from pushengine.tools.sql_cli import main
from pushengine.views.spec import BoundView, load_catalog
from tests.postgres.conftest import execute

FILL = """
INSERT INTO streams (id, title, user_id, live, public, created_at, lat, lon, allowed_users)
SELECT g, 'title ' || g, g % 1000, g % 10 = 0, g % 7 <> 0,
       now() - g * interval '1 second', 50 + (g % 100) * 0.1, 30 + (g % 50) * 0.1,
       ARRAY[g % 1000 + 1]
  FROM generate_series(1, 20000) g
"""

VIEWS = {
    "PublicLiveStreamView": {},
    "PublicRecentStreamView": {},
    "UserStreamView": {"user_id": 42},
    "HomeStreamView": {"users": [1, 2, 3], "session.user": 1},
}


@pytest.fixture
def database(pg_url):
    execute(pg_url, DEMO_SCHEMA, FILL)
    return pg_url


def test_the_printed_indexes_serve_the_views(database, capsys):
    assert main(["indexes", "--database", database]) == 0
    printed = capsys.readouterr().out
    statements = [line for line in printed.splitlines() if line.startswith("CREATE INDEX")]
    assert len(statements) == len(set(statements)) >= 6
    execute(database, *statements, "ANALYZE streams")
    catalog = load_catalog(None)
    with psycopg.connect(database) as conn:
        rows = conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE attrelid = 'streams'::regclass AND attnum > 0 AND NOT attisdropped "
            "ORDER BY attnum").fetchall()
        info = TableInfo(catalog.tables["Stream"], "id", tuple(Column(*r) for r in rows))
        for name, values in VIEWS.items():
            spec = catalog.views[name]
            plan = compile_view(BoundView(spec, values, 10), info)
            text, params = plan.query(None, 50)
            explained = conn.execute(psycopg.sql.SQL("EXPLAIN (FORMAT JSON) ") + text,
                                     params).fetchone()[0]
            shown = json.dumps(explained)
            assert "pe_" in shown and "Seq Scan" not in shown, (name, shown)


def test_without_a_database_every_field_is_a_column(capsys):
    assert main(["indexes"]) == 0
    printed = capsys.readouterr().out
    assert ("CREATE INDEX IF NOT EXISTS pe_public_live_stream_view ON streams "
            "(created_at DESC NULLS LAST, id DESC) WHERE live = true AND public IS TRUE;"
            ) in printed
    assert "(user_id, created_at DESC NULLS LAST, id DESC)" in printed


def test_a_views_file_without_tables_is_refused(tmp_path, capsys):
    path = tmp_path / "views.yaml"
    path.write_text("types: {Stream: {id: id}}\nviews:\n  A: {type: Stream}\n")
    with pytest.raises(SystemExit) as exit_:
        main(["indexes", "--views", str(path)])
    assert exit_.value.code == 1
    assert "maps no type to a table" in capsys.readouterr().err
