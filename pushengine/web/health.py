"""Whether the node is ready for its clients: ``GET /health/ready``.

A node is *live* (``/health/live``) while it answers HTTP at all: nothing
to compute. It is *ready* when it can serve its clients:

- its change feed is up; or
- the feed was up and has been down for less than the grace period
  (``--ready-grace``): its views hold what they held, its clients are served
  from that and get the changes they missed once the feed is back (a reset
  where the feed lost some), so a short broker outage does not take every
  node out of its balancer at once;
- and the node is not shutting down (``draining``: from then on it is not
  ready, so that a balancer stops sending it new clients while it finishes).

A node whose feed has never been up since it started is not ready: it has
no changes to serve yet (a new node started while the broker is down stays
out of its balancer rather than serving views that never move).

The feed's state is read at every probe and every ``sample()`` (the node
samples it each second), so the time it has been down counts from the
first time it was seen down, within a second.
"""
from __future__ import annotations

from typing import Callable

from twisted.internet.interfaces import IReactorTime

DEFAULT_GRACE = 30.0


class Readiness:
    def __init__(self, clock: IReactorTime, feed_up: Callable[[], bool],
                 grace: float = DEFAULT_GRACE) -> None:
        self.clock = clock
        self.feed_up = feed_up
        self.grace = grace
        self.ever_up = False
        self.down_since: float | None = None
        self.is_draining = False

    def draining(self) -> None:
        """Shutdown began: not ready from now on, whatever the feed does."""
        self.is_draining = True

    def sample(self) -> bool:
        """Read the feed's state now; whether it is up."""
        try:
            up = bool(self.feed_up())
        except Exception:
            up = False
        if up:
            self.ever_up = True
            self.down_since = None
        elif self.down_since is None:
            self.down_since = self.clock.seconds()
        return up

    def down_for(self) -> float:
        """Seconds the feed has been seen down (0 while it is up)."""
        if self.down_since is None:
            return 0.0
        return max(0.0, self.clock.seconds() - self.down_since)

    def state(self) -> tuple[bool, str | None]:
        """``(ready, why not)``."""
        up = self.sample()
        if self.is_draining:
            return False, "shutting down"
        if up:
            return True, None
        if not self.ever_up:
            return False, "the change feed has not been up since the node started"
        down = self.down_for()
        if down < self.grace:
            return True, None
        return False, f"the change feed has been down for {down:.0f} s"
