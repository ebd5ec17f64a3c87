"""The hand-off between a view's initial state and the WAL is exact (SPEC 20).

A node's engine reads its views from PostgreSQL and follows the WAL itself
(``PostgresStore`` + ``WalFeed``) while another thread commits random
inserts, updates (a version that only grows, the view's group and rank)
and deletes. Sessions subscribe all along, and the feed is stopped and
started again in the middle (its temporary slot is new: the views are read
again), and held back now and then so that states are read ahead of it.
Every event is checked against the client's copy of its view (an
insert of an absent object, an update whose ``old`` is the copy's and whose
version grows, a delete of a present object, never more than the limit);
at the end every copy must equal what SQL answers for its view."""
from __future__ import annotations

import json
import random
import threading

import psycopg2
import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread

from pushengine.app.engine import build_engine
from pushengine.core.sessions import SessionSettings
from pushengine.postgres.store import PostgresStore
from pushengine.postgres.walfeed import WalFeed
from pushengine.transports.longpoll import LongPolling
from pushengine.views.spec import parse_catalog
from tests.deferreds import eventually
from tests.postgres.conftest import execute

TABLE = ("CREATE TABLE items (id bigint PRIMARY KEY, grp integer, rank integer, "
         "version integer NOT NULL, public boolean NOT NULL DEFAULT true)",
         "ALTER TABLE items REPLICA IDENTITY FULL")
VIEWS = {
    "types": {"Item": {"id": "id", "table": "items"}},
    "views": {"Top": {"type": "Item", "method": "item.top", "params": ["grp", "limit"],
                      "where": {"grp": "$grp", "public": True}, "order": "-rank",
                      "limit": {"default": 4, "max": 10}},
              "Low": {"type": "Item", "method": "item.low", "params": ["limit"],
                      "where": {"public": True}, "order": "rank",
                      "limit": {"default": 3, "max": 10}}},
}
GROUPS = 3


class Copy:
    """A client's copy of one view, built from its state and its events."""

    def __init__(self, state: list[dict], limit: int) -> None:
        self.items = {o["id"]: o for o in state}
        self.limit = limit
        self.events = 0

    def apply(self, event: dict) -> None:
        self.events += 1
        action, obj = event["action"], event.get("obj")
        if action == "insert":
            assert obj["id"] not in self.items, f"insert of a present object: {event}"
            self.items[obj["id"]] = obj
        elif action == "update":
            was = self.items.get(obj["id"])
            assert was is not None, f"update of an absent object: {event}"
            assert event["old"] == was, f"old is not the copy's: {event} / {was}"
            assert obj["version"] > was["version"], f"a version went back: {event}"
            self.items[obj["id"]] = obj
        elif action == "delete":
            assert obj["id"] in self.items, f"delete of an absent object: {event}"
            del self.items[obj["id"]]
        elif action == "reset":
            self.items = {o["id"]: o for o in obj}
        assert len(self.items) <= self.limit, "more than the limit"


def writer(url: str, seed: int, count: int, stop: threading.Event) -> int:
    """Commit ``count`` random transactions (blocking, in a thread)."""
    rnd = random.Random(seed)
    conn = psycopg2.connect(url)
    conn.autocommit = False
    done = 0
    with conn.cursor() as cur:
        for _ in range(count):
            if stop.is_set():
                break
            for _ in range(rnd.randint(1, 3)):
                id_ = rnd.randint(1, 40)
                roll = rnd.random()
                if roll < 0.15:
                    cur.execute("DELETE FROM items WHERE id = %s", [id_])
                else:
                    cur.execute(
                        "INSERT INTO items (id, grp, rank, version, public) "
                        "VALUES (%s, %s, %s, 1, %s) ON CONFLICT (id) DO UPDATE SET "
                        "grp = EXCLUDED.grp, rank = EXCLUDED.rank, "
                        "public = EXCLUDED.public, version = items.version + 1",
                        [id_, rnd.randrange(GROUPS), rnd.randint(0, 20), rnd.random() > 0.1])
            conn.commit()
            done += 1
            stop.wait(0.003)         # the pace of the writes, not a wait for a result
    conn.close()
    return done


def sql_view(url: str, name: str, values: dict, limit: int) -> list[dict]:
    conn = psycopg2.connect(url)
    with conn.cursor() as cur:
        if name == "Top":
            cur.execute("SELECT id, grp, rank, version, public FROM items WHERE grp = %s AND "
                        "public ORDER BY rank DESC NULLS LAST, id DESC LIMIT %s",
                        [values["grp"], limit])
        else:
            cur.execute("SELECT id, grp, rank, version, public FROM items WHERE public "
                        "ORDER BY rank ASC NULLS FIRST, id ASC LIMIT %s", [limit])
        rows = cur.fetchall()
    conn.close()
    return [dict(zip(("id", "grp", "rank", "version", "public"), r)) for r in rows]


@pytest.mark.parametrize("seed", [1, 2])
@pytest_twisted.ensureDeferred
async def test_every_event_follows_the_copy_and_every_copy_ends_as_sql(pg_url, seed):
    execute(pg_url, *TABLE)
    catalog = parse_catalog(VIEWS)
    store = PostgresStore(reactor, pg_url, catalog, pool_size=2)
    await store.start()
    engine = build_engine(reactor, catalog, store, SessionSettings(max_queue=100_000))
    polling = LongPolling(engine.sessions, reactor)
    feed = WalFeed(reactor, pg_url, catalog, f"handoff-{seed}", status_interval=0.3,
                   retry=0.2)
    feed.start(engine)
    copies: list[tuple[object, str, str, dict, int, Copy]] = []
    rnd = random.Random(seed)
    stop = threading.Event()
    try:
        await eventually(lambda: feed.health()["up"], what="the feed up")
        writing = deferToThread(writer, pg_url, seed, 400, stop)

        async def subscribe() -> None:
            session = engine.sessions.create()
            name = rnd.choice(["Top", "Top", "Low"])
            spec = catalog.views[name]
            values = {"grp": rnd.randrange(GROUPS)} if name == "Top" else {}
            limit = rnd.randint(2, 5)
            bound = spec.bind(values, None, limit)
            key, state = await engine.sessions.subscribe(session, bound)
            copies.append((session, key, name, values, limit, Copy(state, limit)))

        def drain() -> None:
            for session, key, _, _, _, copy in copies:
                raw = polling.get_events(session, 0, None)
                assert isinstance(raw, (str, bytes)), "a poll with timeout 0 answers at once"
                events = json.loads(raw)
                if events:
                    polling.get_events(session, 0, events[-1]["seq"])   # ack
                for event in events:
                    if event.get("key") == key and event["action"] != "ping":
                        copy.apply(event)

        restarted = False
        while not writing.called:
            # the WAL held back now and then: subscriptions read states newer
            # than what the feed has delivered, whose changes then arrive late
            lagging = rnd.random() < 0.3
            if lagging:
                feed.reader.pause()
            await subscribe()
            if lagging:
                await deferLater(reactor, 0.02, lambda: None)
                await subscribe()
                feed.reader.resume()
            drain()
            if len(copies) >= 8 and not restarted:
                restarted = True
                await feed.stop()
                feed.start(engine)
            await deferLater(reactor, 0.005, lambda: None)
        done = await writing
        assert done == 400
        # everything committed has come through the WAL
        end = _current_lsn(pg_url)
        await eventually(lambda: feed.reader.received_lsn is not None
                         and feed.reader.received_lsn >= end, timeout=30,
                         what="the WAL read to its end")
        await deferLater(reactor, 0.2, lambda: None)
        drain()
        assert len(copies) > 8 and restarted
        checked = 0
        for session, key, name, values, limit, copy in copies:
            expected = sql_view(pg_url, name, values, limit)
            got = sorted(copy.items.values(), key=lambda o: (o["rank"], o["id"]),
                         reverse=name == "Top")
            assert got == expected, (key, got, expected)
            checked += copy.events
        assert checked > 50          # the copies did follow events
    finally:
        stop.set()
        await feed.stop()
        store.stop()


def _current_lsn(url: str) -> int:
    from pushengine.core.positions import parse_lsn
    conn = psycopg2.connect(url)
    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_lsn()::text")
        text = cur.fetchone()[0]
    conn.close()
    return parse_lsn(text)
