"""The window contract, proven against brute force.

Random objects get random upserts, field changes and deletes; many views with
different filters and limits are subscribed; after every step, each view's
state rebuilt by a client from its initial state and events equals the first
``limit`` matching objects in view order, computed here independently.
"""
from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.deferreds import fired as _result
from tests.core.helpers import decode, delete, get_events, make_engine, Replica, truth_key, upsert

VIEWS = {
    "Live": {"type": "Stream", "params": ["limit"], "where": {"live": True},
             "order": "-score", "limit": {"default": 3, "max": 10}},
    "ByUser": {"type": "Stream", "params": ["user_id", "limit"],
               "where": {"user_id": "$user_id"}, "order": "score",
               "limit": {"default": 2, "max": 10}},
    "Home": {"type": "Stream", "params": ["users", "limit"],
             "where": {"user_id": {"in": "$users"}, "visible_to": "$session.user"},
             "order": "-score", "limit": {"default": 3, "max": 10}},
    "Hot": {"type": "Stream", "params": ["min", "limit"],
            "where": {"score": {"gte": "$min"}, "live": {"ne": False}},
            "order": "-score", "limit": {"default": 2, "max": 10}},
}


def truth(view: str, params: dict, user, objects: dict, limit: int) -> list[dict]:
    def ok(o: dict) -> bool:
        private = o.get("public") is not True     # privacy fails closed
        if view == "Live":
            return o.get("live") is True and not private
        if view == "ByUser":
            return o.get("user_id") == params["user_id"] and not private
        if view == "Home":
            visible = (not private or o.get("user_id") == user
                       or user in (o.get("allowed_users") or []))
            return o.get("user_id") in params["users"] and visible
        if view == "Hot":
            s = o.get("score")
            return isinstance(s, int) and s >= params["min"] and o.get("live") is not False \
                and not private
        raise AssertionError(view)
    field = "score"
    desc = VIEWS[view]["order"].startswith("-")
    found = sorted((o for o in objects.values() if ok(o)),
                   key=lambda o: truth_key(o, field), reverse=desc)
    return found[:limit]


objects_st = st.fixed_dictionaries({
    "id": st.integers(0, 9),
    "score": st.one_of(st.none(), st.integers(0, 4)),
    "live": st.booleans(),
    "user_id": st.integers(0, 2),
    "allowed_users": st.lists(st.integers(0, 2), max_size=2),
}, optional={
    # only true is public: false, 0, 1, "true", null and a missing field are private
    "public": st.sampled_from([True, True, True, False, 0, 1, "true", None]),
})
ops_st = st.lists(st.one_of(
    st.tuples(st.just("upsert"), objects_st),
    st.tuples(st.just("delete"), st.integers(0, 9)),
    st.tuples(st.just("flip"), st.integers(0, 9)),
), min_size=1, max_size=60)
subs_st = st.lists(st.one_of(
    st.tuples(st.just("Live"), st.just({}), st.integers(1, 4), st.none()),
    st.tuples(st.just("ByUser"), st.fixed_dictionaries({"user_id": st.integers(0, 2)}),
              st.integers(1, 3), st.none()),
    st.tuples(st.just("Home"), st.fixed_dictionaries(
        {"users": st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True)}),
        st.integers(1, 4), st.integers(0, 2)),
    st.tuples(st.just("Hot"), st.fixed_dictionaries({"min": st.integers(0, 3)}),
              st.integers(1, 3), st.none()),
), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.lists(objects_st, max_size=10), subs=subs_st, ops=ops_st,
       ack=st.booleans(), partial=st.booleans())
def test_replay_equals_truth(seed, subs, ops, ack, partial):
    engine, clock = make_engine(VIEWS, max_queue=10_000)
    if partial:
        # a store whose answers hold only the first ``limit`` matches (as an
        # HTTP backend's do): views that run short read their query again
        engine.store.promised = lambda view, limit: limit
    objects: dict = {}
    for o in seed:
        objects[o["id"]] = o
    engine.apply_changes([upsert(o) for o in seed])

    clients = []
    for view, params, limit, user in subs:
        session = engine.sessions.create()
        engine.sessions.authorize(session, user)
        bound = engine.catalog.views[view].bind(params, user, limit)
        key, state = _result(engine.sessions.subscribe(session, bound))
        replica = Replica(state, VIEWS[view]["order"], limit)
        assert replica.ordered() == truth(view, params, user, objects, limit)
        clients.append((session, key, replica, view, params, user, limit))

    last_seq = {}
    for op, arg in ops:
        if op == "upsert":
            objects[arg["id"]] = arg
            engine.apply_changes([upsert(arg)])
        elif op == "delete":
            objects.pop(arg, None)
            engine.apply_changes([delete(arg)])
        else:  # flip one field of an existing object
            if arg not in objects:
                continue
            o = dict(objects[arg])
            o["live"] = not o["live"]
            objects[arg] = o
            engine.apply_changes([upsert(o)])
        clock.advance(0)          # re-reads of queries that ran short
        for session, key, replica, view, params, user, limit in clients:
            raw = get_events(engine.sessions, session, 0, last_seq.get(session.id) if ack else None)
            events = decode(raw)
            for e in events:
                if ack and e["seq"] <= last_seq.get(session.id, 0):
                    continue
                assert e["key"] == key
                replica.apply(e)
                last_seq[session.id] = e["seq"]
            assert replica.ordered() == truth(view, params, user, objects, limit), (view, params)


def test_events_are_json():
    engine, clock = make_engine(VIEWS)
    s = engine.sessions.create()
    bound = engine.catalog.views["Live"].bind({}, None, 2)
    key, state = _result(engine.sessions.subscribe(s, bound))
    assert state == [] and key == "Live(limit=2)"
    engine.apply_changes([upsert({"id": 1, "live": True, "public": True, "score": 1,
                                     "title": "кот \"x\""})])
    events = json.loads(get_events(engine.sessions, s, 0, None))
    assert events == [{"seq": 1, "key": key, "action": "insert",
                       "obj": {"id": 1, "live": True, "public": True, "score": 1,
                                     "title": "кот \"x\""}}]


# -- similar-views and distinct (SPEC section 13) ---------------------------------
#
# Titles are drawn from a small vocabulary, so that many pairs are similar;
# the truth is computed here from scratch: exact Jaccard of the word sets (or
# 2-word shingles), and the LSH candidate step as datasketch defines it (a
# MinHash of the tokens, and one band of it byte-for-byte equal).

import re  # noqa: E402

from datasketch import MinHash  # noqa: E402

from pushengine.views.similarity import choose_bands  # noqa: E402

SIMILAR_VIEWS = {
    "Like": {"type": "Stream", "params": ["text", "limit"],
             "where": {"similar": {"field": "title", "text": "$text", "threshold": 0.5}},
             "order": "-_similarity", "limit": {"default": 3, "max": 10}},
    "LikeLive": {"type": "Stream", "params": ["text", "limit"],
                 "where": {"similar": {"field": "title", "text": "$text", "threshold": 0.34},
                           "live": True},
                 "order": "-score", "limit": {"default": 3, "max": 10}},
    "Pairs": {"type": "Stream", "params": ["text", "limit"],
              "where": {"similar": {"field": "title", "text": "$text", "threshold": 0.3,
                                    "shingle": 2}},
              "order": "-_similarity", "limit": {"default": 3, "max": 10}},
    "Distinct": {"type": "Stream", "params": ["limit"], "where": {"live": True},
                 "distinct": {"field": "title", "threshold": 0.5},
                 "order": "-score", "limit": {"default": 3, "max": 10}},
    "LikeDistinct": {"type": "Stream", "params": ["text", "limit"],
                     "where": {"similar": {"field": "title", "text": "$text",
                                           "threshold": 0.25}},
                     "distinct": {"field": "title", "threshold": 0.6},
                     "order": "-_similarity", "limit": {"default": 3, "max": 10}},
}
VOCABULARY = ["cat", "Cat", "cats", "dog", "piano", "live", "the", "кошка", "Кошка", "x1"]
SEPARATORS = [" ", ", ", "-", " ! ", "_"]


def _tokens(title, shingle=1):
    if not isinstance(title, str):
        return frozenset()
    words = [w.lower() for w in re.findall(r"[^\W_]+", title)]
    if shingle == 1:
        return frozenset(words)
    return frozenset(" ".join(words[i:i + shingle]) for i in range(len(words) - shingle + 1))


def _bands(tokens, threshold):
    bands, rows = choose_bands(threshold)
    m = MinHash(num_perm=128, seed=1, scheme="affine32")
    m.update_batch([t.encode("utf-8") for t in tokens])
    values = m.hashvalues
    return [bytes(values[i * rows:(i + 1) * rows].byteswap().data) for i in range(bands)]


def _similarity(text, title, threshold, shingle, lowest):
    """The exact Jaccard similarity when the object is a candidate at or
    above the threshold, else None. ``lowest``: the lowest threshold among
    the views sharing the LSH index (its banding)."""
    a, b = _tokens(text, shingle), _tokens(title, shingle)
    if not a or not b:
        return None
    j = len(a & b) / len(a | b)
    if j < threshold:
        return None
    if not any(x == y for x, y in zip(_bands(a, lowest), _bands(b, lowest))):
        return None
    return j


def similar_truth(view, params, objects, limit):
    spec = SIMILAR_VIEWS[view]
    where = spec["where"]
    found = []
    for o in objects.values():
        if o.get("public") is not True:
            continue
        if where.get("live") is True and o.get("live") is not True:
            continue
        if "similar" in where:
            s = where["similar"]
            shingle = s.get("shingle", 1)
            # the views sharing an index (title, same shingle) and their lowest threshold
            lowest = min(v["where"]["similar"]["threshold"] for v in SIMILAR_VIEWS.values()
                         if "similar" in v["where"]
                         and v["where"]["similar"].get("shingle", 1) == shingle)
            j = _similarity(params["text"], o.get("title"), s["threshold"], shingle, lowest)
            if j is None:
                continue
            o = {**o, "_similarity": j}
        found.append(o)
    field = spec["order"].lstrip("-")
    found.sort(key=lambda o: truth_key(o, field), reverse=spec["order"].startswith("-"))
    distinct = spec.get("distinct")
    if distinct:
        shown = []
        for o in found:
            t = _tokens(o.get("title"))
            if t and any(_tokens(s.get("title"))
                         and len(t & _tokens(s.get("title"))) / len(t | _tokens(s.get("title")))
                         >= distinct["threshold"] for s in shown):
                continue
            shown.append(o)
        found = shown
    return found[:limit]


titles_st = st.one_of(
    st.none(), st.just(""), st.just("!!"),
    st.builds(lambda words, seps: "".join(w + s for w, s in zip(words, seps)).strip(),
              st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=5),
              st.lists(st.sampled_from(SEPARATORS), min_size=5, max_size=5)))
texts_st = st.builds(" ".join, st.lists(st.sampled_from(VOCABULARY), min_size=2, max_size=4))
similar_objects_st = st.fixed_dictionaries({
    "id": st.integers(0, 9),
    "title": titles_st,
    "score": st.one_of(st.none(), st.integers(0, 4)),
    "live": st.booleans(),
}, optional={"public": st.sampled_from([True, True, True, False, None])})
similar_ops_st = st.lists(st.one_of(
    st.tuples(st.just("upsert"), similar_objects_st),
    st.tuples(st.just("delete"), st.integers(0, 9)),
    st.tuples(st.just("retitle"), st.tuples(st.integers(0, 9), titles_st)),
    st.tuples(st.just("flip"), st.integers(0, 9)),
), min_size=1, max_size=50)
similar_subs_st = st.lists(st.one_of(
    st.tuples(st.sampled_from(["Like", "LikeLive", "Pairs", "LikeDistinct"]),
              st.fixed_dictionaries({"text": texts_st}), st.integers(1, 4)),
    st.tuples(st.just("Distinct"), st.just({}), st.integers(1, 4)),
), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.lists(similar_objects_st, max_size=10), subs=similar_subs_st,
       ops=similar_ops_st, ack=st.booleans(), partial=st.booleans(), indexed=st.booleans())
def test_similar_replay_equals_truth(seed, subs, ops, ack, partial, indexed):
    engine, clock = make_engine(SIMILAR_VIEWS, max_queue=10_000)
    if indexed:     # initial states from the store's LSH index, not a scan
        engine.store.index_views(engine.catalog.views.values())
    if partial:
        engine.store.promised = lambda view, limit: limit
    objects: dict = {}
    for o in seed:
        objects[o["id"]] = o
    engine.apply_changes([upsert(o) for o in seed])

    clients = []
    for view, params, limit in subs:
        session = engine.sessions.create()
        bound = engine.catalog.views[view].bind(params, None, limit)
        key, state = _result(engine.sessions.subscribe(session, bound))
        replica = Replica(state, SIMILAR_VIEWS[view]["order"], limit)
        assert replica.ordered() == similar_truth(view, params, objects, limit), (view, params)
        clients.append((session, key, replica, view, params, limit))

    last_seq = {}
    for op, arg in ops:
        if op == "upsert":
            objects[arg["id"]] = arg
            engine.apply_changes([upsert(arg)])
        elif op == "delete":
            objects.pop(arg, None)
            engine.apply_changes([delete(arg)])
        else:
            id_, title = arg if op == "retitle" else (arg, None)
            if id_ not in objects:
                continue
            o = dict(objects[id_])
            if op == "retitle":
                o["title"] = title
            else:
                o["live"] = not o["live"]
            objects[id_] = o
            engine.apply_changes([upsert(o)])
        clock.advance(0)
        for session, key, replica, view, params, limit in clients:
            raw = get_events(engine.sessions, session, 0, last_seq.get(session.id) if ack else None)
            for e in decode(raw):
                if ack and e["seq"] <= last_seq.get(session.id, 0):
                    continue
                assert e["key"] == key
                replica.apply(e)
                last_seq[session.id] = e["seq"]
            assert replica.ordered() == similar_truth(view, params, objects, limit), \
                (view, params)


# -- audience segments (SPEC section 15) ------------------------------------------
#
# Objects carry random ``audience`` values (names, lists, junk); sessions have
# a phone that is in some generated segments; segments are uploaded again and
# deleted between changes, which re-evaluates the subscribed sessions. After
# every step each client's copy equals the truth for the session's segments
# of that moment, and no object a session is shown (initial state, insert,
# update, reset) is aimed at a segment the session is not in.

from pushengine.segments.contacts import SegmentMembership  # noqa: E402
from pushengine.segments.reevaluate import Reevaluator  # noqa: E402
from pushengine.segments.store import MemorySegments  # noqa: E402
from pushengine.segments.targeting import contact_digests  # noqa: E402

SEGMENT_NAMES = ["s0", "s1", "s2"]
AUDIENCE_VIEWS = {
    "Aud": {"type": "Stream", "params": ["limit"], "where": {"audience": "$session.segments"},
            "order": "-score", "limit": {"default": 3, "max": 10}},
    "AudLive": {"type": "Stream", "params": ["limit"],
                "where": {"audience": "$session.segments", "live": True},
                "order": "score", "limit": {"default": 3, "max": 10}},
    "InS1": {"type": "Stream", "params": ["limit"], "where": {"in_segment": "s1"},
             "order": "-score", "limit": {"default": 3, "max": 10}},
    "Live": {"type": "Stream", "params": ["limit"], "where": {"live": True},
             "order": "-score", "limit": {"default": 3, "max": 10}},
}


def phone(i: int) -> str:
    return f"7999000000{i}"


def reaches_truth(obj: dict, segments: set) -> bool:
    """Who an object is shown to, written out again: untargeted objects to
    everybody, a name or a non-empty list of names to their members, any
    other audience to nobody."""
    a = obj.get("audience")
    if a is None:
        return True
    if type(a) is str:
        return a in segments
    if type(a) is list and len(a) > 0 and all(type(x) is str for x in a):
        return bool(set(a) & segments)
    return False


def audience_truth(view: str, segments: set, objects: dict, limit: int) -> list[dict]:
    def ok(o: dict) -> bool:
        if o.get("public") is not True:
            return False
        untargeted = o.get("audience") is None
        if view == "Aud":
            return reaches_truth(o, segments)
        if view == "AudLive":
            return reaches_truth(o, segments) and o.get("live") is True
        if view == "InS1":
            return "s1" in segments and untargeted
        if view == "Live":
            return untargeted and o.get("live") is True
        raise AssertionError(view)
    order = AUDIENCE_VIEWS[view]["order"]
    found = sorted((o for o in objects.values() if ok(o)),
                   key=lambda o: truth_key(o, "score"), reverse=order.startswith("-"))
    return found[:limit]


audiences_st = st.sampled_from([
    "s0", "s1", "s2", "nobody", ["s0"], ["s1", "s2"], ["s2", "x"], [], ["s0", 3], 5, 0,
    True, {"s0": 1}, "", [None], None])
audience_objects_st = st.fixed_dictionaries({
    "id": st.integers(0, 9),
    "score": st.one_of(st.none(), st.integers(0, 4)),
    "live": st.booleans(),
}, optional={"public": st.sampled_from([True, True, True, False, None]),
             "audience": audiences_st})
members_st = st.frozensets(st.integers(0, 3))
audience_ops_st = st.lists(st.one_of(
    st.tuples(st.just("upsert"), audience_objects_st),
    st.tuples(st.just("delete"), st.integers(0, 9)),
    st.tuples(st.just("retarget"), st.tuples(st.integers(0, 9), audiences_st)),
    st.tuples(st.just("segment"), st.tuples(st.sampled_from(SEGMENT_NAMES),
                                            st.one_of(st.none(), members_st))),
), min_size=1, max_size=40)
audience_subs_st = st.lists(st.tuples(
    st.sampled_from(sorted(AUDIENCE_VIEWS)), st.one_of(st.none(), st.integers(0, 3)),
    st.integers(1, 4)), min_size=1, max_size=8)


def _shown(event: dict) -> list[dict]:
    """The object states an event shows (a delete's is one already shown)."""
    if event["action"] in ("insert", "update"):
        return [event["obj"]]
    if event["action"] == "reset":
        return list(event["obj"])
    return []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.lists(audience_objects_st, max_size=10),
       segments=st.fixed_dictionaries({n: members_st for n in SEGMENT_NAMES}),
       subs=audience_subs_st, ops=audience_ops_st, ack=st.booleans())
def test_audience_replay_equals_truth_and_never_leaks(seed, segments, subs, ops, ack):
    engine, clock = make_engine(AUDIENCE_VIEWS, max_queue=10_000)
    store = MemorySegments()
    contacts = SegmentMembership(store)
    Reevaluator(engine.sessions, store, contacts)
    members = {n: set(m) for n, m in segments.items()}

    def upload(name, who):
        if who is None:
            _result(store.delete(name))
            members.pop(name, None)
            return
        up = store.begin(name)
        up.add([contact_digests({"phone": phone(i)})[0] for i in who])
        _result(up.commit({"valid": len(who)}))
        members[name] = set(who)

    for name, who in segments.items():
        upload(name, who)
    objects = {o["id"]: o for o in seed}
    engine.apply_changes([upsert(o) for o in seed])

    def segments_of(contact):
        return {n for n, who in members.items() if contact is not None and contact in who}

    clients = []
    for view, contact, limit in subs:
        session = engine.sessions.create()
        contacts.authorized(session, {"phone": phone(contact)} if contact is not None else {})
        found = _result(contacts.segments_of(session))
        assert set(found) == segments_of(contact)
        bound = engine.catalog.views[view].bind({}, None, limit, segments=found)
        key, state = _result(engine.sessions.subscribe(session, bound))
        for o in state:
            assert reaches_truth(o, segments_of(contact)), (view, o)
        replica = Replica(state, AUDIENCE_VIEWS[view]["order"], limit)
        assert replica.ordered() == audience_truth(view, segments_of(contact), objects, limit)
        clients.append((session, key, replica, view, contact, limit))

    last_seq: dict = {}
    for op, arg in ops:
        if op == "upsert":
            objects[arg["id"]] = arg
            engine.apply_changes([upsert(arg)])
        elif op == "delete":
            objects.pop(arg, None)
            engine.apply_changes([delete(arg)])
        elif op == "retarget":
            id_, audience = arg
            if id_ not in objects:
                continue
            o = {k: v for k, v in objects[id_].items() if k != "audience"}
            if audience is not None:
                o["audience"] = audience
            objects[id_] = o
            engine.apply_changes([upsert(o)])
        else:
            upload(*arg)
        clock.advance(0)
        for session, key, replica, view, contact, limit in clients:
            now = segments_of(contact)
            raw = get_events(engine.sessions, session, 0, last_seq.get(session.id) if ack else None)
            for e in decode(raw):
                if ack and e["seq"] <= last_seq.get(session.id, 0):
                    continue
                assert e["key"] == key
                for o in _shown(e):
                    assert reaches_truth(o, now), (view, now, e)
                replica.apply(e)
                last_seq[session.id] = e["seq"]
            assert replica.ordered() == audience_truth(view, now, objects, limit), (view, now)
