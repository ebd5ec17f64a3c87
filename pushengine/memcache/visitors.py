"""Counting visitors per period in memcached, shared by every node.

:class:`VisitorCounter` is the classic memcached visitor counter: a
*current* key counts the visitors of this period and a *shadow* key holds
the count of the previous one; at each period boundary the current key
becomes the shadow and a new current key starts. The current key is created
(by ``add``, race-safe, see :mod:`.counter`) with an expiry of 2T minus the
time already passed within the period, so it lives exactly through its own
period and the next (as the shadow), then disappears. The keys are named
by period number (``{name}:{n}``, n = floor(now / T)), so the "swap" is a
change of name and a late expiry can never mix two periods.

:class:`SlotCounter` is the smoother figure: a ring of per-slot keys
(``{name}:{s}``, e.g. per-minute) each kept for ``slots + 1`` slots; its
count is the mean of the last ``slots`` complete slots that are still
there.

Both read "what is available": a key evicted or on a server that is down
counts as absent, never as an error of the reader (0 if nothing is there).

``hit(visitor)`` counts a visitor once per period across all nodes, with a
marker key ``{name}:{n}:seen:{visitor}`` added for the rest of the period;
``incr()`` counts without that check (the caller de-duplicates).
"""
from __future__ import annotations

import math

from twisted.internet.interfaces import IReactorTime

from pushengine.memcache.codec import decode_int
from pushengine.memcache.counter import incr_or_add
from pushengine.memcache.deferreds import as_deferred
from pushengine.memcache.errors import KeyExists
from pushengine.memcache.interface import MAX_RELATIVE_EXPIRE, Cache


def _seconds(value: float) -> int:
    """A positive whole-second expiry covering ``value`` seconds."""
    return max(1, math.ceil(value))


class _PeriodKeys:
    def __init__(self, cache: Cache, clock: IReactorTime, name: str, period: float, keep: int) -> None:
        if period <= 0 or period * keep > MAX_RELATIVE_EXPIRE:
            raise ValueError("the period must be positive and well under 30 days")
        self.cache = cache
        self.clock = clock
        self.name = name
        self.period = period
        self.keep = keep  # periods a key lives, its own included

    def index(self) -> tuple[int, float]:
        """The current period number and the seconds passed within it."""
        now = self.clock.seconds()
        n = int(now // self.period)
        return n, now - n * self.period

    def key(self, n: int) -> str:
        return f"{self.name}:{n}"

    @as_deferred
    async def incr(self, delta: int = 1) -> int:
        """Count ``delta`` in the current period; fire with its new count."""
        n, passed = self.index()
        expire = _seconds(self.keep * self.period - passed)
        return await incr_or_add(self.cache, self.key(n), delta, expire)

    @as_deferred
    async def hit(self, visitor: str | bytes) -> bool:
        """Count ``visitor`` unless it was counted this period (by any
        node); fire with whether it was counted now."""
        n, passed = self.index()
        if isinstance(visitor, bytes):
            visitor = visitor.decode("utf-8", "replace")
        try:
            await self.cache.add(
                f"{self.key(n)}:seen:{visitor}", b"1", _seconds(self.period - passed)
            )
        except KeyExists:
            return False
        expire = _seconds(self.keep * self.period - passed)
        await incr_or_add(self.cache, self.key(n), 1, expire)
        return True

    async def _read(self, numbers: list[int]) -> dict[int, int]:
        keys = {self.key(n): n for n in numbers}
        found: dict[str, bytes] = await self.cache.get_multi(list(keys))
        return {keys[k]: decode_int(v) for k, v in found.items()}


class VisitorCounter(_PeriodKeys):
    """Visitors in the last period: the shadow/current key pair."""

    def __init__(self, cache: Cache, clock: IReactorTime, name: str, period: float = 60) -> None:
        super().__init__(cache, clock, name, period, keep=2)

    @as_deferred
    async def counts(self) -> tuple[int | None, int | None]:
        """``(shadow, current)``: the previous period's final count and this
        period's count so far (None where the key is absent)."""
        n, _ = self.index()
        found = await self._read([n - 1, n])
        return found.get(n - 1), found.get(n)

    @as_deferred
    async def count(self) -> int:
        """Visitors in the last period: the larger of the shadow (complete,
        but up to a period old) and the current count (fresh, but partial)."""
        shadow, current = await self.counts()
        return max(shadow or 0, current or 0)


class SlotCounter(_PeriodKeys):
    """A smoother figure: the mean over a ring of per-slot keys."""

    def __init__(
        self, cache: Cache, clock: IReactorTime, name: str, slot: float = 60, slots: int = 5
    ) -> None:
        if slots < 1:
            raise ValueError("at least one slot")
        super().__init__(cache, clock, name, slot, keep=slots + 1)
        self.slots = slots

    @as_deferred
    async def series(self) -> dict[int, int]:
        """``{slot number: count}`` for the last ``slots`` complete slots and
        the current one, as far as they are there."""
        s, _ = self.index()
        return await self._read(list(range(s - self.slots, s + 1)))

    @as_deferred
    async def count(self) -> int:
        """The mean count of the complete slots available (the current
        partial slot when none is)."""
        s, _ = self.index()
        found = await self.series()
        complete = [v for n, v in found.items() if n < s]
        if complete:
            return round(sum(complete) / len(complete))
        return found.get(s, 0)
