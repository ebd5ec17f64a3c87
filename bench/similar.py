"""Benchmark of similar-document views (SPEC section 13), in process.

    python bench/similar.py [--objects 100000] [--views 1000] [--changes 5000]
                            [--queries 300] [--profile] [--json FILE]
    python bench/similar.py --change-cost [--objects 20000] [--changes 2000]
    python bench/similar.py --compare OLD_TREE [--rounds 3] [--objects 20000]

With ``--objects`` stored stream titles (the in-process store and its LSH
index) and ``--views`` live ``SimilarStreamView`` subscriptions (threshold
0.5, one session each):

1. the cost of indexing the corpus (MinHash of every title, LSH insert) and
   the memory it takes;
2. the cost of one subscription (initial state: LSH candidates, exact
   Jaccard, sort), p50 / p99, for texts nobody subscribed to yet;
3. the cost of one change (hash + route + emit, ``Engine.apply_changes`` of
   one message): new titles, title edits (re-hash), other edits, deletes;
4. the recall of the LSH candidate step against exact Jaccard at
   thresholds 0.5, 0.7 and 0.9 (each with the banding a views file with
   that threshold gets), for pairs at least 0.1 above the threshold and at
   the threshold itself; precision is 1 by construction (every shown
   object is checked exactly: verified here too).

Titles: a vocabulary of 20,000 words drawn with Zipf weights, 3 to 10 words
a title, and 30 % of the titles near-copies of an earlier one (one to three
words replaced, dropped or added), so that similar pairs exist at every
level. Everything runs on a simulated clock: no reactor, no HTTP.

``--change-cost``: the CPU time (``time.process_time``) of one change to a
stored stream (a title edited, or another field) with no similar view on the
node, then with one (its first subscription builds the LSH index, timed
too). ``--compare OLD_TREE`` runs that in turn with the code of another
checkout of the project (``--code OLD_TREE``) and with this one, alternating
which goes first, and prints the medians and their ratios.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import random
import statistics
import sys
import time
import tracemalloc
from collections import defaultdict
from typing import Any

HERE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# --code TREE: import the engine from another checkout (the bench's "before")
CODE = os.path.abspath(sys.argv[sys.argv.index("--code") + 1]) if "--code" in sys.argv[:-1] \
    else HERE
sys.path.insert(0, CODE)

from twisted.internet import reactor  # noqa: E402  (never run: a heap of timers)
from twisted.internet.task import Clock  # noqa: E402

from pushengine.core.changes import Change  # noqa: E402
from pushengine.app.engine import build_engine
from pushengine.core.engine import Engine  # noqa: E402
from pushengine.core.sessions import SessionSettings  # noqa: E402
from pushengine.stores.memory import MemoryStore  # noqa: E402
from pushengine.views.similarity import (  # noqa: E402
    choose_bands, jaccard, scheme_for, shares_band)
from pushengine.views.spec import load_catalog  # noqa: E402

VOCABULARY = 20_000
# The cost of an operation is the CPU time of this thread: on a shared machine
# the wall clock also counts the time other processes held the core (a loop of
# 0.3 ms measured a p99 of 28 ms here under a load of 7 on 2 cores).
cost = time.thread_time
# CPU time spent in the cyclic garbage collector so far (a young collection
# walks ~50,000 objects with the node's settings; it lands on whichever
# operation allocates the 50,000th object): reported apart.
GC = [0.0, 0.0]


def _gc_callback(phase: str, info: dict) -> None:
    if phase == "start":
        GC[1] = cost()
    else:
        GC[0] += cost() - GC[1]


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Titles:
    """Zipf-distributed words; some titles near-copies of earlier ones."""

    def __init__(self, seed: int = 13) -> None:
        self.rng = random.Random(seed)
        self.words = [f"w{i}" for i in range(VOCABULARY)]
        weights = [1.0 / (i + 1) for i in range(VOCABULARY)]
        total = sum(weights)
        self.cumulative = []
        acc = 0.0
        for w in weights:
            acc += w / total
            self.cumulative.append(acc)
        self.made: list[str] = []

    def word(self) -> str:
        return self.rng.choices(self.words, cum_weights=self.cumulative)[0]

    def fresh(self) -> str:
        return " ".join(self.word() for _ in range(self.rng.randint(3, 10)))

    def variant(self, title: str) -> str:
        words = title.split()
        for _ in range(self.rng.randint(1, 3)):
            op = self.rng.random()
            if op < 0.4 and len(words) > 1:
                words[self.rng.randrange(len(words))] = self.word()
            elif op < 0.7 and len(words) > 2:
                del words[self.rng.randrange(len(words))]
            else:
                words.insert(self.rng.randrange(len(words) + 1), self.word())
        return " ".join(words)

    def next(self) -> str:
        if self.made and self.rng.random() < 0.3:
            title = self.variant(self.rng.choice(self.made))
        else:
            title = self.fresh()
        self.made.append(title)
        return title


def stream(i: int, title: str, **fields) -> dict:
    return {"id": i, "title": title, "user_id": i % 5000, "live": True, "public": True,
            "created_at": f"2026-11-30T{i % 24:02d}:{i % 60:02d}:00Z", "viewers": i % 100,
            **fields}


def quantiles(samples: list[float], gc_parts: list[float] | None = None) -> dict:
    s = sorted(samples)
    pick = lambda s, q: s[min(len(s) - 1, int(q * len(s)))]  # noqa: E731
    out = {"n": len(s), "mean_ms": statistics.fmean(s) * 1e3, "p50_ms": pick(s, 0.5) * 1e3,
           "p99_ms": pick(s, 0.99) * 1e3, "max_ms": s[-1] * 1e3}
    if gc_parts is not None:
        without = sorted(t - g for t, g in zip(samples, gc_parts))
        out.update({"gc_ms_total": sum(gc_parts) * 1e3,
                    "gc_collections_hit": sum(1 for g in gc_parts if g > 0),
                    "p99_ms_without_gc": pick(without, 0.99) * 1e3,
                    "mean_ms_without_gc": statistics.fmean(without) * 1e3})
    return out


def build(objects: int, titles: Titles) -> tuple[Engine, Clock, dict, dict]:
    catalog = load_catalog()
    # The store's slices run on a Clock advanced by hand (a large answer would
    # take turns); the sessions' timers go to the reactor, never run: its heap
    # is what a node has (a Clock re-sorts all its calls on every callLater).
    clock = Clock()
    store = MemoryStore(catalog.id_fields, clock=clock)
    store.index_views(catalog.views.values())
    engine = build_engine(reactor, catalog, store, SessionSettings(max_queue=10_000_000,
                                                             max_subscriptions=10))
    if hasattr(store, "hold"):
        # the LSH index is kept while a similar view is subscribed: held
        # here as the first subscription does, so that the seed fills it
        store.hold(catalog.views["SimilarStreamView"])
    corpus = {i: titles.next() for i in range(1, objects + 1)}
    changes = [Change("Stream", "upsert", i, stream(i, t)) for i, t in corpus.items()]
    gc.collect()
    before = rss_kib()
    t0 = cost()
    store.apply_changes(changes)     # the seed: one batch, signatures computed together
    seconds = cost() - t0
    gc.collect()
    (index,) = [ix for ix in store.type_indexes["Stream"].values() if hasattr(ix, "lsh")]
    info = {"objects": objects, "seconds": seconds, "per_object_us": seconds / objects * 1e6,
            "rss_kib_store_and_index": rss_kib() - before,
            "bands": index.scheme.bands, "rows": index.scheme.rows}
    return engine, clock, corpus, info


def index_memory(corpus: dict, threshold: float = 0.5) -> dict:
    """The LSH index alone (tracemalloc, without the objects)."""
    from pushengine.views.operators.similar import SimilarStoreIndex
    scheme = scheme_for(1, False, *choose_bands(threshold))
    gc.collect()
    tracemalloc.start()
    index = SimilarStoreIndex("title", scheme)
    objs = [(i, None, {"title": t}) for i, t in corpus.items()]
    base = tracemalloc.get_traced_memory()[0]
    index.move_many(objs)
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    # the object dicts made here are not the index's: subtract them
    mine = sum(sys.getsizeof(o) for _, _, o in objs)
    return {"bytes_per_object": (used - mine) / len(corpus), "mib": (used - mine) / 2**20}


def subscribe(engine: Engine, clock: Clock, text: str, limit: int = 10):
    session = engine.sessions.create()
    bound = engine.catalog.views["SimilarStreamView"].bind({"text": text}, None, limit)
    t0 = cost()
    d = engine.sessions.subscribe(session, bound)
    out: list = []
    d.addBoth(out.append)
    while not out:                  # a scan in slices would need turns
        clock.advance(0)
    elapsed = cost() - t0
    if not isinstance(out[0], tuple) and not isinstance(out[0], list):
        raise RuntimeError(out[0])
    return session, out[0], elapsed


def bench_subscriptions(engine: Engine, clock: Clock, titles: Titles, corpus: dict,
                        views: int) -> tuple[dict, list]:
    rng = random.Random(21)
    ids = list(corpus)
    times, sessions, sizes, gcs = [], [], [], []
    for _ in range(views):
        text = titles.variant(corpus[rng.choice(ids)]) if rng.random() < 0.8 else titles.fresh()
        g0 = GC[0]
        session, (key, state), elapsed = subscribe(engine, clock, text)
        gcs.append(GC[0] - g0)
        times.append(elapsed)
        sizes.append(len(state))
        sessions.append((session, key, text))
    result = quantiles(times, gcs)
    result["views"] = len(engine.registry.queries)
    result["state_size_mean"] = statistics.fmean(sizes)
    result["nonempty"] = sum(1 for s in sizes if s)
    return result, sessions


def bench_changes(engine: Engine, titles: Titles, corpus: dict, count: int,
                  profile: bool) -> dict:
    rng = random.Random(34)
    next_id = max(corpus) + 1
    kinds = defaultdict(list)
    gcs: list[float] = []
    plan = []
    for _ in range(count):
        r = rng.random()
        if r < 0.4:
            title = titles.variant(rng.choice(list(corpus.values())[-5000:])) \
                if rng.random() < 0.5 else titles.next()
            plan.append(("insert", next_id, title))
            corpus[next_id] = title
            next_id += 1
        elif r < 0.7:
            i = rng.choice(list(corpus)[-20000:])
            corpus[i] = titles.variant(corpus[i])
            plan.append(("retitle", i, corpus[i]))
        elif r < 0.9:
            i = rng.choice(list(corpus)[-20000:])
            plan.append(("viewers", i, corpus[i]))
        else:
            i = rng.choice(list(corpus)[-20000:])
            plan.append(("delete", i, None))
            corpus.pop(i)
    profiler = cProfile.Profile() if profile else None
    events_before = engine.sessions.events_out if hasattr(engine.sessions, "events_out") else 0
    queued = lambda: sum(s.log.pending for s in engine.sessions.sessions.values())  # noqa: E731
    q0 = queued()
    if profiler:
        profiler.enable()
    for kind, i, title in plan:
        if kind == "delete":
            c = Change("Stream", "delete", i, {"id": i})
        else:
            c = Change("Stream", "upsert", i, stream(i, title, viewers=rng.randint(0, 999)))
        g0 = GC[0]
        t0 = cost()
        engine.apply_changes([c])
        kinds[kind].append(cost() - t0)
        gcs.append(GC[0] - g0)
    if profiler:
        profiler.disable()
    events = queued() - q0
    in_order = [t for v in kinds.values() for t in v]
    gc_in_order = [gcs[i] for i in _order(plan, kinds)]
    result = {"all": quantiles(in_order, gc_in_order),
              "events_queued": events, "events_per_change": events / count,
              "by_kind": {k: quantiles(v) for k, v in kinds.items()}}
    del events_before
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(25)
        result["profile"] = out.getvalue()
    return result


def _order(plan: list, kinds: dict) -> list[int]:
    """The positions in ``plan`` of the samples as ``kinds`` lists them."""
    by_kind: dict[str, list[int]] = defaultdict(list)
    for i, (kind, _, _) in enumerate(plan):
        by_kind[kind].append(i)
    return [i for kind in kinds for i in by_kind[kind]]


def check_precision(engine: Engine) -> int:
    """Every object every view shows is at or above its threshold, exactly."""
    checked = 0
    for query in engine.registry.queries.values():
        cond = [c for c in query.bound.spec.conditions if c.kind == "similar"][0]
        tokens = cond.operand.scheme.shingler.tokens
        wanted = tokens(query.bound.values["text"])
        for obj in query.objects.values():
            assert jaccard(wanted, tokens(obj["title"])) >= cond.operand.threshold
            assert obj["_similarity"] == jaccard(wanted, tokens(obj["title"]))
            checked += 1
    return checked


def bench_recall(corpus: dict, titles: Titles, queries: int) -> dict:
    """LSH candidates against exact Jaccard over the whole corpus."""
    rng = random.Random(55)
    shingle = scheme_for(1, False, 32, 4).shingler
    tokens = {i: shingle.tokens(t) for i, t in corpus.items()}
    postings: dict[str, list[int]] = defaultdict(list)
    for i, ts in tokens.items():
        for t in ts:
            postings[t].append(i)
    ids = list(corpus)
    texts = [titles.variant(corpus[rng.choice(ids)]) if rng.random() < 0.8
             else corpus[rng.choice(ids)] for _ in range(queries)]
    exact: list[dict[int, float]] = []
    for text in texts:
        q = shingle.tokens(text)
        seen = set()
        for t in q:
            seen.update(postings.get(t, ()))
        exact.append({i: jaccard(q, tokens[i]) for i in seen})
    out = {}
    for threshold in (0.5, 0.7, 0.9):
        bands, rows = choose_bands(threshold)
        scheme = scheme_for(1, False, bands, rows)
        features = dict(zip(corpus, scheme.features_many(list(corpus.values()))))
        from pushengine.views.similarity import SimilarityIndex
        index = SimilarityIndex(scheme)
        for i, f in features.items():
            if f is not None:
                index.insert_bands(i, f.bands)
        above = found_above = at = found_at = candidates = 0
        spent = 0.0
        for text, js in zip(texts, exact):
            t0 = cost()
            qf = scheme.features(text)
            cands = index.query_bands(qf.bands)
            spent += cost() - t0
            candidates += len(cands)
            for i, j in js.items():
                if j >= threshold:
                    at += 1
                    found_at += i in cands
                if j >= min(1.0, threshold + 0.1):
                    above += 1
                    found_above += i in cands
            for i in cands:      # the predicate's band test agrees with the index
                assert shares_band(qf.bands, features[i].bands)
        out[str(threshold)] = {
            "bands": bands, "rows": rows,
            "pairs_at_least_t_plus_0.1": above,
            "recall_t_plus_0.1": found_above / above if above else None,
            "pairs_at_least_t": at, "recall_at_t": found_at / at if at else None,
            "candidates_per_query": candidates / len(texts),
            "query_ms": spent / len(texts) * 1e3}
    return out


def bench_plain_datasketch(corpus: dict, count: int) -> dict:
    """datasketch as it comes, on the first ``count`` titles: a MinHash per
    title (update_batch), MinHashLSH with its dict storage, the same banding."""
    from datasketch import MinHash, MinHashLSH
    scheme = scheme_for(1, False, *choose_bands(0.5))
    titles = list(corpus.values())[:count]
    token_sets = [scheme.shingler.tokens(t) for t in titles]

    def build() -> Any:
        lsh = MinHashLSH(num_perm=scheme.num_perm, params=(scheme.bands, scheme.rows))
        for i, tokens in enumerate(token_sets):
            m = MinHash(num_perm=scheme.num_perm, seed=1, scheme="affine32",
                        permutations=scheme.permutations)
            m.update_batch([t.encode("utf-8") for t in tokens])
            lsh.insert(i, m, check_duplication=False)
        return lsh

    t0 = cost()
    lsh = build()
    spent = cost() - t0
    del lsh
    gc.collect()
    tracemalloc.start()                 # memory: a second build, traced
    base = tracemalloc.get_traced_memory()[0]
    lsh = build()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    t0 = cost()
    for title in titles[:200]:
        m = MinHash(num_perm=scheme.num_perm, seed=1, scheme="affine32",
                    permutations=scheme.permutations)
        m.update_batch([t.encode("utf-8") for t in scheme.shingler.tokens(title)])
        lsh.query(m)
    query = (cost() - t0) / min(200, len(titles))
    return {"titles": len(titles), "per_insert_us": spent / len(titles) * 1e6,
            "bytes_per_title": used / len(titles), "query_ms": query * 1e3}


def bench_change_cost(objects: int, count: int, seed: int = 77) -> dict:
    """The CPU time of one change (``Engine.apply_changes`` of one message) to
    a stored stream with no similar view, then with one similar view."""
    titles = Titles(seed)
    catalog = load_catalog()
    clock = Clock()
    store = MemoryStore(catalog.id_fields, clock=clock)
    store.index_views(catalog.views.values())
    engine = build_engine(reactor, catalog, store, SessionSettings(max_queue=10_000_000))
    corpus = {i: titles.next() for i in range(1, objects + 1)}
    t0 = time.process_time()
    store.apply_changes([Change("Stream", "upsert", i, stream(i, t)) for i, t in corpus.items()])
    seeded = time.process_time() - t0
    gc.collect()
    gc.freeze()
    rng = random.Random(seed)
    ids = list(corpus)

    def changes(kind: str) -> float:
        """Mean µs of ``count`` changes of one kind, each a message of its own."""
        plan = []
        for _ in range(count):
            i = rng.choice(ids)
            if kind == "title":
                corpus[i] = titles.variant(corpus[i])
                plan.append(Change("Stream", "upsert", i, stream(i, corpus[i])))
            else:
                plan.append(Change("Stream", "upsert", i,
                                   stream(i, corpus[i], viewers=rng.randint(0, 999))))
        t0 = time.process_time()
        for c in plan:
            engine.apply_changes([c])
        return (time.process_time() - t0) / count * 1e6

    # each phase after as many changes unmeasured: an index just built (at
    # the seed or for the first subscription) has all its bands merged and
    # takes its first changes for less than later ones
    out: dict[str, Any] = {"objects": objects, "changes": count, "seed_s": seeded}
    changes("title")                # not reported
    out["none"] = {"title_us": changes("title"), "other_us": changes("other")}
    session = engine.sessions.create()
    bound = catalog.views["SimilarStreamView"].bind({"text": titles.variant(corpus[1])},
                                                   None, 10)
    t0 = time.process_time()
    answer: list = []
    engine.sessions.subscribe(session, bound).addBoth(answer.append)
    while not answer:           # the index's build and the scan take turns
        clock.advance(0)
    out["first_subscription_ms"] = (time.process_time() - t0) * 1e3
    changes("title")                # not reported
    out["one"] = {"title_us": changes("title"), "other_us": changes("other")}
    return out


def compare(old: str, rounds: int, objects: int, count: int) -> dict:
    """``--change-cost`` with the code of ``old`` and with this tree, in
    separate processes, alternating which runs first; medians and ratios."""
    import subprocess
    import tempfile
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for r in range(rounds):
        order = [("before", old), ("after", HERE)]
        for name, tree in (order if r % 2 == 0 else order[::-1]):
            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                subprocess.run([sys.executable, os.path.join(HERE, "bench", "similar.py"),
                                "--change-cost", "--objects", str(objects),
                                "--changes", str(count), "--json", f.name, "--code", tree],
                               check=True, stdout=subprocess.DEVNULL)
                runs[name].append(json.load(open(f.name))["change_cost"])
    figures = [("none", "title_us"), ("none", "other_us"), ("one", "title_us"),
               ("one", "other_us")]
    out: dict[str, Any] = {"rounds": rounds, "objects": objects, "changes": count}
    for phase, figure in figures:
        before = statistics.median(r[phase][figure] for r in runs["before"])
        after = statistics.median(r[phase][figure] for r in runs["after"])
        out[f"{phase}.{figure}"] = {"before": before, "after": after, "ratio": after / before,
                                    "before_runs": [r[phase][figure] for r in runs["before"]],
                                    "after_runs": [r[phase][figure] for r in runs["after"]]}
    for figure in ("seed_s", "first_subscription_ms"):
        out[figure] = {name: statistics.median(r[figure] for r in runs[name])
                       for name in runs}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--objects", type=int, default=100_000)
    p.add_argument("--views", type=int, default=1_000)
    p.add_argument("--changes", type=int, default=5_000)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--profile", action="store_true", help="cProfile the changes")
    p.add_argument("--plain", type=int, default=0, metavar="N",
                   help="also index the first N titles with datasketch as it comes")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--wall", action="store_true",
                   help="time operations by the wall clock instead of CPU time")
    p.add_argument("--change-cost", action="store_true",
                   help="only the cost of a change with no similar view, then with one")
    p.add_argument("--compare", metavar="OLD_TREE",
                   help="--change-cost with OLD_TREE's code and this one's, alternating")
    p.add_argument("--rounds", type=int, default=3, help="runs of each with --compare")
    p.add_argument("--code", metavar="TREE", help="import the engine from TREE")
    args = p.parse_args()
    if args.change_cost or args.compare:
        objects = args.objects if "--objects" in sys.argv else 20_000
        count = args.changes if "--changes" in sys.argv else 2_000
        if args.compare:
            result = compare(args.compare, args.rounds, objects, count)
            print(f"{objects:,} stored streams, {count:,} changes of each kind, "
                  f"{args.rounds} runs of each (CPU time, medians):")
            for phase, label in (("none", "no similar view"), ("one", "one similar view")):
                for figure, kind in (("title_us", "title edited"), ("other_us", "other field")):
                    f = result[f"{phase}.{figure}"]
                    print(f"  {label:17s} {kind:13s} before {f['before']:7.1f} µs, "
                          f"after {f['after']:7.1f} µs: x{f['ratio']:.3f}")
            print(f"  seed: before {result['seed_s']['before']:.2f} s, after "
                  f"{result['seed_s']['after']:.2f} s; first similar subscription: before "
                  f"{result['first_subscription_ms']['before']:.1f} ms, after "
                  f"{result['first_subscription_ms']['after']:.1f} ms")
        else:
            result = {"change_cost": bench_change_cost(objects, count)}
            c = result["change_cost"]
            print(f"{objects:,} streams; a change with no similar view: title "
                  f"{c['none']['title_us']:.1f} µs, other field {c['none']['other_us']:.1f} µs; "
                  f"first similar subscription {c['first_subscription_ms']:.1f} ms; with one: "
                  f"title {c['one']['title_us']:.1f} µs, other field {c['one']['other_us']:.1f} µs")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=2)
        return
    global cost
    if args.wall:
        cost = time.perf_counter
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; "
          f"costs are {'wall' if args.wall else 'thread CPU'} time")

    titles = Titles()
    engine, clock, corpus, built = build(args.objects, titles)
    # as a node does once it is built and seeded (pushengine/app/tap.py tune_gc)
    gc.set_threshold(50_000, 20, 100)
    gc.freeze()
    gc.callbacks.append(_gc_callback)
    print(f"indexed {args.objects:,} titles in {built['seconds']:.2f} s "
          f"({built['per_object_us']:.1f} µs each; {built['bands']} bands x "
          f"{built['rows']} rows); store + index RSS +{built['rss_kib_store_and_index'] / 1024:.0f} MiB")
    memory = index_memory(corpus)
    print(f"the LSH index alone: {memory['mib']:.0f} MiB, "
          f"{memory['bytes_per_object']:.0f} bytes per title")

    subs, sessions = bench_subscriptions(engine, clock, titles, corpus, args.views)
    print(f"{args.views:,} subscriptions (initial state): p50 {subs['p50_ms']:.2f} ms, "
          f"p99 {subs['p99_ms']:.2f} ms, max {subs['max_ms']:.2f} ms; "
          f"{subs['state_size_mean']:.1f} objects each on average, {subs['nonempty']} not empty")
    print(f"    garbage collector: {subs['gc_ms_total']:.1f} ms in {subs['gc_collections_hit']} "
          f"subscriptions; p99 without it {subs['p99_ms_without_gc']:.2f} ms")

    changes = bench_changes(engine, titles, corpus, args.changes, args.profile)
    a = changes["all"]
    print(f"{args.changes:,} changes with {subs['views']:,} live similar-views: mean "
          f"{a['mean_ms']:.3f} ms, p50 {a['p50_ms']:.3f} ms, p99 {a['p99_ms']:.3f} ms; "
          f"{changes['events_per_change']:.2f} events per change")
    print(f"    garbage collector: {a['gc_ms_total']:.1f} ms in {a['gc_collections_hit']} "
          f"changes; mean without it {a['mean_ms_without_gc']:.3f} ms, "
          f"p99 {a['p99_ms_without_gc']:.3f} ms")
    for kind, q in changes["by_kind"].items():
        print(f"    {kind:8s} mean {q['mean_ms']:.3f} ms, p99 {q['p99_ms']:.3f} ms ({q['n']})")
    checked = check_precision(engine)
    print(f"precision: {checked:,} shown objects checked, all at or above the threshold")

    recall = bench_recall(corpus, titles, args.queries)
    for t, r in recall.items():
        print(f"threshold {t}: {r['bands']} x {r['rows']}; recall {r['recall_t_plus_0.1']:.4f} "
              f"over {r['pairs_at_least_t_plus_0.1']:,} pairs >= t+0.1, "
              f"{r['recall_at_t']:.4f} over {r['pairs_at_least_t']:,} pairs >= t; "
              f"{r['candidates_per_query']:.1f} candidates per query "
              f"(hash + LSH look-up {r['query_ms']:.3f} ms)")
    plain = None
    if args.plain:
        plain = bench_plain_datasketch(corpus, args.plain)
        print(f"datasketch as it comes, {plain['titles']:,} titles: "
              f"{plain['per_insert_us']:.0f} µs a title (MinHash + insert), "
              f"{plain['bytes_per_title']:.0f} bytes a title, "
              f"{plain['query_ms']:.3f} ms a query (MinHash + look-up)")
    if args.profile:
        print(changes["profile"])
        changes.pop("profile")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"clock": "wall" if args.wall else "thread_time",
                       "load_average": os.getloadavg()[0], "build": built, "index_memory": memory, "subscriptions": subs,
                       "changes": changes, "precision_checked": checked, "recall": recall,
                       "plain_datasketch": plain},
                      f, indent=2)


if __name__ == "__main__":
    main()
