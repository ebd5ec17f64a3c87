"""The WAL reader: each committed row change of the mapped tables, in commit
order, as the engine's changes (SPEC 20, "Change feed from the WAL").

``WalReader`` follows PostgreSQL's logical replication with the built-in
``pgoutput`` plugin (``pgoutput.py``) over a publication of the mapped tables
and a replication slot, both created when missing. One thread of its own owns
the replication connection (and a plain connection for catalog look-ups):
nothing of it runs in the reactor thread but ``deliver``, ``on_gap`` and the
log, which the thread hands over with ``callFromThread``.

What a consumer gets is a ``Transaction`` per commit (every one, an empty one
too, so that its end can be confirmed); it calls ``confirm(end_lsn)`` once it
is done with it (a node: applied; a relay: confirmed by the broker). The slot
moves only with those confirmations, so a crash loses nothing: PostgreSQL
sends again from the last confirmed position (a consumer drops what it has
already seen, by position). The one exception is psycopg2's own rule for an
idle stream: when everything received has been confirmed and the server says
its WAL ends further on, the slot may move there, over WAL that holds nothing
for the publication, so that a quiet publication does not pin the WAL.

Transaction ids: pgoutput's Begin carries the 32-bit xid; the engine compares
them with ``pg_current_snapshot()``'s 64-bit ``xid8`` (``core/positions.py``).
``widen_xid`` takes the 64-bit value with those low 32 bits nearest to the
newest 64-bit xid known (the next xid read on connecting, then each
transaction's): PostgreSQL keeps every live xid within 2**31 of the next one,
so the nearest is the right epoch.
"""
from __future__ import annotations

import os
import re
import select
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import psycopg2
import psycopg2.errors
import psycopg2.extensions
import psycopg2.extras
from psycopg2 import sql
from twisted.internet.defer import Deferred, succeed
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.threadable import isInIOThread

from pushengine.core.changes import DELETE, UPSERT, Change, valid_id
from pushengine.core.positions import format_lsn, parse_lsn
from pushengine.postgres import pgoutput
from pushengine.postgres.pgoutput import UNCHANGED, TupleData
from pushengine.postgres.rows import Column, row_object
from pushengine.views.spec import Catalog

log = Logger()

# what every connection of the reader sets: timestamps the same everywhere
SESSION_OPTIONS = "-c TimeZone=UTC -c DateStyle=ISO -c client_encoding=UTF8"
# a replication slot's name: what PostgreSQL accepts
SLOT_NAME = re.compile(r"^[a-z0-9_]{1,63}$")
# SQLSTATE: the slot is active for another process / already exists
OBJECT_IN_USE = "55006"
DUPLICATE_OBJECT = "42710"
# changes handed to the reactor and not yet delivered, above which the
# thread stops reading (the reactor is slower than the WAL)
MAX_PENDING = 10_000
# at most one confirmation sent to the server per this many seconds
CONFIRM_EVERY = 0.5
# the longest wait between reconnection attempts
MAX_BACKOFF = 30.0


@dataclass(frozen=True)
class Transaction:
    """One committed transaction's changes of the mapped tables."""

    xid: int          # 64-bit transaction id (xid8), comparable with pg_current_snapshot()
    commit_lsn: int
    end_lsn: int      # what the consumer confirms once done with the transaction
    changes: list[Change]   # in WAL order, each with .xid set


class MappingError(Exception):
    """A mapped table cannot be followed; the text names the table and the fix."""


class SlotInUse(Exception):
    """The replication slot is active for another process."""


def widen_xid(xid: int, reference: int) -> int:
    """The 64-bit xid whose low 32 bits are ``xid`` and which is nearest to
    ``reference``, a recent 64-bit xid (never below 0)."""
    low = reference & 0xFFFFFFFF
    delta = ((xid - low + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
    full = reference + delta
    return full if full >= 0 else full + (1 << 32)


def qualified(schema: str, name: str) -> str:
    """``schema.table`` as a message shows it."""
    return f"{schema}.{name}"


@dataclass
class _Mapped:
    """A mapped table as the checks found it."""

    type: str
    id_field: str
    schema: str
    name: str


@dataclass
class _Relation:
    """A relation as its last Relation message described it."""

    mapped: _Mapped | None
    columns: list[Column]
    id_index: int
    identity: str


@dataclass
class _Open:
    """The transaction being read."""

    xid: int
    final_lsn: int
    changes: list[Change] = field(default_factory=list)
    gap: bool = False


class _Control:
    """One run of the reader's thread: its stop flag, its wake-up pipe (so
    that stop, confirm and resume wake a waiting ``select`` at once) and the
    Deferred fired when it has ended. A new ``start`` after a ``stop`` that
    timed out gets a new one, so the old thread closes only its own pipe."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.stopped: Deferred = Deferred()
        self.lock = threading.Lock()
        self.pending = 0      # changes handed to the reactor, not yet delivered
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)

    def wake(self) -> None:
        with self.lock:
            if self.wake_w < 0:
                return
            try:
                os.write(self.wake_w, b"x")
            except OSError:
                pass    # the pipe is full: a wake-up is pending anyway

    def drain(self) -> None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except OSError:
            pass

    def close(self) -> None:
        with self.lock:
            fds = (self.wake_r, self.wake_w)
            self.wake_r = self.wake_w = -1
        for fd in fds:
            os.close(fd)


class WalReader:
    """Follows the mapped tables' changes in the WAL (module docstring).

    ``deliver(transaction)`` runs in the reactor thread, in commit order;
    ``on_gap()`` too, after the transaction of a TRUNCATE of a mapped table,
    after a row that could not be read whole, and when the stream starts
    again on a slot that was just created (a temporary slot after a lost
    connection): the consumer re-reads what it shows. ``retry``: seconds
    between attempts on a slot another process is using (and the first wait
    after a lost connection, growing to 30 s); ``status_interval``: seconds
    between the status messages that tell the server the confirmed position,
    even when idle.
    """

    def __init__(self, reactor: Any, dsn: str, catalog: Catalog, *, slot: str,
                 publication: str = "pushengine", temporary: bool = False,
                 deliver: Callable[[Transaction], None],
                 on_gap: Callable[[], None] | None = None, retry: float = 2.0,
                 status_interval: float = 10.0, max_pending: int = MAX_PENDING) -> None:
        if not SLOT_NAME.match(slot):
            raise ValueError(f"a replication slot's name is 1 to 63 of a-z, 0-9 and _, "
                             f"not {slot[:80]!r}")
        if not publication or len(publication) > 63 or "\0" in publication:
            raise ValueError("a publication's name is 1 to 63 characters")
        if retry <= 0 or status_interval <= 0:
            raise ValueError("retry and status_interval must be positive")
        self.reactor = reactor
        self.dsn = dsn
        self.catalog = catalog
        self.slot = slot
        self.publication = publication
        self.temporary = temporary
        self.deliver = deliver
        self.on_gap = on_gap
        self.retry = retry
        self.status_interval = status_interval
        self.max_pending = max_pending

        self._lock = threading.Lock()
        # calls the thread hands to the reactor, run in order by one callFromThread
        self._handed: deque[tuple[Callable[..., None], _Control, tuple[Any, ...]]] = deque()
        self._handing = False
        self._control: _Control | None = None
        self._paused = False
        self._confirmed = 0        # the highest position confirm() was given
        self._streamed_before = False

        # figures (written by the thread, read anywhere)
        self.up = False
        self.waiting = False
        self.error: str | None = None
        self.received_lsn: int | None = None
        self.sent_lsn: int | None = None     # the last confirmation sent to the server
        self.transactions = 0
        self.changes = 0
        self.skipped_rows = 0
        self.gaps = 0
        self.reconnects = 0
        self.status_messages = 0

    # -- the public API (reactor thread, except confirm) --------------------

    def check(self) -> Deferred:
        """In a thread: check the mapped tables, create the publication (and
        a persistent slot) when missing; fails with MappingError."""
        return deferToThreadPool(self.reactor, self.reactor.getThreadPool(), self._check_once)

    def start(self) -> None:
        """Check, then stream in a thread of its own, retrying until stopped."""
        if self._control is not None:
            return
        control = self._control = _Control()
        threading.Thread(target=self._run, args=(control,), name=f"pushengine WAL {self.slot}",
                         daemon=True).start()

    def confirm(self, lsn: int) -> None:
        """The consumer is done with everything up to ``lsn`` (a transaction's
        end_lsn); thread-safe. The slot never moves further on this account."""
        with self._lock:
            if lsn <= self._confirmed:
                return
            self._confirmed = lsn
        self._wake()

    def pause(self) -> None:
        """Stop reading the stream (a relay whose broker is slow)."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._wake()

    def stop(self, timeout: float = 10.0) -> Deferred:
        """End the thread and close its connections; fires when done (or
        after ``timeout`` seconds with a warning: a connection attempt may
        hold the thread that long, and it ends on its own afterwards).
        Nothing is delivered after ``stop``, not even what was read before."""
        control = self._control
        if control is None:
            return succeed(None)
        self._control = None
        self.up = self.waiting = False
        control.stopping.set()
        control.wake()
        done: Deferred = Deferred()

        def finished(_: object) -> None:
            if timer.active():
                timer.cancel()
            if not done.called:
                done.callback(None)

        def late() -> None:
            log.warn("WAL reader {slot}: still busy {timeout} s after stop; it ends on "
                     "its own", slot=self.slot, timeout=timeout)
            done.callback(None)

        timer = self.reactor.callLater(timeout, late)
        control.stopped.addCallback(finished)
        control.stopped.addErrback(lambda f: log.failure("WAL reader: stopping failed", f))
        return done

    def health(self) -> dict[str, Any]:
        return {
            "up": self.up,
            "slot": self.slot,
            "temporary": self.temporary,
            "publication": self.publication,
            "waiting": self.waiting,
            "paused": self._paused,
            "received_lsn": format_lsn(self.received_lsn) if self.received_lsn else None,
            "confirmed_lsn": format_lsn(self._confirmed) if self._confirmed else None,
            "error": self.error,
        }

    def stats(self) -> dict[str, float]:
        """Counters for /metrics."""
        lag = 0
        if self.received_lsn is not None:
            lag = max(0, self.received_lsn - self._confirmed)
        return {"transactions": self.transactions, "changes": self.changes,
                "skipped_rows": self.skipped_rows, "gaps": self.gaps,
                "reconnects": self.reconnects, "up": int(self.up),
                "waiting": int(self.waiting), "unconfirmed_bytes": lag,
                "status_messages": self.status_messages}

    @property
    def confirmed(self) -> int:
        return self._confirmed

    # -- connections (reader thread) ----------------------------------------

    def _connect(self, replication: bool = False) -> Any:
        params = psycopg2.extensions.parse_dsn(self.dsn)
        params["options"] = f"{params.get('options', '')} {SESSION_OPTIONS}".strip()
        params.setdefault("application_name", f"pushengine WAL {self.slot}")
        params.setdefault("connect_timeout", "10")
        # a peer that vanished is noticed within about half a minute
        params.setdefault("keepalives", "1")
        params.setdefault("keepalives_idle", "10")
        params.setdefault("keepalives_interval", "5")
        params.setdefault("keepalives_count", "3")
        if replication:
            return psycopg2.connect(
                connection_factory=psycopg2.extras.LogicalReplicationConnection, **params)
        conn = psycopg2.connect(**params)
        conn.autocommit = True
        return conn

    def _check_once(self) -> None:
        conn = self._connect()
        try:
            self._check(conn)
        finally:
            conn.close()

    def _check(self, conn: Any) -> tuple[dict[tuple[str, str], _Mapped], bool]:
        """Check the database, the mapped tables, the publication and the
        slot; create what is missing. Raises MappingError naming every
        problem found and its fix. Returns the mapped tables, and whether
        it created a persistent slot (one that was gone)."""
        cur = conn.cursor()
        cur.execute("SHOW wal_level")
        (wal_level,) = cur.fetchone()
        if wal_level != "logical":
            raise MappingError(
                f"the database runs with wal_level = {wal_level}, and following its WAL "
                f"needs wal_level = logical: set it in postgresql.conf (or the service's "
                f"parameters) and restart PostgreSQL")
        cur.execute("SHOW server_version_num")
        version = int(cur.fetchone()[0])
        if not self.catalog.tables:
            raise MappingError("the views file maps no type to a table: give one under "
                               "types (types: {Stream: {id: id, table: streams}})")
        problems: list[str] = []
        mapped: dict[tuple[str, str], _Mapped] = {}
        for type_, table in sorted(self.catalog.tables.items()):
            schema = table.schema or "public"
            name = qualified(schema, table.name)
            quoted = sql.SQL("{}.{}").format(sql.Identifier(schema),
                                             sql.Identifier(table.name)).as_string(conn)
            id_field = self.catalog.id_fields.get(type_, "id")
            key = (schema, table.name)
            if key in mapped:
                problems.append(f"types {mapped[key].type} and {type_} both map to table "
                                f"{name}: a table is one type")
                continue
            cur.execute(
                "SELECT c.oid, c.relkind, c.relreplident FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relname = %s", (schema, table.name))
            row = cur.fetchone()
            if row is None:
                problems.append(f"table {name} (type {type_}) does not exist: create it, or "
                                f"correct 'table' and 'schema' of {type_} in the views file")
                continue
            oid, relkind, identity = row
            if relkind != "r":
                kind = {"p": "a partitioned table", "v": "a view", "m": "a materialized view",
                        "f": "a foreign table"}.get(relkind, f"of relkind {relkind!r}")
                problems.append(f"{name} (type {type_}) is {kind}: the WAL reader follows "
                                f"plain tables only; map {type_} to a table")
                continue
            cur.execute(
                "SELECT a.attname FROM pg_index i "
                "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
                "WHERE i.indrelid = %s AND i.indisprimary ORDER BY a.attnum", (oid,))
            key_columns = [r[0] for r in cur.fetchall()]
            if not key_columns:
                problems.append(
                    f"table {name} (type {type_}) has no primary key: its rows cannot be "
                    f"told apart; run ALTER TABLE {quoted} ADD PRIMARY KEY "
                    f"({sql.Identifier(id_field).as_string(conn)})")
                continue
            if key_columns != [id_field]:
                problems.append(
                    f"the primary key of table {name} is ({', '.join(key_columns)}) but the id "
                    f"field of type {type_} is {id_field!r}: the id must be the table's "
                    f"one-column primary key; set 'id' of {type_} in the views file to the "
                    f"key column, or make {id_field!r} the primary key")
                continue
            if identity != "f":
                shown = {"d": "DEFAULT", "n": "NOTHING", "i": "USING INDEX"}.get(identity,
                                                                               identity)
                problems.append(
                    f"table {name} (type {type_}) has REPLICA IDENTITY {shown}: its deletes "
                    f"would carry only the key (not the fields views route on) and its "
                    f"updates could leave large (TOASTed) values out; run ALTER TABLE "
                    f"{quoted} REPLICA IDENTITY FULL")
                continue
            mapped[key] = _Mapped(type_, id_field, schema, table.name)
        if problems:
            raise MappingError("cannot follow the WAL: " + "; ".join(problems))
        self._publication(conn, cur, mapped, version)
        return mapped, self._slot(cur)

    def _publication(self, conn: Any, cur: Any, mapped: dict[tuple[str, str], _Mapped],
                     version: int) -> None:
        """Create the publication of the mapped tables, or add the missing
        tables to it; refuse one that leaves some changes out."""
        pub = sql.Identifier(self.publication)
        tables = sql.SQL(", ").join(sql.SQL("{}.{}").format(sql.Identifier(m.schema),
                                                           sql.Identifier(m.name))
                                    for m in mapped.values())
        cur.execute("SELECT oid, puballtables, pubinsert, pubupdate, pubdelete "
                    "FROM pg_publication WHERE pubname = %s", (self.publication,))
        row = cur.fetchone()
        try:
            if row is None:
                cur.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(pub, tables))
                log_in_reactor(self.reactor, "info",
                               "WAL reader: created publication {publication}",
                               publication=self.publication)
                return
            oid, all_tables, inserts, updates, deletes = row
            if not (inserts and updates and deletes):
                raise MappingError(
                    f"publication {self.publication} does not publish every insert, update "
                    f"and delete: run ALTER PUBLICATION {pub.as_string(conn)} SET "
                    f"(publish = 'insert, update, delete, truncate')")
            if all_tables:
                return
            cur.execute("SELECT schemaname, tablename FROM pg_publication_tables "
                        "WHERE pubname = %s", (self.publication,))
            present = {(s, t) for s, t in cur.fetchall()}
            missing = [m for k, m in mapped.items() if k not in present]
            if missing:
                cur.execute(sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                    pub, sql.SQL(", ").join(
                        sql.SQL("{}.{}").format(sql.Identifier(m.schema), sql.Identifier(m.name))
                        for m in missing)))
                log_in_reactor(self.reactor, "info",
                               "WAL reader: added {tables} to publication {publication}",
                               tables=", ".join(qualified(m.schema, m.name) for m in missing),
                               publication=self.publication)
            if version >= 150000:
                cur.execute(
                    "SELECT n.nspname, c.relname FROM pg_publication_rel r "
                    "JOIN pg_class c ON c.oid = r.prrelid "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE r.prpubid = %s AND (r.prqual IS NOT NULL OR r.prattrs IS NOT NULL)",
                    (oid,))
                filtered = [(s, t) for s, t in cur.fetchall() if (s, t) in mapped]
                if filtered:
                    s, t = filtered[0]
                    raise MappingError(
                        f"publication {self.publication} publishes table {qualified(s, t)} "
                        f"with a row filter or a column list, so some of its changes would "
                        f"not reach the engine: publish the whole table (ALTER PUBLICATION "
                        f"{pub.as_string(conn)} SET TABLE ...), or use another publication")
        except psycopg2.errors.InsufficientPrivilege as e:
            raise MappingError(
                f"cannot create or change publication {self.publication}: "
                f"{str(e).strip()}; create it as the tables' owner: CREATE PUBLICATION "
                f"{pub.as_string(conn)} FOR TABLE {tables.as_string(conn)}") from None

    def _slot(self, cur: Any) -> bool:
        """Create a persistent slot when missing (a temporary one is made by
        the replication connection that uses it); refuse a slot of that name
        made for something else."""
        cur.execute("SELECT plugin, database, temporary FROM pg_replication_slots "
                    "WHERE slot_name = %s", (self.slot,))
        row = cur.fetchone()
        if row is not None:
            self._refuse_foreign_slot(cur, *row)
            return False
        if self.temporary:
            return False
        try:
            cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')",
                        (self.slot,))
        except psycopg2.errors.DuplicateObject:
            return False     # another reader made it in the meantime
        log_in_reactor(self.reactor, "info", "WAL reader: created replication slot {slot}",
                       slot=self.slot)
        return True

    def _refuse_foreign_slot(self, cur: Any, plugin: str | None, database: str | None,
                             temporary: bool) -> None:
        cur.execute("SELECT current_database()")
        (here,) = cur.fetchone()
        drop = f"SELECT pg_drop_replication_slot('{self.slot}')"
        if plugin != "pgoutput" or database != here:
            raise MappingError(
                f"replication slot {self.slot} exists for {plugin or 'physical replication'} "
                f"on database {database or '-'}: choose another slot name, or drop it ({drop})")
        if temporary and not self.temporary:
            raise MappingError(f"replication slot {self.slot} is a temporary slot of another "
                               f"connection: choose another slot name")
        if not temporary and self.temporary:
            raise MappingError(f"replication slot {self.slot} exists as a persistent slot, "
                               f"and a node's own feed makes a temporary one of that name: "
                               f"drop it ({drop}) or give the node another id")

    # -- the thread ---------------------------------------------------------

    def _wake(self) -> None:
        control = self._control
        if control is not None:
            control.wake()

    def _say(self, level: str, text: str, **fields: Any) -> None:
        log_in_reactor(self.reactor, level, text, **fields)

    def _run(self, control: _Control) -> None:
        """Connect, stream, and on any failure wait and start again."""
        failures = 0
        said: str | None = None
        try:
            while not control.stopping.is_set():
                wait = self.retry
                try:
                    self._session(control)
                    failures = 0
                    continue
                except SlotInUse as e:
                    self.waiting = True
                    self.error = str(e)
                except Exception as e:   # a mapping, the database down, a lost connection
                    self.waiting = False
                    self.error = str(e) if isinstance(e, MappingError) else _describe(e)
                    wait = min(MAX_BACKOFF, self.retry * 1.5 ** failures)
                    failures += 1
                finally:
                    self.up = False
                if control.stopping.is_set():
                    break
                self.reconnects += 1
                if self.error != said:
                    said = self.error
                    if self.waiting:
                        self._say("info", "WAL reader: slot {slot} is in use; waiting to take "
                                  "over ({error})", slot=self.slot, error=self.error)
                    else:
                        self._say("error", "WAL reader: {error}; trying again in {wait:.1f} s",
                                  error=self.error, wait=wait)
                control.stopping.wait(wait)
        finally:
            control.close()
            self.reactor.callFromThread(control.stopped.callback, None)

    def _session(self, control: _Control) -> None:
        """One connection's life: check, create what is missing, stream
        until stopped (returns) or until the connection fails (raises)."""
        catalog = self._connect()
        replication = None
        try:
            mapped, created = self._check(catalog)
            reference = self._next_xid(catalog)
            confirmed_before = self._slot_position(catalog)
            replication = self._connect(replication=True)
            cur = replication.cursor()
            if self.temporary:
                try:
                    cur.execute(
                        f"CREATE_REPLICATION_SLOT {psycopg2.extensions.quote_ident(self.slot, cur)}"
                        f" TEMPORARY LOGICAL pgoutput NOEXPORT_SNAPSHOT")
                    created = True
                except psycopg2.Error as e:
                    if getattr(e, "pgcode", None) == DUPLICATE_OBJECT:
                        raise SlotInUse(f"replication slot {self.slot} exists already "
                                        f"(another node with this id?)") from None
                    raise
            elif confirmed_before is not None:
                with self._lock:
                    self._confirmed = max(self._confirmed, confirmed_before)
            names = '"' + self.publication.replace('"', '""') + '"'
            try:
                cur.start_replication(slot_name=self.slot, decode=False,
                                      options={"proto_version": "1",
                                               "publication_names": names},
                                      # psycopg2's own (it takes 1 s at least);
                                      # the thread sends its own every status_interval
                                      status_interval=max(1.0, self.status_interval))
            except psycopg2.Error as e:
                if getattr(e, "pgcode", None) == OBJECT_IN_USE:
                    raise SlotInUse(str(e).strip()) from None
                raise
            if created and (self._streamed_before or self.temporary):
                # the changes since the last connection are not in this slot;
                # a node's temporary slot is new at its start too, and the
                # views it read before the slot existed may miss a change
                self.gaps += 1
                self._hand_over(control, self._gap)
            self._streamed_before = True
            self.up, self.waiting, self.error = True, False, None
            self._say("info", "WAL reader: following slot {slot} (publication {publication})",
                      slot=self.slot, publication=self.publication)
            _Stream(self, control, cur, catalog, mapped, reference).run()
        finally:
            for conn in (replication, catalog):
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:
                        pass

    def _next_xid(self, cur_conn: Any) -> int:
        """The next 64-bit xid, without taking one (a snapshot's xmax)."""
        cur = cur_conn.cursor()
        try:
            cur.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
        except Exception:
            cur.execute("SELECT txid_snapshot_xmax(txid_current_snapshot())")
        return int(cur.fetchone()[0])

    def _slot_position(self, conn: Any) -> int | None:
        """The persistent slot's confirmed position (None: not there)."""
        cur = conn.cursor()
        cur.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                    "WHERE slot_name = %s", (self.slot,))
        row = cur.fetchone()
        if row is None or row[0] is None:
            return None
        return parse_lsn(row[0])

    # -- into the reactor ---------------------------------------------------

    def _hand_over(self, control: _Control, call: Callable[..., None], *args: Any) -> None:
        """Run ``call(control, *args)`` in the reactor thread, in order. The
        calls queue up while one hand-over is on its way, so that a busy
        stream costs one reactor wake-up per batch, not per transaction."""
        with self._lock:
            self._handed.append((call, control, args))
            if self._handing:
                return
            self._handing = True
        self.reactor.callFromThread(self._take_handed)

    def _take_handed(self) -> None:
        """The reactor's side of ``_hand_over``: run every queued call, then
        wake the threads whose transactions were taken (one write each)."""
        woken: set[_Control] = set()
        while True:
            with self._lock:
                if not self._handed:
                    self._handing = False
                    break
                batch = list(self._handed)
                self._handed.clear()
            for call, control, args in batch:
                if call == self._deliver:
                    woken.add(control)
                call(control, *args)
        for control in woken:
            control.wake()

    def _gap(self, control: _Control) -> None:
        if self.on_gap is None or control is not self._control:
            return      # stopped meanwhile: nothing more reaches the consumer
        try:
            self.on_gap()
        except Exception:
            log.failure("WAL reader: on_gap failed")

    def _deliver(self, control: _Control, transaction: Transaction) -> None:
        with self._lock:
            control.pending -= len(transaction.changes)
        if control is not self._control:
            return      # stopped meanwhile: nothing more reaches the consumer
        try:
            self.deliver(transaction)
        except Exception:
            log.failure("WAL reader: delivering transaction {xid} failed",
                        xid=transaction.xid)


class _Stream:
    """Reading one replication connection (the reader's thread only)."""

    def __init__(self, reader: WalReader, control: _Control, cur: Any, catalog: Any,
                 mapped: dict[tuple[str, str], _Mapped], reference: int) -> None:
        self.reader = reader
        self.control = control
        self.cur = cur
        self.catalog = catalog
        self.mapped = mapped
        self.reference = reference
        self.relations: dict[int, _Relation] = {}
        self.type_names: dict[tuple[int, int], str] = {}
        self.open: _Open | None = None
        self.sent = 0               # the last confirmation sent on this connection
        self.sent_at = 0.0
        self.status_at = time.monotonic()
        self.heard_at = time.monotonic()
        self.warned: set[str] = set()

    def run(self) -> None:
        reader, control = self.reader, self.control
        fd = self.cur.connection.fileno()
        self._feedback(ask_reply=True)
        while not control.stopping.is_set():
            control.drain()
            self._maybe_feedback()
            with reader._lock:
                full = control.pending >= reader.max_pending
            if reader._paused or full:
                # not reading: the server waits; the status messages go on
                self.heard_at = time.monotonic()
                select.select([control.wake_r], [], [], self._timeout())
                continue
            message = self.cur.read_message()
            if message is not None:
                self.heard_at = time.monotonic()
                self._handle(message.payload, message.data_start)
                continue
            readable, _, _ = select.select([fd, control.wake_r], [], [], self._timeout())
            if fd in readable:
                self.heard_at = time.monotonic()
            elif time.monotonic() - self.heard_at > 3 * reader.status_interval + 5:
                raise ConnectionError(
                    f"no word from the server for {3 * reader.status_interval + 5:.0f} s")

    def _timeout(self) -> float:
        due = self.status_at + self.reader.status_interval - time.monotonic()
        return max(0.05, min(due, 1.0))

    def _maybe_feedback(self) -> None:
        now = time.monotonic()
        if now - self.status_at >= self.reader.status_interval:
            self._feedback(ask_reply=True)
        elif self.reader._confirmed > self.sent and now - self.sent_at >= CONFIRM_EVERY:
            self._feedback(ask_reply=False)

    def _feedback(self, ask_reply: bool) -> None:
        """Send the confirmed position; a periodic one asks the server to
        answer, which tells a live connection from a dead one."""
        lsn = self.reader._confirmed
        now = time.monotonic()
        self.cur.send_feedback(write_lsn=lsn, flush_lsn=lsn, apply_lsn=lsn,
                               force=True, reply=ask_reply)
        self.sent, self.sent_at, self.status_at = lsn, now, now
        self.reader.sent_lsn = lsn
        self.reader.status_messages += 1

    # -- messages ------------------------------------------------------------

    def _handle(self, payload: bytes, data_start: int) -> None:
        message = pgoutput.parse(payload)
        if isinstance(message, pgoutput.Begin):
            xid = widen_xid(message.xid, self.reference)
            self.reference = max(self.reference, xid)
            self.open = _Open(xid, message.final_lsn)
        elif isinstance(message, pgoutput.Commit):
            self._commit(message)
        elif isinstance(message, pgoutput.Relation):
            self._relation(message)
        elif isinstance(message, (pgoutput.Insert, pgoutput.Update, pgoutput.Delete)):
            self._row(message)
        elif isinstance(message, pgoutput.Truncate):
            if any(self.relations.get(oid) is not None
                   and self.relations[oid].mapped is not None for oid in message.relations):
                if self.open is not None:
                    self.open.gap = True
        # Origin, Type, Message: nothing to do (types are named by format_type)

    def _commit(self, message: pgoutput.Commit) -> None:
        reader = self.reader
        tx = self.open
        self.open = None
        if tx is None:
            return
        transaction = Transaction(tx.xid, message.commit_lsn, message.end_lsn, tx.changes)
        reader.received_lsn = message.end_lsn
        reader.transactions += 1
        reader.changes += len(tx.changes)
        with reader._lock:
            self.control.pending += len(tx.changes)
        reader._hand_over(self.control, reader._deliver, transaction)
        if tx.gap:
            reader.gaps += 1
            reader._hand_over(self.control, reader._gap)

    def _relation(self, message: pgoutput.Relation) -> None:
        namespace = message.namespace or "pg_catalog"
        mapped = self.mapped.get((namespace, message.name))
        columns = [Column(c.name, self._type_name(c.type_oid, c.type_modifier))
                   for c in message.columns] if mapped is not None else []
        id_index = -1
        if mapped is not None:
            names = [c.name for c in message.columns]
            if mapped.id_field in names:
                id_index = names.index(mapped.id_field)
            else:
                self._warn(f"id:{message.oid}", "WAL reader: table {table} has no column "
                           "{id_field} any more: its changes are skipped",
                           table=qualified(namespace, message.name), id_field=mapped.id_field)
            if message.replica_identity != pgoutput.IDENTITY_FULL:
                self._warn(f"identity:{message.oid}", "WAL reader: table {table} no longer "
                           "has REPLICA IDENTITY FULL: deletes may lose their fields and "
                           "updates their large values (views are re-read when that happens)",
                           table=qualified(namespace, message.name))
        self.relations[message.oid] = _Relation(mapped, columns, id_index,
                                                message.replica_identity)

    def _type_name(self, oid: int, modifier: int) -> str:
        key = (oid, modifier)
        name = self.type_names.get(key)
        if name is None:
            cur = self.catalog.cursor()
            cur.execute("SELECT format_type(%s, %s)", (oid, modifier if modifier >= 0 else None))
            name = str(cur.fetchone()[0])
            self.type_names[key] = name
        return name

    def _row(self, message: pgoutput.Insert | pgoutput.Update | pgoutput.Delete) -> None:
        relation = self.relations.get(message.relation)
        tx = self.open
        if relation is None or relation.mapped is None or tx is None:
            return
        mapped = relation.mapped
        if relation.id_index < 0:
            self.reader.skipped_rows += 1
            return
        old = message.old if isinstance(message, pgoutput.Update) \
            and not message.old_is_key else None
        if isinstance(message, pgoutput.Delete):
            values: TupleData = message.old
            action = DELETE
        else:
            values = message.new
            action = UPSERT
        texts, whole = _fill(values, old)
        if not whole:
            tx.gap = True      # a value we cannot know: the views are re-read
        obj = row_object(relation.columns, texts)
        id_ = obj.get(mapped.id_field)
        if not valid_id(id_):
            self.reader.skipped_rows += 1
            self._warn(f"badid:{message.relation}", "WAL reader: a row of {table} has an "
                       "id the engine cannot carry ({id!r}: a non-empty string or an integer "
                       "within ±2**53): skipped (and counted) from now on",
                       table=qualified(mapped.schema, mapped.name), id=str(id_)[:80])
            return
        if isinstance(message, pgoutput.Delete):
            if message.old_is_key:
                obj = {mapped.id_field: id_}
            tx.changes.append(Change(mapped.type, DELETE, id_, obj, xid=tx.xid))
            return
        was = None
        if isinstance(message, pgoutput.Update) and old is not None:
            before = row_object(relation.columns, _fill(old, None)[0])
            was = {k: v for k, v in before.items() if obj.get(k) != v} or None
        tx.changes.append(Change(mapped.type, action, id_, obj, was=was, xid=tx.xid))

    def _warn(self, key: str, text: str, **fields: Any) -> None:
        if key not in self.warned:
            self.warned.add(key)
            self.reader._say("warn", text, **fields)


def _fill(values: TupleData, old: TupleData | None) -> tuple[list[str | None], bool]:
    """A tuple's texts, unchanged TOASTed values taken from the old tuple;
    False when one is unknown (then it is null)."""
    texts: list[str | None] = []
    whole = True
    for i, value in enumerate(values):
        if value is UNCHANGED:
            previous = old[i] if old is not None and i < len(old) else UNCHANGED
            if previous is UNCHANGED:
                whole = False
                texts.append(None)
            else:
                assert not isinstance(previous, pgoutput._Unchanged)
                texts.append(previous)
        else:
            assert not isinstance(value, pgoutput._Unchanged)
            texts.append(value)
    return texts, whole


def _describe(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text[:500]


def log_in_reactor(reactor: Any, level: str, text: str, **fields: Any) -> None:
    """Log from any thread: the line is written in the reactor thread."""
    if isInIOThread():
        getattr(log, level)(text, **fields)
    else:
        reactor.callFromThread(getattr(log, level), text, **fields)


__all__: Sequence[str] = ("Transaction", "MappingError", "WalReader", "widen_xid")
