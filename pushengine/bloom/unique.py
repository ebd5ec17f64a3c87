"""``stats.unique(key)``: distinct authorized users who subscribed to a view
key in the current ``--online-period``, across nodes (SPEC section 14).

Each period ``n`` (``floor(now / period)``) and view key has a scalable
Bloom filter ``unique:{n}:{view key}`` in the node's Bloom backend (Redis
with ``--redis``: every node adds into the same one). A user counts when
one of their sessions subscribes to the key or polls while subscribed
(``touch``, called where sessions are counted online): ``insert`` adds the
user, and the filter's "Number of items inserted" — the users it took as
new — is the figure. Each node remembers which (user, key) pairs it added
this period, so polling costs nothing after the first time.

The figure read is, as for the online counters, the larger of the previous
period's (complete, up to a period old) and the current one's (partial):
it does not drop to 0 when a period starts. A user the filter takes for one
already there (its false-positive rate, 0.1 % here) is not counted: the
figure may fall short by about that much, never exceed the truth. The
filters expire two periods after their last insert. Counting never fails
the caller: with Redis down ``touch`` logs and ``count`` reads 0.
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Protocol

from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.bloom import errors
from pushengine.bloom.base import BloomCommands
from pushengine.core.hooks import SessionHooksBase
from pushengine.core.sessions import Session

log = Logger()

CAPACITY = 256
ERROR = 0.001


class UniqueUsers:
    def __init__(self, bloom: BloomCommands, clock: IReactorTime, period: float = 60.0,
                 capacity: int = CAPACITY, error: float = ERROR,
                 prefix: str = "unique") -> None:
        if period <= 0:
            raise ValueError("the period must be positive")
        self.bloom = bloom
        self.clock = clock
        self.period = period
        self.capacity = capacity
        self.error = error
        self.prefix = prefix
        self._n: int | None = None
        self._added: dict[str, set[str]] = {}      # user → keys added this period
        self.counters = {"added": 0, "errors": 0}
        self._last_error_log: int | None = None

    def _period(self) -> int:
        n = int(self.clock.seconds() // self.period)
        if n != self._n:
            self._n = n
            self._added = {}
        return n

    def key(self, n: int, view_key: str) -> str:
        return f"{self.prefix}:{n}:{view_key}"

    def touch(self, user: object, view_keys: Iterable[str]) -> Deferred:
        """Count ``user`` in each of ``view_keys`` for this period (once per
        node and period). Fires with None; never fails."""
        if user is None:
            return succeed(None)
        n = self._period()
        item = json.dumps(user, separators=(",", ":"), ensure_ascii=False)
        done = self._added.setdefault(item, set())
        todo = [k for k in view_keys if k not in done]
        if not todo:
            return succeed(None)
        done.update(todo)
        calls = [self.bloom.insert(self.key(n, k), [item], capacity=self.capacity,
                                   error=self.error, ttl=2 * self.period) for k in todo]
        return DeferredList(calls, consumeErrors=True).addCallback(self._logged, n, item, todo)

    def _logged(self, results: list[tuple[bool, Any]], n: int, item: str,
                keys: list[str]) -> None:
        failures = [(k, r) for k, (ok, r) in zip(keys, results) if not ok]
        self.counters["added"] += len(keys) - len(failures)
        if failures:
            self.counters["errors"] += len(failures)
            if n == self._n:                      # add again on the next poll
                self._added.get(item, set()).difference_update(k for k, _ in failures)
            if self._last_error_log != n:
                self._last_error_log = n
                log.warn("stats.unique: users not counted ({count} errors so far): {error}",
                         count=self.counters["errors"],
                         error=failures[0][1].getErrorMessage())

    def count(self, view_key: str) -> Deferred:
        """Distinct users of ``view_key`` in the last period; fires with an
        int (0 when nothing can be read)."""
        n = int(self.clock.seconds() // self.period)

        def items(info: dict) -> int:
            return int(info.get("Number of items inserted") or 0)

        def absent(f: Failure) -> int:
            if not f.check(errors.BloomError):
                log.warn("stats.unique of {key} unreadable: {e}", key=view_key,
                         e=f.getErrorMessage())
            return 0
        reads = [self.bloom.info(self.key(m, view_key)).addCallbacks(items, absent)
                 for m in (n - 1, n)]
        return DeferredList(reads, consumeErrors=True).addCallback(
            lambda results: max(r for ok, r in results if ok))

    def stats(self) -> dict[str, int]:
        return dict(self.counters)

    counter_names = ("added", "errors")


class UniqueHooks(SessionHooksBase):
    """One of the node's session hooks (``core.hooks``): a session counts
    its user in its view keys when it subscribes, is authorized, or polls
    (``UniqueUsers.touch``)."""

    def __init__(self, unique: UniqueUsers) -> None:
        self.unique = unique

    def _touch(self, session: Session) -> None:
        user = session.user
        if user is not None and session.subs:
            self.unique.touch(user, list(session.subs))

    def changed(self, session: Session) -> None:
        self._touch(session)

    def polled(self, session: Session) -> None:
        self._touch(session)
