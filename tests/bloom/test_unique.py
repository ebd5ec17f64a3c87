"""``stats.unique``: distinct authorized users per view key and period,
added into by every node that shares the backend."""
from __future__ import annotations

from twisted.internet.defer import fail
from twisted.internet.task import Clock

from pushengine.bloom.errors import BloomUnavailable
from pushengine.bloom.memory import MemoryBloom
from pushengine.bloom.unique import UniqueUsers
from tests.deferreds import fired

KEY = "PublicLiveStreamView(limit=10)"


def test_users_count_once_per_period_across_nodes():
    clock = Clock()
    clock.advance(1000 * 60)
    shared = MemoryBloom(clock)
    a, b = UniqueUsers(shared, clock, 60), UniqueUsers(shared, clock, 60)
    for user in (1, 2, 3):
        a.touch(user, [KEY])
    for user in (3, 4, "4", 1):             # 3 and 1 again, on another node: once
        b.touch(user, [KEY, "Other(limit=5)"])
    assert fired(a.count(KEY)) == fired(b.count(KEY)) == 5          # 1, 2, 3, 4, "4"
    assert fired(a.count("Other(limit=5)")) == 4
    assert fired(a.count("Nobody(limit=1)")) == 0
    commands = shared.counters["commands"]
    a.touch(2, [KEY])                        # known here this period: no command
    assert shared.counters["commands"] == commands
    a.touch(None, [KEY])                     # an anonymous session is nobody
    # the next period: the previous figure is read until the new one is larger
    clock.advance(60)
    assert fired(a.count(KEY)) == 5
    a.touch(9, [KEY])
    assert fired(a.count(KEY)) == 5
    clock.advance(60)
    assert fired(a.count(KEY)) == 1
    clock.advance(180)                       # two periods without an insert: gone
    assert fired(a.count(KEY)) == 0
    a.touch(10, [KEY])                       # a write sweeps the expired filters away
    assert list(shared.filters) == [f"unique:{int(clock.seconds() // 60)}:{KEY}"]


class DownBloom:
    def insert(self, *args, **kwargs):
        return fail(BloomUnavailable("Redis is down"))

    def info(self, key):
        return fail(BloomUnavailable("Redis is down"))


def test_counting_never_fails_the_caller():
    clock = Clock()
    unique = UniqueUsers(DownBloom(), clock, 60)
    assert fired(unique.touch(1, [KEY])) is None
    assert fired(unique.count(KEY)) == 0
    assert unique.counters["errors"] == 1
    # not remembered as counted: the next poll tries again
    unique.touch(1, [KEY])
    assert unique.counters["errors"] == 2
