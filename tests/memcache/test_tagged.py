"""Tagged entries: invalidation by tag, and one rebuild at a time."""
from __future__ import annotations

import pytest_twisted
from twisted.internet.defer import Deferred, fail, gatherResults
from twisted.internet.task import deferLater
from twisted.trial.unittest import SynchronousTestCase

from pushengine.memcache import CacheUnavailable, InMemoryCache, TaggedCache

from tests.memcache.test_visitors import start_clock


class Rebuilds:
    """A rebuild function that counts calls and may be held pending."""

    def __init__(self, hold: bool = False) -> None:
        self.calls = 0
        self.hold = hold
        self.pending: list[Deferred] = []

    def __call__(self):
        self.calls += 1
        if self.hold:
            d = Deferred()
            self.pending.append(d)
            return d
        return b"value-%d" % self.calls


class TaggedCacheTests(SynchronousTestCase):
    def setUp(self):
        self.clock = start_clock()
        self.cache = InMemoryCache(self.clock)

    def node(self, **kwargs) -> TaggedCache:
        kwargs.setdefault("poll", 0.1)
        return TaggedCache(self.cache, self.clock, **kwargs)

    def get(self, tc, rebuild, tags=("t",), **kwargs):
        return tc.get_or_rebuild("k", list(tags), rebuild, **kwargs)

    def test_served_until_a_tag_is_invalidated(self):
        tc, rebuild = self.node(), Rebuilds()
        self.assertEqual(self.successResultOf(self.get(tc, rebuild, ("a", "b"))), b"value-1")
        self.assertEqual(self.successResultOf(self.get(tc, rebuild, ("a", "b"))), b"value-1")
        self.successResultOf(tc.invalidate("b"))
        self.assertEqual(self.successResultOf(self.get(tc, rebuild, ("a", "b"))), b"value-2")
        self.successResultOf(tc.invalidate("a"))
        self.assertEqual(self.successResultOf(tc.get("k", ["a", "b"])), None)
        self.assertEqual(rebuild.calls, 2)

    def test_invalidation_reaches_every_node(self):
        one, two, rebuild = self.node(), self.node(), Rebuilds()
        self.successResultOf(self.get(one, rebuild))
        self.successResultOf(two.invalidate("t"))
        self.assertEqual(self.successResultOf(self.get(one, rebuild)), b"value-2")

    def test_ttl_makes_an_entry_stale(self):
        tc, rebuild = self.node(), Rebuilds()
        self.successResultOf(self.get(tc, rebuild, ttl=10))
        self.clock.advance(9)
        self.assertEqual(self.successResultOf(self.get(tc, rebuild, ttl=10)), b"value-1")
        self.clock.advance(1)
        self.assertEqual(self.successResultOf(self.get(tc, rebuild, ttl=10)), b"value-2")

    def test_an_evicted_tag_version_invalidates(self):
        tc, rebuild = self.node(), Rebuilds()
        self.successResultOf(self.get(tc, rebuild))
        self.successResultOf(self.cache.delete(tc.tag_key("t")))
        self.assertEqual(self.successResultOf(self.get(tc, rebuild)), b"value-2")

    def test_stale_value_served_while_another_node_rebuilds(self):
        one, two = self.node(), self.node()
        self.successResultOf(self.get(one, Rebuilds()))  # value-1 stored
        self.successResultOf(one.invalidate("t"))
        slow = Rebuilds(hold=True)
        rebuilding = self.get(one, slow)
        self.assertNoResult(rebuilding)
        other = Rebuilds()
        self.assertEqual(self.successResultOf(self.get(two, other)), b"value-1")  # stale
        self.assertEqual(other.calls, 0)
        slow.pending[0].callback(b"fresh")
        self.assertEqual(self.successResultOf(rebuilding), b"fresh")
        self.assertEqual(self.successResultOf(self.get(two, other)), b"fresh")
        self.assertEqual(other.calls, 0)

    def test_cold_start_waits_for_the_one_rebuilder(self):
        nodes = [self.node() for _ in range(5)]
        slow = Rebuilds(hold=True)
        answers = [self.get(n, slow) for n in nodes]
        self.assertEqual(slow.calls, 1)
        self.clock.advance(1)
        for d in answers:
            self.assertNoResult(d)
        slow.pending[0].callback(b"built once")
        self.clock.advance(0.1)
        for d in answers:
            self.assertEqual(self.successResultOf(d), b"built once")
        self.assertEqual(slow.calls, 1)

    def test_a_rebuilder_that_hangs_is_not_waited_for_forever(self):
        one, two = self.node(), self.node(wait=3)
        hung = Rebuilds(hold=True)
        self.get(one, hung)
        d = self.get(two, Rebuilds())
        self.clock.advance(2.9)
        self.assertNoResult(d)
        self.clock.advance(0.2)
        self.assertEqual(self.successResultOf(d), b"value-1")

    def test_a_failed_rebuild_frees_the_lock(self):
        tc = self.node()
        self.failureResultOf(self.get(tc, lambda: fail(ValueError("backend down"))), ValueError)
        self.assertEqual(self.successResultOf(self.get(tc, Rebuilds())), b"value-1")

    def test_a_failed_rebuild_serves_the_stale_value(self):
        tc = self.node()
        self.successResultOf(self.get(tc, Rebuilds()))
        self.successResultOf(tc.invalidate("t"))
        self.assertEqual(
            self.successResultOf(self.get(tc, lambda: fail(ValueError("backend down")))), b"value-1"
        )
        self.flushLoggedErrors(ValueError)

    def test_invalidated_during_the_rebuild_stays_stale(self):
        tc = self.node()
        slow = Rebuilds(hold=True)
        d = self.get(tc, slow)
        self.successResultOf(tc.invalidate("t"))  # the data changed meanwhile
        slow.pending[0].callback(b"already old")
        self.assertEqual(self.successResultOf(d), b"already old")
        self.assertIsNone(self.successResultOf(tc.get("k", ["t"])))

    def test_cache_down_rebuilds_directly(self):
        class Down:
            def __getattr__(self, name):
                return lambda *a, **k: fail(CacheUnavailable("down"))

        tc = TaggedCache(Down(), self.clock)
        self.assertEqual(self.successResultOf(self.get(tc, Rebuilds())), b"value-1")


@pytest_twisted.ensureDeferred
async def test_many_nodes_cold_start_rebuild_once(make_cache, reactor):
    calls = []

    async def rebuild():
        calls.append(1)
        await deferLater(reactor, 0.05, lambda: None)  # a slow backend
        return b"expensive"

    nodes = [TaggedCache(make_cache(), reactor, poll=0.01) for _ in range(10)]
    answers = await gatherResults(
        [Deferred.fromCoroutine(_call(n, rebuild)) for n in nodes]
    )
    assert answers == [b"expensive"] * 10
    assert len(calls) == 1
    await nodes[3].invalidate("view:x")
    assert await nodes[5].get("entry", ["view:x"]) is None


async def _call(node, rebuild):
    return await node.get_or_rebuild("entry", ["view:x"], rebuild, ttl=60)
