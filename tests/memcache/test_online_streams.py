"""Counting held streams online in one pass per period (``touch_many``):
the same figures as one ``touch`` per stream per run of the timer, at one
memcached operation per view key."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from pushengine.memcache import InMemoryCache
from pushengine.memcache.online import OnlineCounter
from pushengine.memcache.visitors import VisitorCounter
from tests.http.harness import ClockNode, Http, Rpc

PERIOD = 60
SESSIONS = [f"s{i}" for i in range(5)]
KEYS = ["A", "B", "C"]


class Counting(InMemoryCache):
    """The in-process cache, counting the operations that count."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.ops = 0

    def incr(self, key, delta=1):
        self.ops += 1
        return super().incr(key, delta)

    def add(self, key, value, expire=0):
        self.ops += 1
        return super().add(key, value, expire)


class Model:
    """Sessions attaching, detaching, polling, subscribing and moving in,
    counted by two nodes' worth of counters: ``ref`` counts each held
    stream with ``touch`` at every run of the timer (as the engine did),
    ``new`` makes one ``touch_many`` pass per period."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.ref = OnlineCounter(InMemoryCache(self.clock), self.clock, period=PERIOD)
        self.new = OnlineCounter(InMemoryCache(self.clock), self.clock, period=PERIOD)
        self.subs: dict[str, set[str]] = {}
        self.held: set[str] = set()

    def both(self, call, *args) -> None:
        for online in (self.ref, self.new):
            getattr(online, call)(*args)

    def step(self, op: tuple) -> None:
        kind, sid, key = op
        subs = self.subs.setdefault(sid, set())
        if kind == "attach":
            self.held.add(sid)
            self.both("touch", sid, set(subs))
        elif kind == "detach":
            self.held.discard(sid)
        elif kind == "poll":                   # a poll replaces a stream
            self.held.discard(sid)
            self.both("touch", sid, set(subs))
        elif kind == "subscribe":
            subs.add(key)
            self.both("touch", sid, set(subs))
        elif kind == "unsubscribe":
            subs.discard(key)
        elif kind == "resume":                 # moved here; counted there in n or n - 1
            n = int(self.clock.seconds() // PERIOD)
            self.both("mark_counted", sid, set(subs), n - KEYS.index(key) % 2)
            self.held.add(sid)
            self.both("touch", sid, set(subs))
        elif kind == "tick":
            for s in sorted(self.held):
                self.ref.touch(s, set(self.subs[s]))
            if self.new.streams_due():
                self.new.touch_many((s, set(self.subs[s])) for s in sorted(self.held))
        elif kind == "advance":
            self.clock.advance(KEYS.index(key) * 25 + 5)

    def figures(self, online: OnlineCounter) -> list:
        out = []
        for name in ["online:all", *(f"online:view:{k}" for k in KEYS)]:
            counts = VisitorCounter(online.cache, self.clock, name, PERIOD).counts()
            out.append(counts.result)
        return out


ops = st.tuples(
    st.sampled_from(["attach", "detach", "poll", "subscribe", "unsubscribe", "resume",
                     "tick", "tick", "advance", "advance"]),
    st.sampled_from(SESSIONS), st.sampled_from(KEYS))


@settings(max_examples=300, deadline=None)
@given(st.lists(ops, max_size=60))
def test_one_pass_per_period_gives_the_figures_of_one_touch_per_stream(steps):
    model = Model()
    for op in steps:
        model.step(op)
        assert model.figures(model.new) == model.figures(model.ref), op


def test_a_pass_costs_one_operation_per_figure_and_runs_once_per_period():
    clock = Clock()
    clock.advance(1_700_000_000 - 1_700_000_000 % PERIOD)
    cache = Counting(clock)
    online = OnlineCounter(cache, clock, period=PERIOD)
    held = [(f"s{i}", [KEYS[i % 3]]) for i in range(3000)]
    assert online.streams_due()
    online.touch_many(held)
    assert cache.ops == 1 + 3 + 4                # incr all, 3 keys; + the adds that created them
    assert not online.streams_due()
    clock.advance(PERIOD - 1)
    assert not online.streams_due()              # the rest of the period: nothing to do
    clock.advance(1)
    assert online.streams_due()                  # the turn: a new pass
    online.touch("s0", ["A"])                    # polled first in the new period
    cache.ops = 0
    online.touch_many(held)
    assert cache.ops == 2 + 2 * 2                # all and A exist: incr; B and C: incr, add
    figures = [current(online, k) for k in (None, *KEYS)]
    assert figures == [3000, 1000, 1000, 1000]


def current(online: OnlineCounter, key: str | None = None) -> int:
    """This period's figure so far (``count`` is the larger of it and the last)."""
    name = "online:all" if key is None else f"online:view:{key}"
    return VisitorCounter(online.cache, online.clock, name, PERIOD).counts().result[1] or 0


def test_the_node_counts_its_streams_once_per_period():
    node = ClockNode("--online-period", "60")
    node.clock.advance(1_700_000_000 - 1_700_000_000 % PERIOD + 1)
    cache = Counting(node.clock)
    node.online.cache = cache
    rpc = Rpc(Http(node.web.resource()))

    class Stream:
        holds_session = True

        def notify(self, session) -> None:
            pass

        def close(self) -> None:
            pass

    sids = [rpc("session.create") for _ in range(40)]
    for i, sid in enumerate(sids):
        rpc("stream.subscribe_public_live", sid, 5 + i % 4)  # four view keys
    streams = sids[:30]
    for sid in streams:
        node.engine.sessions.attach(node.engine.sessions.get(sid), Stream())
    node.clock.advance(PERIOD)                   # a new period: nobody counted
    cache.ops = 0
    node.api.touch_streams()
    assert cache.ops <= 2 * (1 + 4)              # an incr (and an add) per figure
    node.api.touch_streams()                     # later runs within the period
    node.clock.advance(10)
    node.api.touch_streams()
    assert cache.ops <= 2 * (1 + 4)
    assert current(node.online) == 30
    keys = {key for sid in streams for key in node.engine.sessions.get(sid).subs}
    assert len(keys) == 4 and sum(current(node.online, k) for k in keys) == 30
