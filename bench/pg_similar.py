"""Similar views on PostgreSQL, two ways, on one table (SPEC 13 and 20).

A private PostgreSQL cluster (tests/pgcluster.py) holds ``--rows`` streams
(100,000 by default; bench/pg_initial.py's ``fill``: 20 % live, 90 %
public, titles of three words out of 24). ``SimilarStreamView`` (live public
streams whose title is like a text, threshold 0.5, limit 10) is answered
for ``--queries`` random texts of three of those words, two ways:

(b) the in-process index, as the engine serves it (postgres/similar.py):
    the rows the view could show are read into memory and indexed (MinHash
    LSH) on the first subscription; answers come from memory; the feed's
    changes keep it. Measured through ``PostgresStore`` (a simulated clock
    runs the in-process store's slices back to back): the load (wall and
    CPU), the process's RSS before and after it, the answer time (wall and
    CPU), and the CPU of one change (a new title) through
    ``PostgresStore.apply_changes``, over ``--changes`` changes of rows the
    view shows and as many of any rows. Beside it the naive path: no index,
    every live public row read and checked by the engine (``read_state``
    with the view bound directly).

(a) band hashes in a side table kept by a trigger (a prototype, built here
    to measure it): ``stream_bands (id, band, hash)`` indexed on (band,
    hash) and on id, and a PL/pgSQL trigger on ``streams`` that tokenises
    the title as the engine does, computes a 128-value MinHash with the
    engine's 32-bit affine permutations in bigint arithmetic, cuts it into
    the engine's bands for threshold 0.5 (``choose_bands``) and replaces the
    row's band rows; once with the bands of every row, once of the live
    public rows only (``stream_bands_shown``, as (b) keeps). The token hash
    is md5's first 32 bits and a band's hash md5's first 64 bits of its
    values (md5 is built in; the engine's SHA-1 needs pgcrypto, and its
    fmix32 pre-mix and 64-bit band hash are left out): the same scheme in
    kind, not the engine's signatures. Measured: the backfill, the side
    table's size, the trigger's cost (the CPU of the database's server
    process for the same UPDATE of ``--changes`` titles with the trigger
    and without, and the wall time of single-row UPDATEs), and the answer
    time: the text's bands computed in Python with the same hash, the ids
    and titles of the live public rows sharing a band, exact Jaccard in
    Python, the first 10 rows read whole, all in one snapshot (wall, and the
    CPU of this thread and of the server process).

Every answer is compared with the naive path's (the engine's answer); one
table prints them side by side, with ratios to (b). The database is made
with ``LC_CTYPE C.UTF-8`` so that PostgreSQL's character classes and
``lower()`` take Cyrillic words as the engine does (the collation stays C).

    python bench/pg_similar.py [--rows 100000] [--queries 200] [--changes 10000]
                               [--explain]
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import os
import random
import statistics
import sys
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pg_initial import WORDS, fill  # noqa: E402

VIEW = "SimilarStreamView"
LIMIT = 10
SINGLES = 2_000           # single-row UPDATEs timed per side table (a quarter per kind
                          # of row and with / without the trigger)


def rss_kib() -> int:
    gc.collect()
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def pick(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


def random_text(rnd: random.Random) -> str:
    return " ".join(rnd.sample(WORDS, 3))


# -- (a): the prototype ---------------------------------------------------------------

class Prototype:
    """The band hashes of approach (a), in SQL and, alike, in Python."""

    def __init__(self, threshold: float = 0.5) -> None:
        from pushengine.views.similarity import choose_bands, scheme_for
        self.bands, self.rows = choose_bands(threshold)
        scheme = scheme_for(1, False, self.bands, self.rows)
        a, b = scheme.permutations
        self.a = [int(x) for x in a]
        self.b = [int(x) for x in b]

    def function(self) -> str:
        """The band function: a title's (band, hash) rows."""
        array = lambda values: "'{" + ",".join(map(str, values)) + "}'::bigint[]"  # noqa: E731
        rows = self.rows
        # h * a overflows a bigint when both are 32-bit: h is cut into its
        # high and low 16 bits, (h * a) mod 2^32 =
        # (((h >> 16) * a mod 2^16) << 16) + (h & 65535) * a, mod 2^32. One
        # SQL statement over the permutations is about three times faster
        # than a PL/pgSQL loop over them.
        return f"""
CREATE OR REPLACE FUNCTION stream_title_bands(title text)
RETURNS TABLE (band smallint, hash bigint)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  WITH h AS (
    SELECT DISTINCT ('x' || substr(md5(t), 1, 8))::bit(32)::bigint AS h
      FROM unnest(regexp_split_to_array(lower(title), '[^[:alnum:]]+')) t
     WHERE t <> ''),
  sig AS (
    SELECT p.i, min((((((h.h >> 16) * p.a) & 65535) << 16) + (h.h & 65535) * p.a + p.b)
                    & 4294967295) AS v
      FROM h, unnest({array(self.a)}, {array(self.b)}) WITH ORDINALITY p(a, b, i)
     GROUP BY p.i)
  SELECT ((i - 1) / {rows})::smallint,
         ('x' || substr(md5(string_agg(v::text, ',' ORDER BY i)), 1, 16))::bit(64)::bigint
    FROM sig
   WHERE i <= {self.bands * rows}
   GROUP BY (i - 1) / {rows}
$$"""

    def text_bands(self, text: str) -> list[int]:
        """The bands of a text, as the SQL function computes them."""
        from pushengine.views.similarity import words
        hashes = {int(hashlib.md5(w.encode()).hexdigest()[:8], 16) for w in words(text)}
        if not hashes:
            return []
        sig = [min((h * a + b) & 0xFFFFFFFF for h in hashes) for a, b in zip(self.a, self.b)]
        r = self.rows
        return [int.from_bytes(hashlib.md5(",".join(map(str, sig[k * r:(k + 1) * r]))
                                           .encode()).digest()[:8], "big", signed=True)
                for k in range(self.bands)]


class Variant:
    """One side table and its trigger: ``shown_only`` keeps the bands of the
    rows the view could show (live and public), as (b) does, else of every
    row."""

    def __init__(self, shown_only: bool) -> None:
        self.shown_only = shown_only
        self.table = "stream_bands_shown" if shown_only else "stream_bands"
        self.trigger = f"{self.table}_keep"
        self.label = "(a) live public" if shown_only else "(a) every row"

    SHOWN = "(coalesce({0}.live, false) AND coalesce({0}.public, false))"

    def sql(self) -> list[str]:
        t, shown = self.table, self.SHOWN
        if self.shown_only:
            skip = (f"(NOT {shown.format('OLD')} AND NOT {shown.format('NEW')}) OR "
                    f"(NEW.id = OLD.id AND NEW.title IS NOT DISTINCT FROM OLD.title AND "
                    f"{shown.format('OLD')} = {shown.format('NEW')})")
            keep = f"TG_OP IN ('INSERT', 'UPDATE') AND {shown.format('NEW')}"
            columns = "id, title, live, public"
        else:
            skip = "NEW.id = OLD.id AND NEW.title IS NOT DISTINCT FROM OLD.title"
            keep = "TG_OP IN ('INSERT', 'UPDATE')"
            columns = "id, title"
        return [
            f"DROP TABLE IF EXISTS {t}",
            f"CREATE TABLE {t} (id bigint NOT NULL, band smallint NOT NULL, "
            f"hash bigint NOT NULL)",
            f"""
CREATE OR REPLACE FUNCTION {self.trigger}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND ({skip}) THEN
    RETURN NULL;
  END IF;
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    DELETE FROM {t} WHERE id = OLD.id;
  END IF;
  IF {keep} THEN
    INSERT INTO {t} (id, band, hash)
    SELECT NEW.id, b.band, b.hash FROM stream_title_bands(NEW.title) b;
  END IF;
  RETURN NULL;
END $$""",
            f"CREATE TRIGGER {self.trigger} AFTER INSERT OR DELETE OR UPDATE OF {columns} "
            f"ON streams FOR EACH ROW EXECUTE FUNCTION {self.trigger}()",
            f"ALTER TABLE streams DISABLE TRIGGER {self.trigger}",
        ]

    def backfill(self) -> str:
        where = f" WHERE {self.SHOWN.format('s')}" if self.shown_only else ""
        return (f"INSERT INTO {self.table} (id, band, hash) SELECT s.id, b.band, b.hash "
                f"FROM streams s CROSS JOIN LATERAL stream_title_bands(s.title) b{where}")

    def candidates_sql(self) -> str:
        return f"""
SELECT s.id, s.title FROM streams s
 WHERE s.live AND s.public IS TRUE
   AND s.id IN (SELECT b.id FROM {self.table} b
                  JOIN unnest(%s::smallint[], %s::bigint[]) q(band, hash)
                    ON b.band = q.band AND b.hash = q.hash)
"""

    def raw_candidates_sql(self) -> str:
        return f"""
SELECT count(DISTINCT b.id) FROM {self.table} b
  JOIN unnest(%s::smallint[], %s::bigint[]) q(band, hash) ON b.band = q.band AND b.hash = q.hash
"""


def measure_a(url: str, texts: list[str], rows: int, changes: int, rnd: random.Random,
              explain: bool) -> dict[str, Any]:
    """Both variants: backfill, size, answers (from the filled table), then
    the triggers' costs (which change titles)."""
    import psycopg

    from pushengine.postgres.rows import Column
    from pushengine.postgres.store import COLUMNS_SQL

    proto = Prototype()
    variants = [Variant(False), Variant(True)]
    out: dict[str, Any] = {"bands": proto.bands, "rows_per_band": proto.rows}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(proto.function())
        columns = tuple(Column(n, t) for n, t in conn.execute(COLUMNS_SQL, ["streams"]))
        shown_ids = [i for (i,) in conn.execute(
            "SELECT id FROM streams WHERE live AND public IS TRUE")]
        out["streams_size"] = conn.execute("SELECT pg_total_relation_size('streams')"
                                           ).fetchone()[0]
        for v in variants:
            r: dict[str, Any] = out.setdefault(v.label, {})
            for statement in v.sql():
                conn.execute(statement)
            t0 = time.perf_counter()
            conn.execute(v.backfill())
            t1 = time.perf_counter()
            conn.execute(f"CREATE INDEX {v.table}_band_hash ON {v.table} (band, hash)")
            conn.execute(f"CREATE INDEX {v.table}_id ON {v.table} (id)")
            conn.execute(f"VACUUM ANALYZE {v.table}")
            r["backfill_s"], r["index_s"] = t1 - t0, time.perf_counter() - t1
            r["band_rows"] = conn.execute(f"SELECT count(*) FROM {v.table}").fetchone()[0]
            r["size"], r["heap"] = conn.execute(
                f"SELECT pg_total_relation_size('{v.table}'), pg_relation_size('{v.table}')"
            ).fetchone()
            # the bands SQL keeps are the ones Python computes for the title
            r["checked"] = [_check_bands(conn, proto, v, conn.execute(
                "SELECT id, title, live AND public IS TRUE FROM streams ORDER BY random() "
                "LIMIT 100").fetchall())]
    for v in variants:
        out[v.label].update(answers_a(url, v, proto, columns, texts, explain))
    for v in variants:
        out[v.label].update(trigger_costs(url, v, proto, rows, shown_ids, changes, rnd))
    with psycopg.connect(url, autocommit=True) as conn:
        for v in variants:
            out[v.label]["size_after"] = conn.execute(
                f"SELECT pg_total_relation_size('{v.table}')").fetchone()[0]
    return out


def answers_a(url: str, v: Variant, proto: Prototype, columns: tuple, texts: list[str],
              explain: bool) -> dict[str, Any]:
    """Candidates by band equality, exact Jaccard, the first rows read whole,
    in one snapshot per answer."""
    import psycopg

    from pushengine.postgres.rows import row_object
    from pushengine.views.similarity import jaccard, shingler

    tokens = shingler(1, False).tokens
    select = ", ".join(f'"{c.name}"::text' for c in columns)
    whole = f"SELECT {select} FROM streams WHERE id = ANY(%s::bigint[])"
    candidates_sql = v.candidates_sql()
    band_ids = list(range(proto.bands))
    times: list[float] = []
    sql_times: list[float] = []
    found: list[int] = []
    answers: list[list[int]] = []
    cpu: list[float] = []
    with psycopg.connect(url) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        server = backend_cpu(conn)
        for text in texts:
            t0, c0 = time.perf_counter(), time.thread_time()
            bands = proto.text_bands(text)
            wanted = tokens(text)
            with conn.transaction():
                t1 = time.perf_counter()
                candidates = conn.execute(candidates_sql, [band_ids, bands]).fetchall()
                sql_times.append(time.perf_counter() - t1)
                hits = []
                for id_, title in candidates:
                    if title is None:
                        continue
                    similarity = jaccard(wanted, tokens(title))
                    if similarity >= 0.5:
                        # the view's order: most similar first, then the
                        # larger id (a descending view reverses its whole key)
                        hits.append((-similarity, -id_))
                hits.sort()
                top = [-id_ for _, id_ in hits[:LIMIT]]
                objects = {o["id"]: o for o in (row_object(columns, r) for r in
                                                conn.execute(whole, [top]).fetchall())}
                answer = [objects[i] for i in top if i in objects]
            times.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
            found.append(len(candidates))
            answers.append([o["id"] for o in answer])
        server = (backend_cpu(conn) - server) / len(texts)
        raw = [conn.execute(v.raw_candidates_sql(), [band_ids, proto.text_bands(t)]
                            ).fetchone()[0] for t in texts[:50]]
        conn.rollback()
        if explain:
            plan = conn.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "
                                + candidates_sql, [band_ids, proto.text_bands(texts[0])])
            print(f"{v.label}: the candidate query's plan:")
            for (line,) in plan.fetchall():
                print("    " + line)
            conn.rollback()
    return {"answer": times, "candidate_sql": sql_times, "candidates": found,
            "answers": answers, "raw_candidates": raw,
            "answer_cpu": (statistics.fmean(cpu), server)}


def trigger_costs(url: str, v: Variant, proto: Prototype, rows: int, shown_ids: list[int],
                  changes: int, rnd: random.Random) -> dict[str, Any]:
    """New titles for ``changes`` rows in one UPDATE, and single-row UPDATEs
    (autocommit), with the variant's trigger and without, alternating, other
    rows each time; of rows the view shows and of any rows. Per row, in
    seconds: {kind: {"batch" | "single": {on: mean}}}."""
    import psycopg

    pools = {"shown": shown_ids, "any": list(range(1, rows + 1))}
    cost: dict[str, dict[str, dict[bool, list[float]]]] = {
        kind: {how: {True: [], False: []} for how in ("batch", "batch_cpu", "single")}
        for kind in pools}
    checked: list[str] = []
    update = "UPDATE streams SET title = %s WHERE id = %s"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(update, ["x", 0], prepare=True)
        for round_ in range(2):
            for kind, pool in pools.items():
                for on in ((False, True) if round_ == 0 else (True, False)):
                    conn.execute(f"ALTER TABLE streams {'ENABLE' if on else 'DISABLE'} "
                                 f"TRIGGER {v.trigger}")
                    ids = rnd.sample(pool, min(changes, len(pool)))
                    titles = [random_text(rnd).title() for _ in ids]
                    t0, c0 = time.perf_counter(), backend_cpu(conn)
                    conn.execute("UPDATE streams s SET title = v.t FROM unnest(%s::bigint[], "
                                 "%s::text[]) v(id, t) WHERE s.id = v.id", [ids, titles])
                    cost[kind]["batch"][on].append((time.perf_counter() - t0) / len(ids))
                    cost[kind]["batch_cpu"][on].append((backend_cpu(conn) - c0) / len(ids))
                    if on:
                        checked.append(_check_bands(conn, proto, v, conn.execute(
                            "SELECT id, title, live AND public IS TRUE FROM streams "
                            "WHERE id = ANY(%s::bigint[])", [ids[:50]]).fetchall()))
                    ids = rnd.sample(pool, min(SINGLES // 8, len(pool)))
                    titles = [random_text(rnd).title() for _ in ids]
                    t0 = time.perf_counter()
                    for id_, title in zip(ids, titles):
                        conn.execute(update, [title, id_], prepare=True)
                    cost[kind]["single"][on].append((time.perf_counter() - t0) / len(ids))
        conn.execute(f"ALTER TABLE streams DISABLE TRIGGER {v.trigger}")
    return {"update": {kind: {how: {on: statistics.fmean(x) for on, x in by_on.items()}
                              for how, by_on in hows.items()}
                       for kind, hows in cost.items()},
            "checked_after": checked}


def backend_cpu(conn: Any) -> float:
    """The CPU seconds the connection's server process has used (from /proc:
    the cluster runs on this machine)."""
    with open(f"/proc/{conn.info.backend_pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _check_bands(conn: Any, proto: Prototype, v: Variant,
                 sample: list[tuple[int, str, bool]]) -> str:
    bad = 0
    for id_, title, shown in sample:
        stored = [h for _, h in conn.execute(
            f"SELECT band, hash FROM {v.table} WHERE id = %s ORDER BY band", [id_])]
        expected = proto.text_bands(title or "") if shown or not v.shown_only else []
        bad += stored != expected
    return f"{len(sample) - bad}/{len(sample)}"


# -- (b): the in-process index ----------------------------------------------------------

def measure_b(url: str, texts: list[str], rows: int, changes: int,
              rnd: random.Random) -> dict[str, Any]:
    from twisted.internet.defer import Deferred, succeed
    from twisted.internet.task import Clock

    from pushengine.core.changes import UPSERT, Change
    from pushengine.postgres.rows import row_object
    from pushengine.postgres.store import PROMISE_MIN, PostgresStore
    from pushengine.views.spec import BoundView, load_catalog

    catalog = load_catalog(None)
    spec = catalog.views[VIEW]
    clock = Clock()
    store = PostgresStore(clock, url, catalog, pool_size=1, statement_timeout=60)
    store.pool.open()
    store.load_tables()
    similar = store.similar[spec.type]
    # the rows are read on this thread (not the store's pool) so that the
    # load is timed from here; the SQL and the conversion are the store's
    similar.read_all = lambda bound: succeed(store.read_state(bound, 1 << 62))

    def due() -> bool:
        now = clock.seconds()
        return any(c.getTime() <= now for c in clock.getDelayedCalls())

    def settle(d: Deferred) -> Any:
        box: list[Any] = []
        d.addBoth(box.append)
        while not box and due():       # the store's slices, back to back
            clock.advance(0)
        if not box:
            raise RuntimeError("the answer never came")
        if hasattr(box[0], "raiseException"):
            box[0].raiseException()
        return box[0]

    out: dict[str, Any] = {}
    before = rss_kib()
    t0, c0 = time.perf_counter(), time.process_time()
    store.hold(spec)                  # the first subscription: read, index
    settle(store.query(spec, {"text": texts[0]}, LIMIT))
    out["load_s"] = time.perf_counter() - t0
    out["load_cpu_s"] = time.process_time() - c0
    out["rss_kib"] = (before, rss_kib())
    out["loaded"] = similar.rows
    objects = similar.memory.objects[spec.type]

    times: list[float] = []
    answers: list[list[int]] = []
    sizes: list[int] = []
    cpu: list[float] = []
    for text in texts:
        t0, c0 = time.perf_counter(), time.thread_time()
        state = settle(store.query(spec, {"text": text}, LIMIT))
        times.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
        answers.append([o["id"] for o in list(state)[:LIMIT]])
        sources, _ = similar.memory._candidates(spec, {"text": text}, "id")
        sizes.append(sum(len(b) for b in sources or ()))
    out.update(answer=times, answers=answers, candidates=sizes,
               answer_cpu=(statistics.fmean(cpu), 0.0))

    # the naive path: every live public row read and checked by the engine
    naive: list[float] = []
    exact: list[list[int]] = []
    want = max(LIMIT, spec.limit_max, PROMISE_MIN)
    with store.pool.connection() as conn:
        server = backend_cpu(conn)      # the pool's one connection
    c0 = time.thread_time()
    for text in texts:
        t0 = time.perf_counter()
        state = store.read_state(BoundView(spec, {"text": text}, LIMIT), want)
        naive.append(time.perf_counter() - t0)
        exact.append([o["id"] for o in list(state)[:LIMIT]])
    engine = (time.thread_time() - c0) / len(texts)
    with store.pool.connection() as conn:
        server = (backend_cpu(conn) - server) / len(texts)
    out.update(naive=naive, exact=exact, naive_cpu=(engine, server))

    # a change of one row (a new title) through the store: rows the view
    # shows (each re-hashed), and rows of the whole table (most leave at
    # once: not live, or not public)
    shown = list(objects)
    kinds: dict[str, list[Change]] = {
        "shown": [Change(spec.type, UPSERT, i, {**objects[i], "title": random_text(rnd).title()})
                  for i in (rnd.choice(shown) for _ in range(changes))]}
    info = store.tables[spec.type]
    select = ", ".join(f'"{c.name}"::text' for c in info.columns)
    ids = [rnd.randint(1, rows) for _ in range(changes)]
    with store.pool.connection() as conn:
        by_id = {o["id"]: o for o in (row_object(info.columns, r) for r in conn.execute(
            f"SELECT {select} FROM streams WHERE id = ANY(%s::bigint[])", [ids]).fetchall())}
        conn.rollback()
    kinds["any"] = [Change(spec.type, UPSERT, i, {**by_id[i], "title": random_text(rnd).title()})
                    for i in ids]
    out["update"] = {}
    for kind, batch in kinds.items():
        t0, c0 = time.perf_counter(), time.process_time()
        for change in batch:
            store.apply_changes([change])
        while due():
            clock.advance(0)
        out["update"][kind] = ((time.perf_counter() - t0) / len(batch),
                               (time.process_time() - c0) / len(batch))
    store.pool.close()
    return out


# -- the report --------------------------------------------------------------------------

def agree(answers: list[list[int]], exact: list[list[int]]) -> str:
    return f"{sum(a == e for a, e in zip(answers, exact))}/{len(exact)}"


def report(rows: int, a: dict[str, Any], b: dict[str, Any]) -> None:
    ms = lambda s: f"{s * 1e3:.2f}"           # noqa: E731
    us = lambda s: f"{s * 1e6:.0f}"           # noqa: E731
    mib = lambda n: f"{n / 2 ** 20:.1f}"      # noqa: E731
    ratio: Callable[[float, float], str] = lambda x, y: f"{x / y:.1f}" if y else "-"  # noqa
    median = statistics.median
    every, shown = a["(a) every row"], a["(a) live public"]
    before, after = b["rss_kib"]
    grown = (after - before) * 1024

    def trigger(r: dict, kind: str, how: str) -> float:
        u = r["update"][kind][how]
        return u[True] - u[False]

    def line(name: str, fa: Callable[[dict], float], fb: float | None,
             show: Callable[[float], str], naive: str) -> tuple[str, ...]:
        x, y = fa(every), fa(shown)
        if fb is None:
            return (name, show(x), show(y), "-", "-", "-", naive)
        return (name, show(x), show(y), show(fb), ratio(x, fb), ratio(y, fb), naive)

    b_load = b["load_s"]
    lines = [
        line("answer p50 (ms)", lambda r: pick(r["answer"], .5), pick(b["answer"], .5), ms,
             ms(pick(b["naive"], .5))),
        line("answer p99 (ms)", lambda r: pick(r["answer"], .99), pick(b["answer"], .99), ms,
             ms(pick(b["naive"], .99))),
        ("answer CPU, mean: engine + database (ms)", *(
            f"{r['answer_cpu'][0] * 1e3:.2f} + {r['answer_cpu'][1] * 1e3:.2f}"
            for r in (every, shown, b)),
         ratio(sum(every["answer_cpu"]), sum(b["answer_cpu"])),
         ratio(sum(shown["answer_cpu"]), sum(b["answer_cpu"])),
         f"{b['naive_cpu'][0] * 1e3:.0f} + {b['naive_cpu'][1] * 1e3:.0f}"),
        line("  the candidate SQL, p50 (ms)", lambda r: pick(r["candidate_sql"], .5), None,
             ms, "-"),
        line("candidates per answer (median)", lambda r: median(r["candidates"]),
             median(b["candidates"]), lambda n: f"{n:,.0f}", f"{b['loaded']:,}"),
        ("answers equal to the engine's", agree(every["answers"], b["exact"]),
         agree(shown["answers"], b["exact"]), agree(b["answers"], b["exact"]), "-", "-",
         "(they are)"),
        line("update, a row it shows (us/row)", lambda r: trigger(r, "shown", "batch_cpu"),
             b["update"]["shown"][1], us, "0"),
        line("update, any row (us/row)", lambda r: trigger(r, "any", "batch_cpu"),
             b["update"]["any"][1], us, "0"),
        line("  single-row UPDATE, a row it shows", lambda r: trigger(r, "shown", "single"),
             None, us, "0"),
        line("  single-row UPDATE, any row", lambda r: trigger(r, "any", "single"), None,
             us, "0"),
        line("memory (MiB)", lambda r: r["size"], grown, mib, "0"),
        line("load / backfill (s)", lambda r: r["backfill_s"] + r["index_s"], b_load,
             lambda t: f"{t:.2f}", "-"),
    ]
    print()
    print(f"SimilarStreamView on {rows:,} rows ({b['loaded']:,} live public), threshold 0.5, "
          f"limit {LIMIT}, {len(b['answer'])} texts")
    head = ("", "(a) every row", "(a) live public", "(b) in-process", "every/b", "live/b",
            "naive")
    widths = (40, 13, 15, 14, 7, 7, 10)
    for row in (head, *lines):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(row, widths))))
    print()
    print(f"(a) side table + trigger, band hashes of every row or of the live public rows "
          f"only; {every['band_rows']:,} / {shown['band_rows']:,} band rows ({a['bands']} "
          f"bands of {a['rows_per_band']} values); streams itself "
          f"{mib(a['streams_size'])} MiB.")
    for r, name in ((every, "every row"), (shown, "live public")):
        u = r["update"]
        print(f"  {name}: backfill {r['backfill_s']:.2f} s + indexes {r['index_s']:.2f} s; "
              f"{mib(r['size'])} MiB (heap {mib(r['heap'])}), {mib(r['size_after'])} MiB "
              f"after the updates; per row with / without the trigger: batch CPU "
              + ", ".join(f"{k} {us(u[k]['batch_cpu'][True])} / "
                          f"{us(u[k]['batch_cpu'][False])} us" for k in u)
              + "; batch wall "
              + ", ".join(f"{k} {us(u[k]['batch'][True])} / {us(u[k]['batch'][False])} us"
                          for k in u)
              + "; single-row wall "
              + ", ".join(f"{k} {us(u[k]['single'][True])} / {us(u[k]['single'][False])} us"
                          for k in u)
              + f"; all live public rows sharing a band: median "
              f"{median(r['candidates']):.0f}, all rows: {median(r['raw_candidates']):.0f}; "
              f"bands equal to Python's: {', '.join(r['checked'] + r['checked_after'])}")
    print("  update = CPU of the database's server process per row (the UPDATE with the "
          "trigger minus without, new titles); single-row UPDATE: wall time per autocommit "
          "UPDATE, with minus without")
    print(f"(b) update = CPU per PostgresStore.apply_changes of one change (wall "
          f"{us(b['update']['shown'][0])} / {us(b['update']['any'][0])} us); memory = RSS "
          f"growth over the load, {before / 1024:.1f} -> {after / 1024:.1f} MiB; load = read and "
          f"index on the first subscription, wall {b_load:.2f} s, CPU "
          f"{b['load_cpu_s']:.2f} s; candidates = LSH candidates of a size that can reach "
          f"the threshold")
    print("naive: every live public row read and checked by the engine (read_state with the "
          "view bound directly)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--changes", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--explain", action="store_true",
                        help="print PostgreSQL's plan of (a)'s candidate query")
    args = parser.parse_args()
    import psycopg

    from tests.pgcluster import start_cluster
    cluster = start_cluster()
    try:
        # character classes and lower() for every script (the engine's words
        # are Unicode letters and digits); collation stays C
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE pe_similar TEMPLATE template0 ENCODING 'UTF8' "
                         "LC_COLLATE 'C' LC_CTYPE 'C.UTF-8'")
        url = cluster.dsn("pe_similar")
        started = time.perf_counter()
        fill(url, args.rows)
        print(f"{args.rows:,} rows and indexes in {time.perf_counter() - started:.1f} s")
        rnd = random.Random(args.seed)
        texts = [random_text(rnd) for _ in range(args.queries)]
        started = time.perf_counter()
        b = measure_b(url, texts, args.rows, args.changes, random.Random(args.seed + 1))
        print(f"(b) measured in {time.perf_counter() - started:.1f} s")
        started = time.perf_counter()
        a = measure_a(url, texts, args.rows, args.changes, random.Random(args.seed + 2),
                      args.explain)
        print(f"(a) measured in {time.perf_counter() - started:.1f} s")
        report(args.rows, a, b)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
