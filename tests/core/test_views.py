"""Views: the views file, conditions, keys, privacy and routing."""
from __future__ import annotations

import json

import pytest
from twisted.internet.defer import Deferred, succeed

from pushengine.core.changes import Change
from pushengine.views.conditions import ParamError, ViewDefinitionError
from pushengine.views.morphology import text_forms, word_forms
from pushengine.views.registry import ViewRegistry
from pushengine.views.spec import load_catalog, parse_catalog
from tests.core.helpers import get_events, make_engine, upsert
from tests.deferreds import fired as result


def view(**kw):
    return {"V": {"type": "Stream", "order": "id", **kw}}


def matches(where, obj, params=None, user=None, params_decl=None):
    catalog = parse_catalog({"views": view(where=where, params=params_decl or list(params or {}))})
    bound = catalog.views["V"].bind(params or {}, user, None)
    return bound.predicate()({"public": True, **obj})


# -- the views file --------------------------------------------------------------

def test_default_views_load():
    catalog = load_catalog()
    assert set(catalog.views) == {"PublicLiveStreamView", "PublicRecentStreamView",
                                  "UserStreamView", "WordStreamView", "NearStreamView",
                                  "HomeStreamView"} | {"FollowedNewStreamView"} \
        | {"SimilarStreamView"}
    assert catalog.methods["stream.subscribe_user"].params == ["user_id", "limit"]
    assert catalog.views["HomeStreamView"].needs_user
    assert catalog.views["FollowedNewStreamView"].once_per_user


@pytest.mark.parametrize("views, error", [
    ({"V": {"order": "id"}}, "'type' is required"),
    ({"V": {"type": "S", "where": {"a": "$x"}}}, "not in 'params'"),
    ({"V": {"type": "S", "params": ["x"]}}, "is not used"),
    ({"V": {"type": "S", "where": {"a": {"like": 1}}}}, "needs one operator"),
    ({"V": {"type": "S", "where": {"visible_to": "$x"}, "params": ["x"]}}, "$session.user"),
    ({"V": {"type": "S", "limit": {"default": 9, "max": 3}}}, "limits"),
    ({"V": {"type": "S", "method": "session.evil"}}, "bad method"),
    ({"V": {"type": "S", "where": {"near": {"lat": 1}}}}, "lat, lon and km"),
    ({"bad name": {"type": "S"}}, "bad view name"),
])
def test_bad_views_files_are_explained(views, error):
    with pytest.raises(ViewDefinitionError, match=error.replace("$", r"\$")):
        parse_catalog({"views": views})


def test_views_file_may_be_json(tmp_path):
    path = tmp_path / "views.json"
    path.write_text(json.dumps({"views": view(method="s.all")}))
    assert load_catalog(path).methods["s.all"].name == "V"


# -- conditions ------------------------------------------------------------------

def test_equality_is_json_equality():
    assert matches({"live": True}, {"live": True})
    assert not matches({"live": True}, {"live": 1})
    assert matches({"n": 1}, {"n": 1.0})
    assert matches({"gone": None}, {})
    assert matches({"gone": None}, {"gone": None})
    assert not matches({"gone": None}, {"gone": 0})


def test_operators():
    assert matches({"v": {"gte": 10}}, {"v": 10})
    assert not matches({"v": {"gt": 10}}, {"v": 10})
    assert not matches({"v": {"gt": 10}}, {"v": "11"})   # no cross-type comparison
    assert matches({"v": {"lt": "b"}}, {"v": "a"})
    assert matches({"v": {"ne": 3}}, {})
    assert matches({"v": {"in": [1, 2]}}, {"v": 2})
    assert not matches({"v": {"in": [1, 2]}}, {"v": True})


@pytest.mark.parametrize("word, title", [
    ("кошка", "Наши кошки спят"), ("кот", "Смотрим на котов"), ("играть", "Дети играли"),
    ("cat", "Cats and dogs"), ("running", "She runs"), ("Москва", "Стрим из Москвы"),
    ("ёлка", "Новогодняя елка"),
])
def test_has_word_matches_inflected_forms(word, title):
    assert matches({"title": {"has_word": "$w"}}, {"title": title}, {"w": word})


@pytest.mark.parametrize("word, title", [("кошка", "Собаки"), ("cat", "category"),
                                          ("cat", None)])
def test_has_word_does_not_match_other_words(word, title):
    assert not matches({"title": {"has_word": "$w"}}, {"title": title}, {"w": word})


def test_near_is_great_circle_distance():
    where = {"near": {"lat": "$lat", "lon": "$lon", "km": "$km"}}
    moscow = {"lat": 55.7558, "lon": 37.6173}
    spb = {"lat": 59.9343, "lon": 30.3351}
    params = {"lat": 55.75, "lon": 37.62, "km": 10}
    assert matches(where, moscow, params)
    assert not matches(where, spb, params)
    assert matches(where, spb, {**params, "km": 700})   # ~634 km
    assert not matches(where, {"lat": "x", "lon": 1}, params)


@pytest.mark.parametrize("params, error", [
    ({"w": "two words"}, "single word"), ({"w": 5}, "single word"),
])
def test_bad_params_are_refused(params, error):
    catalog = parse_catalog({"views": view(where={"t": {"has_word": "$w"}}, params=["w"])})
    with pytest.raises(ParamError, match=error):
        catalog.views["V"].bind(params, None, None)


def test_limits_and_unknown_params():
    catalog = parse_catalog({"views": view(params=["limit"], limit={"default": 3, "max": 5})})
    spec = catalog.views["V"]
    assert spec.bind({}, None, None).limit == 3
    for bad in (0, -1, 6, 2.5, True, "3"):
        with pytest.raises(ParamError, match="limit"):
            spec.bind({}, None, bad)
    with pytest.raises(ParamError, match="no parameter"):
        spec.bind({"x": 1}, None, None)


def test_keys_are_canonical_and_node_independent():
    catalog = load_catalog()
    a = catalog.views["NearStreamView"].bind({"lon": 37.6, "lat": 55.7, "km": 5}, None, 10)
    b = catalog.views["NearStreamView"].bind({"km": 5, "lat": 55.7, "lon": 37.6}, None, 10)
    assert a.key == b.key == "NearStreamView(km=5.0;lat=55.7;lon=37.6;limit=10)"
    home = catalog.views["HomeStreamView"].bind({"users": [1]}, 9, None)
    assert home.key == "HomeStreamView(session.user=9;users=[1];limit=20)"
    word = catalog.views["WordStreamView"].bind({"word": "кот"}, None, 5)
    assert word.key == 'WordStreamView(word="кот";limit=5)'


def test_words_normalise_once():
    assert word_forms("Кошки") == frozenset({"кошка"})
    assert "кот" in text_forms("Коты, коты!")


# -- privacy -------------------------------------------------------------------------

HOME = {"Home": {"type": "Stream", "params": ["users"],
                 "where": {"user_id": {"in": "$users"}, "visible_to": "$session.user"},
                 "order": "id"},
        "User": {"type": "Stream", "params": ["user_id"],
                 "where": {"user_id": "$user_id"}, "order": "id"}}


def subscribe(engine, name, params, user=None):
    s = engine.sessions.create()
    engine.sessions.authorize(s, user)
    bound = engine.catalog.views[name].bind(params, user, None)
    key, state = result(engine.sessions.subscribe(s, bound))
    return s, state


def events(engine, s):
    return [(e["action"], e["obj"]["id"]) for e in
            json.loads(get_events(engine.sessions, s, 0, None))]


def test_private_objects_reach_only_who_may_see_them():
    engine, _ = make_engine(HOME)
    private = {"id": 1, "user_id": 5, "public": False, "allowed_users": [7]}
    engine.apply_changes([upsert(private)])
    owner, state_owner = subscribe(engine, "Home", {"users": [5]}, user=5)
    friend, state_friend = subscribe(engine, "Home", {"users": [5]}, user=7)
    stranger, state_stranger = subscribe(engine, "Home", {"users": [5]}, user=8)
    public_view, state_public = subscribe(engine, "User", {"user_id": 5})
    assert [o["id"] for o in state_owner] == [1]
    assert [o["id"] for o in state_friend] == [1]
    assert state_stranger == [] and state_public == []

    # access granted to the stranger: it appears at once
    engine.apply_changes([upsert({**private, "allowed_users": [7, 8], "title": "x"})])
    assert events(engine, stranger) == [("insert", 1)]
    assert events(engine, friend) == [("update", 1)]
    assert events(engine, public_view) == []
    # revoked from the friend: it leaves at once
    engine.apply_changes([upsert({**private, "allowed_users": [8], "title": "x"})])
    assert events(engine, friend) == [("delete", 1)]
    assert events(engine, public_view) == []
    # made public: the public view sees it now
    engine.apply_changes([upsert({**private, "public": True})])
    assert events(engine, public_view) == [("insert", 1)]


# -- routing --------------------------------------------------------------------------

def test_a_change_reaches_only_the_views_it_can_affect(monkeypatch):
    engine, _ = make_engine(HOME)
    for user in range(1000):
        subscribe(engine, "User", {"user_id": user})
    offered = []
    from pushengine.views import query as query_module
    original = query_module.Query.upsert

    def spy(self, id_, obj):
        offered.append(self.key)
        return original(self, id_, obj)
    monkeypatch.setattr(query_module.Query, "upsert", spy)
    engine.apply_changes([upsert({"id": 1, "user_id": 500, "public": True})])
    assert offered == ["User(user_id=500)"]
    offered.clear()
    engine.apply_changes([upsert({"id": 1, "user_id": 501, "public": True})])   # moves between users
    assert sorted(offered) == ["User(user_id=500)", "User(user_id=501)"]


def test_a_change_looks_only_at_the_indexes_of_views_someone_holds(monkeypatch):
    """Of a type's views, those nobody holds are not even looked up; a view
    is looked up from its first query to the end of its last."""
    engine, _ = make_engine(HOME)
    registry = engine.registry
    looked = []
    from pushengine.views import registry as registry_module
    original = registry_module.SpecIndex.lookup

    def spy(self, obj):
        looked.append(self)
        return original(self, obj)
    monkeypatch.setattr(registry_module.SpecIndex, "lookup", spy)
    engine.apply_changes([upsert({"id": 1, "user_id": 5, "public": True})])
    assert looked == []
    session, _ = subscribe(engine, "User", {"user_id": 5})
    subscribe(engine, "User", {"user_id": 6})
    engine.apply_changes([upsert({"id": 2, "user_id": 5, "public": True})])
    assert looked == [registry.indexes["User"]]
    assert events(engine, session) == [("insert", 2)]
    for s in list(engine.sessions.sessions.values()):
        engine.sessions.destroy(s)
    looked.clear()
    engine.apply_changes([upsert({"id": 3, "user_id": 5, "public": True})])
    assert looked == [] and registry.held_indexes == {}


def test_changes_of_unknown_types_are_ignored():
    engine, _ = make_engine(HOME)
    engine.apply_changes([Change("Comment", "upsert", 1, {"id": 1})])
    assert engine.counters.change_errors == 0


# -- loading and gaps ------------------------------------------------------------------

class SlowStore:
    """A store whose answers the test releases by hand."""

    def __init__(self):
        self.pending = []
        self.answer = []

    def query(self, view, params, limit):
        d = Deferred()
        self.pending.append(d)
        return d

    def apply_changes(self, changes):
        pass


def test_concurrent_first_subscriptions_share_one_store_query_and_see_changes():
    catalog = parse_catalog({"views": HOME})
    store = SlowStore()
    registry = ViewRegistry(catalog, store)
    bound = catalog.views["User"].bind({"user_id": 5}, None, 10)
    d1, d2 = registry.open(bound), registry.open(bound)
    assert len(store.pending) == 1
    registry.apply(Change("Stream", "upsert", 2, {"id": 2, "user_id": 5, "public": True}))
    registry.apply(Change("Stream", "delete", 3, {"id": 3}))
    store.pending[0].callback([{"id": 3, "user_id": 5, "public": True}, {"id": 4, "user_id": 5, "public": True}])
    w1, w2 = result(d1), result(d2)
    assert w1 is w2
    assert [o["id"] for o in w1.state()] == [2, 4]


def test_store_failure_fails_the_subscription_and_leaves_nothing():
    catalog = parse_catalog({"views": HOME})
    store = SlowStore()
    registry = ViewRegistry(catalog, store)
    d = registry.open(catalog.views["User"].bind({"user_id": 5}, None, 10))
    store.pending[0].errback(RuntimeError("backend down"))
    failures = []
    d.addErrback(failures.append)
    assert failures and registry.queries == {}


def test_feed_gap_resets_views_whose_state_changed():
    catalog = parse_catalog({"views": HOME})

    class Store:
        objects = [{"id": 1, "user_id": 5, "public": True}]

        def query(self, view, params, limit):
            return succeed(list(self.objects))

        def apply_changes(self, changes):
            pass

    from pushengine.app.engine import build_engine
    from twisted.internet.task import Clock
    store = Store()
    engine = build_engine(Clock(), catalog, store)
    changed, _ = subscribe(engine, "User", {"user_id": 5})
    same, _ = subscribe(engine, "User", {"user_id": 6})
    store.objects = [{"id": 1, "user_id": 5, "public": True}, {"id": 2, "user_id": 5, "public": True}]
    engine.feed_gap()
    got = json.loads(get_events(engine.sessions, changed, 0, None))
    assert [(e["action"], [o["id"] for o in e["obj"]]) for e in got] == [("reset", [1, 2])]
    assert get_events(engine.sessions, same, 0, None) == b"[]"
    assert engine.counters.feed_gaps == 1


def test_a_store_that_raises_fails_the_subscription_and_frees_the_view():
    catalog = parse_catalog({"views": HOME})

    class Broken:
        def query(self, view, params, limit):
            raise RuntimeError("no backend")

        def apply_changes(self, changes):
            pass

    registry = ViewRegistry(catalog, Broken())
    bound = catalog.views["User"].bind({"user_id": 5}, None, 10)
    for _ in range(2):   # a second try is not stuck behind the first
        failures = []
        registry.open(bound).addErrback(failures.append)
        assert failures and failures[0].check(RuntimeError)
        assert registry.queries == {} and registry._loading == {}


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_params_are_refused(value):
    catalog = load_catalog()
    with pytest.raises(ParamError):
        catalog.views["UserStreamView"].bind({"user_id": value}, None, None)
    with pytest.raises(ParamError):
        catalog.views["NearStreamView"].bind({"lat": value, "lon": 1, "km": 1}, None, None)


def test_an_update_that_python_calls_equal_is_still_a_change():
    """``{"public": 1} == {"public": True}`` in Python, but 1 is not true for
    privacy (it fails closed): the object must leave the public view."""
    engine, _ = make_engine(HOME)
    engine.apply_changes([upsert({"id": 1, "user_id": 5, "public": True, "n": 1})])
    s, state = subscribe(engine, "User", {"user_id": 5})
    assert [o["id"] for o in state] == [1]
    engine.apply_changes([upsert({"id": 1, "user_id": 5, "public": 1, "n": 1})])
    assert events(engine, s) == [("delete", 1)]
    engine.apply_changes([upsert({"id": 1, "user_id": 5, "public": True, "n": 1})])
    engine.apply_changes([upsert({"id": 1, "user_id": 5, "public": True, "n": 1.0})])
    assert events(engine, s) == [("insert", 1), ("update", 1)]
