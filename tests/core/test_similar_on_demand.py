"""The LSH index of similar views is kept on demand (SPEC section 13, the
in-process store): only while a similar view using it is subscribed, and
only over the objects such a view could show. A change with no similar
subscriber computes no tokens and no MinHash; a view subscribed late (its
index built from the stored objects, in slices, while changes go on) sees
exactly what a view subscribed from the start sees."""
from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from pushengine.app.engine import build_engine
from pushengine.core.errors import UnknownSession
from pushengine.core.sessions import SessionSettings
from pushengine.stores.memory import MemoryStore
from pushengine.views import similarity
from pushengine.views.operators.similar import SimilarStoreIndex
from pushengine.views.spec import load_catalog, parse_catalog
from tests.core.helpers import Replica, decode, delete, get_events, upsert
from tests.core.test_window_property import (
    SIMILAR_VIEWS, similar_objects_st, similar_truth, texts_st)
from tests.deferreds import fired


def stream(id_: int, title: Any, **fields: Any) -> dict:
    return {"id": id_, "title": title, "public": True, "live": True, **fields}


def node(views: dict | None = None, **options: Any):
    """An engine over an in-process store with a clock, as a node has."""
    clock = Clock()
    catalog = load_catalog() if views is None else parse_catalog({"views": views})
    store = MemoryStore(catalog.id_fields, clock=clock, **options)
    store.index_views(catalog.views.values())
    engine = build_engine(clock, catalog, store, SessionSettings(max_queue=100_000))
    return engine, clock, store


def settle(d, clock: Clock, turns: int = 10_000):
    """The result of ``d`` once the store's turns it needs have run."""
    while not d.called and turns:
        clock.advance(0.001)
        turns -= 1
    return fired(d)


def similar_indexes(store: MemoryStore) -> list[SimilarStoreIndex]:
    return [i for i in store.type_indexes.get("Stream", {}).values()
            if isinstance(i, SimilarStoreIndex)]


def spy(monkeypatch) -> Counter:
    """Counts tokenizing (a text's words) and MinHash (token hashes)."""
    calls: Counter = Counter()
    units, token_hash = similarity.Shingler._units, similarity.token_hash

    def counted_units(self, text):
        calls["tokens"] += 1
        return units(self, text)

    def counted_hash(token):
        calls["minhash"] += 1
        return token_hash(token)
    monkeypatch.setattr(similarity.Shingler, "_units", counted_units)
    monkeypatch.setattr(similarity, "token_hash", counted_hash)
    return calls


def test_a_change_with_no_similar_view_computes_no_features(monkeypatch) -> None:
    engine, clock, store = node(index_linger=0)
    calls = spy(monkeypatch)
    # fresh titles each time: no cache could hide a computation
    engine.apply_changes([upsert(stream(i, f"first title number{i} q{i}")) for i in range(300)])
    engine.apply_changes([upsert(stream(7, "a retitled stream zz7"))])
    engine.apply_changes([delete(8)])
    assert calls == Counter() and similar_indexes(store) == []

    session = engine.sessions.create()
    bound = engine.catalog.views["SimilarStreamView"].bind({"text": "retitled stream"}, None, 10)
    key, state = settle(engine.sessions.subscribe(session, bound), clock)
    assert [o["id"] for o in state] == [7]
    assert calls["tokens"] >= 299 and calls["minhash"] > 0     # built from the stored ones
    assert len(similar_indexes(store)[0]) == 299

    calls.clear()
    engine.apply_changes([upsert(stream(9, "another title ab9"))])
    assert calls["tokens"] and calls["minhash"]                 # kept up to date

    engine.sessions.unsubscribe(session, key)                    # the last similar view
    assert similar_indexes(store) == []
    calls.clear()
    engine.apply_changes([upsert(stream(i, f"later title cd{i}")) for i in range(5)])
    engine.apply_changes([delete(9)])
    assert calls == Counter()


def test_a_session_that_ends_releases_the_index_after_the_linger() -> None:
    engine, clock, store = node(index_linger=30)
    engine.apply_changes([upsert(stream(1, "cats on a piano"))])
    bound = engine.catalog.views["SimilarStreamView"].bind({"text": "cats piano"}, None, 10)
    first = engine.sessions.create()
    settle(engine.sessions.subscribe(first, bound), clock)
    assert store.builds == 1
    engine.sessions.destroy(first)                               # as when it expires
    clock.advance(29)
    assert len(similar_indexes(store)) == 1                      # kept a while ...
    again = engine.sessions.create()
    key, state = settle(engine.sessions.subscribe(again, bound), clock)
    assert store.builds == 1 and [o["id"] for o in state] == [1]  # ... and used again
    engine.sessions.unsubscribe(again, key)
    clock.advance(30.5)
    assert similar_indexes(store) == []


def test_an_object_no_similar_view_can_show_is_not_indexed() -> None:
    """SimilarStreamView shows live public streams: the index holds those
    only, whether it was built from the store or follows changes."""
    engine, clock, store = node(index_linger=0)
    shown = stream(1, "cats on a piano")
    hidden = [stream(2, "cats on a piano", live=False),
              stream(3, "cats on a piano", public=False),
              stream(4, "cats on a piano", audience="vip"),
              stream(5, None)]
    engine.apply_changes([upsert(o) for o in [shown, *hidden]])
    bound = engine.catalog.views["SimilarStreamView"].bind({"text": "cats piano"}, None, 10)
    session = engine.sessions.create()
    key, state = settle(engine.sessions.subscribe(session, bound), clock)
    (index,) = similar_indexes(store)
    assert set(index.objects) == {1} and set(index.tokens) == {1} and len(index.lsh) == 1
    assert [o["id"] for o in state] == [1]

    engine.apply_changes([upsert(stream(6, "cats on the piano", live=False)),
                          upsert(stream(1, "cats on a piano", live=False)),
                          upsert(stream(2, "cats on a piano"))])
    assert set(index.objects) == {2} and 1 not in index.lsh.keys
    events = decode(get_events(engine.sessions, session, 0, None))
    assert [(e["action"], e["obj"]["id"]) for e in events] == [("delete", 1), ("insert", 2)]


def test_views_sharing_an_index_keep_what_any_of_them_could_show() -> None:
    views = {"Like": SIMILAR_VIEWS["Like"], "LikeLive": SIMILAR_VIEWS["LikeLive"]}
    engine, clock, store = node(views, index_linger=0)
    engine.apply_changes([upsert(stream(1, "cat dog", live=False)),
                          upsert(stream(2, "cat dog", public=False))])
    session = engine.sessions.create()
    bound = engine.catalog.views["LikeLive"].bind({"text": "cat dog"}, None, 3)
    settle(engine.sessions.subscribe(session, bound), clock)
    (index,) = similar_indexes(store)
    assert set(index.objects) == {1}        # Like could show it; no view the private one


def test_a_view_subscribed_during_a_build_waits_for_it_and_misses_nothing() -> None:
    engine, clock, store = node(index_linger=0, build_at_once=0)
    engine.apply_changes([upsert(stream(i, f"w{i % 50} w{i % 7} w{i % 11}")) for i in range(2_000)])
    view = engine.catalog.views["SimilarStreamView"]
    session = engine.sessions.create()
    d = engine.sessions.subscribe(session, view.bind({"text": "w3 w3 w3"}, None, 50))
    assert not d.called and store.scanning == 1                    # built in slices
    # changes while it is built: a new one, a retitled one, a deleted one
    engine.apply_changes([upsert(stream(5_000, "w3 w3")), upsert(stream(3, "nothing alike")),
                          delete(53)])
    clock.advance(0.001)
    engine.apply_changes([upsert(stream(103, "w3 w0"))])
    other = engine.sessions.create()
    d2 = engine.sessions.subscribe(other, view.bind({"text": "w3 w3 w0"}, None, 50))
    _, state = settle(d, clock)
    _, state2 = settle(d2, clock)
    assert store.turns > 1 and store.builds == 1
    for text, got, who in (("w3 w3 w3", state, session), ("w3 w3 w0", state2, other)):
        replica = Replica(got, "-_similarity", 50)
        for e in decode(get_events(engine.sessions, who, 0, None)):
            replica.apply(e)
        bound = view.bind({"text": text}, None, 50)
        match, value = bound.predicate(), bound.computed()["_similarity"]
        truth = sorted((o for o in store.objects["Stream"].values() if match(o)),
                       key=lambda o: (value(o), o["id"]), reverse=True)[:50]
        assert [(o["id"], o["_similarity"]) for o in replica.ordered()] == \
            [(o["id"], value(o)) for o in truth]
    assert 5_000 in {o["id"] for o in state} and 3 not in {o["id"] for o in state}


# -- a view subscribed late sees what one subscribed from the start sees -----------------

LATE_VIEWS = ["Like", "LikeLive", "Pairs", "LikeDistinct"]
late_ops_st = st.lists(st.one_of(
    st.tuples(st.just("upsert"), similar_objects_st),
    st.tuples(st.just("delete"), st.integers(0, 9)),
    st.tuples(st.just("subscribe"), st.tuples(st.sampled_from(LATE_VIEWS), texts_st,
                                              st.integers(1, 4))),
    st.tuples(st.just("unsubscribe"), st.integers(0, 7)),
    st.tuples(st.just("expire"), st.integers(0, 7)),
    st.tuples(st.just("turn"), st.sampled_from([0.001, 0.5, 2.0])),
), min_size=1, max_size=40)


class Client:
    def __init__(self, engine, view: str, text: str, limit: int) -> None:
        self.engine, self.view, self.params, self.limit = engine, view, {"text": text}, limit
        self.session = engine.sessions.create()
        bound = engine.catalog.views[view].bind(self.params, None, limit)
        self.pending = engine.sessions.subscribe(self.session, bound)
        self.key: str | None = None
        self.replica: Replica | None = None

    def catch_up(self) -> bool:
        """Whether subscribed: its copy up to date with its events."""
        if self.replica is None:
            if not self.pending.called:
                return False
            self.key, state = fired(self.pending)
            self.replica = Replica(state, SIMILAR_VIEWS[self.view]["order"], self.limit)
        for e in decode(get_events(self.engine.sessions, self.session, 0, None)):
            assert e["key"] == self.key
            self.replica.apply(e)
        return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.lists(similar_objects_st, max_size=10), ops=late_ops_st,
       at_once=st.sampled_from([0, 3, 1_000]), linger=st.sampled_from([0, 1.0]))
def test_a_view_subscribed_late_sees_what_one_subscribed_from_the_start_sees(
        seed, ops, at_once, linger) -> None:
    # the reference: every view the ops subscribe, subscribed before anything
    early, early_clock, _ = node(SIMILAR_VIEWS)
    reference: dict[tuple, Client] = {}
    for op, arg in ops:
        if op == "subscribe" and arg not in reference:
            reference[arg] = Client(early, *arg)
            assert reference[arg].catch_up()
    late, clock, store = node(SIMILAR_VIEWS, build_at_once=at_once, index_linger=linger)
    objects: dict = {}
    clients: list[Client] = []
    abandoned: list = []

    def change(changes) -> None:
        early.apply_changes(changes)
        late.apply_changes(changes)

    def check() -> None:
        for ref in reference.values():
            ref.catch_up()
        for client in clients:
            if client.catch_up():
                arg = (client.view, client.params["text"], client.limit)
                truth = similar_truth(client.view, client.params, objects, client.limit)
                assert reference[arg].replica.ordered() == truth, arg
                assert client.replica.ordered() == truth, arg

    for o in seed:
        objects[o["id"]] = o
    change([upsert(o) for o in seed])
    for op, arg in ops:
        if op == "upsert":
            objects[arg["id"]] = arg
            change([upsert(arg)])
        elif op == "delete":
            objects.pop(arg, None)
            change([delete(arg)])
        elif op == "subscribe":
            clients.append(Client(late, *arg))
        elif op in ("unsubscribe", "expire") and clients:
            client = clients.pop(arg % len(clients))
            if not client.catch_up():
                late.sessions.destroy(client.session)   # gone before its answer ...
                client.pending.addErrback(lambda f: f.trap(UnknownSession))
                abandoned.append(client.pending)         # ... which then fails
            elif op == "expire":
                late.sessions.destroy(client.session)
            else:
                late.sessions.unsubscribe(client.session, client.key)
        elif op == "turn":
            clock.advance(arg)
        check()
    for _ in range(10_000):
        if all(c.pending.called for c in clients) and all(d.called for d in abandoned):
            break
        clock.advance(0.001)
    check()
    assert all(c.replica is not None for c in clients)
    if not clients:         # every similar view gone: so is the index, after the linger
        clock.advance(linger + 1)
        assert similar_indexes(store) == []


def test_an_index_that_cannot_be_built_is_not_kept(monkeypatch) -> None:
    """Its views are answered by a scan, exactly; the next first
    subscription builds it again."""
    engine, clock, store = node(index_linger=0, build_at_once=0)
    engine.apply_changes([upsert(stream(i, f"cats on a piano {i}")) for i in range(300)])
    original = SimilarStoreIndex.move_many

    def broken(self, moves):
        raise RuntimeError("no memory left")
    monkeypatch.setattr(SimilarStoreIndex, "move_many", broken)
    view = engine.catalog.views["SimilarStreamView"]
    session = engine.sessions.create()
    key, state = settle(engine.sessions.subscribe(session, view.bind({"text": "cats piano 7"},
                                                                     None, 10)), clock)
    assert similar_indexes(store) == []
    assert [o["id"] for o in state] == [7]              # 3/5 similar; the others 2/6
    engine.apply_changes([upsert(stream(1_000, "cats piano 7"))])
    events = decode(get_events(engine.sessions, session, 0, None))
    assert [(e["action"], e["obj"]["id"]) for e in events] == [("insert", 1_000)]
    engine.sessions.unsubscribe(session, key)
    monkeypatch.setattr(SimilarStoreIndex, "move_many", original)
    again = engine.sessions.create()
    settle(engine.sessions.subscribe(again, view.bind({"text": "cats piano 7"}, None, 10)),
           clock)
    assert len(similar_indexes(store)[0]) == 301 and store.builds == 2


def test_the_subscriptions_a_build_held_back_go_on_a_slice_at_a_time() -> None:
    """Fifty subscriptions that waited for one build do not all gather
    their candidates in one reactor turn once it is complete: each turn
    lets a slice's worth go on (here, with no time to spare, one)."""
    engine, clock, store = node(index_linger=0, build_at_once=0, slice_seconds=0)
    engine.apply_changes([upsert(stream(i, f"cats {i} piano")) for i in range(300)])
    view = engine.catalog.views["SimilarStreamView"]
    waiting = [engine.sessions.subscribe(engine.sessions.create(),
                                         view.bind({"text": f"cats {i} piano"}, None, 10))
               for i in range(50)]
    answered = [0]
    turn = store._turn

    def counted_turn() -> None:          # the answers after each turn
        turn()
        answered.append(sum(d.called for d in waiting))
    store._turn = counted_turn
    while not all(d.called for d in waiting):
        clock.advance(0.001)
    assert store.builds == 1
    assert max(b - a for a, b in zip(answered, answered[1:])) == 1
    for i, d in enumerate(waiting):
        key, state = fired(d)
        assert state[0]["id"] == i
