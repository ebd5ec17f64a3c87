"""Per-client limits: a call rate (token bucket) and a count of sessions.

One client must not be able to exhaust a node for the others: each client
(an address; see ``pushengine.web.clients``) may make ``rate`` calls a second
with bursts of ``burst``, and hold ``max_sessions`` sessions. Beyond either it
is told to retry later (HTTP 429, JSON-RPC error 1007) while every other
client is served as before. Time comes from the injected clock.
"""
from __future__ import annotations

import math
from typing import Hashable

from twisted.internet.interfaces import IReactorTime


class _Bucket:
    __slots__ = ("tokens", "stamp")

    def __init__(self, tokens: float, stamp: float) -> None:
        self.tokens = tokens
        self.stamp = stamp


class CallRate:
    """Token buckets, one per client, created on first use and forgotten
    once full again (a full bucket and no bucket mean the same)."""

    def __init__(self, clock: IReactorTime, rate: float, burst: float | None = None,
                 sweep_every: int = 10_000) -> None:
        self.clock = clock
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else 2 * rate)
        self.buckets: dict[Hashable, _Bucket] = {}
        self.refused = 0
        self._sweep_every = sweep_every
        self._until_sweep = sweep_every

    def admit(self, client: Hashable, cost: float = 1.0) -> float:
        """Take ``cost`` tokens: 0.0 when admitted, else the seconds to wait
        before the same call would be (nothing is taken then)."""
        if self.rate <= 0:
            return 0.0
        now = self.clock.seconds()
        bucket = self.buckets.get(client)
        if bucket is None:
            self._until_sweep -= 1
            if self._until_sweep <= 0:
                self._sweep(now)
            bucket = self.buckets[client] = _Bucket(self.burst, now)
        else:
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.stamp) * self.rate)
            bucket.stamp = now
        if bucket.tokens >= cost:
            bucket.tokens -= cost
            return 0.0
        self.refused += 1
        return max((min(cost, self.burst) - bucket.tokens) / self.rate, 0.001)

    def _sweep(self, now: float) -> None:
        self._until_sweep = self._sweep_every
        full = [c for c, b in self.buckets.items()
                if b.tokens + (now - b.stamp) * self.rate >= self.burst]
        for client in full:
            del self.buckets[client]


class SessionCounts:
    """How many sessions each client holds, against a cap."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.counts: dict[Hashable, int] = {}
        self.refused = 0

    def may_open(self, client: Hashable | None) -> bool:
        if client is None or not self.limit:
            return True
        if self.counts.get(client, 0) >= self.limit:
            self.refused += 1
            return False
        return True

    def opened(self, client: Hashable | None) -> None:
        if client is not None:
            self.counts[client] = self.counts.get(client, 0) + 1

    def closed(self, client: Hashable | None) -> None:
        if client is None:
            return
        left = self.counts.get(client, 0) - 1
        if left > 0:
            self.counts[client] = left
        else:
            self.counts.pop(client, None)


def retry_after(seconds: float) -> int:
    """A Retry-After header value: whole seconds, at least 1."""
    return max(1, math.ceil(seconds))
