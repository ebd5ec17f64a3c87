"""The in-process backend on a Clock: expiry, eviction and edge cases
(the rest of its semantics is checked against real memcached in
test_semantics)."""
from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from pushengine.memcache import (
    BadValue,
    InMemoryCache,
    KeyExists,
    NotFound,
    ValueTooLarge,
)


class InMemoryCacheTests(SynchronousTestCase):
    def setUp(self):
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.cache = InMemoryCache(self.clock, max_items=100)

    def value(self, key):
        return self.successResultOf(self.cache.get(key))

    def test_relative_expiry_in_whole_seconds(self):
        self.successResultOf(self.cache.set("k", b"v", 10))
        self.clock.advance(9.9)
        self.assertEqual(self.value("k"), b"v")
        self.clock.advance(0.1)
        self.assertIsNone(self.value("k"))

    def test_zero_never_expires(self):
        self.successResultOf(self.cache.set("k", b"v", 0))
        self.clock.advance(10 * 365 * 86400)
        self.assertEqual(self.value("k"), b"v")

    def test_more_than_30_days_is_an_absolute_time(self):
        now = int(self.clock.seconds())
        self.successResultOf(self.cache.set("abs", b"v", now + 100))
        self.successResultOf(self.cache.set("rel", b"v", 30 * 86400))
        self.clock.advance(99)
        self.assertEqual(self.value("abs"), b"v")
        self.clock.advance(1)
        self.assertIsNone(self.value("abs"))
        self.assertEqual(self.value("rel"), b"v")
        # an absolute time in the past: gone at once
        self.successResultOf(self.cache.set("old", b"v", now - 10))
        self.assertIsNone(self.value("old"))

    def test_negative_expiry_is_expired_at_once(self):
        self.successResultOf(self.cache.set("k", b"v", -1))
        self.assertIsNone(self.value("k"))

    def test_expired_keys_can_be_added_again(self):
        self.successResultOf(self.cache.add("k", b"1", 5))
        self.failureResultOf(self.cache.add("k", b"2", 5), KeyExists)
        self.clock.advance(5)
        self.assertTrue(self.successResultOf(self.cache.add("k", b"3", 5)))
        self.assertEqual(self.value("k"), b"3")

    def test_incr_decr_append_keep_the_expiry(self):
        self.successResultOf(self.cache.set("n", b"1", 10))
        self.successResultOf(self.cache.set("s", b"a", 10))
        self.clock.advance(5)
        self.successResultOf(self.cache.incr("n"))
        self.successResultOf(self.cache.append("s", b"b"))
        self.clock.advance(5)
        self.failureResultOf(self.cache.incr("n"), NotFound)
        self.failureResultOf(self.cache.append("s", b"c"), NotFound)

    def test_incr_wraps_and_decr_stops_at_zero(self):
        self.successResultOf(self.cache.set("n", b"%d" % (2**64 - 1)))
        self.assertEqual(self.successResultOf(self.cache.incr("n", 2)), 1)
        self.assertEqual(self.successResultOf(self.cache.decr("n", 5)), 0)
        self.successResultOf(self.cache.set("x", b"12a"))
        self.failureResultOf(self.cache.incr("x"), BadValue)
        self.failureResultOf(self.cache.incr("n", -1), ValueError)

    def test_values_are_bytes_and_bounded(self):
        self.failureResultOf(self.cache.set("k", "text"), TypeError)
        self.failureResultOf(self.cache.set("k", b"x" * 1_000_001), ValueTooLarge)

    def test_least_recently_used_are_evicted(self):
        for i in range(100):
            self.successResultOf(self.cache.set(f"k{i}", b"v"))
        self.value("k0")  # used: kept
        self.successResultOf(self.cache.set("new", b"v"))
        self.assertEqual(self.value("k0"), b"v")
        self.assertIsNone(self.value("k1"))
        self.assertEqual(self.cache.stats()["evictions"], 1)

    def test_cas(self):
        self.assertIsNone(self.successResultOf(self.cache.gets("k")))
        self.successResultOf(self.cache.set("k", b"1"))
        value, token = self.successResultOf(self.cache.gets("k"))
        self.successResultOf(self.cache.set("k", b"2"))
        self.failureResultOf(self.cache.cas("k", b"3", token), KeyExists)
        value, token = self.successResultOf(self.cache.gets("k"))
        self.assertTrue(self.successResultOf(self.cache.cas("k", b"3", token)))
        self.successResultOf(self.cache.delete("k"))
        self.failureResultOf(self.cache.cas("k", b"4", token), NotFound)

    def test_health_and_stats(self):
        self.value("missing")
        self.successResultOf(self.cache.set("k", b"v"))
        self.value("k")
        stats = self.cache.stats()
        self.assertEqual((stats["hits"], stats["misses"], stats["items"]), (1, 1, 1))
        self.assertTrue(self.cache.health()["up"])


def test_expiry_rule_boundaries():
    from pushengine.memcache.interface import MAX_RELATIVE_EXPIRE, expiry_deadline

    assert expiry_deadline(0, 100.0) is None
    assert expiry_deadline(MAX_RELATIVE_EXPIRE, 100.0) == 100.0 + MAX_RELATIVE_EXPIRE
    assert expiry_deadline(MAX_RELATIVE_EXPIRE + 1, 100.0) == MAX_RELATIVE_EXPIRE + 1
    assert expiry_deadline(-5, 100.0) == 100.0
