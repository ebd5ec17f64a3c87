"""``once_per_user: true`` in the views layer: an object enters such a view
at most once per authorized user, across sessions and nodes."""
from __future__ import annotations

import json

import pytest
from twisted.internet.defer import Deferred, fail

from pushengine.bloom.memory import MemoryBloom
from pushengine.bloom.errors import BloomUnavailable
from pushengine.views.conditions import ViewDefinitionError
from pushengine.views.once import SeenFilter
from pushengine.views.spec import parse_catalog
from tests.core.helpers import delete, get_events, make_engine, Replica, upsert
from tests.deferreds import fired

VIEWS = {"News": {
    "type": "Stream", "params": ["users", "limit"], "once_per_user": True,
    "where": {"user_id": {"in": "$users"}, "live": True, "visible_to": "$session.user"},
    "order": "-created_at", "limit": {"default": 5, "max": 10}}}


def stream(id_: int, live: bool = True, user_id: int = 2, **fields) -> dict:
    return {"id": id_, "user_id": user_id, "live": live, "public": True,
            "created_at": id_, **fields}


def node(bloom=None):
    engine, clock = make_engine(VIEWS, seen=SeenFilter(bloom) if bloom is not None else None)
    return engine


def subscribe(engine, user, users=(2,), limit=None):
    session = engine.sessions.create()
    engine.sessions.authorize(session, user)
    bound = engine.catalog.views["News"].bind({"users": list(users)}, user, limit)
    key, state = fired(engine.sessions.subscribe(session, bound))
    return session, key, [o["id"] for o in state]


def events(engine, session) -> list[dict]:
    return json.loads(get_events(engine.sessions, session, 0, None))


def actions(engine, session) -> list[tuple[str, int]]:
    return [(e["action"], e["obj"]["id"]) for e in events(engine, session)
            if e["action"] != "ping"]


def test_a_view_needs_the_session_user_for_once_per_user():
    with pytest.raises(ViewDefinitionError, match="bound to"):
        parse_catalog({"views": {"V": {"type": "S", "once_per_user": True}}})
    with pytest.raises(ViewDefinitionError, match="true or false"):
        parse_catalog({"views": {"V": {"type": "S", "once_per_user": "yes",
                                       "where": {"visible_to": "$session.user"}}}})


def test_an_object_enters_once_and_never_comes_back():
    engine = node()
    engine.apply_changes([upsert(stream(1)), upsert(stream(2))])
    s, key, state = subscribe(engine, 7)
    assert state == [2, 1]
    engine.apply_changes([upsert(stream(3))])
    assert actions(engine, s) == [("insert", 3)]
    engine.apply_changes([upsert(stream(3, title="renamed"))])       # stays: updates as usual
    assert actions(engine, s) == [("update", 3)]
    engine.apply_changes([upsert(stream(3, live=False))])            # leaves...
    engine.apply_changes([upsert(stream(3, live=True))])             # ...and does not come back
    engine.apply_changes([delete(2), upsert(stream(2))])
    assert actions(engine, s) == [("delete", 3), ("delete", 2)]
    # a new subscription (a reload, another session) shows nothing seen before
    engine.sessions.unsubscribe(s, key)
    s, key, state = subscribe(engine, 7)
    assert state == []
    engine.apply_changes([upsert(stream(4))])
    assert actions(engine, s) == [("insert", 4)]
    assert subscribe(engine, 7, users=[2, 5])[2] == []              # other params, same user
    # another user has a filter of their own
    assert subscribe(engine, 8)[2] == [4, 3, 2, 1]


def test_the_view_stays_consistent_for_its_subscribers():
    engine = node()
    engine.apply_changes([upsert(stream(i)) for i in range(1, 4)])
    s, key, _ = subscribe(engine, 7, limit=2)
    state = fired(engine.registry.open(engine.sessions.get(s.id).bounds[key])).state()
    replica = Replica(state, "-created_at", 2)
    changes = [upsert(stream(9)), upsert(stream(9, live=False)), upsert(stream(9)),
               delete(3), upsert(stream(3)), upsert(stream(10)), upsert(stream(2, live=False)),
               upsert(stream(11, user_id=5)), upsert(stream(12))]
    for change in changes:
        engine.apply_changes([change])
        for event in events(engine, s):
            replica.apply(event)
        assert [o["id"] for o in replica.ordered()] == \
            [o["id"] for o in s.subs[key].state()]


def test_two_nodes_share_the_seen_filter():
    shared = MemoryBloom()                  # stands for Redis (tests/bloom/test_nodes.py)
    a, b = node(shared), node(shared)
    for engine in (a, b):
        engine.apply_changes([upsert(stream(1))])
    sa, _, state_a = subscribe(a, 7)
    sb, _, state_b = subscribe(b, 7)
    assert (state_a, state_b) == ([1], [])
    # a change reaches both nodes: it enters the user's view on one of them
    for engine in (a, b):
        engine.apply_changes([upsert(stream(2))])
    assert actions(a, sa) == [("insert", 2)] and actions(b, sb) == []


class LateBloom:
    """A backend whose answers come later (as over the network)."""

    def __init__(self) -> None:
        self.inner = MemoryBloom()
        self.waiting: list[tuple[Deferred, Deferred]] = []
        self.down = False

    def insert(self, *args, **kwargs) -> Deferred:
        if self.down:
            return fail(BloomUnavailable("Redis is down"))
        later: Deferred = Deferred()
        self.waiting.append((self.inner.insert(*args, **kwargs), later))
        return later

    def answer(self) -> None:
        waiting, self.waiting = self.waiting, []
        for done, later in waiting:
            done.chainDeferred(later)


def test_with_a_late_filter_an_object_enters_a_round_trip_later():
    bloom = LateBloom()
    engine = node(bloom)
    engine.apply_changes([upsert(stream(1))])
    session = engine.sessions.create()
    engine.sessions.authorize(session, 7)
    d = engine.sessions.subscribe(
        session, engine.catalog.views["News"].bind({"users": [2]}, 7, None))
    assert not d.called
    bloom.answer()
    key, state = fired(d)
    assert [o["id"] for o in state] == [1]
    engine.apply_changes([upsert(stream(2))])
    engine.apply_changes([upsert(stream(2, title="latest"))])       # while the filter is asked
    engine.apply_changes([upsert(stream(3))])
    engine.apply_changes([delete(3)])                               # gone before the answer
    assert actions(engine, session) == []
    bloom.answer()
    got = events(engine, session)
    assert [(e["action"], e["obj"]["id"], e["obj"].get("title")) for e in got] == [
        ("insert", 2, "latest")]
    engine.apply_changes([upsert(stream(3))])                       # marked seen: stays out
    assert not bloom.waiting and actions(engine, session) == []


def test_with_the_filter_down_objects_enter_as_unseen():
    bloom = LateBloom()
    engine = node(bloom)
    bloom.down = True
    engine.apply_changes([upsert(stream(1))])
    s, _, state = subscribe(engine, 7)
    assert state == [1]
    engine.apply_changes([upsert(stream(2))])
    assert actions(engine, s) == [("insert", 2)]
    engine.apply_changes([upsert(stream(2, live=False)), upsert(stream(2))])
    assert actions(engine, s) == [("delete", 2)]                    # this instance remembers
    assert engine.registry.seen.counters["failed_open"] >= 2
