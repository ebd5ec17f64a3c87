"""The PostgreSQL store answers exactly what the in-process store answers
for the same rows (SPEC 20), over random rows and random views of every
operator: hypothesis against a real PostgreSQL, the in-process store as the
oracle. Both stores see the same objects: the rows are read back through
``row_object`` and seeded into the in-process store."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pushengine.core.changes import UPSERT, Change
from pushengine.postgres.rows import Column, row_object
from pushengine.postgres.store import PostgresStore
from pushengine.stores.memory import MemoryStore
from pushengine.views.spec import BoundView, ViewDefinitionError, parse_catalog
from tests.postgres.conftest import execute

TABLE = """
CREATE TABLE items (
    id bigint PRIMARY KEY,
    title text,
    tag varchar(20),
    user_id bigint,
    live boolean,
    public boolean,
    views integer,
    score double precision,
    price numeric(10, 2),
    created_at timestamptz,
    day date,
    lat double precision,
    lon double precision,
    allowed_users bigint[],
    meta jsonb,
    audience text
)"""
COLUMNS = ["id", "title", "tag", "user_id", "live", "public", "views", "score", "price",
           "created_at", "day", "lat", "lon", "allowed_users", "meta", "audience"]
WORDS = ["кошка", "кошки", "cat", "cats", "dog", "собака", "Котики", "ЁЖ", "a", "zed", "Ä"]
TAGS = ["a", "b", "B", "ä", "z", "", "a b", "10", "9"]

nullable = lambda s: st.one_of(st.none(), s)  # noqa: E731
row = st.fixed_dictionaries({
    "title": nullable(st.lists(st.sampled_from(WORDS), max_size=4).map(" ".join)),
    "tag": nullable(st.sampled_from(TAGS)),
    "user_id": nullable(st.integers(1, 4)),
    "live": nullable(st.booleans()),
    "public": nullable(st.booleans()),
    "views": nullable(st.integers(-3, 3)),
    "score": nullable(st.sampled_from([-1.5, 0.0, 0.5, 1.0, 2.25, 1e10])),
    "price": nullable(st.sampled_from(["0", "1.50", "2", "-3.25", "1.00"])),
    "created_at": nullable(st.sampled_from(
        ["2026-11-30 10:00:00+00", "2026-11-30 10:00:00.5+00", "2026-11-30 12:00:00+02",
         "2025-01-01 00:00:00+00", "2026-11-30 09:59:59.999999+00"])),
    "day": nullable(st.sampled_from(["2026-01-01", "2026-12-31", "2025-06-15"])),
    "lat": nullable(st.sampled_from([55.75, 55.8, 56.5, -10.0, 89.9])),
    "lon": nullable(st.sampled_from([37.6, 37.7, 40.0, 179.9, -179.9])),
    "allowed_users": nullable(st.lists(st.integers(1, 4), max_size=3)),
    "meta": nullable(st.sampled_from(['{"a": 1}', '[1, 2]', '"x"', '1', 'null'])),
    "audience": st.sampled_from([None, None, None, "seg"]),
})

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 4), st.sampled_from(
    [0.5, 1.0, 2.25, -1.5, 1e10]), st.sampled_from(TAGS + WORDS[:3] + [
        "2026-11-30T10:00:00.000000Z", "2026-11-30T10:00:00.500000Z", "2026-11-30T10",
        "2026-01-01", "2026"]))
FIELDS = [c for c in COLUMNS if c not in ("id",)] + ["missing"]


@st.composite
def views(draw):
    where: dict = {}
    for field in draw(st.lists(st.sampled_from(FIELDS), max_size=3, unique=True)):
        op = draw(st.sampled_from(["eq", "in", "ne", "gt", "gte", "lt", "lte"]))
        if op == "eq":
            where[field] = draw(SCALARS)
        elif op == "in":
            where[field] = {"in": draw(st.lists(SCALARS, max_size=4))}
        elif op == "ne":
            where[field] = {"ne": draw(SCALARS)}
        else:
            where[field] = {op: draw(SCALARS.filter(
                lambda v: isinstance(v, (int, float, str)) and not isinstance(v, bool)))}
    extra = draw(st.sampled_from(["none", "none", "visible_to", "has_word", "near"]))
    values: dict = {}
    if extra == "visible_to":
        where["visible_to"] = "$session.user"
        values["session.user"] = draw(st.integers(1, 4))
    elif extra == "has_word":
        where["title"] = {"has_word": draw(st.sampled_from(["кошка", "cat", "собаки", "ёж"]))}
    elif extra == "near":
        where["near"] = {"lat": 55.75, "lon": 37.6, "km": draw(st.sampled_from([1, 10, 300]))}
    order = draw(st.sampled_from(FIELDS + ["id"]))
    descending = draw(st.booleans())
    limit = draw(st.integers(1, 8))
    return where, ("-" if descending else "") + order, limit, values


def catalog(where, order):
    return parse_catalog({"types": {"Item": {"id": "id", "table": "items"}},
                          "views": {"V": {"type": "Item", "where": where, "order": order,
                                          "limit": {"default": 5, "max": 10}}}})


@pytest.fixture(scope="module")
def database(pg_cluster):
    url = pg_cluster.create_database("oracle")
    execute(url, TABLE)
    store = PostgresStore(None, url, catalog({}, "id"), pool_size=1, statement_timeout=10)
    store.pool.open()
    yield url, store
    store.pool.close()


def fill(url, rows):
    import psycopg2
    conn = psycopg2.connect(url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("TRUNCATE items")
        for i, r in enumerate(rows, 1):
            names = ["id", *r]
            cur.execute(f"INSERT INTO items ({', '.join(names)}) VALUES "
                        f"({', '.join(['%s'] * len(names))})", [i, *r.values()])
        cur.execute("SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                    "WHERE attrelid = 'items'::regclass AND attnum > 0 ORDER BY attnum")
        columns = [Column(n, t) for n, t in cur.fetchall()]
        cur.execute(f"SELECT {', '.join(c.name + '::text' for c in columns)} FROM items")
        objects = [row_object(columns, texts) for texts in cur.fetchall()]
    conn.close()
    return objects


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.lists(row, max_size=25), view=views())
def test_same_answer_as_the_in_process_store(database, rows, view):
    url, store = database
    where, order, limit, values = view
    try:
        cat = catalog(where, order)
    except ViewDefinitionError:
        return
    spec = cat.views["V"]
    objects = fill(url, rows)
    memory = MemoryStore({"Item": "id"})
    memory.apply_changes([Change("Item", UPSERT, o["id"], o) for o in objects])
    expected = []
    memory.query(spec, dict(values), limit).addCallback(expected.extend)
    store.catalog = cat
    store.tables = {}
    got = store.read_state(BoundView(spec, dict(values), limit), store.promised(spec, limit))
    assert [o["id"] for o in got[:limit]] == [o["id"] for o in expected[:limit]], (where, order)
    assert got[:limit] == expected[:limit]
    assert got.snapshot is not None


@pytest.mark.parametrize("order", ["title", "tag", "views", "score", "price", "created_at",
                                   "day", "live", "meta", "missing", "id"])
@pytest.mark.parametrize("descending", [False, True])
def test_pages_follow_the_view_order(database, order, descending):
    """A rare match among many rows: the store reads page after page (keyset
    on the order column and the id, nulls included) and still answers what
    the in-process store answers."""
    import random
    url, store = database
    rnd = random.Random(f"{order}{descending}")
    rows = []
    for _ in range(700):
        r = {
            "title": rnd.choice(["cat", "dog", "bird", None]) if rnd.random() > 0.03 else "кошка",
            "tag": rnd.choice(TAGS + [None]), "user_id": rnd.randint(1, 4),
            "live": rnd.choice([True, False, None]), "public": True,
            "views": rnd.choice([None, 1, 2, 3]), "score": rnd.choice([None, 0.5, 1e10]),
            "price": rnd.choice([None, "1.50", "2"]),
            "created_at": rnd.choice([None, "2026-11-30 10:00:00+00", "2025-01-01 00:00:00+00"]),
            "day": rnd.choice([None, "2026-01-01", "2025-06-15"]), "lat": None, "lon": None,
            "allowed_users": None, "meta": rnd.choice([None, '{"a": 1}', "2"]), "audience": None}
        rows.append(r)
    objects = fill(url, rows)
    cat = catalog({"title": {"has_word": "кошки"}}, ("-" if descending else "") + order)
    spec = cat.views["V"]
    memory = MemoryStore({"Item": "id"})
    memory.apply_changes([Change("Item", UPSERT, o["id"], o) for o in objects])
    expected = []
    memory.query(spec, {}, 10).addCallback(expected.extend)
    store.catalog, store.tables = cat, {}
    reads = store.queries
    got = store.read_state(BoundView(spec, {}, 10), 10)
    assert [o["id"] for o in got] == [o["id"] for o in expected[:10]]
    assert len(got) == 10
    if order in ("id", "views", "live"):
        assert store.queries - reads > 1      # matches spread: more than one page
