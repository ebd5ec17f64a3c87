"""Visitor counters: the shadow/current pair and the ring of slots."""
from __future__ import annotations

import pytest_twisted
from hypothesis import given, strategies as st
from twisted.internet.defer import gatherResults
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from pushengine.memcache import InMemoryCache, SlotCounter, VisitorCounter
from tests.deferreds import fired as result

T = 60


def start_clock(offset: float = 0.0) -> Clock:
    clock = Clock()
    clock.advance(1_700_000_040 + offset)  # a period boundary (multiple of 60)
    return clock


class VisitorCounterTests(SynchronousTestCase):
    def setUp(self):
        self.clock = start_clock()
        self.cache = InMemoryCache(self.clock)
        self.counter = VisitorCounter(self.cache, self.clock, "visits", period=T)

    def test_current_becomes_shadow_then_expires(self):
        for v in "abc":
            self.assertTrue(result(self.counter.hit(v)))
        self.assertEqual(result(self.counter.counts()), (None, 3))
        self.clock.advance(T)
        result(self.counter.hit("a"))
        self.assertEqual(result(self.counter.counts()), (3, 1))
        self.assertEqual(result(self.counter.count()), 3)
        self.clock.advance(T)
        self.assertEqual(result(self.counter.counts()), (1, None))
        self.clock.advance(T)
        self.assertEqual(result(self.counter.count()), 0)

    def test_expiry_is_corrected_by_the_time_passed(self):
        self.clock.advance(45)  # 45 s into the period: the key lives 2T - 45
        result(self.counter.incr())
        n = int(self.clock.seconds() // T)
        self.clock.advance(2 * T - 45 - 1)
        self.assertIsNotNone(result(self.cache.get(f"visits:{n}")))
        self.clock.advance(1)
        self.assertIsNone(result(self.cache.get(f"visits:{n}")))

    def test_a_visitor_counts_once_per_period(self):
        self.assertTrue(result(self.counter.hit("a")))
        self.clock.advance(T - 1)
        self.assertFalse(result(self.counter.hit("a")))
        self.clock.advance(1)
        self.assertTrue(result(self.counter.hit("a")))

    def test_evicted_keys_read_as_what_is_left(self):
        result(self.counter.incr(5))
        self.clock.advance(T)
        result(self.counter.incr(2))
        n = int(self.clock.seconds() // T)
        result(self.cache.delete(f"visits:{n - 1}"))  # the shadow is evicted
        self.assertEqual(result(self.counter.count()), 2)


@given(st.lists(st.tuples(st.floats(0, 3 * T - 0.001), st.sampled_from("abcdefgh")), max_size=40))
def test_each_visitor_once_per_period(visits):
    """Whatever the order of visits, each period's count is the number of
    distinct visitors in it."""
    clock = start_clock()
    start = clock.seconds()
    cache = InMemoryCache(clock)
    counter = VisitorCounter(cache, clock, "v", period=T)
    periods: dict[int, set] = {}
    for at, visitor in sorted(visits):
        clock.advance(start + at - clock.seconds())
        result(counter.hit(visitor))
        periods.setdefault(int(clock.seconds() // T), set()).add(visitor)
        n = int(clock.seconds() // T)
        shadow, current = result(counter.counts())
        assert current == len(periods[n])
        assert shadow == (len(periods[n - 1]) if n - 1 in periods else None)


class SlotCounterTests(SynchronousTestCase):
    def test_mean_of_the_complete_slots(self):
        clock = start_clock()
        cache = InMemoryCache(clock)
        ring = SlotCounter(cache, clock, "ring", slot=T, slots=3)
        result(ring.incr(3))
        self.assertEqual(result(ring.count()), 3)  # only a partial slot yet
        clock.advance(T)
        for count in (6, 9):
            result(ring.incr(count))
            clock.advance(T)
        self.assertEqual(result(ring.count()), 6)  # (3 + 6 + 9) / 3
        result(ring.incr(100))  # the current slot does not count yet
        self.assertEqual(result(ring.count()), 6)
        clock.advance(T)  # the slot of 3 leaves the window
        self.assertEqual(result(ring.count()), round((6 + 9 + 100) / 3))
        self.assertEqual(len(result(ring.series())), 3)  # the slot of 3 expired

    def test_partial_slot_when_nothing_complete(self):
        clock = start_clock()
        ring = SlotCounter(InMemoryCache(clock), clock, "ring", slot=T, slots=5)
        result(ring.hit("a"))
        result(ring.hit("a"))
        result(ring.hit("b"))
        self.assertEqual(result(ring.count()), 2)


@pytest_twisted.ensureDeferred
async def test_nodes_count_a_visitor_once(make_cache):
    clock = start_clock()
    nodes = [VisitorCounter(make_cache(clock), clock, "shared", period=T) for _ in range(4)]
    visitors = [f"user{i}" for i in range(20)]
    # every node sees every visitor, all at once
    counted = await gatherResults([n.hit(v) for v in visitors for n in nodes])
    assert counted.count(True) == 20
    assert await nodes[0].count() == 20
    clock.advance(T)
    await gatherResults([n.hit(v) for v in visitors[:5] for n in nodes])
    assert await nodes[1].counts() == (20, 5)
