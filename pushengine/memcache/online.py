"""Online counters: sessions online, in the whole service and per view key.

Every node adds into the same figures in memcached (or the in-process cache
when the engine runs without ``--memcache``). A session counts once per
period while it polls: the node remembers in which period it last counted
each (session, figure) pair, so polling many times within a period costs
nothing after the first; the memcached keys are created with ``add`` and
then incremented (race-safe), so several nodes adding into one figure count
a session once as long as the session stays on one node (a session that
moves to another node within a period may count twice in that period).

Streams (SSE, WebSocket) do not poll: the node counts the sessions they
hold in one pass per period (``streams_due`` says when one is due,
``touch_many`` makes it). A pass adds, per figure, the number of sessions
not counted in it yet in one ``incr`` of N, so its cost in memcached is one
operation per view key, whatever the number of streams; the figures are the
ones one ``touch`` per session would give. One pass per period is enough:
a stream attached later in the period, or a view subscribed later, is
counted by ``touch`` when that happens.

``period`` uses the shadow/current pair of :class:`VisitorCounter`;
``slots > 1`` uses :class:`SlotCounter`, a ring of per-period keys whose
figure is the mean over the last ``slots`` periods (smoother).

Counting never fails the push path: with memcached down or a key evicted,
``touch`` logs (at most once per period) and goes on, and ``count`` reads
what is there (0 if nothing).

Keys: ``online:all:{n}`` and ``online:view:{view key}:{n}`` (n = period
number), each an ASCII decimal; long or unsafe view keys are hashed by the
cache layer.
"""
from __future__ import annotations

from typing import Any, Iterable

from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.memcache.interface import Cache
from pushengine.memcache.visitors import SlotCounter, VisitorCounter

log = Logger()

_ALL = object()  # the whole-service figure


class OnlineCounter:
    """Count sessions online per period, globally and per view key."""

    def __init__(
        self,
        cache: Cache,
        clock: IReactorTime,
        period: float = 60,
        slots: int = 1,
        prefix: str = "online",
    ) -> None:
        self.cache = cache
        self.clock = clock
        self.period = period
        self.slots = slots
        self.prefix = prefix
        self._period_n: int | None = None
        self._streams_n: int | None = None  # the period of the last streams pass
        self._counted: dict[str, set[object]] = {}  # session → figures counted this period
        self._errors = 0
        self._last_error_log: int | None = None
        self._counter(_ALL)  # checks period and slots now, not on the push path

    def _counter(self, key: object) -> VisitorCounter | SlotCounter:
        name = f"{self.prefix}:all" if key is _ALL or key is None else f"{self.prefix}:view:{key}"
        if self.slots > 1:
            return SlotCounter(self.cache, self.clock, name, slot=self.period, slots=self.slots)
        return VisitorCounter(self.cache, self.clock, name, period=self.period)

    def _turn(self) -> int:
        """The current period number; a new period forgets who was counted."""
        n = int(self.clock.seconds() // self.period)
        if n != self._period_n:
            self._period_n = n
            self._counted = {}  # a new period: everyone counts again
        return n

    def counted(self, session_id: str, view_keys: Iterable[str] = ()) -> bool:
        """Whether ``session_id`` and each of ``view_keys`` are counted in
        this period already (``touch`` would do nothing): a poll asks this
        first, which costs no Deferred."""
        if int(self.clock.seconds() // self.period) != self._period_n:
            return False
        counted = self._counted.get(session_id)
        return counted is not None and _ALL in counted and counted.issuperset(view_keys)

    def touch(self, session_id: str, view_keys: Iterable[str] = ()) -> Deferred:
        """Count ``session_id`` online (and in each of ``view_keys``) for this
        period, if not counted yet. Fires with None; never fails."""
        if self.counted(session_id, view_keys):
            return succeed(None)     # the common case: a poll within the period
        n = self._turn()
        counted = self._counted.get(session_id)
        if counted is None:
            counted = self._counted[session_id] = set()
        todo = [k for k in (_ALL, *view_keys) if k not in counted]
        if not todo:
            return succeed(None)
        counted.update(todo)
        calls = [self._counter(k).incr() for k in todo]
        return DeferredList(calls, consumeErrors=True).addCallback(self._logged, n)

    def mark_counted(self, session_id: str, view_keys: Iterable[str], period: int | None) -> bool:
        """Another node already counted ``session_id`` (globally and in
        ``view_keys``) in ``period``: remember it here so that a session that
        moved does not count twice. Returns whether ``period`` is the current
        one (only then is there anything to remember)."""
        if period is None or period != int(self.clock.seconds() // self.period):
            return False
        self._turn()
        self._counted.setdefault(session_id, set()).update([_ALL, *view_keys])
        return True

    def streams_due(self) -> bool:
        """Whether this period's pass over the streams is still to be made."""
        return int(self.clock.seconds() // self.period) != self._streams_n

    def touch_many(self, sessions: Iterable[tuple[str, Iterable[str]]]) -> Deferred:
        """Count each ``(session id, view keys)`` of ``sessions`` as
        ``touch`` would, with one ``incr`` of N per figure (N: the sessions
        not counted in it yet this period) instead of one per session, and
        mark this period's pass over the streams done. Fires with None;
        never fails."""
        n = self._turn()
        self._streams_n = n
        counted_now = self._counted
        tally: dict[object, int] = {}
        for session_id, view_keys in sessions:
            counted = counted_now.get(session_id)
            if counted is None:
                # the common case at the turn of a period: nothing counted yet
                counted = counted_now[session_id] = {_ALL, *view_keys}
                for key in counted:
                    tally[key] = tally.get(key, 0) + 1
                continue
            for key in (_ALL, *view_keys):
                if key not in counted:
                    counted.add(key)
                    tally[key] = tally.get(key, 0) + 1
        if not tally:
            return succeed(None)
        calls = [self._counter(key).incr(many) for key, many in tally.items()]
        return DeferredList(calls, consumeErrors=True).addCallback(self._logged, n)

    def forget(self, session_id: str) -> None:
        """The session is gone: drop what this node remembers of it (its
        count stays in this period's figures, as with any visitor)."""
        self._counted.pop(session_id, None)

    def _logged(self, results: list[tuple[bool, Any]], n: int) -> None:
        failures = [r for ok, r in results if not ok]
        if failures:
            self._errors += len(failures)
            if self._last_error_log != n:  # at most one line per period
                self._last_error_log = n
                log.warn(
                    "online counters not updated ({count} errors so far): {error}",
                    count=self._errors,
                    error=failures[0].getErrorMessage(),
                )
        return None

    def count(self, key: str | None = None) -> Deferred:
        """Sessions online in view ``key`` (None: in the whole service).
        Fires with an int; 0 when nothing can be read."""

        def unreadable(failure: Failure) -> int:
            log.warn("online count for {key} unreadable: {e}", key=key, e=failure.getErrorMessage())
            return 0

        return self._counter(_ALL if key is None else key).count().addErrback(unreadable)

    def stats(self) -> dict[str, int]:
        """Numbers for /metrics."""
        return {"sessions_counted": len(self._counted), "errors": self._errors}
