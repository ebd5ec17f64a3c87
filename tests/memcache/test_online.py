"""Online counters: once per period per session, shared across nodes,
never failing the caller."""
from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet.defer import fail, gatherResults
from twisted.trial.unittest import SynchronousTestCase

from pushengine.memcache import CacheUnavailable, InMemoryCache
from pushengine.memcache.online import OnlineCounter

from tests.memcache.test_visitors import start_clock


class OnlineCounterTests(SynchronousTestCase):
    def setUp(self):
        self.clock = start_clock()
        self.cache = InMemoryCache(self.clock)
        self.online = OnlineCounter(self.cache, self.clock, period=60)

    def count(self, key=None, online=None):
        return self.successResultOf((online or self.online).count(key))

    def test_a_polling_session_counts_once_per_period(self):
        for _ in range(10):
            self.successResultOf(self.online.touch("s1", ["ViewA(limit=10)"]))
            self.clock.advance(5)
        self.successResultOf(self.online.touch("s2", ["ViewA(limit=10)", "ViewB(limit=5)"]))
        self.assertEqual(self.count(), 2)
        self.assertEqual(self.count("ViewA(limit=10)"), 2)
        self.assertEqual(self.count("ViewB(limit=5)"), 1)
        self.assertEqual(self.count("Nobody"), 0)

    def test_a_new_view_counts_within_the_period(self):
        self.successResultOf(self.online.touch("s1", ["A"]))
        self.successResultOf(self.online.touch("s1", ["A", "B"]))
        self.assertEqual((self.count(), self.count("A"), self.count("B")), (1, 1, 1))

    def test_sessions_that_stop_polling_fade_out(self):
        self.successResultOf(self.online.touch("s1"))
        self.successResultOf(self.online.touch("s2"))
        self.clock.advance(60)
        self.successResultOf(self.online.touch("s1"))
        self.assertEqual(self.count(), 2)  # the last full period still had both
        self.clock.advance(60)
        self.successResultOf(self.online.touch("s1"))
        self.assertEqual(self.count(), 1)
        self.clock.advance(120)
        self.assertEqual(self.count(), 0)

    def test_the_ring_is_smoother(self):
        online = OnlineCounter(self.cache, self.clock, period=60, slots=3, prefix="smooth")
        for minute, sessions in enumerate([4, 4, 1]):
            for s in range(sessions):
                self.successResultOf(online.touch(f"s{s}"))
            self.clock.advance(60)
        self.assertEqual(self.count(online=online), 3)  # (4 + 4 + 1) / 3

    def test_an_evicted_key_reads_as_what_is_left(self):
        self.successResultOf(self.online.touch("s1", ["A"]))
        self.successResultOf(self.online.touch("s2", ["A"]))
        for key in list(self.cache._items):
            self.successResultOf(self.cache.delete(key))
        self.assertEqual(self.count("A"), 0)
        self.successResultOf(self.online.touch("s3", ["A"]))
        self.assertEqual(self.count("A"), 1)

    def test_cache_down_never_fails_the_caller(self):
        class Down:
            def __getattr__(self, name):
                return lambda *a, **k: fail(CacheUnavailable("memcached down"))

        online = OnlineCounter(Down(), self.clock)
        self.assertIsNone(self.successResultOf(online.touch("s1", ["A"])))
        self.assertIsNone(self.successResultOf(online.touch("s2", ["A"])))
        self.assertEqual(self.successResultOf(online.count()), 0)
        self.assertEqual(self.successResultOf(online.count("A")), 0)
        self.assertEqual(online.stats()["errors"], 4)

    def test_forget_and_memory_per_period(self):
        self.successResultOf(self.online.touch("s1"))
        self.online.forget("s1")
        self.assertEqual(self.online.stats()["sessions_counted"], 0)
        self.successResultOf(self.online.touch("s2"))
        self.clock.advance(60)
        self.successResultOf(self.online.touch("s3"))
        self.assertEqual(self.online.stats()["sessions_counted"], 1)

    def test_bad_settings_fail_at_once(self):
        with pytest.raises(ValueError):
            OnlineCounter(self.cache, self.clock, period=0)


@pytest.mark.service
@pytest_twisted.ensureDeferred
async def test_two_nodes_add_into_one_figure(memcached, client_factory):
    clock = start_clock()
    nodes = [OnlineCounter(client_factory([memcached.address]), clock, period=60) for _ in range(2)]
    await nodes[0].cache.flush_all()
    # sessions 0-29 sit on node 0, 30-59 on node 1; each polls three times
    touches = [
        nodes[0 if s < 30 else 1].touch(f"session{s}", ["Live(limit=10)"] + (["Mine(user=1)"] if s % 2 else []))
        for _ in range(3)
        for s in range(60)
    ]
    await gatherResults(touches)
    assert await nodes[0].count() == 60
    assert await nodes[1].count() == 60
    assert await nodes[1].count("Live(limit=10)") == 60
    assert await nodes[0].count("Mine(user=1)") == 30
    clock.advance(60)  # a new period: the figure is the last full one until it fills
    await gatherResults([nodes[1].touch(f"session{s}") for s in range(10)])
    assert await nodes[0].count() == 60
