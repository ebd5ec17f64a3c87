"""Event log, arrays and table."""
from __future__ import annotations

import pytest_twisted
from hypothesis import given, strategies as st
from twisted.internet.defer import gatherResults
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from pushengine.memcache import AppendArray, EventLog, InMemoryCache, LockedArray, Table
from pushengine.memcache.arrays import fold

from tests.memcache.test_visitors import result, start_clock


class EventLogTests(SynchronousTestCase):
    def setUp(self):
        self.clock = start_clock()
        self.cache = InMemoryCache(self.clock)
        self.log = EventLog(self.cache, self.clock, "events", time_chunk=10, num_chunks=3)

    def test_fetch_returns_the_interval_in_order(self):
        t0 = self.clock.seconds()
        for i in range(6):
            result(self.log.append({"i": i}))
            self.clock.advance(4)
        events = result(self.log.fetch())
        self.assertEqual([e["i"] for _, e in events], [0, 1, 2, 3, 4, 5])
        self.assertEqual([e["i"] for _, e in result(self.log.fetch(t0 + 4, t0 + 12))], [1, 2, 3])

    def test_only_the_last_chunks_are_kept(self):
        for i in range(8):
            result(self.log.append(i))
            self.clock.advance(10)
        # now in the chunk after event 7's: the ring holds that chunk and the two before
        self.assertEqual([e for _, e in result(self.log.fetch(0, self.clock.seconds()))], [6, 7])

    def test_old_chunks_expire(self):
        result(self.log.append("old"))
        self.clock.advance(30)  # three chunks later: gone
        result(self.log.append("new"))
        self.assertEqual([e for _, e in result(self.log.fetch(0, self.clock.seconds()))], ["new"])


@given(st.lists(st.floats(0, 100), max_size=30), st.floats(0, 100), st.floats(0, 100))
def test_event_log_fetch_matches_the_model(times, a, b):
    clock = start_clock()
    start = clock.seconds()
    cache = InMemoryCache(clock)
    log = EventLog(cache, clock, "m", time_chunk=10, num_chunks=4)
    logged = []
    for i, at in enumerate(sorted(times)):
        clock.advance(start + at - clock.seconds())
        logged.append((result(log.append(i)), i))
    now = clock.seconds()
    first, last = start + min(a, b), start + max(a, b)
    oldest_kept = (int(now // 10) - 3) * 10
    expected = [(t, i) for t, i in logged if first <= t <= last and t >= oldest_kept]
    assert result(log.fetch(first, last)) == expected


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5)), max_size=40))
def test_append_array_folds_like_a_list(ops):
    cache = InMemoryCache(Clock())
    array = AppendArray(cache, "arr", compact_at=64)  # compacts often
    model: list = []
    for add, item in ops:
        if add:
            result(array.append(item))
            model.append(item)
        else:
            result(array.remove(item))
            model = [i for i in model if i != item]
        assert result(array.read()) == model
    result(array.compact(force=True))
    assert result(array.read()) == model


def test_fold_skips_broken_records():
    assert fold(b'+1\n+"a"\n-1\n+{bad\n\n+2\n') == ["a", 2]


class TableTests(SynchronousTestCase):
    def test_set_semantics(self):
        cache = InMemoryCache(Clock())
        table = Table(cache, "t")
        self.assertTrue(result(table.add("a")))
        self.assertFalse(result(table.add("a")))
        self.assertTrue(result(table.add("b c")))
        self.assertTrue(result(table.contains("b c")))
        self.assertFalse(result(table.contains("z")))
        self.assertTrue(result(table.remove("a")))
        self.assertFalse(result(table.remove("a")))
        self.assertEqual(result(table.members()), ["b c"])
        result(cache.delete(table.key("b c")))  # evicted: not reported
        self.assertEqual(result(table.members()), [])
        result(table.add("d"))
        result(table.clear())
        self.assertEqual(result(table.members()), [])
        self.assertFalse(result(table.contains("d")))


@pytest_twisted.ensureDeferred
async def test_concurrent_appends_to_the_event_log_lose_nothing(make_cache):
    clock = start_clock()
    logs = [EventLog(make_cache(clock), clock, "shared", time_chunk=60, num_chunks=5) for _ in range(5)]
    await gatherResults([log.append([n, i]) for i in range(20) for n, log in enumerate(logs)])
    events = [e for _, e in await logs[0].fetch()]
    assert sorted(events) == sorted([n, i] for i in range(20) for n in range(5))


@pytest_twisted.ensureDeferred
async def test_locked_array_writers_lose_nothing(make_cache, reactor):
    arrays = [LockedArray(make_cache(), reactor, "rare", wait=10) for _ in range(5)]
    arrays[0].lock.retry_interval = 0.001
    for a in arrays:
        a.lock.retry_interval = 0.001
    await gatherResults([a.append(f"{n}-{i}") for i in range(4) for n, a in enumerate(arrays)])
    assert sorted(await arrays[0].read()) == sorted(f"{n}-{i}" for i in range(4) for n in range(5))
    await arrays[1].remove("0-0")
    assert "0-0" not in await arrays[2].read()


@pytest_twisted.ensureDeferred
async def test_append_array_concurrent_appends_lose_nothing(make_cache):
    arrays = [AppendArray(make_cache(), "frequent", compact_at=1 << 20) for _ in range(5)]
    await gatherResults([a.append([n, i]) for i in range(30) for n, a in enumerate(arrays)])
    assert sorted(await arrays[0].read()) == sorted([n, i] for i in range(30) for n in range(5))
    assert await arrays[0].compact(force=True)
    assert len(await arrays[1].read()) == 150


@pytest_twisted.ensureDeferred
async def test_table_one_winner_per_member(make_cache):
    tables = [Table(make_cache(), "members") for _ in range(5)]
    added = await gatherResults([t.add(f"m{i}") for i in range(10) for t in tables])
    assert added.count(True) == 10
    assert sorted(await tables[0].members()) == sorted(f"m{i}" for i in range(10))
    assert await tables[3].contains("m3")
