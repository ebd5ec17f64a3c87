"""One timer that keeps every open stream of a transport alive.

A stream that has been silent for ``interval`` seconds gets a ping (an SSE
``: ping`` comment, a WebSocket ping frame) so that proxies keep it open and
a dead peer is found. One timer per stream would put thousands of
``DelayedCall``s in the reactor's heap, each push and pop a Python-level
comparison (a quarter of the engine's time in a profile of 20,000 idle
streams). Instead the streams are filed in buckets by when they fall due,
one bucket per ``step`` (a second, or a third of the interval when that is
shorter), and one timer at each bucket's time takes the buckets that are
due: a ping follows ``interval`` to ``interval + step`` seconds of silence,
and a sweep looks only at the streams filed for it, not at every stream.

A stream that wrote since it was filed (``last_write`` moved) is filed again
for its new due time when its bucket comes; writing costs the stream
nothing but setting ``last_write``. A stream that leaves is taken out of
its bucket at once, so that nothing keeps a closed stream alive.
"""
from __future__ import annotations

import math
from typing import Protocol

from twisted.logger import Logger

from pushengine.web.timing import Clock, Timer

log = Logger()
STEP = 1.0


class Pingable(Protocol):
    last_write: float

    def ping(self, now: float) -> None:
        """Write a ping now (and set ``last_write``)."""


class Heartbeat:
    """The streams of one transport and the one timer that pings them.

    ``streams`` maps each stream to the bucket it is filed in (the number
    of the step it falls due by); ``buckets`` holds each bucket's streams
    (a dict used as an ordered set). Only this class changes either.
    """

    def __init__(self, clock: Clock, interval: float, step: float = STEP) -> None:
        self.clock = clock
        self.interval = interval
        self.step = min(step, interval / 3)
        self.streams: dict[Pingable, int] = {}
        self.buckets: dict[int, dict[Pingable, None]] = {}
        self.swept = math.floor(clock.seconds() / self.step)   # the last bucket taken
        self.timer: Timer | None = None
        self.pings = 0

    def add(self, stream: Pingable) -> None:
        self._file(stream, stream.last_write + self.interval)
        if self.timer is None:
            self._next()

    def members(self) -> list[Pingable]:
        """Every stream filed now (a copy: the caller may close them as it
        goes): the open streams of the transport."""
        return list(self.streams)

    def discard(self, stream: Pingable) -> None:
        number = self.streams.pop(stream, None)
        if number is not None:
            bucket = self.buckets.get(number)
            if bucket is not None:
                bucket.pop(stream, None)

    def _file(self, stream: Pingable, due: float) -> None:
        # the first bucket whose time is not before ``due``, and never one
        # already taken
        number = max(math.ceil(due / self.step), self.swept + 1)
        self.streams[stream] = number
        bucket = self.buckets.get(number)
        if bucket is None:
            self.buckets[number] = {stream: None}
        else:
            bucket[stream] = None

    def _due_buckets(self, last: int) -> list[int]:
        """The numbers of the buckets from the last sweep's to ``last``."""
        if last - self.swept <= len(self.buckets):
            return [n for n in range(self.swept + 1, last + 1) if n in self.buckets]
        return sorted(n for n in self.buckets if n <= last)    # the clock jumped

    def _sweep(self) -> None:
        self.timer = None
        now = self.clock.seconds()
        last = math.floor(now / self.step + 1e-9)
        numbers = self._due_buckets(last)
        self.swept = max(self.swept, last)
        for number in numbers:
            for stream in self.buckets.pop(number):
                if self.streams.get(stream) != number:
                    continue                # gone while this bucket was taken
                due = stream.last_write + self.interval
                if due > now + 1e-6:
                    self._file(stream, due)  # it wrote: due later
                    continue
                try:
                    stream.ping(now)
                    self.pings += 1
                except Exception:
                    log.failure("pinging a stream failed")
                    self.streams.pop(stream, None)
                    continue
                if stream in self.streams:   # the ping may have closed it
                    self._file(stream, max(stream.last_write, now) + self.interval)
        if self.streams:
            self._next()
        else:
            self.buckets.clear()

    def _next(self) -> None:
        """The timer, set for the next bucket's time."""
        delay = (self.swept + 1) * self.step - self.clock.seconds()
        self.timer = self.clock.callLater(max(0.0, delay), self._sweep)

    def stop(self) -> None:
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        self.timer = None
