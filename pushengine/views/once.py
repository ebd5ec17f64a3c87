"""``once_per_user: true``: an object enters such a view at most once per
authorized user, across sessions and nodes (SPEC section 14).

A once-per-user view is bound to ``$session.user``, so each user has an
instance (a live query) of their own. Its :class:`Gate` lets an object into
the query only if the user's Bloom filter of objects seen in that view
(``seen:{view}:{user}``, in the node's Bloom backend: Redis with
``--redis``, so shared by every node) did not hold it, and puts it there in
the same step (``insert``: a test-and-set, atomic across nodes):

- the initial state (and every re-read of the store) keeps the objects the
  filter did not hold, and marks them seen;
- a change that would make an object enter asks the filter first; with the
  in-process backend the answer is there at once, with Redis the object
  enters a round trip later (the latest state received meanwhile);
- an object that was let in stays while it matches (updates as usual, and
  it may leave and come back within the window as others come and go);
  once it leaves the query (deleted, or no longer matching) it never enters
  again.

A filter says "seen" for an object it never saw at its false-positive rate
(0.1 % by default): such an object is not shown. With Redis down the gate
fails open — objects enter as if unseen, so notifications keep flowing —
and counts it (``/metrics``); what this instance let in or refused is
remembered locally, so it never shows one twice by itself.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Callable, Hashable, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

if TYPE_CHECKING:
    from pushengine.views.query import Query

log = Logger()

DEFAULT_CAPACITY = 1000
DEFAULT_ERROR = 0.001
DEFAULT_TTL = 30 * 86400.0      # a user's filter lives 30 days after its last write
MAX_REFUSED = 10_000            # ids remembered as refused per instance (the filter knows all)


def _text(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


class SeenBackend(Protocol):
    """What a seen filter needs of a Bloom backend (pushengine.bloom):
    ``insert``, a test-and-set of many items."""

    def insert(self, key: str, items: list[str], *, capacity: int, error: float,
               ttl: float | None) -> Deferred[list[int]]:
        """Add ``items`` to the filter ``key`` (made with ``capacity`` and
        ``error`` when new, living ``ttl`` seconds after its last write);
        fire with 1 for each item that was not there, else 0."""


class MemorySeen:
    """An exact, in-process record of what each key holds, with the
    ``insert`` of a Bloom backend: for a registry built without the node's
    filters (one process, tests). Every key's items are kept."""

    def __init__(self) -> None:
        self.keys: dict[str, set[str]] = {}

    def insert(self, key: str, items: list[str], *, capacity: int = 0, error: float = 0.0,
               ttl: float | None = None) -> Deferred[list[int]]:
        """Add ``items`` to ``key``; fire with 1 for each that was new, else 0
        (exact: the filter settings do not matter)."""
        held = self.keys.setdefault(key, set())
        flags = []
        for item in items:
            flags.append(0 if item in held else 1)
            held.add(item)
        return succeed(flags)


class SeenFilter:
    """The objects each user was shown, per once-per-user view: one scalable
    Bloom filter per (view, user) in ``bloom`` (a pushengine.bloom backend)."""

    def __init__(self, bloom: SeenBackend, capacity: int = DEFAULT_CAPACITY,
                 error: float = DEFAULT_ERROR, ttl: float | None = DEFAULT_TTL,
                 prefix: str = "seen") -> None:
        self.bloom = bloom
        self.capacity = capacity
        self.error = error
        self.ttl = ttl
        self.prefix = prefix
        self.counters = {"asked": 0, "admitted": 0, "refused": 0, "failed_open": 0}
        self._last_warning: float | None = None

    def key(self, view: str, user: object) -> str:
        return f"{self.prefix}:{view}:{_text(user)}"

    def admit(self, view: str, user: object, ids: list[Hashable]) -> Deferred[list[bool]]:
        """Mark ``ids`` seen by ``user`` in ``view``; fire with one flag per
        id: True where it was not seen before (it may enter). Never fails:
        when the filter cannot answer every flag is True (fail open)."""
        self.counters["asked"] += len(ids)
        d = self.bloom.insert(self.key(view, user), [_text(i) for i in ids],
                              capacity=self.capacity, error=self.error, ttl=self.ttl)

        def answered(results: list[int]) -> list[bool]:
            flags = [r != 0 for r in results]          # an error element: fail open
            flags += [True] * (len(ids) - len(flags))  # nothing after it was added
            admitted = sum(flags)
            self.counters["admitted"] += admitted
            self.counters["refused"] += len(flags) - admitted
            return flags

        def failed(f: Failure) -> list[bool]:
            self.counters["failed_open"] += len(ids)
            now = getattr(getattr(self.bloom, "reactor", None), "seconds", lambda: None)()
            if self._last_warning is None or now is None or now - self._last_warning > 60:
                self._last_warning = now
                log.warn("once_per_user: the seen filters cannot be read ({why}); objects "
                         "enter as unseen until they can", why=f.getErrorMessage())
            return [True] * len(ids)
        return d.addCallbacks(answered, failed)

    def stats(self) -> dict[str, int]:
        return dict(self.counters)

    counter_names = ("asked", "admitted", "refused", "failed_open")


class Gate:
    """The once-per-user gate of one live query (one user's instance)."""

    def __init__(self, seen: SeenFilter, view: str, user: object,
                 on_late: Callable[[Query, Hashable], None],
                 on_wait: Callable[[Query, Hashable, bool], None] | None = None) -> None:
        """``on_late(query, id)`` is called after an object entered the query
        outside a change (the filter answered later); ``on_wait(query, id,
        waiting)`` when an answer about ``id`` starts and stops being awaited
        (the changes of that object must reach the gate meanwhile)."""
        self.seen = seen
        self.view = view
        self.user = user
        self.on_late = on_late
        self.on_wait = on_wait or (lambda query, id_, waiting: None)
        self.refused: dict[Hashable, None] = {}     # insertion-ordered, bounded
        self.pending: dict[Hashable, dict | None] = {}
        self.closed = False

    def _refuse(self, id_: Hashable) -> None:
        self.refused[id_] = None
        if len(self.refused) > MAX_REFUSED:
            del self.refused[next(iter(self.refused))]

    def enters(self, query: Query, id_: Hashable, obj: dict | None) -> bool:
        """May ``id_`` enter ``query`` now? ``obj`` is its state when it
        matches, None when it does not (a pending answer then does nothing)."""
        if id_ in self.pending:
            self.pending[id_] = obj
            return False
        if obj is None or id_ in self.refused:
            return False
        answer: list[list[bool]] = []
        d = self.seen.admit(self.view, self.user, [id_])
        d.addCallback(answer.append)
        if answer:                             # the in-process filter answers at once
            if answer[0][0]:
                return True
            self._refuse(id_)
            return False
        self.pending[id_] = obj
        self.on_wait(query, id_, True)
        d.addCallback(lambda _: self._answered(query, id_, answer[0][0]))
        return False

    def _answered(self, query: Query, id_: Hashable, admitted: bool) -> None:
        obj = self.pending.pop(id_, None)
        if self.closed:
            return
        self.on_wait(query, id_, False)
        if not admitted or obj is None:
            self._refuse(id_)              # seen now, whether or not it entered
            return
        if query.admit_late(id_, obj):
            self.on_late(query, id_)

    def left(self, id_: Hashable) -> None:
        """``id_`` left the query: it never enters again."""
        if id_ in self.pending:
            self.pending[id_] = None
        else:
            self._refuse(id_)

    def screen(self, objects: list[dict], query: Query) -> list[dict] | Deferred[list[dict]]:
        """A store's answer without the objects the user has seen (those
        already in the query stay); the others are marked seen. A list, or
        a Deferred of one when the filter answers later."""
        id_field = query.bound.spec.id_field
        inside = set(query.objects)
        ask = []
        for o in objects:
            if not isinstance(o, dict):
                continue
            id_ = o.get(id_field)
            if id_ not in inside and id_ not in self.refused and id_ not in self.pending:
                ask.append(id_)
        ask = list(dict.fromkeys(ask))

        def keep(flags: list[bool]) -> list[dict]:
            for id_, ok in zip(ask, flags):
                if ok:
                    inside.add(id_)
                else:
                    self._refuse(id_)
            return [o for o in objects if isinstance(o, dict) and o.get(id_field) in inside]
        if not ask:
            return keep([])
        return self.seen.admit(self.view, self.user, ask).addCallback(keep)

    def close(self) -> None:
        """The query is forgotten: answers still on the way change nothing."""
        self.closed = True
        self.pending.clear()
