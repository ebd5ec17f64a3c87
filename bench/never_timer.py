"""A timer that never fires, for in-process benchmarks whose timed work is
the answers, not the timers (``clock.callLater = never_timer``). It imports
nothing of the project, so that a benchmark measuring another checkout can
use it before that checkout is on the path."""
from __future__ import annotations

from typing import Any


class NeverTimer:
    """What a ``DelayedCall`` offers the engine, doing nothing."""

    def __init__(self) -> None:
        self.on = True

    def active(self) -> bool:
        return self.on

    def cancel(self) -> None:
        self.on = False

    def reset(self, seconds: float) -> None:
        pass

    def delay(self, seconds: float) -> None:
        pass


def never_timer(delay: float, f: Any, *args: Any, **kwargs: Any) -> NeverTimer:
    """A ``callLater`` whose calls never run."""
    return NeverTimer()
