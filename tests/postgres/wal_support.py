"""What the WAL tests share: a views file's catalog, a recording consumer,
readers stopped (and their slots dropped) after the test, and SQL helpers."""
from __future__ import annotations

import pytest
import pytest_twisted

from pushengine.core.positions import parse_lsn
from pushengine.postgres.wal import Transaction, WalReader
from pushengine.views.spec import Catalog, parse_catalog
from tests.waiting import wait_until

# fast enough for tests: status every 0.3 s, retries every 0.2 s
FAST = {"status_interval": 0.3, "retry": 0.2}

STREAMS = ('CREATE TABLE streams (id bigint PRIMARY KEY, title text, user_id integer, '
           'tags text[])', 'ALTER TABLE streams REPLICA IDENTITY FULL')


def catalog(**tables: str) -> Catalog:
    """A catalog mapping each type to a table (``Stream="streams"``)."""
    return parse_catalog({"types": {t: {"id": "id", "table": name}
                                    for t, name in tables.items()}, "views": {}})


class Recorder:
    """A reader's consumer: keeps each transaction and counts the gaps;
    confirms what it receives when ``auto_confirm``."""

    def __init__(self, auto_confirm: bool = True) -> None:
        self.transactions: list[Transaction] = []
        self.gaps = 0
        self.auto_confirm = auto_confirm
        self.reader: WalReader | None = None
        self.events: list[str] = []

    def deliver(self, transaction: Transaction) -> None:
        self.transactions.append(transaction)
        self.events.append(f"tx:{len(transaction.changes)}")
        if self.auto_confirm and self.reader is not None:
            self.reader.confirm(transaction.end_lsn)

    def on_gap(self) -> None:
        self.gaps += 1
        self.events.append("gap")

    @property
    def changes(self) -> list:
        return [c for t in self.transactions for c in t.changes]


def sql_value(url: str, query: str, params=None):
    """The first column of the first row of ``query`` (autocommit)."""
    import psycopg2
    conn = psycopg2.connect(url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(query, params)
            row = cur.fetchone()
            return None if row is None else row[0]
    finally:
        conn.close()


def transaction(url: str, *statements: str) -> int:
    """Run ``statements`` in one transaction; its 64-bit xid."""
    import psycopg2
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
            cur.execute("SELECT pg_current_xact_id()::text::bigint")
            xid = cur.fetchone()[0]
        conn.commit()
        return int(xid)
    finally:
        conn.close()


def slot_confirmed(url: str, slot: str) -> int | None:
    text = sql_value(url, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                          "WHERE slot_name = %s", (slot,))
    return None if text is None else parse_lsn(text)


def drop_slots(url: str) -> None:
    """Drop this database's slots once no process holds them."""
    def inactive() -> bool:
        return not sql_value(url, "SELECT count(*) FROM pg_replication_slots "
                                  "WHERE database = current_database() AND active")
    wait_until(inactive, what="the slots released")
    sql_value(url, "SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots "
                   "WHERE database = current_database()")


@pytest.fixture
def readers(pg_url):
    """``readers(catalog, recorder, slot=..., **options)``: a started reader
    of the test's database, stopped after the test; its slots dropped."""
    from twisted.internet import reactor
    made: list[WalReader] = []

    def make(catalog: Catalog, recorder: Recorder, slot: str = "relay", start: bool = True,
             dsn: str | None = None, **options) -> WalReader:
        reader = WalReader(reactor, dsn or pg_url, catalog, slot=slot,
                           deliver=recorder.deliver,
                           on_gap=recorder.on_gap, **{**FAST, **options})
        recorder.reader = reader
        made.append(reader)
        if start:
            reader.start()
        return reader

    yield make
    for reader in made:
        pytest_twisted.blockon(reader.stop())
    drop_slots(pg_url)
