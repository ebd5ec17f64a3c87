"""Interest-based routing without a broker: the routing and binding keys
(hypothesis), the topics a view needs, the reference-counted bindings on a
fake channel and a Clock, and the registry reading a view's initial state
only after its bindings are confirmed."""
from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock

from pushengine.amqp.interest import Bindings
from pushengine.amqp.routing import (
    BROADCAST, MAX_WORD, binding_key, change_keys, plan, routing_key, routes_of, value_word)
from pushengine.core.changes import Change
from pushengine.core.topics import ANY, Topic, covers, object_pins, pin
from pushengine.stores.memory import MemoryStore
from pushengine.views.registry import ViewRegistry
from pushengine.views.spec import parse_catalog
from tests.deferreds import fired, pending

# -- RabbitMQ's topic matching, as the broker does it -----------------------------


def topic_matches(binding: str, key: str) -> bool:
    """Whether a topic exchange routes ``key`` to ``binding``: words split on
    ``.``, ``*`` is one word, ``#`` zero or more."""
    def match(b: list[str], k: list[str]) -> bool:
        if not b:
            return not k
        if b[0] == "#":
            return any(match(b[1:], k[i:]) for i in range(len(k) + 1))
        if not k:
            return False
        return (b[0] == "*" or b[0] == k[0]) and match(b[1:], k[1:])
    return match(binding.split("."), key.split("."))


def test_the_matcher_is_rabbitmqs():
    assert topic_matches("Stream.#", "Stream.n1")
    assert topic_matches("Stream.#", "Stream")
    assert topic_matches("Stream.*.s2", "Stream.n1.s2")
    assert not topic_matches("Stream.*", "Stream.n1.s2")
    assert not topic_matches("Stream.n1", "Stream.n2")


# -- values, words and keys --------------------------------------------------------

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**53, max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=30))
short_texts = st.text(max_size=12)


@settings(max_examples=500, deadline=None)
@given(scalars, scalars)
def test_words_are_equal_exactly_for_json_equal_values(a, b):
    wa, wb = value_word(pin(a)), value_word(pin(b))
    if len(wa) <= MAX_WORD and len(wb) <= MAX_WORD:
        # escaping is injective: distinct values, distinct words
        assert (wa == wb) == (pin(a) == pin(b))
    for word in (wa, wb):
        assert "." not in word and word not in ("*", "#") and "*" not in word \
            and "#" not in word and word


def test_words_of_note():
    assert value_word(pin(340699)) == "n340699"
    assert value_word(pin(340699.0)) == "n340699"
    assert value_word(pin("340699")) == "s340699"
    assert value_word(pin(True)) == "t" and value_word(pin(1)) == "n1"
    assert value_word(pin(None)) == "z"
    assert value_word(pin("a.b")) == "sa%2Eb"
    assert value_word(pin("#")) == "s%23" and value_word(pin("*")) == "s%2A"
    assert value_word(pin("%2E")) == "s%252E"
    long = value_word(pin("x" * 300))
    assert long.startswith("%h") and len(long) == 42


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=300), st.lists(scalars, min_size=0, max_size=4))
def test_keys_fit_in_a_short_string_and_never_widen(type_, values):
    key = routing_key(type_, [pin(v) for v in values])
    assert len(key.encode()) <= 255
    assert len(key.split(".")) == 1 + len(values)
    assert "*" not in key and "#" not in key


pins_or_any = st.one_of(st.just(ANY), scalars.map(pin))


@settings(max_examples=800, deadline=None)
@given(st.sampled_from(["Stream", "Video.v2", "a*b"]),
       st.integers(min_value=1, max_value=3).flatmap(
           lambda n: st.tuples(st.lists(pins_or_any, min_size=n, max_size=n),
                               st.lists(scalars, min_size=n, max_size=n))))
def test_a_binding_sees_exactly_the_changes_of_its_topic(type_, case):
    wanted, values = case
    topic = Topic(type_, tuple(wanted))
    pins = tuple(pin(v) for v in values)
    routed = topic_matches(binding_key(topic), routing_key(type_, pins))
    assert routed == covers(topic, pins)
    # another type never reaches it
    assert not topic_matches(binding_key(topic), routing_key(type_ + "x", pins))
    assert not topic_matches(binding_key(topic), BROADCAST)


# -- the topics of a view ------------------------------------------------------------

VIEWS = {
    "types": {"Stream": {"id": "id", "route": ["user_id"]}, "Note": {"id": "id"}},
    "views": {
        "UserStreams": {"type": "Stream", "params": ["user_id"],
                        "where": {"user_id": "$user_id"}, "order": "-created_at"},
        "HomeStreams": {"type": "Stream", "params": ["users"],
                        "where": {"user_id": {"in": "$users"}}, "order": "-created_at"},
        "Mine": {"type": "Stream", "where": {"user_id": "$session.user"},
                 "order": "-created_at"},
        "Live": {"type": "Stream", "where": {"live": True}, "order": "-created_at"},
        "Notes": {"type": "Note", "order": "id"},
    },
}


def catalog():
    return parse_catalog(VIEWS)


def test_the_topics_of_views():
    c = catalog()
    assert c.routes == {"Stream": ["user_id"]}
    user = c.views["UserStreams"].bind({"user_id": 7}, None, None)
    assert user.topics() == {Topic("Stream", (pin(7),))}
    home = c.views["HomeStreams"].bind({"users": [1, 2, 2.0]}, None, None)
    assert home.topics() == {Topic("Stream", (pin(1),)), Topic("Stream", (pin(2),))}
    assert c.views["HomeStreams"].bind({"users": []}, None, None).topics() == set()
    many = c.views["HomeStreams"].bind({"users": list(range(100))}, None, None)
    assert len(many.topics()) == 100
    mine = c.views["Mine"].bind({}, "u1", None)
    assert mine.topics() == {Topic("Stream", (pin("u1"),))}
    assert c.views["Live"].bind({}, None, None).topics() == {Topic("Stream", (ANY,))}
    assert c.views["Notes"].bind({}, None, None).topics() == set()


def test_too_many_combinations_leave_a_field_unpinned():
    data = {"types": {"T": {"route": ["a", "b"]}},
            "views": {"V": {"type": "T", "params": ["xs", "ys"],
                            "where": {"a": {"in": "$xs"}, "b": {"in": "$ys"}}}}}
    view = parse_catalog(data).views["V"]
    topics = view.bind({"xs": list(range(20)), "ys": list(range(10))}, None, None).topics()
    assert len(topics) == 10 and all(t.values[0] is ANY for t in topics)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=4), st.one_of(st.none(), st.integers(0, 5)),
       st.booleans())
def test_every_object_a_view_can_show_is_routed_to_it(users, user_id, live):
    """The routing never keeps from a view an object it would show."""
    c = catalog()
    obj = {"id": 1, "live": live, "created_at": 1, "public": True}
    if user_id is not None:
        obj["user_id"] = user_id
    key = change_keys(Change("Stream", "upsert", 1, obj), c.routes)[0]
    bound = [(c.views["HomeStreams"].bind({"users": users}, None, None), users),
             (c.views["Live"].bind({}, None, None), None)]
    bound += [(c.views["UserStreams"].bind({"user_id": u}, None, None), [u]) for u in users]
    for view, pinned in bound:
        reached = any(topic_matches(binding_key(t), key) for t in view.topics())
        if view.predicate()(obj):
            assert reached
        if pinned is not None:            # pinned: reached only when it could show it
            assert reached == (user_id in pinned)


# -- what a change is published with -----------------------------------------------

ROUTES = {"Stream": ["user_id"]}


def test_change_keys():
    up = Change("Stream", "upsert", 1, {"id": 1, "user_id": 7})
    assert change_keys(up, ROUTES) == ("Stream.n7",)
    assert change_keys(Change("Stream", "upsert", 1, {"id": 1}), ROUTES) == ("Stream.z",)
    moved = Change("Stream", "upsert", 1, {"id": 1, "user_id": 8}, was={"user_id": 7})
    assert change_keys(moved, ROUTES) == ("Stream.n8", "Stream.n7")
    same = Change("Stream", "upsert", 1, {"id": 1, "user_id": 8}, was={"title": "x"})
    assert change_keys(same, ROUTES) == ("Stream.n8",)
    assert change_keys(Change("Stream", "delete", 1, {"id": 1}), ROUTES) == (BROADCAST,)
    assert change_keys(Change("Stream", "delete", 1, {"id": 1, "user_id": 7}), ROUTES) == \
        ("Stream.n7",)
    assert change_keys(Change("Note", "upsert", 1, {"id": 1}), ROUTES) == (BROADCAST,)


def test_a_batch_is_split_where_its_keys_change_and_keeps_its_order():
    changes = [Change("Stream", "upsert", i, {"id": i, "user_id": u})
               for i, u in enumerate([1, 1, 2, 1])]
    messages = plan(changes, ROUTES)
    assert [(len(batch), keys) for batch, keys in messages] == [
        (2, ("Stream.n1",)), (1, ("Stream.n2",)), (1, ("Stream.n1",))]
    assert [c for batch, _ in messages for c in batch] == changes


def test_routes_of_a_views_file():
    assert routes_of(VIEWS["types"]) == {"Stream": ["user_id"]}
    assert routes_of({"T": {"route": "a"}}) == {"T": ["a"]}
    with pytest.raises(ValueError):
        routes_of({"T": {"route": 5}})


# -- bindings: reference counts on a fake channel ------------------------------------


class FakeChannel:
    """Records queue.bind/unbind; each answers when the test says so."""

    def __init__(self, auto: bool = True):
        self.auto = auto
        self.calls: list[tuple[str, str]] = []
        self.answers: list[Deferred] = []

    def _call(self, kind: str, routing_key: str) -> Deferred:
        self.calls.append((kind, routing_key))
        if self.auto:
            return succeed(None)
        d: Deferred = Deferred()
        self.answers.append(d)
        return d

    def queue_bind(self, queue, exchange, routing_key):
        return self._call("bind", routing_key)

    def queue_unbind(self, queue, exchange, routing_key):
        return self._call("unbind", routing_key)

    def answer(self) -> None:
        self.answers.pop(0).callback(None)


A, B = Topic("Stream", (pin(1),)), Topic("Stream", (pin(2),))


def attached(clock=None, auto=True, linger=5.0):
    bindings = Bindings(clock or Clock(), linger=linger)
    channel = FakeChannel(auto)
    done = bindings.attach(channel, "q", "x")
    if auto:
        fired(done)
    return bindings, channel


def test_first_want_binds_last_release_unbinds_after_the_linger():
    clock = Clock()
    bindings, channel = attached(clock)
    assert channel.calls == [("bind", BROADCAST)]
    fired(bindings.want(A))
    fired(bindings.want(A))
    assert channel.calls[1:] == [("bind", "Stream.n1")]
    bindings.release(A)
    clock.advance(10)
    assert channel.calls[2:] == []
    bindings.release(A)
    clock.advance(4.9)
    assert channel.calls[2:] == []
    clock.advance(0.1)
    assert channel.calls[2:] == [("unbind", "Stream.n1")]
    assert bindings.bound == {BROADCAST} and bindings.counts == {}


def test_wanted_again_within_the_linger_keeps_the_binding():
    clock = Clock()
    bindings, channel = attached(clock)
    fired(bindings.want(A))
    bindings.release(A)
    clock.advance(3)
    fired(bindings.want(A))
    clock.advance(10)
    assert channel.calls == [("bind", BROADCAST), ("bind", "Stream.n1")]


def test_want_fires_only_when_the_broker_confirmed_the_binding():
    bindings, channel = attached(auto=False)
    channel.answer()                  # BROADCAST
    first, second = bindings.want(A), bindings.want(A)
    assert pending(first) and pending(second)
    assert channel.calls == [("bind", BROADCAST), ("bind", "Stream.n1")]
    channel.answer()
    fired(first), fired(second)


def test_operations_go_one_at_a_time_in_order():
    clock = Clock()
    bindings, channel = attached(clock, auto=False, linger=0)
    channel.answer()
    a = bindings.want(A)
    bindings.release(A)
    clock.advance(0)                  # the unbind waits behind the bind
    b = bindings.want(B)
    assert channel.calls[1:] == [("bind", "Stream.n1")]
    channel.answer()
    fired(a)
    assert channel.calls[2:] == [("unbind", "Stream.n1")]
    channel.answer()
    assert channel.calls[3:] == [("bind", "Stream.n2")]
    channel.answer()
    fired(b)
    assert bindings.bound == {BROADCAST, "Stream.n2"}


def test_wanted_during_its_unbind_binds_again_after_it():
    clock = Clock()
    bindings, channel = attached(clock, auto=False, linger=0)
    channel.answer()
    d = bindings.want(A)
    channel.answer()
    fired(d)
    bindings.release(A)
    clock.advance(0)
    assert channel.calls[-1] == ("unbind", "Stream.n1")
    again = bindings.want(A)          # the unbind is in flight
    assert pending(again)
    channel.answer()
    assert channel.calls[-1] == ("bind", "Stream.n1")
    channel.answer()
    fired(again)
    assert "Stream.n1" in bindings.bound


def test_wants_wait_for_the_connection_and_a_reconnection_binds_everything_again():
    clock = Clock()
    bindings = Bindings(clock)
    d = bindings.want(A)
    assert pending(d)
    channel = FakeChannel()
    fired(bindings.attach(channel, "q", "x"))
    fired(d)
    fired(bindings.want(B))
    bindings.release(B)
    bindings.detach()
    clock.advance(10)                  # B let go while disconnected
    again = FakeChannel()
    fired(bindings.attach(again, "q", "x"))
    assert again.calls == [("bind", BROADCAST), ("bind", "Stream.n1"), ("unbind", "Stream.n2")]
    assert bindings.bound == {BROADCAST, "Stream.n1"} and bindings.stale == set()


def test_wants_during_a_reconnection_wait_for_its_bindings():
    bindings = Bindings(Clock())
    fired(bindings.attach(FakeChannel(), "q", "x"))
    fired(bindings.want(A))
    fired(bindings.want(B))
    bindings.detach()
    channel = FakeChannel(auto=False)
    done = bindings.attach(channel, "q", "x")
    d, c = bindings.want(A), Topic("Stream", (pin(3),))
    e = bindings.want(c)
    # the keys go together, without waiting for each answer; a new key after them
    assert channel.calls == [("bind", BROADCAST), ("bind", "Stream.n1"), ("bind", "Stream.n2")]
    assert pending(d) and pending(done) and pending(e)
    channel.answer(), channel.answer()
    fired(d)
    assert pending(done) and bindings.bound == {BROADCAST, "Stream.n1"}
    channel.answer()
    fired(done)
    assert channel.calls[3:] == [("bind", "Stream.n3")] and pending(e)
    channel.answer()
    fired(e)


def test_a_reconnection_binds_a_window_of_keys_at_a_time():
    from pushengine.amqp.interest import WINDOW
    bindings = Bindings(Clock())
    topics = [Topic("Stream", (pin(i),)) for i in range(WINDOW + 10)]
    wants = [bindings.want(t) for t in topics]
    channel = FakeChannel(auto=False)
    done = bindings.attach(channel, "q", "x")
    assert len(channel.calls) == WINDOW
    for _ in range(11):
        channel.answer()
    assert len(channel.calls) == WINDOW + 11 and pending(done)
    while channel.answers:
        channel.answer()
    fired(done)
    assert all(not pending(w) for w in wants) and len(bindings.bound) == WINDOW + 11


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["want", "release", "tick", "flap"]),
                          st.sampled_from([A, B])), max_size=40))
def test_a_key_is_bound_while_anyone_holds_it(steps):
    clock = Clock()
    bindings, channel = attached(clock, linger=1.0)
    held = {A: 0, B: 0}
    for step, topic in steps:
        if step == "want":
            held[topic] += 1
            fired(bindings.want(topic))
        elif step == "release" and held[topic]:
            held[topic] -= 1
            bindings.release(topic)
        elif step == "tick":
            clock.advance(0.6)
        elif step == "flap":
            bindings.detach()
            fired(bindings.attach(FakeChannel(), "q", "x"))
        for t, n in held.items():
            if n:
                assert binding_key(t) in bindings.bound
    clock.advance(5)
    for t, n in held.items():
        assert (binding_key(t) in bindings.bound) == bool(n)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["open", "close"]),
                          st.one_of(st.none(), st.integers(0, 4))), max_size=30),
       st.lists(st.one_of(st.none(), st.integers(0, 5)), min_size=1, max_size=5))
def test_every_change_reaches_exactly_the_nodes_whose_views_could_show_it(steps, users):
    """Three nodes open and close per-user views (None: the catch-all view)
    through their bindings; then a change reaches a node (its queue's
    bindings, as the broker matches them) exactly when one of its open views
    is of the change's user or sees every user."""
    c = catalog()
    clock = Clock()
    nodes = []
    for _ in range(3):
        bindings, _channel = attached(clock, linger=1.0)
        nodes.append((bindings, Counter()))
    for n, action, user in steps:
        bindings, views = nodes[n]
        bound = (c.views["Live"].bind({}, None, None) if user is None
                 else c.views["UserStreams"].bind({"user_id": user}, None, None))
        if action == "open":
            views[user] += 1
            for t in bound.topics():
                fired(bindings.want(t))
        elif views[user]:
            views[user] -= 1
            for t in bound.topics():
                bindings.release(t)
    clock.advance(5)
    for user in users:
        obj = {"id": 1, "live": True, "created_at": 1, "public": True, "user_id": user}
        key = change_keys(Change("Stream", "upsert", 1, obj), c.routes)[0]
        for bindings, views in nodes:
            reached = any(topic_matches(b, key) for b in bindings.bound)
            assert reached == bool(views[None] or views[user])


# -- the registry: bind, then read -----------------------------------------------------


class HeldInterest:
    def __init__(self):
        self.wants: list[tuple[Topic, Deferred]] = []
        self.released: list[Topic] = []

    def want(self, topic):
        d: Deferred = Deferred()
        self.wants.append((topic, d))
        return d

    def release(self, topic):
        self.released.append(topic)


class CountingStore(MemoryStore):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.queries = 0

    def query(self, view, params, limit):
        self.queries += 1
        return super().query(view, params, limit)


def test_the_initial_state_is_read_after_the_binding_is_confirmed():
    c = catalog()
    store = CountingStore(c.id_fields)
    store.apply_changes([Change("Stream", "upsert", 1, {"id": 1, "user_id": 7, "public": True,
                                                         "created_at": 1})])
    interest = HeldInterest()
    registry = ViewRegistry(c, store, interest=interest)
    bound = c.views["UserStreams"].bind({"user_id": 7}, None, None)
    opened = registry.open(bound)
    assert [t for t, _ in interest.wants] == [Topic("Stream", (pin(7),))]
    assert store.queries == 0 and pending(opened)
    # a change that arrives once bound and before the read is kept over the store's
    registry.apply(Change("Stream", "upsert", 2, {"id": 2, "user_id": 7, "created_at": 2,
                                                  "public": True}))
    interest.wants[0][1].callback(None)
    assert store.queries == 1
    window = fired(opened)
    assert [o["id"] for o in window.state()] == [2, 1]
    # a second subscriber shares the query: no second want
    fired(registry.open(bound))
    assert len(interest.wants) == 1
    window.subscribers.clear()
    registry.close(window)
    assert interest.released == [Topic("Stream", (pin(7),))]


def test_a_failed_want_fails_the_subscription_and_releases():
    c = catalog()
    interest = HeldInterest()
    registry = ViewRegistry(c, CountingStore(c.id_fields), interest=interest)
    opened = registry.open(c.views["UserStreams"].bind({"user_id": 7}, None, None))
    interest.wants[0][1].errback(RuntimeError("no broker"))
    with pytest.raises(RuntimeError, match="no broker"):
        fired(opened)
    assert interest.released == [Topic("Stream", (pin(7),))]
    assert registry.queries == {}


def test_views_of_types_without_routing_fields_want_nothing():
    c = catalog()
    interest = HeldInterest()
    registry = ViewRegistry(c, CountingStore(c.id_fields), interest=interest)
    fired(registry.open(c.views["Notes"].bind({}, None, None)))
    assert interest.wants == []


def test_object_pins_treat_a_missing_field_as_null():
    assert object_pins({"a": 1}, ["a", "b"]) == (pin(1), pin(None))
    assert re.fullmatch(r"Stream\.z", routing_key("Stream", object_pins({}, ["user_id"])))
