"""Similar-document views (SPEC section 13): tokens and exact Jaccard, MinHash
signatures as datasketch computes them, the LSH index of the store, routing
by bands, ``_similarity`` order, ``distinct``, and bad input."""
from __future__ import annotations

import json
import random

import pytest
from datasketch import MinHash, MinHashLSH
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from pushengine.core.changes import Change
from pushengine.app.engine import build_engine
from pushengine.stores.memory import MemoryStore
from pushengine.views import similarity
from pushengine.views.conditions import ParamError, ViewDefinitionError
from pushengine.views.operators import OPERATORS
from pushengine.views.operators.similar import SimilarStoreIndex
from pushengine.views.similarity import (
    SimilarityIndex, choose_bands, collision_probability, jaccard, scheme_for, shingler)
from pushengine.views.spec import load_catalog, parse_catalog
from tests.core.helpers import decode, delete, get_events, make_engine, Replica, upsert
from tests.deferreds import fired as result

VOCABULARY = [f"w{i}" for i in range(40)]


def similar_view(threshold=0.5, order="-_similarity", **extra):
    where = {"similar": {"field": "title", "text": "$text", "threshold": threshold, **extra}}
    return {"type": "Stream", "params": ["text", "limit"], "where": where, "order": order,
            "limit": {"default": 5, "max": 50}}


def stream(id_, title, **fields):
    return {"id": id_, "title": title, "public": True, "live": True, **fields}


def subscribe(engine, view, params, limit=None):
    session = engine.sessions.create()
    bound = engine.catalog.views[view].bind(params, None, limit)
    key, state = result(engine.sessions.subscribe(session, bound))
    return session, key, state


def events(engine, session):
    return decode(get_events(engine.sessions, session, 0, None))


# -- tokens and Jaccard ----------------------------------------------------------------

def test_words_are_lower_cased_runs_of_letters_and_digits():
    assert similarity.words("Cats_and DOGS, 2024! Кошки-мышки") == \
        ["cats", "and", "dogs", "2024", "кошки", "мышки"]
    assert shingler().tokens("The cat, the CAT!") == frozenset({"the", "cat"})
    assert shingler(2).tokens("a b c a b") == frozenset({"a b", "b c", "c a"})
    assert shingler(3).tokens("a b") == frozenset()          # shorter than a shingle


def test_stemmed_tokens_are_the_forms_has_word_uses():
    assert shingler(1, True).tokens("Кошки играют") == shingler(1, True).tokens("кошка играла")
    assert shingler(1, True).tokens("cats running") == shingler(1, True).tokens("cat runs")
    assert shingler(1, False).tokens("cats") != shingler(1, False).tokens("cat")
    assert shingler(2, True).tokens("cats running") == shingler(2, True).tokens("cat runs")


def test_jaccard_is_exact():
    a, b = frozenset("abc"), frozenset("bcd")
    assert jaccard(a, b) == 2 / 4
    assert jaccard(a, a) == 1.0
    assert jaccard(a, frozenset()) == 0.0 == jaccard(frozenset(), frozenset())


# -- MinHash and the LSH, as datasketch has them ------------------------------------------

def test_signatures_and_bands_are_datasketchs():
    scheme = scheme_for(1, False, *choose_bands(0.5))
    rng = random.Random(5)
    sets = [frozenset(rng.sample(VOCABULARY, rng.randint(1, 12))) for _ in range(300)]
    sets.append(frozenset(f"t{i}" for i in range(similarity.CHUNK_TOKENS + 10)))  # in steps
    many = scheme.signatures(sets)
    for n, (tokens, row) in enumerate(zip(sets, many)):
        m = MinHash(num_perm=128, seed=1, scheme="affine32")
        m.update_batch([t.encode("utf-8") for t in tokens])
        assert (m.hashvalues == row).all()
        # the bands as datasketch's MinHashLSH hashes them with our hashfunc
        plain = MinHashLSH(num_perm=128, params=(scheme.bands, scheme.rows),
                           hashfunc=scheme.band_hash)
        plain.insert(n, m)
        expected = tuple(plain.keys[n])
        assert scheme.band_keys(row[None, :])[0] == expected
        assert scheme.features(" ".join(sorted(tokens))).bands == expected
        ours = SimilarityIndex(scheme)
        ours.insert(n, m)
        assert ours.bands_of(n) == expected


def test_the_index_answers_as_datasketchs_api():
    scheme = scheme_for(1, False, *choose_bands(0.5))
    ours, plain = SimilarityIndex(scheme), MinHashLSH(num_perm=128, params=(scheme.bands,
                                                                            scheme.rows))
    rng = random.Random(6)
    texts = {i: " ".join(rng.sample(VOCABULARY[:12], rng.randint(2, 6))) for i in range(200)}
    for i, text in texts.items():
        if i % 2:
            ours.insert(i, scheme.minhash(scheme.shingler.tokens(text)))   # datasketch's way
        else:
            ours.insert_bands(i, scheme.features(text).bands)
        plain.insert(i, scheme.minhash(scheme.shingler.tokens(text)))
    for i in range(0, 200, 3):
        ours.remove(i) if i % 2 else ours.discard(i)
        plain.remove(i)
    for text in list(texts.values())[:50]:
        m = scheme.minhash(scheme.shingler.tokens(text))
        assert set(ours.query(m)) == set(plain.query(m)) == \
            ours.query_bands(scheme.features(text).bands)
    assert len(ours) == len(plain.keys)


def test_the_index_refuses_what_datasketchs_refuses():
    scheme = scheme_for(1, False, *choose_bands(0.5))
    ours, m = SimilarityIndex(scheme), scheme.minhash(["a", "b"])
    ours.insert("k", m)
    with pytest.raises(ValueError, match="already exists"):
        ours.insert("k", m)
    with pytest.raises(ValueError, match="length 128, got 64"):
        ours.insert("other", MinHash(num_perm=64, seed=1, scheme="affine32"))
    with pytest.raises(ValueError, match="scheme 'affine32'"):
        ours.query(MinHash(num_perm=128, seed=1, scheme="affine64"))
    ours.remove("k")
    with pytest.raises(ValueError, match="does not exist"):
        ours.remove("k")
    ours.discard("k")                       # discard: quietly
    assert len(ours) == 0 and "k" not in ours


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])   # the same patch each time
@given(ops=st.lists(st.tuples(st.sampled_from(["bands", "minhash", "many", "discard", "remove"]),
                              st.integers(0, 30), st.lists(st.sampled_from(VOCABULARY[:8]),
                                                           min_size=1, max_size=4)),
                    max_size=80))
def test_the_compact_index_keeps_what_datasketchs_keeps(ops, monkeypatch):
    """Inserts, re-inserts and removals, by bands, by datasketch's API and in
    batches, merged into the sorted arrays every few: every query answers as
    datasketch's own MinHashLSH (dict storage) answers."""
    monkeypatch.setattr(similarity, "MERGE_MIN", 3)
    scheme = scheme_for(1, False, *choose_bands(0.3))
    ours = SimilarityIndex(scheme)
    plain = MinHashLSH(num_perm=128, params=(scheme.bands, scheme.rows))
    texts: dict[int, str] = {}
    for op, key, words in ops:
        text = " ".join(words)
        if op in ("discard", "remove"):
            if key in texts:
                del texts[key]
                plain.remove(key)
                ours.discard(key) if op == "discard" else ours.remove(key)
            continue
        if key in texts:
            plain.remove(key)
        texts[key] = text
        plain.insert(key, scheme.minhash(scheme.shingler.tokens(text)))
        if op == "bands":
            ours.insert_bands(key, scheme.features(text).bands)
        elif op == "minhash":
            if key in ours:
                ours.remove(key)
            ours.insert(key, scheme.minhash(scheme.shingler.tokens(text)))
        else:
            ours.insert_many([key], scheme.band_matrix(
                scheme.signatures([scheme.shingler.tokens(text)])))
    assert len(ours) == len(texts)
    for text in set(texts.values()) | {"w0 w1", "w2"}:
        m = scheme.minhash(scheme.shingler.tokens(text))
        assert set(ours.query(m)) == set(plain.query(m)) == \
            ours.query_bands(scheme.features(text).bands)


@pytest.mark.parametrize("threshold", [0.1, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
def test_bands_give_the_recall_promised(threshold):
    bands, rows = choose_bands(threshold)
    assert bands >= 2 and bands * rows <= 128
    assert collision_probability(min(1.0, threshold + 0.1), bands, rows) >= 0.95
    assert collision_probability(min(1.0, threshold + 0.05), bands, rows) >= 0.95
    assert choose_bands(0.5) == (32, 4)


# -- the views file and parameters ------------------------------------------------------

@pytest.mark.parametrize("similar, error", [
    ({"field": "title", "text": "$text", "threshold": 0}, "above 0 and at most 1"),
    ({"field": "title", "text": "$text", "threshold": 1.01}, "above 0 and at most 1"),
    ({"field": "title", "text": "$text", "threshold": -0.5}, "above 0 and at most 1"),
    ({"field": "title", "text": "$text", "threshold": "0.5"}, "above 0 and at most 1"),
    ({"field": "title", "text": "$text", "threshold": True}, "above 0 and at most 1"),
    ({"field": "title", "text": "$text", "threshold": 0.5, "shingle": 0}, "'shingle'"),
    ({"field": "title", "text": "$text", "threshold": 0.5, "shingle": 99}, "'shingle'"),
    ({"field": "title", "text": "$text", "threshold": 0.5, "shingle": 1.5}, "'shingle'"),
    ({"field": "title", "text": "$text", "threshold": 0.5, "stem": "yes"}, "'stem'"),
    ({"field": "title", "threshold": 0.5}, "takes {field, text, threshold}"),
    ({"field": "title", "text": "$text", "threshold": 0.5, "k": 1}, "takes"),
    ({"field": 5, "text": "$text", "threshold": 0.5}, "'field'"),
    ({"field": "title", "text": "", "threshold": 0.5}, "at least one word"),
    ({"field": "title", "text": "one", "threshold": 0.5, "shingle": 2}, "at least 2 words"),
    ({"field": "title", "text": "x" * 2000, "threshold": 0.5}, "at most 1024"),
    ("title", "takes"),
])
def test_bad_similar_conditions_are_explained(similar, error):
    view = {"type": "Stream", "params": ["text"], "where": {"similar": similar}}
    if isinstance(similar, dict) and not str(similar.get("text", "")).startswith("$"):
        view["params"] = []
    with pytest.raises(ViewDefinitionError, match=error.replace("{", r"\{").replace("}", r"\}")):
        parse_catalog({"views": {"V": view}})


def test_similarity_order_needs_a_similar_condition():
    with pytest.raises(ViewDefinitionError, match="order _similarity needs exactly one similar"):
        parse_catalog({"views": {"V": {"type": "S", "order": "-_similarity"}}})
    with pytest.raises(ViewDefinitionError, match="'distinct'"):
        parse_catalog({"views": {"V": {"type": "S", "distinct": {"field": "t"}}}})
    with pytest.raises(ViewDefinitionError, match="threshold"):
        parse_catalog({"views": {"V": {"type": "S", "distinct": {"field": "t",
                                                                  "threshold": 2}}}})


@pytest.mark.parametrize("text, error", [
    ("", "at least one word"), ("   ", "at least one word"), ("?!-", "at least one word"),
    ("x" * 1025, "at most 1024 characters"), (5, "at least one word"), (None, "at least one word"),
    (["a"], "at least one word"),
])
def test_bad_texts_are_refused_at_bind(text, error):
    spec = load_catalog().views["SimilarStreamView"]
    with pytest.raises(ParamError, match=error):
        spec.bind({"text": text}, None, None)


def test_a_text_shorter_than_a_shingle_is_refused():
    catalog = parse_catalog({"views": {"V": similar_view(shingle=3)}})
    with pytest.raises(ParamError, match="at least 3 words .*it has 2"):
        catalog.views["V"].bind({"text": "two words"}, None, None)
    catalog.views["V"].bind({"text": "three words here"}, None, None)


def test_texts_are_bound_as_their_words():
    spec = load_catalog().views["SimilarStreamView"]
    a = spec.bind({"text": "Cats, playing the PIANO!"}, None, 5)
    b = spec.bind({"text": "cats playing the piano"}, None, 5)
    assert a.key == b.key == 'SimilarStreamView(text="cats playing the piano";limit=5)'


def test_the_default_view():
    spec = load_catalog().views["SimilarStreamView"]
    assert spec.method == "stream.subscribe_similar"
    assert spec.params == ["text", "limit"]
    assert spec.order_field == "_similarity" and spec.descending
    (similar,) = [c for c in spec.conditions if c.kind == "similar"]
    assert similar.operand.threshold == 0.5 and similar.field == "title"
    assert spec.index.kind == "similar"
    bound = spec.bind({"text": "cats"}, None, None)
    match = bound.predicate()
    assert match(stream(1, "Cats!"))
    assert not match(stream(1, "Cats!", live=False))
    assert not match(stream(1, "Cats!", public=False))
    assert not match(stream(1, "cats and dogs"))          # 1/3 < 0.5


def test_views_sharing_a_field_share_one_banding():
    catalog = parse_catalog({"views": {
        "A": similar_view(0.9), "B": similar_view(0.5), "C": similar_view(0.7, stem=True)}})
    scheme = {name: catalog.views[name].conditions[0].operand.scheme for name in "ABC"}
    assert scheme["A"] is scheme["B"]
    assert (scheme["A"].bands, scheme["A"].rows) == choose_bands(0.5)
    assert (scheme["C"].bands, scheme["C"].rows) == choose_bands(0.7)
    store = MemoryStore(catalog.id_fields)
    store.index_views(catalog.views.values())
    assert len(store.demands) == 2          # (title, words) and (title, stems) ...
    assert store.type_indexes == {}         # ... kept while a view using them is subscribed
    for name in "ABC":
        store.hold(catalog.views[name])
    assert len(store.type_indexes["Stream"]) == 2


# -- views -------------------------------------------------------------------------------

def test_most_similar_first_with_the_id_breaking_ties():
    engine, _ = make_engine({"V": similar_view(0.3)})
    engine.apply_changes([upsert(stream(i, t)) for i, t in [
        (1, "a b c"), (2, "a b"), (3, "a b"), (4, "a x y z"), (5, "q r s")]])
    _, key, state = subscribe(engine, "V", {"text": "a b"})
    assert [(o["id"], o["_similarity"]) for o in state] == \
        [(3, 1.0), (2, 1.0), (1, 2 / 3)]
    assert key == 'V(text="a b";limit=5)'


def test_changes_move_objects_in_and_out():
    engine, _ = make_engine({"V": similar_view(0.5)})
    session, key, state = subscribe(engine, "V", {"text": "live cats on a piano"})
    assert state == []
    engine.apply_changes([upsert(stream(1, "cats on a piano"))])              # 4/5
    engine.apply_changes([upsert(stream(1, "cats on a piano", viewers=3))])   # no title change
    engine.apply_changes([upsert(stream(1, "dogs in a car"))])                # 1/8: leaves
    engine.apply_changes([upsert(stream(2, "live cats on a piano"))])
    engine.apply_changes([delete(2)])
    got = [(e["action"], e["obj"]["id"], e["obj"].get("_similarity")) for e in events(engine, session)]
    assert got == [("insert", 1, 0.8), ("update", 1, 0.8), ("delete", 1, 0.8),
                   ("insert", 2, 1.0), ("delete", 2, 1.0)]


def test_a_change_that_changes_nothing_shown_sends_nothing():
    engine, _ = make_engine({"V": similar_view(0.5)})
    session, _, _ = subscribe(engine, "V", {"text": "cats"})
    obj = stream(1, "Cats")
    engine.apply_changes([upsert(obj)])
    engine.apply_changes([upsert(dict(obj))])       # redelivered
    assert [e["action"] for e in events(engine, session)] == ["insert"]


def lsh_miss(threshold: float, seed: int = 1) -> tuple[str, str]:
    """Two texts at or above the threshold that share no band."""
    scheme = scheme_for(1, False, *choose_bands(threshold))
    rng = random.Random(seed)
    while True:
        base = rng.sample(VOCABULARY, 6)
        other = base[:4] + rng.sample(VOCABULARY, 2)
        a, b = " ".join(base), " ".join(other)
        j = jaccard(scheme.shingler.tokens(a), scheme.shingler.tokens(b))
        if j >= threshold and not similarity.shares_band(scheme.features(a).bands,
                                                         scheme.features(b).bands):
            return a, b


@pytest.mark.parametrize("indexed", [False, True])
def test_a_pair_the_lsh_misses_is_missed_everywhere_alike(indexed):
    """Recall is the LSH's; the view, its initial state (scan or index) and
    its routing agree on what it shows."""
    a, b = lsh_miss(0.5)
    engine, _ = make_engine({"V": similar_view(0.5)})
    if indexed:
        engine.store.index_views(engine.catalog.views.values())
    engine.apply_changes([upsert(stream(1, b))])
    session, _, state = subscribe(engine, "V", {"text": a})
    assert state == []
    engine.apply_changes([upsert(stream(2, b)), upsert(stream(3, a))])
    assert [(e["action"], e["obj"]["id"]) for e in events(engine, session)] == [("insert", 3)]


def test_a_change_reaches_only_the_views_sharing_a_band(monkeypatch):
    engine, _ = make_engine({"V": similar_view(0.5)})
    rng = random.Random(2)
    texts = {" ".join(rng.sample(VOCABULARY, rng.randint(2, 6))) for _ in range(1500)}
    for text in texts:
        subscribe(engine, "V", {"text": text})
    offered = []
    from pushengine.views import query as query_module
    original = query_module.Query.upsert

    def spy(self, id_, obj):
        offered.append(self.bound.values["text"])
        return original(self, id_, obj)
    monkeypatch.setattr(query_module.Query, "upsert", spy)
    scheme = engine.catalog.views["V"].conditions[0].operand.scheme
    title = "w1 w2 w3 w4"
    engine.apply_changes([upsert(stream(1, title))])
    sharing = {t for t in texts if similarity.shares_band(scheme.features(t).bands,
                                                          scheme.features(title).bands)}
    assert set(offered) == sharing and len(offered) == len(sharing)
    assert len(sharing) < len(texts) / 10
    similar = {t for t in texts if jaccard(scheme.shingler.tokens(t),
                                           scheme.shingler.tokens(title)) >= 0.5}
    assert similar & sharing == {t for t in similar if t in sharing}
    # the views that show it get it again when it changes; it leaves those
    offered.clear()
    engine.apply_changes([upsert(stream(1, "nothing like it"))])
    holding = {q.bound.values["text"] for q in engine.registry.holders.get(("Stream", 1), ())}
    assert holding == set()
    assert set(offered) >= {t for t in sharing if jaccard(scheme.shingler.tokens(t),
                                                          scheme.shingler.tokens(title)) >= 0.5}


# -- the store's index ----------------------------------------------------------------------

def big_store(n=20_000, seed=3):
    catalog = parse_catalog({"views": {"V": similar_view(0.5), "All": {"type": "Stream"}}})
    clock = Clock()
    store = MemoryStore(catalog.id_fields, clock=clock)
    store.index_views(catalog.views.values())
    store.hold(catalog.views["V"])          # as a subscription to V does
    rng = random.Random(seed)
    vocabulary = [f"v{i}" for i in range(2000)]
    objs = [stream(i, " ".join(rng.sample(vocabulary, rng.randint(3, 8)))) for i in range(n)]
    store.apply_changes([upsert(o) for o in objs])
    return catalog, store, clock, objs


def brute(store, spec, text):
    bound = spec.bind({"text": text}, None, None)
    match, value = bound.predicate(), bound.computed()["_similarity"]
    found = [o for o in store.objects["Stream"].values() if match(o)]
    found.sort(key=lambda o: (value(o), o["id"]), reverse=True)
    return found


def ask(store, spec, text, limit=10, wait=True):
    """The answer of a query; with ``wait``, after the store's turns it needs."""
    answers = []
    store.query(spec, spec.bind({"text": text}, None, limit).values, limit) \
        .addBoth(answers.append)
    while wait and not answers and store.clock is not None:
        store.clock.advance(0.01)
    return answers


def test_an_initial_state_comes_from_the_index_without_a_scan():
    """A text with few candidates (at most a quarter of the store's
    ``small``) is answered at once, from the index."""
    catalog, store, clock, objs = big_store()
    spec = catalog.views["V"]
    (index,) = store.type_indexes["Stream"].values()
    assert isinstance(index, SimilarStoreIndex) and len(index) == len(objs)
    for o in objs[:200:7]:
        answers = ask(store, spec, o["title"], wait=False)
        assert answers, "answered at once"
        assert store.turns == 0 and store.scanning == 0 and store.examined == 0
        assert answers[0] == brute(store, spec, o["title"])[:store.answer_max]
        assert answers[0][0]["id"] == o["id"]


def test_the_index_follows_inserts_updates_and_deletes():
    catalog, store, clock, objs = big_store(2_000)
    spec = catalog.views["V"]
    (index,) = store.type_indexes["Stream"].values()
    text = "brand new words here"
    assert ask(store, spec, text)[0] == []
    store.apply_changes([upsert(stream(1, text))])              # re-hashed
    assert [o["id"] for o in ask(store, spec, text)[0]] == [1]
    assert [o["id"] for o in ask(store, spec, objs[1]["title"])[0]] == []
    store.apply_changes([upsert(stream(1, text, viewers=5))])   # same title: same bands
    assert ask(store, spec, text)[0][0]["viewers"] == 5
    store.apply_changes([upsert(stream(1, None))])              # no title: out of the index
    assert ask(store, spec, text)[0] == [] and 1 not in index.objects
    store.apply_changes([upsert(stream(1, text)), delete(1)])
    assert ask(store, spec, text)[0] == [] and 1 not in index.lsh.keys
    for o in objs[2:300]:
        assert ask(store, spec, o["title"])[0] == brute(store, spec, o["title"])


def test_a_change_re_hashes_one_object(monkeypatch):
    catalog, store, clock, objs = big_store(2_000)
    (index,) = store.type_indexes["Stream"].values()
    computed = []
    original = index.scheme._features
    monkeypatch.setattr(index.scheme, "features",
                        lambda text: computed.append(text) or original(text))
    monkeypatch.setattr(index.scheme, "features_many",
                        lambda texts: pytest.fail("a batch of one hashed as many"))
    store.apply_changes([upsert(stream(5, "one new title"))])
    assert computed == ["one new title"]


# -- distinct -------------------------------------------------------------------------------

DISTINCT = {"D": {"type": "Stream", "params": ["limit"], "where": {"live": True},
                  "distinct": {"field": "title", "threshold": 0.6},
                  "order": "-score", "limit": {"default": 3, "max": 10}}}


def test_distinct_hides_near_duplicates_and_shows_them_again():
    engine, _ = make_engine(DISTINCT)
    engine.apply_changes([upsert(stream(i, t, score=s)) for i, t, s in [
        (1, "cats on a piano", 9), (2, "Cats on a piano!", 8), (3, "dogs in a car", 7),
        (4, "cats on the piano", 6), (5, "birds", 5)]])
    session, key, state = subscribe(engine, "D", {})
    assert [o["id"] for o in state] == [1, 3, 5]          # 2 and 4 are like 1
    replica = Replica(state, "-score", 3)
    engine.apply_changes([delete(1)])                     # 2 shows again; 4 is like 2
    engine.apply_changes([upsert(stream(2, "a new title", score=8))])   # 4 shows again
    for e in events(engine, session):
        replica.apply(e)
    assert [o["id"] for o in replica.ordered()] == [2, 3, 4]


def test_distinct_is_greedy_down_the_order():
    engine, _ = make_engine(DISTINCT)
    # a ~ b and b ~ c, but a and c differ: b is hidden, c shown
    engine.apply_changes([upsert(stream(1, "a b c d e", score=3)),
                          upsert(stream(2, "a b c d x", score=2)),
                          upsert(stream(3, "a b c x y", score=1))])
    _, _, state = subscribe(engine, "D", {})
    assert [o["id"] for o in state] == [1, 3]


def test_distinct_reads_more_when_a_partial_answer_hides_too_many():
    engine, clock = make_engine(DISTINCT)
    engine.store.promised = lambda view, limit: limit
    engine.apply_changes([upsert(stream(i, "same title", score=100 - i)) for i in range(20)])
    engine.apply_changes([upsert(stream(100 + i, f"unique{i} words here", score=i))
                          for i in range(3)])
    _, _, state = subscribe(engine, "D", {})
    assert [o["id"] for o in state] == [0, 102, 101]


def test_similar_with_distinct_over_http_like_flow():
    catalog = load_catalog()
    clock = Clock()
    store = MemoryStore(catalog.id_fields, clock=clock)
    store.index_views(catalog.views.values())
    engine = build_engine(clock, catalog, store)
    engine.apply_changes([Change("Stream", "upsert", 1, stream(1, "Cats playing piano"))])
    session, key, state = subscribe(engine, "SimilarStreamView", {"text": "cats playing piano"})
    assert [o["_similarity"] for o in state] == [1.0]
    engine.apply_changes([Change("Stream", "upsert", 1, stream(1, "Cats playing piano",
                                                                live=False))])
    assert json.loads(get_events(engine.sessions, session, 0, None))[0]["action"] == "delete"


def test_every_operator_is_registered_once():
    assert list(OPERATORS)[:8] == ["eq", "in", "ne", "gt", "gte", "lt", "lte", "has_word"]
    assert {"near", "visible_to", "similar"} <= set(OPERATORS)
