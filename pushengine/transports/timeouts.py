"""A timer wheel: the timeouts of many parked polls on one reactor timer.

A timer per parked poll (``callLater``, then ``cancel`` when the poll is
answered) is two operations on the reactor's heap of timers per poll, each a
Python-level comparison among every other timer: with 10,000 sessions that
poll again every second, 20,000 heap operations a second for timeouts that
almost never fire. Here a poll's deadline goes into a bucket of
``resolution`` seconds (0.25 s by default); one repeating timer, running
only while some bucket holds a poll, expires the buckets that are due.
Adding and removing a poll are one dict operation each.

A timeout fires at its deadline rounded *up* to the next bucket edge (a
multiple of ``resolution`` on the clock): never early, at most one
``resolution`` late (plus the reactor's own lateness).
"""
from __future__ import annotations

import math
from typing import Callable, Generic, Hashable, TypeVar

from twisted.logger import Logger

from pushengine.web.timing import Clock, Timer

log = Logger()

T = TypeVar("T", bound=Hashable)

#: the default width of a bucket, in seconds
RESOLUTION = 0.25


class TimerWheel(Generic[T]):
    """Entries with deadlines, expired in buckets by one timer on ``clock``.

    ``expire(entry)`` is called once for each entry whose deadline passed
    and that was not removed first. An entry is in the wheel at most once
    at a time: ``add`` answers the bucket it went into, which ``remove``
    takes back (the caller keeps it, e.g. in a slot of the entry)."""

    __slots__ = ("clock", "expire", "resolution", "buckets", "cursor", "timer", "size")

    def __init__(self, clock: Clock, expire: Callable[[T], object],
                 resolution: float = RESOLUTION) -> None:
        if resolution <= 0:
            raise ValueError("the resolution must be positive")
        self.clock = clock
        self.expire = expire
        self.resolution = resolution
        # bucket number k -> its entries (a dict: ordered, O(1) removal);
        # bucket k expires when the clock reaches k * resolution
        self.buckets: dict[int, dict[T, None]] = {}
        self.cursor = 0                  # the last bucket expired (or due when the timer started)
        self.timer: Timer | None = None  # runs while a bucket holds an entry
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, entry: T, timeout: float) -> int:
        """Expire ``entry`` ``timeout`` seconds from now (rounded up to a
        bucket edge); answers its bucket, for ``remove``."""
        res = self.resolution
        deadline = self.clock.seconds() + timeout
        k = math.ceil(deadline / res)
        if k * res < deadline:           # a rounding of the division: never early
            k += 1
        if self.timer is None:
            self._start()
        if k <= self.cursor:             # due already (a timeout of 0): the next tick
            k = self.cursor + 1
        bucket = self.buckets.get(k)
        if bucket is None:
            bucket = self.buckets[k] = {}
        bucket[entry] = None
        self.size += 1
        return k

    def remove(self, entry: T, bucket: int) -> bool:
        """Take ``entry`` out of ``bucket`` (answered before its timeout):
        False when it was not there (expired, or removed already). The
        last entry out stops the timer: an empty wheel never wakes the
        reactor (one cancel, where a timer per entry costs one per entry)."""
        entries = self.buckets.get(bucket)
        if entries is None or entries.pop(entry, 0) is not None:
            return False
        self.size -= 1
        if not entries:
            del self.buckets[bucket]
            if not self.buckets:
                self._stop_timer()
        return True

    def entries(self) -> list[T]:
        """Every entry in the wheel now, soonest first (a copy: the caller
        may remove them as it goes)."""
        return [entry for k in sorted(self.buckets) for entry in self.buckets[k]]

    def stop(self) -> None:
        """Drop every entry and the timer (the node stops)."""
        self.buckets.clear()
        self.size = 0
        self._stop_timer()

    # -- the timer -------------------------------------------------------------------
    def _due(self) -> int:
        """The last bucket whose edge the clock has reached."""
        res = self.resolution
        now = self.clock.seconds()
        k = math.floor(now / res)
        if (k + 1) * res <= now:
            k += 1
        elif k * res > now:
            k -= 1
        return k

    def _start(self) -> None:
        self.cursor = self._due()
        self._schedule()

    def _stop_timer(self) -> None:
        timer, self.timer = self.timer, None
        if timer is not None and timer.active():
            timer.cancel()

    def _schedule(self) -> None:
        delay = (self.cursor + 1) * self.resolution - self.clock.seconds()
        self.timer = self.clock.callLater(max(delay, 0.0), self._tick)

    def _tick(self) -> None:
        self.timer = None
        due = self._due()
        buckets = self.buckets
        if due - self.cursor <= len(buckets):
            ready = [k for k in range(self.cursor + 1, due + 1) if k in buckets]
        else:                            # the clock jumped far: look at the buckets instead
            ready = sorted(k for k in buckets if k <= due)
        self.cursor = max(self.cursor, due)   # what is added from here goes later
        expire = self.expire
        for k in ready:
            entries = buckets[k]
            # an entry removed by an earlier expiry of this bucket is skipped
            for entry in list(entries):
                if entries.pop(entry, 0) is not None:
                    continue
                self.size -= 1
                try:
                    expire(entry)
                except Exception:
                    log.failure("expiring a timeout failed")
            if buckets.get(k) is entries:
                del buckets[k]
        if buckets and self.timer is None:   # (an expiry may have added, and started it)
            self._schedule()
