"""Lock and atomic counter: Clock-driven cases on the in-process backend,
concurrency on both backends."""
from __future__ import annotations

import pytest
import pytest_twisted
from hypothesis import given, strategies as st
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.task import Clock, deferLater
from twisted.trial.unittest import SynchronousTestCase

from pushengine.memcache import AtomicCounter, InMemoryCache, Lock, LockNotAcquired


class LockTests(SynchronousTestCase):
    def setUp(self):
        self.clock = Clock()
        self.cache = InMemoryCache(self.clock)

    def lock(self, **kwargs):
        return Lock(self.cache, self.clock, "job", **kwargs)

    def test_one_holder_at_a_time(self):
        a, b = self.lock(), self.lock()
        self.assertTrue(self.successResultOf(a.try_acquire()))
        self.assertFalse(self.successResultOf(b.try_acquire()))
        self.assertTrue(self.successResultOf(a.release()))
        self.assertTrue(self.successResultOf(b.try_acquire()))

    def test_an_expired_holder_never_frees_the_next_holders_lock(self):
        a, b = self.lock(ttl=5), self.lock(ttl=5)
        self.successResultOf(a.try_acquire())
        self.clock.advance(5)  # a died or stalled: the lock expired
        self.assertTrue(self.successResultOf(b.try_acquire()))
        self.assertFalse(self.successResultOf(a.release()))
        self.assertFalse(self.successResultOf(self.lock().try_acquire()))

    def test_acquire_waits_on_the_clock(self):
        a, b = self.lock(), self.lock(retry_interval=0.5)
        self.successResultOf(a.try_acquire())
        d = b.acquire(wait=2)
        self.clock.advance(1)
        self.assertNoResult(d)
        self.successResultOf(a.release())
        self.clock.advance(0.5)
        self.assertTrue(self.successResultOf(d))

    def test_acquire_gives_up_after_the_wait(self):
        a, b = self.lock(), self.lock(retry_interval=0.5)
        self.successResultOf(a.try_acquire())
        d = b.acquire(wait=2)
        self.clock.advance(2)
        self.assertFalse(self.successResultOf(d))

    def test_run_locked_frees_the_lock_on_error(self):
        def boom():
            raise RuntimeError("boom")

        self.failureResultOf(self.lock().run_locked(boom), RuntimeError)
        self.assertTrue(self.successResultOf(self.lock().try_acquire()))

    def test_run_locked_returns_the_result_and_refuses_when_taken(self):
        self.assertEqual(self.successResultOf(self.lock().run_locked(lambda x: x * 2, 21)), 42)
        self.successResultOf(self.lock().try_acquire())
        self.failureResultOf(self.lock().run_locked(lambda: 1), LockNotAcquired)


class CounterTests(SynchronousTestCase):
    def test_counts_from_nothing_and_survives_eviction(self):
        cache = InMemoryCache(Clock())
        counter = AtomicCounter(cache, "hits")
        self.assertEqual(self.successResultOf(counter.value()), 0)
        self.assertEqual(self.successResultOf(counter.incr()), 1)
        self.assertEqual(self.successResultOf(counter.incr(4)), 5)
        self.successResultOf(cache.delete("hits"))  # evicted
        self.assertEqual(self.successResultOf(counter.incr(2)), 2)
        self.assertEqual(self.successResultOf(counter.decr(5)), 0)
        self.successResultOf(counter.reset(7))
        self.assertEqual(self.successResultOf(counter.value()), 7)

    def test_the_add_race_is_retried_as_incr(self):
        cache = InMemoryCache(Clock())
        real_add = cache.add

        def add_after_someone_else(key, value, expire=0):
            cache.add = real_add
            self.successResultOf(real_add(key, b"10"))  # another client won
            return real_add(key, value, expire)

        cache.add = add_after_someone_else
        self.assertEqual(self.successResultOf(AtomicCounter(cache, "c").incr()), 11)


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 1000)), max_size=30))
def test_counter_follows_the_model(steps):
    cache = InMemoryCache(Clock())
    counter = AtomicCounter(cache, "c")
    model = 0
    for up, delta in steps:
        d = counter.incr(delta) if up else counter.decr(delta)
        model = model + delta if up else max(0, model - delta)
        results = []
        d.addCallback(results.append)
        assert results == [model]


@pytest_twisted.ensureDeferred
async def test_ten_concurrent_clients_lose_no_increment(make_cache):
    clients = [AtomicCounter(make_cache(), "shared") for _ in range(10)]
    # all launched before any answer: the first ones race to create the key
    results = await gatherResults([c.incr() for _ in range(50) for c in clients])
    assert sorted(results) == list(range(1, 501))
    assert await clients[0].value() == 500


@pytest_twisted.ensureDeferred
async def test_two_clients_never_hold_one_lock(make_cache, reactor):
    caches = [make_cache() for _ in range(10)]
    taken = await gatherResults([Lock(c, reactor, "one").try_acquire() for c in caches])
    assert taken.count(True) == 1


@pytest_twisted.ensureDeferred
async def test_run_locked_serialises_read_modify_write(make_cache, reactor):
    caches = [make_cache() for _ in range(5)]
    await caches[0].set("total", b"0")
    holders = []

    async def bump(cache):
        holders.append(1)
        assert len(holders) == 1, "two holders at once"
        value = int(await cache.get("total"))
        await deferLater(reactor, 0, lambda: None)  # let the others try
        await cache.set("total", b"%d" % (value + 1))
        holders.pop()

    async def worker(cache):
        lock = Lock(cache, reactor, "rmw", retry_interval=0.001)
        for _ in range(6):
            await lock.run_locked(bump, cache, wait=10)

    await gatherResults([Deferred.fromCoroutine(worker(c)) for c in caches])
    assert int(await caches[0].get("total")) == 30


@pytest_twisted.ensureDeferred
async def test_hold_as_an_async_context(make_cache, reactor):
    cache = make_cache()
    lock = Lock(cache, reactor, "ctx")
    with pytest.raises(RuntimeError):
        async with lock.hold():
            assert not await Lock(cache, reactor, "ctx").try_acquire()
            raise RuntimeError("inside")
    assert await Lock(cache, reactor, "ctx").try_acquire()
