"""The SessionManager's methods that change a session's user and
subscriptions (authorize, subscribe, install, move, remove): the only way
anything installs, moves or removes a subscription."""
from __future__ import annotations

import json

import pytest

from pushengine.core.errors import LimitReached, NotAuthorized, UnknownKey
from pushengine.core.routes import Route
from tests.core.helpers import get_events, make_engine, upsert
from tests.deferreds import fired

VIEWS = {
    "Streams": {"type": "Stream", "params": ["user_id", "limit"],
                "where": {"user_id": "$user_id"}, "order": "id",
                "limit": {"default": 5, "max": 10}},
}


def stream(id_: int, user_id: int = 1) -> dict:
    return {"id": id_, "user_id": user_id, "public": True}


class Setup:
    def __init__(self, **settings):
        self.engine, self.clock = make_engine(VIEWS, **settings)
        self.manager = self.engine.sessions
        self.registry = self.engine.registry

    def bound(self, user_id: int, limit: int = 5):
        return self.engine.catalog.views["Streams"].bind({"user_id": user_id}, None, limit)

    def open(self, bound):
        return fired(self.registry.open(bound))

    def events(self, session):
        return json.loads(get_events(self.manager, session, 0, None))


def test_authorize_sets_the_user_and_refuses_another():
    t = Setup()
    s = t.manager.create()
    t.manager.authorize(s, "alice")
    t.manager.authorize(s, "alice")                  # the same user again: nothing changes
    assert s.user == "alice"
    with pytest.raises(NotAuthorized):
        t.manager.authorize(s, "bob")
    assert s.user == "alice"


def test_install_shows_a_window_under_its_key_and_remove_closes_it():
    t = Setup()
    t.engine.apply_changes([upsert(stream(1))])
    s = t.manager.create()
    bound = t.bound(1)
    window = t.open(bound)
    entry = t.manager.install(s, bound.key, window, bound)
    assert entry is window and s.subs == {bound.key: window} and s.bounds[bound.key] is bound
    assert s in window.subscribers
    t.engine.apply_changes([upsert(stream(2))])
    t.manager.remove(s, bound.key)
    assert s.subs == {} and s.bounds == {} and s not in window.subscribers
    assert t.events(s) == []                         # its unsent events went with it
    assert t.registry.queries == {}                  # nobody holds the window: closed


def test_install_under_another_key_routes_the_window():
    t = Setup()
    t.engine.apply_changes([upsert(stream(1))])
    a, b = t.manager.create(), t.manager.create()
    bound = t.bound(1)
    window = t.open(bound)
    t.open(bound)
    ra = t.manager.install(a, "mine", window, bound)
    rb = t.manager.install(b, "mine", window, bound)
    assert isinstance(ra, Route) and ra is rb and a.subs["mine"] is ra
    assert t.manager.routes == {(window, "mine"): ra}
    assert ra.state() == window.state()
    t.engine.apply_changes([upsert(stream(2))])
    for s in (a, b):
        assert [(e["key"], e["action"], e["obj"]["id"]) for e in t.events(s)] == [
            ("mine", "insert", 2)]
    t.manager.remove(a, "mine")
    assert t.manager.routes == {(window, "mine"): ra} and ra.subscribers == {b}
    t.manager.remove(b, "mine")
    assert t.manager.routes == {} and t.registry.queries == {}


def test_install_again_drops_what_was_queued_under_the_key():
    t = Setup()
    s = t.manager.create()
    bound = t.bound(1)
    window = t.open(bound)
    t.manager.install(s, bound.key, window, bound)
    t.engine.apply_changes([upsert(stream(1))])
    t.manager.install(s, bound.key, t.open(bound), bound)     # subscribed again
    assert t.events(s) == [] and s.subs[bound.key] is window


def test_move_replaces_the_window_and_keeps_what_was_queued():
    t = Setup()
    t.engine.apply_changes([upsert(stream(1)), upsert(stream(2, user_id=2))])
    s = t.manager.create()
    one, two = t.bound(1), t.bound(2)
    first = t.open(one)
    t.manager.install(s, one.key, first, one)
    t.engine.apply_changes([upsert(stream(3))])
    second = t.open(two)
    entry = t.manager.move(s, one.key, second, two)
    assert isinstance(entry, Route) and entry.window is second
    assert s.bounds[one.key] is two and s not in first.subscribers
    assert t.registry.queries.keys() == {two.query_key}      # the first window closed
    t.engine.apply_changes([upsert(stream(4, user_id=2))])
    assert [(e["key"], e["obj"]["id"]) for e in t.events(s)] == [(one.key, 3), (one.key, 4)]
    # moved back under its own key: the route goes, the window itself is held
    back = t.open(one)
    assert t.manager.move(s, one.key, back, one) is back and t.manager.routes == {}
    with pytest.raises(UnknownKey):
        t.manager.move(s, "nothing", back, one)


def test_a_route_leaving_keeps_the_sessions_own_subscription_to_the_window():
    t = Setup()
    s = t.manager.create()
    bound = t.bound(1)
    window = t.open(bound)
    t.open(bound)
    t.manager.install(s, bound.key, window, bound)
    t.manager.install(s, "theirs", window, bound)
    t.manager.remove(s, "theirs")
    assert s in window.subscribers and t.registry.queries.keys() == {bound.query_key}
    t.engine.apply_changes([upsert(stream(1))])
    assert [e["key"] for e in t.events(s)] == [bound.key]


def test_subscribe_under_the_clients_key():
    t = Setup()
    t.engine.apply_changes([upsert(stream(1))])
    s = t.manager.create()
    bound = t.bound(1)
    key, state = fired(t.manager.subscribe(s, bound, "client-key"))
    assert key == "client-key" and [o["id"] for o in state] == [1]
    assert isinstance(s.subs[key], Route) and s.bounds[key] is bound


def test_subscribe_counts_the_limit_once_the_window_opened():
    t = Setup(max_subscriptions=1)
    s = t.manager.create()
    fired(t.manager.subscribe(s, t.bound(1)))
    with pytest.raises(LimitReached):
        t.manager.subscribe(s, t.bound(2))
    fired(t.manager.subscribe(s, t.bound(1)))             # the same key again is no new one
    assert list(s.subs) == [t.bound(1).key]


def test_destroy_leaves_every_window_and_route():
    t = Setup()
    s = t.manager.create()
    bound = t.bound(1)
    fired(t.manager.subscribe(s, bound))
    fired(t.manager.subscribe(s, t.bound(2), "routed"))
    t.manager.destroy(s)
    assert t.manager.routes == {} and t.registry.queries == {}
