"""Changes written into their tables: what ``--demo`` does on PostgreSQL.

On the embedded default the demo producer publishes its changes to the
feed. On PostgreSQL it writes them where an application would, into the
views' tables (an upsert is ``INSERT ... ON CONFLICT (id) DO UPDATE``, a
delete a ``DELETE``), and they come back to the views through the WAL,
as every other change does. ``DEMO_SCHEMA`` makes the two tables of the
built-in views when they are missing.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool

from pushengine.core.changes import DELETE, Change
from pushengine.views.spec import Catalog

# the built-in views' tables, for --demo (docs/postgres.md shows them)
DEMO_SCHEMA = """
CREATE TABLE IF NOT EXISTS streams (
    id bigint PRIMARY KEY,
    title text,
    user_id bigint,
    user_name text,
    live boolean NOT NULL DEFAULT false,
    public boolean NOT NULL DEFAULT true,
    allowed_users bigint[],
    created_at timestamptz NOT NULL DEFAULT now(),
    ended_at timestamptz,
    duration integer,
    viewers integer,
    thumbnail text,
    lat double precision,
    lon double precision
);
ALTER TABLE streams REPLICA IDENTITY FULL;
CREATE TABLE IF NOT EXISTS users (
    id bigint PRIMARY KEY,
    name text,
    avatar text,
    login text,
    created_at timestamptz
);
ALTER TABLE users REPLICA IDENTITY FULL;
"""


def _param(value: Any) -> Any:
    """A JSON value as a parameter: nested objects as JSON text."""
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return value


class TableWriter:
    """Writes changes into the tables the views file maps their types to,
    on a thread of its own; ``publish`` fires with their number once
    committed (one transaction per call)."""

    def __init__(self, reactor: Any, dsn: str, catalog: Catalog) -> None:
        self.reactor = reactor
        self.dsn = dsn
        self.catalog = catalog
        self.threads = ThreadPool(minthreads=0, maxthreads=1, name="pushengine-pg-writer")
        self._conn: Any = None
        self._columns: dict[str, set[str]] = {}
        self.started = False

    def start(self) -> None:
        if not self.started:
            self.started = True
            self.threads.start()
            self.reactor.addSystemEventTrigger("during", "shutdown", self.stop)

    def stop(self) -> None:
        if self.started:
            self.started = False
            self.threads.stop()

    def publish(self, changes: Sequence[Change]) -> Deferred[int]:
        self.start()
        return deferToThreadPool(self.reactor, self.threads, self.write, list(changes))

    def ensure_schema(self, ddl: str = DEMO_SCHEMA) -> Deferred[None]:
        """Run ``ddl`` (idempotent statements) on the writer's thread."""
        self.start()
        return deferToThreadPool(self.reactor, self.threads, self._execute, ddl)

    def ensure_schema_now(self, ddl: str = DEMO_SCHEMA) -> None:
        """As ``ensure_schema``, at once (blocking): for start-up, before
        the reactor runs and the WAL feed looks for the tables."""
        self._execute(ddl)

    def _connection(self) -> Any:
        import psycopg
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.dsn, connect_timeout=5,
                                         application_name="pushengine-demo")
        return self._conn

    def _execute(self, ddl: str) -> None:
        conn = self._connection()
        with conn.transaction():
            conn.execute(ddl)

    def _table_columns(self, conn: Any, type_: str) -> set[str]:
        found = self._columns.get(type_)
        if found is None:
            from pushengine.postgres.store import COLUMNS_SQL, qualified
            rows = conn.execute(COLUMNS_SQL, [qualified(self.catalog.tables[type_])]).fetchall()
            found = self._columns[type_] = {name for name, _ in rows}
        return found

    def write(self, changes: list[Change]) -> int:
        """Write ``changes`` in one transaction (blocking); their number."""
        from psycopg import sql
        conn = self._connection()
        written = 0
        with conn.transaction():
            for change in changes:
                table = self.catalog.tables.get(change.type)
                if table is None:
                    continue
                ident = sql.Identifier(table.schema, table.name) if table.schema \
                    else sql.Identifier(table.name)
                id_field = self.catalog.id_fields.get(change.type, "id")
                if change.action == DELETE:
                    conn.execute(sql.SQL("DELETE FROM {} WHERE {} = %s").format(
                        ident, sql.Identifier(id_field)), [change.id])
                else:
                    # the object is the row's whole new state: a column it
                    # does not name is NULL
                    names = sorted(self._table_columns(conn, change.type))
                    updates = [n for n in names if n != id_field] or [id_field]
                    conn.execute(sql.SQL(
                        "INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) DO UPDATE SET {}"
                    ).format(
                        ident, sql.SQL(", ").join(map(sql.Identifier, names)),
                        sql.SQL(", ").join([sql.Placeholder()] * len(names)),
                        sql.Identifier(id_field),
                        sql.SQL(", ").join(sql.SQL("{} = EXCLUDED.{}").format(
                            sql.Identifier(n), sql.Identifier(n)) for n in updates)),
                        [_param(change.obj.get(n)) for n in names])
                written += 1
        return written
