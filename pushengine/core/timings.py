"""Histograms of durations, kept in plain lists on the hot path.

``/metrics`` exports them as Prometheus histograms at scrape time
(``metrics/prometheus.py``); nothing here touches prometheus_client, takes a
lock or allocates per observation: an observation is a ``bisect`` over the
bucket bounds, one list increment and one float addition (the node runs on
one thread, the reactor's).

``Timings`` is one histogram per label value, from a fixed set of values
(anything else is counted as ``other``), so that a client cannot grow the
series of a node by calling methods that do not exist.
"""
from __future__ import annotations

from bisect import bisect_left
from typing import Iterable, Iterator

OTHER = "other"

# seconds. A call answered at once takes tens of microseconds; a parked
# get_events waits up to --max-timeout (90 s by default); a store's initial
# state takes from microseconds (in process) to seconds (a slow backend).
CALL_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 90.0)
INITIAL_STATE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                         0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# from a change handed to the engine to its events handed to each transport:
# microseconds for one session, milliseconds for a fan-out to thousands
DELIVERY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                    0.05, 0.1, 0.25, 0.5, 1.0)


class Histogram:
    """Counts of observations per bucket (``counts[i]``: values at most
    ``bounds[i]`` and above the bound before; the last: above every bound)
    and their sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Iterable[float]) -> None:
        self.bounds = tuple(sorted(bounds))
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations at most that)``, the last bound
        infinite: Prometheus' ``le`` buckets."""
        out: list[tuple[float, int]] = []
        total = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts):
            total += n
            out.append((bound, total))
        return out


class Timings:
    """One ``Histogram`` per label value, made on the first observation of
    the value; values outside ``known`` count as ``other`` (``known`` None:
    every value is known, for labels the node itself chooses)."""

    __slots__ = ("label", "bounds", "known", "by_label")

    def __init__(self, label: str, bounds: Iterable[float],
                 known: Iterable[str] | None = None) -> None:
        self.label = label
        self.bounds = tuple(sorted(bounds))
        self.known = frozenset(known) if known is not None else None
        self.by_label: dict[str, Histogram] = {}

    def observe(self, value: str, seconds: float) -> None:
        histogram = self.by_label.get(value)
        if histogram is None:
            histogram = self._new(value)
        # (Histogram.observe, inline: one call less on every answer)
        histogram.counts[bisect_left(histogram.bounds, seconds)] += 1
        histogram.sum += seconds

    def _new(self, value: str) -> Histogram:
        if self.known is not None and value not in self.known:
            value = OTHER
            found = self.by_label.get(value)
            if found is not None:
                return found
        histogram = self.by_label[value] = Histogram(self.bounds)
        return histogram

    def __iter__(self) -> Iterator[tuple[str, Histogram]]:
        return iter(sorted(self.by_label.items()))
