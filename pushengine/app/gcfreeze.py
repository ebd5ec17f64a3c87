"""The collector's settings of a running node (``--gc-freeze N``).

A node holding many connections keeps hundreds of thousands of long-lived
objects (sessions, sockets, queued events) and allocates a little per
delivered event: with CPython's defaults the young generation is collected
every 700 allocations and every older collection walks all of those objects
again, pauses that grow with the connections held. Once the node has
started, what exists is frozen (``gc.freeze``: a permanent generation no
collection walks) and the young generation is collected every N
allocations. 0 leaves the collector as CPython sets it.
"""
from __future__ import annotations

import gc
from typing import Any

DEFAULT = 50_000


def freeze(threshold: int, collector: Any = gc) -> bool:
    """Collect, freeze what survives, and collect the young generation every
    ``threshold`` allocations (older ones less often too). False, changing
    nothing, when ``threshold`` is 0."""
    if threshold <= 0:
        return False
    collector.collect()              # garbage is freed, not frozen
    collector.freeze()
    collector.set_threshold(threshold, 20, 100)
    return True


def after_start(reactor: Any, threshold: int) -> None:
    """``freeze`` once the reactor runs: the services have started by then
    (listening, the seed loaded), so their objects are frozen too."""
    if threshold > 0:
        reactor.callWhenRunning(freeze, threshold)
