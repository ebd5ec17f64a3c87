"""The PostgreSQL store: a view's initial state read from its table (SPEC 20).

``query`` compiles the bound view (postgres/sql.py), then reads pages of
rows in one REPEATABLE READ, READ ONLY transaction on a worker thread,
turns each row into its object (postgres/rows.py, shared with the WAL
feed), keeps those the view's own predicate accepts, and stops once it has
the view's first ``promised`` matches or the table has no more rows. The
answer is a ``core.positions.State``: the objects in view order with the
snapshot they were read in, so that the view registry applies exactly the
changes of the transactions that snapshot did not see.

The reactor never waits on the database: queries run on a thread pool of
``pool_size`` threads over as many connections (psycopg_pool), each
statement bounded by ``statement_timeout``; at most ``max_waiting`` queries
wait for a thread. A database that is down, slow or saturated fails the
subscriptions that wait on it with ``StoreUnavailable`` (error 1012), and
nothing else. Concurrent queries of one view, parameters and size make one
SQL query.
"""
from __future__ import annotations

import json
import time
from typing import Any, Callable, Hashable, Sequence

from twisted.application.service import Service
from twisted.internet.defer import Deferred, fail
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from pushengine.core.changes import Change
from pushengine.core.errors import StoreUnavailable
from pushengine.core.positions import Snapshot, State
from pushengine.postgres.rows import Column, converter, row_object
from pushengine.postgres.similar import SimilarRows, uses_similar
from pushengine.postgres.sql import Plan, TableInfo, compile_view
from pushengine.stores.kept import KeptObjects
from pushengine.views.spec import BoundView, Catalog, Table, ViewSpec
from pushengine.views.values import sort_key

log = Logger()

PROMISE_MIN = 20        # an answer holds at least this many matches (or the limit)
PAGE_MIN, PAGE_MAX = 100, 5_000


class MappingProblem(Exception):
    """A mapped table cannot be read: missing, or without its id column."""


COLUMNS_SQL = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod)
  FROM pg_attribute a
 WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum
"""


def qualified(table: Table) -> str:
    """The table's name as ``to_regclass`` reads it, each part quoted."""
    def quote(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'
    return f"{quote(table.schema)}.{quote(table.name)}" if table.schema else quote(table.name)


class PostgresStore:
    """An ObjectStore reading initial states from PostgreSQL (see the module
    docstring). ``keep``: types whose objects are kept here from the feed
    and read by id (``get``: the public profiles)."""

    kind = "postgresql"     # the store label of /metrics' initial-state times

    def __init__(self, reactor: Any, dsn: str, catalog: Catalog, *, pool_size: int = 4,
                 statement_timeout: float = 5.0, connect_timeout: float = 5.0,
                 max_waiting: int = 256, query_timeout: float = 30.0,
                 keep: set[str] | frozenset[str] = frozenset()) -> None:
        from psycopg_pool import ConnectionPool

        self.reactor = reactor
        self.dsn = dsn
        self.catalog = catalog
        self.statement_timeout = statement_timeout
        self.connect_timeout = connect_timeout
        self.max_waiting = max_waiting
        self.query_timeout = query_timeout
        self.threads = ThreadPool(minthreads=0, maxthreads=pool_size, name="pushengine-pg")
        options = (f"-c statement_timeout={int(statement_timeout * 1000)} "
                   f"-c timezone=UTC -c DateStyle=ISO")
        self.pool = ConnectionPool(dsn, min_size=0, max_size=pool_size, open=False,
                                   timeout=connect_timeout, configure=self._configure,
                                   check=ConnectionPool.check_connection,
                                   kwargs={"options": options,
                                           "connect_timeout": max(1, int(connect_timeout)),
                                           "application_name": "pushengine"})
        self.tables: dict[str, TableInfo] = {}
        self._pending: dict[str, list[Deferred[State]]] = {}
        self.waiting = 0
        self.queries = 0           # SQL queries made (tests, metrics)
        self.rows_read = 0
        self.failures = 0
        self.kept = KeptObjects(keep)
        self.started = False
        # similar views: their rows in memory, with the LSH (postgres/similar.py)
        self.similar: dict[str, SimilarRows] = {}
        by_type: dict[str, list[ViewSpec]] = {}
        for spec in catalog.views.values():
            if uses_similar(spec) and spec.type in catalog.tables:
                by_type.setdefault(spec.type, []).append(spec)
        for type_, specs in by_type.items():
            self.similar[type_] = SimilarRows(reactor, type_, specs,
                                              catalog.id_fields.get(type_, "id"), self.read_all)

    @staticmethod
    def _configure(conn: Any) -> None:
        from psycopg import IsolationLevel
        conn.isolation_level = IsolationLevel.REPEATABLE_READ
        conn.read_only = True

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> Deferred[None]:
        """Start the threads and read the mapped tables' columns; fails with
        MappingProblem when a table is missing or lacks its id column (a
        database that cannot be reached is only logged: the columns are read
        again on the first query)."""
        if not self.started:
            self.started = True
            self.threads.start()
            self.reactor.addSystemEventTrigger("during", "shutdown", self.stop)
            self.pool.open(wait=False)
        d = deferToThreadPool(self.reactor, self.threads, self.load_tables)

        def unreachable(f: Failure) -> None:
            if f.check(MappingProblem):
                return f  # type: ignore[return-value]
            log.warn("PostgreSQL store: the database cannot be read yet ({error}); "
                     "subscriptions fail with error 1012 until it can", error=f.value)
            return None
        return d.addErrback(unreachable)

    def stop(self) -> None:
        if self.started:
            self.started = False
            self.threads.stop()
            self.pool.close(timeout=1.0)

    def load_tables(self) -> None:
        tables: dict[str, TableInfo] = {}
        with self.pool.connection(timeout=self.connect_timeout) as conn:
            for type_, table in self.catalog.tables.items():
                rows = conn.execute(COLUMNS_SQL, [qualified(table)]).fetchall()
                if not rows:
                    raise MappingProblem(
                        f"type {type_}: table {qualified(table)} does not exist (or cannot "
                        f"be read by this user)")
                columns = tuple(Column(name, type_name) for name, type_name in rows)
                id_field = self.catalog.id_fields.get(type_, "id")
                if id_field not in {c.name for c in columns}:
                    raise MappingProblem(
                        f"type {type_}: table {qualified(table)} has no column {id_field!r}, "
                        f"the type's id field")
                tables[type_] = TableInfo(table, id_field, columns)
        self.tables = tables

    # -- ObjectStore ----------------------------------------------------------------
    def promised(self, view: ViewSpec, limit: int) -> int:
        """How many matches an answer holds when it may not hold every one:
        as many as the view's largest window, so that a larger limit needs
        no second read."""
        if uses_similar(view) and view.type in self.similar:
            return self.similar[view.type].promised(view, limit)
        return max(limit, getattr(view, "limit_max", 0), PROMISE_MIN)

    def hold(self, view: ViewSpec) -> None:
        """A query of ``view`` is made (the view registry says so): a similar
        view's rows are read into memory with the first one."""
        if uses_similar(view) and view.type in self.similar:
            self.similar[view.type].hold(view)

    def release(self, view: ViewSpec) -> None:
        if uses_similar(view) and view.type in self.similar:
            self.similar[view.type].release(view)

    def read_all(self, bound: BoundView) -> Deferred[State]:
        """Every row of ``bound``'s table that its conditions let through."""
        return deferToThreadPool(self.reactor, self.threads, self.read_state, bound, 1 << 62)

    def query(self, view: ViewSpec, params: dict[str, Any], limit: int) -> Deferred[State]:
        """Fire with the first matches of ``view`` (at least ``limit``, when
        there are so many) in view order, as a State with its snapshot."""
        if view.type not in self.catalog.tables:
            return fail(StoreUnavailable(f"type {view.type} is not mapped to a table"))
        if uses_similar(view) and view.type in self.similar:
            return self.similar[view.type].query(view, params, limit)
        bound = BoundView(view, dict(params or {}), limit)
        key = json.dumps([view.name, _plain(bound.values), limit], sort_keys=True,
                         default=str)
        waiter: Deferred[State] = Deferred()
        waiting = self._pending.get(key)
        if waiting is not None:
            waiting.append(waiter)
            return waiter
        if self.waiting >= self.max_waiting:
            self.failures += 1
            return fail(StoreUnavailable("the database has too many queries waiting"))
        self._pending[key] = [waiter]
        self.waiting += 1
        want = self.promised(view, limit)
        d = deferToThreadPool(self.reactor, self.threads, self.read_state, bound, want)
        d.addBoth(self._deliver, key)
        d.addErrback(lambda f: log.failure("PostgreSQL store: delivering an answer", f))
        return waiter

    def _deliver(self, result: State | Failure, key: str) -> None:
        self.waiting -= 1
        for waiter in self._pending.pop(key, []):
            if isinstance(result, Failure):
                waiter.errback(result)
            else:
                waiter.callback(State(result, result.snapshot))
        return None

    def read_state(self, bound: BoundView, want: int) -> State:
        """The view's first ``want`` matches, read at once (blocking: ``query``
        runs it on a pool thread)."""
        from psycopg import errors as pgerrors
        from psycopg_pool import PoolTimeout
        import psycopg
        try:
            if bound.spec.type not in self.tables:
                self.load_tables()
            info = self.tables[bound.spec.type]
            plan = compile_view(bound, info)
            return self._read(plan, bound, want)
        except MappingProblem as e:
            self._failed("mapping", e)
            raise StoreUnavailable(str(e)) from None
        except PoolTimeout:
            self._failed("no connection", None)
            raise StoreUnavailable("the database cannot be reached") from None
        except pgerrors.QueryCanceled:
            self._failed("statement timeout", None)
            raise StoreUnavailable(
                f"the database did not answer within {self.statement_timeout:g} s") from None
        except psycopg.OperationalError as e:
            self._failed("connection", e)
            raise StoreUnavailable("the database cannot be reached") from None
        except psycopg.Error as e:
            self._failed("query", e)
            raise StoreUnavailable("the database refused the view's query") from None

    def _failed(self, what: str, error: Exception | None) -> None:
        self.failures += 1
        log.warn("PostgreSQL store: {what}{detail}", what=what,
                 detail=f": {str(error).strip()[:300]}" if error is not None else "")

    def _read(self, plan: Plan, bound: BoundView, want: int) -> State:
        match = bound.predicate()
        columns = plan.info.columns
        names = [c.name for c in columns]
        id_at = names.index(plan.info.id_field)
        order_at = names.index(plan.order.name) if plan.order is not None else None
        # the predicate looks at a few fields: a row is made whole only once
        # it matches (None: it may look at any field)
        probe = _probe_fields(bound, names)
        probed = [(names[i], converter(columns[i].type), i) for i in probe or ()]
        found: list[dict] = []
        deadline = time.monotonic() + self.query_timeout
        page = min(PAGE_MAX, max(PAGE_MIN, 2 * want))
        read = 0
        with self.pool.connection(timeout=self.connect_timeout) as conn:
            with conn.transaction():
                snapshot = Snapshot.parse(
                    conn.execute("SELECT pg_current_snapshot()::text").fetchone()[0])
                after: tuple[str | None, str] | None = None
                while True:
                    text, params = plan.query(after, page)
                    rows = conn.execute(text, params).fetchall()
                    self.queries += 1
                    self.rows_read += len(rows)
                    read += len(rows)
                    for texts in rows:
                        if probe is not None and not match(
                                {name: None if texts[i] is None else convert(texts[i])
                                 for name, convert, i in probed}):
                            continue
                        obj = row_object(columns, texts)
                        if probe is not None or match(obj):
                            found.append(obj)
                    if len(rows) < page or (plan.ordered and len(found) >= want):
                        break
                    if time.monotonic() > deadline:
                        raise StoreUnavailable(
                            f"the view's query took more than {self.query_timeout:g} s")
                    last = rows[-1]
                    after = (last[order_at] if order_at is not None else None, last[id_at])
                    page = _next_page(page, read, len(found), want, plan.ordered)
        if not plan.ordered:
            found.sort(key=_view_key(bound), reverse=bound.spec.descending)
        return State(found[:want], snapshot)

    def apply_changes(self, changes: Sequence[Change]) -> None:
        """The database is the state; only the kept types, and the rows of
        similar views, are kept here."""
        for type_, rows in self.similar.items():
            mine = [c for c in changes if c.type == type_]
            if mine:
                rows.apply(mine)
        self.kept.apply_changes(changes)

    def get(self, type_: str, id_: Hashable) -> dict | None:
        """A kept object by type and id, or None."""
        return self.kept.get(type_, id_)

    def health(self) -> dict[str, Any]:
        stats = self.pool.get_stats()
        report: dict[str, Any] = {
            "waiting": self.waiting, "queries": self.queries, "rows_read": self.rows_read,
            "failures": self.failures, "connections": stats.get("pool_size", 0)}
        if self.similar:
            report["similar"] = {t: rows.health() for t, rows in self.similar.items()}
        return report


# the fields each operator's predicate reads besides its own field (and the
# implicit rules: ``public`` for privacy, ``audience`` for targeting)
_OPERATOR_FIELDS: dict[str, tuple[str, ...]] = {
    "eq": (), "in": (), "ne": (), "gt": (), "gte": (), "lt": (), "lte": (), "has_word": (),
    "near": ("lat", "lon"), "visible_to": ("public", "user_id", "allowed_users"),
}


def _probe_fields(bound: BoundView, names: list[str]) -> list[int] | None:
    """The columns the view's predicate reads, or None when an operator may
    read others (a computed order, an operator this list does not know)."""
    fields = {"public", "audience"}
    for c in bound.spec.conditions:
        extra = _OPERATOR_FIELDS.get(c.kind)
        if extra is None:
            return None
        fields.update(extra)
        if c.field is not None:
            fields.add(c.field)
    return [i for i, name in enumerate(names) if name in fields]


def _next_page(page: int, read: int, found: int, want: int, ordered: bool) -> int:
    """The next page's size: as many rows as the matches so far say the
    rest of the window needs (a fifth more), at most PAGE_MAX."""
    if not ordered or found == 0:
        return min(PAGE_MAX, page * 2)
    needed = (want - found) * read / found * 1.2
    return int(min(PAGE_MAX, max(PAGE_MIN, needed)))


def _view_key(bound: BoundView) -> Callable[[dict], tuple]:
    """The engine's order of a view's objects (views/query.py's key)."""
    value, id_field = bound.order_value(), bound.spec.id_field

    def key(obj: dict) -> tuple:
        id_ = obj.get(id_field)
        return (sort_key(value(obj)), sort_key(id_), id_)
    return key


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    return {k: (sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v)
            for k, v in values.items()}


class StoreService(Service):
    """Starts the store with the node and stops it with it; a mapping the
    database refuses (a missing table or id column) is ``refused(text)``."""

    def __init__(self, store: PostgresStore, refused: Callable[[str], None]) -> None:
        self.store = store
        self.refused = refused

    def startService(self) -> None:
        super().startService()

        def failed(f: Failure) -> None:
            if f.check(MappingProblem):
                self.refused(str(f.value))
            else:
                log.failure("PostgreSQL store: starting failed", f)
        self.store.start().addErrback(failed)

    def stopService(self) -> None:
        super().stopService()
        self.store.stop()
