"""Similar views on the PostgreSQL store (postgres/similar.py): the rows
they could show are read into memory once and kept by the feed; answers
equal the in-process store's over the same rows, before and after changes
(a change of a transaction the load's snapshot saw is not applied again)."""
from __future__ import annotations

import random

import pytest_twisted
from twisted.internet import reactor

from pushengine.core.changes import UPSERT, Change
from pushengine.core.positions import Snapshot
from pushengine.postgres.store import PostgresStore
from pushengine.postgres.writer import DEMO_SCHEMA
from pushengine.stores.memory import MemoryStore
from pushengine.views.spec import load_catalog
from tests.postgres.conftest import execute

WORDS = ["кошки", "котик", "собака", "музыка", "cats", "dogs", "music", "news", "live"]


def rows(n: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    return [{"id": i, "title": " ".join(rnd.sample(WORDS, rnd.randint(1, 4))),
             "user_id": rnd.randint(1, 5), "live": rnd.random() < 0.7,
             "public": rnd.random() < 0.9, "created_at": "2026-11-30T10:00:00.000000Z"}
            for i in range(1, n + 1)]


def insert(url: str, objects: list[dict]) -> None:
    import psycopg
    with psycopg.connect(url, autocommit=True) as conn:
        for o in objects:
            conn.execute("INSERT INTO streams (id, title, user_id, live, public, created_at) "
                         "VALUES (%(id)s, %(title)s, %(user_id)s, %(live)s, %(public)s, "
                         "%(created_at)s)", o)


def full(o: dict) -> dict:
    """The object as the table gives it back (every column)."""
    columns = ["id", "title", "user_id", "user_name", "live", "public", "allowed_users",
               "created_at", "ended_at", "duration", "viewers", "thumbnail", "lat", "lon"]
    return {c: o.get(c) for c in columns}


async def answers(store, memory, catalog, text, limit=10):
    spec = catalog.views["SimilarStreamView"]
    values = spec.bind({"text": text}, None, limit).values
    got = await store.query(spec, values, limit)
    expected = []
    memory.query(spec, values, limit).addCallback(expected.extend)
    return [o["id"] for o in got[:limit]], [o["id"] for o in expected[:limit]]


@pytest_twisted.ensureDeferred
async def test_answers_equal_the_in_process_store_before_and_after_changes(pg_url):
    execute(pg_url, DEMO_SCHEMA)
    objects = rows(300, 1)
    insert(pg_url, objects)
    catalog = load_catalog(None)
    store = PostgresStore(reactor, pg_url, catalog, pool_size=2)
    await store.start()
    memory = MemoryStore({"Stream": "id"})
    memory.index_views(catalog.views.values())
    memory.apply_changes([Change("Stream", UPSERT, o["id"], full(o)) for o in objects])
    spec = catalog.views["SimilarStreamView"]
    store.hold(spec)
    memory.hold(spec)
    try:
        for text in ("кошки котик", "cats dogs music", "news live"):
            got, expected = await answers(store, memory, catalog, text)
            assert got == expected and got, text
        loaded = store.similar["Stream"]
        shown = sum(1 for o in objects if o["live"] and o["public"])
        assert loaded.health() == {"rows": shown, "loaded": True}
        # changes after the load: one of a transaction the snapshot saw (not
        # applied again: it would take the row back), others that are new
        snapshot = loaded.snapshot
        assert snapshot is not None
        old = full(dict(objects[0], title="old title", live=True, public=True))
        store.apply_changes([Change("Stream", UPSERT, 1, old, xid=snapshot.xmin - 1)])
        changed = []
        for o in objects[1:60]:
            new = full(dict(o, live=not o["live"], title=o["title"] + " кошки"))
            changed.append(Change("Stream", UPSERT, o["id"], new, xid=snapshot.xmax + 5))
        store.apply_changes(changed)
        memory.apply_changes(changed)
        for text in ("кошки котик", "cats dogs music", "кошки"):
            got, expected = await answers(store, memory, catalog, text)
            assert got == expected, text
        assert loaded.memory.objects["Stream"].get(1, {}).get("title") != "old title"
        # a row that can no longer be shown leaves memory
        hidden = [c.id for c in changed if not (c.obj["live"] and c.obj["public"])]
        assert hidden and not set(hidden) & set(loaded.memory.objects["Stream"])
    finally:
        store.stop()
