"""The WAL reader on a private PostgreSQL cluster with wal_level=logical."""
import pytest
import pytest_twisted

from pushengine.core.changes import Change
from pushengine.core.positions import Snapshot
from pushengine.postgres.rows import Column, row_object
from pushengine.postgres.wal import MappingError, widen_xid
from tests.deferreds import eventually
from tests.postgres.conftest import execute
from tests.postgres.wal_support import (
    STREAMS, Recorder, catalog, readers, slot_confirmed, sql_value, transaction)

__all__ = ["readers"]     # the fixture


# -- 64-bit transaction ids (no database) -------------------------------------

@pytest.mark.parametrize("xid,reference,full", [
    (1000, 1005, 1000),                                  # epoch 0, just below
    (1010, 1005, 1010),                                  # a little above the reference
    (2**32 - 5, (1 << 32) + 10, 2**32 - 5),              # before the wrap, epoch 0
    (3, (1 << 32) - 10, (1 << 32) + 3),                  # just after the wrap, epoch 1
    (7, (5 << 32) + 9, (5 << 32) + 7),
    (2**32 - 1, 100, 2**32 - 1),                         # never below 0
])
def test_widen_xid(xid, reference, full):
    assert widen_xid(xid, reference) == full


# -- changes ------------------------------------------------------------------

async def following(readers, url, *setup, types=None, **options):
    execute(url, *(setup or STREAMS))
    recorder = Recorder()
    reader = readers(catalog(**(types or {"Stream": "streams"})), recorder, **options)
    await eventually(lambda: reader.up, what="the reader streaming")
    return reader, recorder


@pytest_twisted.ensureDeferred
async def test_insert_update_delete(readers, pg_url):
    reader, got = await following(readers, pg_url)
    xid = transaction(pg_url, "INSERT INTO streams VALUES (1, 'cat', 7, '{a,b}')")
    await eventually(lambda: got.changes, what="the insert")
    assert got.changes == [Change("Stream", "upsert", 1,
                                  {"id": 1, "title": "cat", "user_id": 7, "tags": ["a", "b"]},
                                  xid=xid)]
    assert got.transactions[0].xid == xid
    assert Snapshot.parse(sql_value(pg_url, "SELECT pg_current_snapshot()::text")).sees(xid)

    transaction(pg_url, "UPDATE streams SET title = 'dog', user_id = 8 WHERE id = 1")
    await eventually(lambda: len(got.changes) == 2, what="the update")
    update = got.changes[1]
    assert (update.action, update.obj["title"], update.obj["user_id"]) == ("upsert", "dog", 8)
    assert update.was == {"title": "cat", "user_id": 7}

    transaction(pg_url, "DELETE FROM streams WHERE id = 1")
    await eventually(lambda: len(got.changes) == 3, what="the delete")
    delete = got.changes[2]
    assert delete.action == "delete" and delete.id == 1
    assert delete.obj == {"id": 1, "title": "dog", "user_id": 8, "tags": ["a", "b"]}
    health = reader.health()
    assert health["up"] and not health["waiting"] and health["error"] is None
    assert health["received_lsn"] and health["confirmed_lsn"]


@pytest_twisted.ensureDeferred
async def test_an_unchanged_toasted_value_stays_in_the_object(readers, pg_url):
    reader, got = await following(
        readers, pg_url, *STREAMS, "ALTER TABLE streams ADD COLUMN body text",
        "ALTER TABLE streams ALTER COLUMN body SET STORAGE EXTERNAL")
    body = "".join(f"{i:08x}" for i in range(2500))         # 20 KB, stored out of line
    transaction(pg_url, f"INSERT INTO streams (id, title, body) VALUES (1, 'a', '{body}')")
    assert sql_value(pg_url, "SELECT pg_column_size(body) < 100 FROM streams") is False
    transaction(pg_url, "UPDATE streams SET title = 'b' WHERE id = 1")
    await eventually(lambda: len(got.changes) == 2, what="the update")
    assert got.changes[1].obj["title"] == "b" and got.changes[1].obj["body"] == body
    assert got.changes[1].was == {"title": "a"}
    assert got.gaps == 0


@pytest_twisted.ensureDeferred
async def test_a_transaction_keeps_its_order_and_one_xid(readers, pg_url):
    reader, got = await following(readers, pg_url)
    xid = transaction(pg_url, "INSERT INTO streams (id, title) VALUES (1, 'a'), (2, 'b')",
                      "UPDATE streams SET title = 'c' WHERE id = 2",
                      "DELETE FROM streams WHERE id = 1",
                      "INSERT INTO streams (id, title) VALUES (3, 'd')")
    await eventually(lambda: got.transactions, what="the transaction")
    assert len(got.transactions) == 1
    tx = got.transactions[0]
    assert [(c.action, c.id) for c in tx.changes] == [
        ("upsert", 1), ("upsert", 2), ("upsert", 2), ("delete", 1), ("upsert", 3)]
    assert {c.xid for c in tx.changes} == {xid} == {tx.xid}
    assert tx.commit_lsn < tx.end_lsn


@pytest_twisted.ensureDeferred
async def test_concurrent_transactions_arrive_in_commit_order(readers, pg_url):
    import psycopg2
    reader, got = await following(readers, pg_url)
    first, second = psycopg2.connect(pg_url), psycopg2.connect(pg_url)
    try:
        with first.cursor() as a, second.cursor() as b:
            a.execute("INSERT INTO streams (id, title) VALUES (10, 'begun first')")
            a.execute("SELECT pg_current_xact_id()::text::bigint")
            xid_a = a.fetchone()[0]
            b.execute("INSERT INTO streams (id, title) VALUES (11, 'committed first')")
            b.execute("SELECT pg_current_xact_id()::text::bigint")
            xid_b = b.fetchone()[0]
            second.commit()
            first.commit()
    finally:
        first.close()
        second.close()
    await eventually(lambda: len(got.transactions) == 2, what="both transactions")
    assert [t.xid for t in got.transactions] == [xid_b, xid_a]
    assert xid_a < xid_b
    assert [c.id for c in got.changes] == [11, 10]
    assert got.transactions[0].end_lsn <= got.transactions[1].commit_lsn


TYPED = ("CREATE TABLE items (id text PRIMARY KEY, doc json, meta jsonb, nums integer[], "
         "grid numeric[], names text[], at timestamptz, local timestamp, day date, "
         "price numeric(10, 2), big numeric, ratio double precision, ok boolean, "
         "code uuid, nothing text)", "ALTER TABLE items REPLICA IDENTITY FULL")


@pytest_twisted.ensureDeferred
async def test_values_are_the_objects_the_store_reads(readers, pg_url):
    reader, got = await following(readers, pg_url, *TYPED, types={"Item": "items"})
    transaction(pg_url, """INSERT INTO items VALUES (
        'k1', '{"b": [1, 2.5, "x"], "a": null}', '{"z": {"y": true}, "n": 12345678901}',
        '{1,NULL,3}', '{{1.5,2},{3,4}}', '{"a b","c,d","e\\"f",NULL}',
        '2024-02-29 23:59:59.5+05:30', '1999-12-31 23:00:00', '2024-01-02', 12.30,
        123456789012345678901234567890, 0.25, true,
        'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', NULL)""")
    await eventually(lambda: got.changes, what="the insert")
    obj = got.changes[0].obj
    import psycopg2
    conn = psycopg2.connect(pg_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SET TimeZone = 'America/New_York'")      # the store's may differ
            cur.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                        "WHERE attrelid = 'items'::regclass AND attnum > 0 "
                        "AND NOT attisdropped ORDER BY attnum")
            columns = [Column(n, t) for n, t in cur.fetchall()]
            cur.execute("SELECT " + ", ".join(f'"{c.name}"::text' for c in columns)
                        + " FROM items")
            stored = row_object(columns, cur.fetchone())
    finally:
        conn.close()
    assert obj == stored
    assert obj["doc"] == {"b": [1, 2.5, "x"], "a": None}
    assert obj["names"] == ["a b", "c,d", 'e"f', None]
    assert obj["at"] == "2024-02-29T18:29:59.500000Z"
    assert obj["price"] == 12.3 and obj["ok"] is True and obj["nothing"] is None


async def refused(readers, pg_url, *setup) -> str:
    execute(pg_url, *setup)
    reader = readers(catalog(Stream="streams"), Recorder(), start=False)
    with pytest.raises(MappingError) as caught:
        await reader.check()
    return str(caught.value)


@pytest_twisted.ensureDeferred
async def test_refuses_a_table_without_a_primary_key(readers, pg_url):
    text = await refused(readers, pg_url, "CREATE TABLE streams (id bigint, title text)",
                         "ALTER TABLE streams REPLICA IDENTITY FULL")
    assert "public.streams" in text and "no primary key" in text
    assert 'ALTER TABLE "public"."streams" ADD PRIMARY KEY ("id")' in text


@pytest_twisted.ensureDeferred
async def test_refuses_an_id_that_is_not_the_key(readers, pg_url):
    text = await refused(readers, pg_url,
                         "CREATE TABLE streams (id bigint, slug text PRIMARY KEY)",
                         "ALTER TABLE streams REPLICA IDENTITY FULL")
    assert "public.streams" in text and "(slug)" in text and "'id'" in text


@pytest_twisted.ensureDeferred
async def test_refuses_a_table_without_replica_identity_full(readers, pg_url):
    text = await refused(readers, pg_url, "CREATE TABLE streams (id bigint PRIMARY KEY)")
    assert "public.streams" in text and "REPLICA IDENTITY DEFAULT" in text
    assert 'ALTER TABLE "public"."streams" REPLICA IDENTITY FULL' in text


@pytest_twisted.ensureDeferred
async def test_refuses_a_missing_table_and_names_every_problem(readers, pg_url):
    execute(pg_url, "CREATE TABLE users (id bigint PRIMARY KEY)")
    reader = readers(catalog(Stream="streams", User="users"), Recorder(), start=False)
    with pytest.raises(MappingError) as caught:
        await reader.check()
    text = str(caught.value)
    assert "public.streams (type Stream) does not exist" in text
    assert 'ALTER TABLE "public"."users" REPLICA IDENTITY FULL' in text
    # nothing was created for a mapping that cannot be followed
    assert sql_value(pg_url, "SELECT count(*) FROM pg_publication") == 0


@pytest_twisted.ensureDeferred
async def test_a_started_reader_shows_the_refusal_and_starts_once_fixed(readers, pg_url):
    execute(pg_url, "CREATE TABLE streams (id bigint PRIMARY KEY)")
    got = Recorder()
    reader = readers(catalog(Stream="streams"), got)
    await eventually(lambda: reader.health()["error"], what="the refusal")
    assert "REPLICA IDENTITY FULL" in reader.health()["error"] and not reader.up
    execute(pg_url, "ALTER TABLE streams REPLICA IDENTITY FULL")
    await eventually(lambda: reader.up, what="the reader streaming")
    transaction(pg_url, "INSERT INTO streams VALUES (1)")
    await eventually(lambda: got.changes, what="the insert")


@pytest_twisted.ensureDeferred
async def test_check_creates_the_publication_and_adds_missing_tables(readers, pg_url):
    execute(pg_url, *STREAMS, "CREATE TABLE users (id bigint PRIMARY KEY)",
            "ALTER TABLE users REPLICA IDENTITY FULL", 'CREATE PUBLICATION "Pub" FOR TABLE users')
    reader = readers(catalog(Stream="streams", User="users"), Recorder(), start=False,
                     publication="Pub")
    await reader.check()
    tables = sql_value(pg_url, "SELECT string_agg(tablename, ',' ORDER BY tablename) "
                               "FROM pg_publication_tables WHERE pubname = 'Pub'")
    assert tables == "streams,users"
    assert sql_value(pg_url, "SELECT plugin FROM pg_replication_slots "
                             "WHERE slot_name = 'relay'") == "pgoutput"


@pytest_twisted.ensureDeferred
async def test_rows_whose_id_the_engine_cannot_carry_are_skipped(readers, pg_url):
    reader, got = await following(
        readers, pg_url, "CREATE TABLE streams (id text PRIMARY KEY, title text)",
        "ALTER TABLE streams REPLICA IDENTITY FULL")
    transaction(pg_url, "INSERT INTO streams VALUES ('', 'empty id'), ('ok', 'fine')")
    await eventually(lambda: got.transactions, what="the transaction")
    assert [c.id for c in got.changes] == ["ok"]
    assert reader.stats()["skipped_rows"] == 1


@pytest_twisted.ensureDeferred
async def test_truncate_calls_on_gap_after_what_came_before(readers, pg_url):
    reader, got = await following(readers, pg_url)
    transaction(pg_url, "INSERT INTO streams (id) VALUES (1)")
    transaction(pg_url, "TRUNCATE streams")
    transaction(pg_url, "INSERT INTO streams (id) VALUES (2)")
    await eventually(lambda: len(got.changes) == 2, what="the inserts")
    assert got.events == ["tx:1", "tx:0", "gap", "tx:1"]


# -- the slot -------------------------------------------------------------------

@pytest_twisted.ensureDeferred
async def test_the_slot_never_passes_what_was_confirmed(readers, pg_url):
    execute(pg_url, *STREAMS, "CREATE TABLE other (n integer)")
    got = Recorder(auto_confirm=False)
    reader = readers(catalog(Stream="streams"), got)
    await eventually(lambda: reader.up, what="the reader streaming")
    transaction(pg_url, "INSERT INTO streams (id) VALUES (1)")
    await eventually(lambda: got.transactions, what="the first transaction")
    first = got.transactions[0]
    reader.confirm(first.end_lsn)
    await eventually(lambda: slot_confirmed(pg_url, "relay") >= first.end_lsn,
                     what="the first confirmation")
    transaction(pg_url, "INSERT INTO streams (id) VALUES (2)")
    await eventually(lambda: len(got.transactions) == 2, what="the second transaction")
    second = got.transactions[1]
    # WAL that is not for the publication, and several status messages
    for i in range(3):
        transaction(pg_url, f"INSERT INTO other VALUES ({i})")
    sent = reader.status_messages
    await eventually(lambda: reader.status_messages >= sent + 4, what="status messages")
    assert first.end_lsn <= slot_confirmed(pg_url, "relay") < second.end_lsn
    assert reader.health()["confirmed_lsn"] is not None

    reader.confirm(second.end_lsn)
    await eventually(lambda: slot_confirmed(pg_url, "relay") >= second.end_lsn,
                     what="the second confirmation")


@pytest_twisted.ensureDeferred
async def test_a_quiet_publication_does_not_hold_the_wal(readers, pg_url):
    reader, got = await following(readers, pg_url, *STREAMS, "CREATE TABLE other (n integer)")
    transaction(pg_url, "INSERT INTO streams (id) VALUES (1)")
    await eventually(lambda: got.transactions, what="the transaction")
    end = got.transactions[0].end_lsn
    transaction(pg_url, "INSERT INTO other VALUES (1)")
    await eventually(lambda: slot_confirmed(pg_url, "relay") > end,
                     what="the slot moving over WAL that is not published")
    assert got.transactions == [got.transactions[0]]


@pytest_twisted.ensureDeferred
async def test_a_second_reader_waits_and_takes_over(readers, pg_url):
    execute(pg_url, *STREAMS)
    a, b = Recorder(), Recorder(auto_confirm=False)
    first = readers(catalog(Stream="streams"), a)
    await eventually(lambda: first.up, what="the first reader")
    second = readers(catalog(Stream="streams"), b)
    await eventually(lambda: second.health()["waiting"], what="the second reader waiting")
    assert not second.up and "active" in second.health()["error"]
    transaction(pg_url, "INSERT INTO streams (id) VALUES (1)")
    await eventually(lambda: a.changes, what="the first reader's change")
    await eventually(lambda: slot_confirmed(pg_url, "relay") >= a.transactions[0].end_lsn,
                     what="its confirmation")
    await first.stop()
    await eventually(lambda: second.up, what="the second reader taking over")
    assert not second.health()["waiting"] and second.health()["error"] is None
    transaction(pg_url, "INSERT INTO streams (id) VALUES (2)")
    await eventually(lambda: b.changes, what="the second reader's change")
    assert [c.id for c in b.changes] == [2]      # 1 was confirmed: not sent again
    assert b.gaps == 0


@pytest_twisted.ensureDeferred
async def test_a_lost_connection_resumes_from_the_slot(readers, pg_url):
    reader, got = await following(readers, pg_url)
    got.auto_confirm = False
    transaction(pg_url, "INSERT INTO streams (id) VALUES (1)")
    await eventually(lambda: got.changes, what="the first change")
    sql_value(pg_url, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                      "WHERE slot_name = 'relay'")
    transaction(pg_url, "INSERT INTO streams (id) VALUES (2)")
    await eventually(lambda: 2 in [c.id for c in got.changes], what="the change made meanwhile")
    # the unconfirmed change came again: a consumer drops it by position
    assert [c.id for c in got.changes] == [1, 1, 2]
    assert got.transactions[0].end_lsn == got.transactions[1].end_lsn
    assert got.gaps == 0 and reader.stats()["reconnects"] >= 1


@pytest_twisted.ensureDeferred
async def test_a_paused_reader_reads_nothing_until_resumed(readers, pg_url):
    reader, got = await following(readers, pg_url)
    reader.pause()
    assert reader.health()["paused"]
    transaction(pg_url, "INSERT INTO streams (id) VALUES (1)")
    sent = reader.status_messages
    await eventually(lambda: reader.status_messages >= sent + 3, what="status messages")
    assert got.transactions == [] and reader.up
    reader.resume()
    await eventually(lambda: got.changes, what="the change after resuming")


@pytest_twisted.ensureDeferred
async def test_a_database_that_is_down_shows_in_health_and_is_retried(readers, pg_url):
    from tests.services import free_port
    reader = readers(catalog(Stream="streams"), Recorder(),
                     dsn=f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere")
    await eventually(lambda: reader.stats()["reconnects"] >= 2, what="two attempts")
    health = reader.health()
    assert not health["up"] and not health["waiting"]
    assert "127.0.0.1" in health["error"] or "connect" in health["error"]
