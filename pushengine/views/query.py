"""A live query: every object matching one bound view, kept in view order.

The query holds all matching objects it knows (not only the first ``limit``),
so when an object leaves a full window the next one can enter at once. Its
windows (one per limit) share the sorted set; each change is turned into the
window events by comparing the object's rank before and after, in
O(log n) per change and window.
"""
from __future__ import annotations

from itertools import islice
from typing import TYPE_CHECKING, Callable, Hashable, Iterable, Union

from sortedcontainers import SortedList

from pushengine.core.positions import Snapshot
from pushengine.core.strictjson import identical
from pushengine.views.spec import BoundView
from pushengine.views.values import Descending, sort_key
from pushengine.views.window import Window

if TYPE_CHECKING:
    from pushengine.views.once import Gate

# an object's place in the view order: (order value, id, id), reversed for a
# descending order
SortKey = Union[tuple[tuple[int, object], tuple[int, object], Hashable], Descending]


class Query:
    def __init__(self, bound: BoundView) -> None:
        self.bound = bound
        self.key = bound.query_key
        self.match = bound.predicate()
        # adds the fields the view computes (``_similarity``) to what it shows
        self.decorate = bound.decorator()
        self.id_field = bound.spec.id_field
        self.order_field = bound.spec.order_field
        self.descending = bound.spec.descending
        self.objects: dict[Hashable, dict] = {}
        self.keys: dict[Hashable, SortKey] = {}
        self.sorted = SortedList()
        self.windows: dict[int, Window] = {}
        self.touched: set[Hashable] | None = None   # ids changed while loading
        # The store's answer may stop short of every match (it promises the
        # first ``limit`` at least). Then only the objects that sort up to the
        # answer's last one (``boundary``) are known to be the true first
        # ones: an object never seen may sort anywhere after it. When fewer
        # than the largest window's limit are left before the boundary
        # (deleted, or updated to sort after it), ``on_short(self)`` is
        # called so that the registry reads the query again.
        self.boundary: SortKey | None = None
        self.on_short: Callable[[Query], None] | None = None
        # once_per_user views: who may enter (pushengine.views.once.Gate)
        self.gate: Gate | None = None
        # the snapshot its state was last read in (a PostgreSQL store's,
        # core/positions.py): a change of a transaction it saw is in the state
        self.snapshot: Snapshot | None = None

    # -- the hand-off from the store to the feed ------------------------------
    def hand_off(self, snapshot: Snapshot | None) -> None:
        """The state now held was read in ``snapshot`` (None: unknown)."""
        self.snapshot = snapshot

    def saw(self, xid: int | None) -> bool:
        """Whether the state already holds what transaction ``xid`` did."""
        return xid is not None and self.snapshot is not None and self.snapshot.sees(xid)

    # -- order -------------------------------------------------------------
    def _key(self, id_: Hashable, obj: dict) -> SortKey:
        key = (sort_key(obj.get(self.order_field)), sort_key(id_), id_)
        return Descending(key) if self.descending else key

    @staticmethod
    def _id(key: SortKey) -> Hashable:
        return (key.key if isinstance(key, Descending) else key)[2]

    def _at(self, index: int) -> dict:
        return self.objects[self._id(self.sorted[index])]

    def top(self, limit: int) -> list[dict]:
        objects, id_ = self.objects, self._id
        return [objects[id_(k)] for k in self.sorted.islice(0, limit)]

    def __len__(self) -> int:
        return len(self.sorted)

    # -- windows -----------------------------------------------------------
    def window(self, limit: int, key: str) -> Window:
        w = self.windows.get(limit)
        if w is None:
            w = self.windows[limit] = Window(self, key, limit)
        return w

    def drop_window(self, limit: int) -> None:
        self.windows.pop(limit, None)

    # -- loading -----------------------------------------------------------
    def load(self, objects: Iterable[tuple[Hashable, dict]]) -> None:
        """Fill from the store; no events (nobody has seen a state yet). The
        first copy of an id wins; the keys go into the sorted set at once (an
        answer in view order costs one pass, not a search per object)."""
        match, have, decorate = self.match, self.objects, self.decorate
        fresh: dict[Hashable, dict] = {}
        for id_, obj in objects:
            if id_ not in have and id_ not in fresh and match(obj):
                fresh[id_] = obj if decorate is None else decorate(obj)
        if not fresh:
            return
        key = self._key
        keys = [key(id_, obj) for id_, obj in fresh.items()]
        have.update(fresh)
        self.keys.update(zip(fresh, keys))
        self.sorted.update(keys)

    def replace(self, objects: Iterable[tuple[Hashable, dict]]) -> list[Window]:
        """Rebuild from a fresh store answer; return windows whose state changed."""
        before = {limit: w.state() for limit, w in self.windows.items()}
        self.objects.clear()
        self.keys.clear()
        self.sorted.clear()
        self.boundary = None
        self.load(objects)
        return [w for limit, w in self.windows.items() if w.state() != before[limit]]

    # -- changes -----------------------------------------------------------
    def upsert(self, id_: Hashable, obj: dict) -> None:
        old = self.objects.get(id_)
        if self.decorate is None:
            if old is not None and old == obj and identical(old, obj):
                return
            matches = self.match(obj)
        else:
            matches = self.match(obj)
            if matches:
                obj = self.decorate(obj)
                if old is not None and old == obj and identical(old, obj):
                    return
        if old is None:
            if self.gate is not None:
                if not self.gate.enters(self, id_, obj if matches else None):
                    return
            elif not matches:
                return
        self._upsert(id_, obj, old, matches)
        if self.gate is not None and old is not None and not matches:
            self.gate.left(id_)
        if self.boundary is not None and old is not None:
            self._check_short()

    def admit_late(self, id_: Hashable, obj: dict) -> bool:
        """A once-per-user gate let ``id_`` in after the change that brought
        it (its filter answered later): enter now if it still matches."""
        if id_ in self.objects or not self.match(obj):
            return False
        self._upsert(id_, obj if self.decorate is None else self.decorate(obj), None, True)
        return True

    def _upsert(self, id_: Hashable, obj: dict, old: dict | None, matches: bool) -> None:
        old_pos = None
        if old is not None:
            old_key = self.keys.pop(id_)
            old_pos = self.sorted.index(old_key)
            self.sorted.remove(old_key)
            del self.objects[id_]
        new_pos = None
        if matches:
            key = self._key(id_, obj)
            self.objects[id_] = obj
            self.keys[id_] = key
            self.sorted.add(key)
            new_pos = self.sorted.index(key)
        size = len(self.sorted)
        for limit, w in self.windows.items():
            was = old if old_pos is not None and old_pos < limit else None
            now_in = new_pos is not None and new_pos < limit
            if was is not None and now_in:
                w.updated(obj, was)
            elif was is not None:
                w.deleted(was)
                if size >= limit:
                    w.inserted(self._at(limit - 1))
            elif now_in:
                if size > limit:
                    w.deleted(self._at(limit))
                w.inserted(obj)

    def mark_partial(self, last_id: Hashable, last: dict) -> None:
        """The store's answer ended with ``last`` and may have had more."""
        self.boundary = self._key(last_id, last if self.decorate is None else self.decorate(last))

    def short_of(self, limit: int) -> bool:
        """Whether a window of ``limit`` needs more than the partial answer
        is sure of."""
        return self.boundary is not None and self.sorted.bisect_right(self.boundary) < limit

    def read_size(self, limit: int | None = None) -> int:
        """How many objects to ask the store for when (re-)reading."""
        return max([limit or self.bound.limit, *self.windows])

    def _check_short(self) -> None:
        if self.on_short is not None and self.windows and self.short_of(max(self.windows)):
            self.on_short(self)

    def delete(self, id_: Hashable) -> None:
        old = self.objects.pop(id_, None)
        if self.gate is not None:
            self.gate.left(id_)
        if old is None:
            return
        try:
            self._delete(id_, old)
        finally:
            if self.boundary is not None:
                self._check_short()

    def _delete(self, id_: Hashable, old: dict) -> None:
        key = self.keys.pop(id_)
        pos = self.sorted.index(key)
        self.sorted.remove(key)
        size = len(self.sorted)
        for limit, w in self.windows.items():
            if pos < limit:
                w.deleted(old)
                if size >= limit:
                    w.inserted(self._at(limit - 1))


class DistinctQuery(Query):
    """A query whose windows hide near-duplicates (the ``distinct`` option,
    views/distinct.py). A window is the first ``limit`` objects the greedy
    pass shows, so one change may hide or show objects anywhere below it:
    each change recomputes the largest window and tells every window the
    difference from what it last told (deletes, then updates, then inserts,
    so that a client's copy never holds more than ``limit``)."""

    def __init__(self, bound: BoundView) -> None:
        super().__init__(bound)
        if bound.spec.distinct is None:
            raise ValueError(f"{bound.spec.name} has no distinct option")
        self.distinct = bound.spec.distinct
        self.told: dict[int, list[dict]] = {}   # per window: the state it last told

    def _ordered(self) -> Iterable[dict]:
        objects, id_ = self.objects, self._id
        return (objects[id_(k)] for k in self.sorted)

    def top(self, limit: int) -> list[dict]:
        return self.distinct.first(self._ordered(), limit)[0]

    def window(self, limit: int, key: str) -> Window:
        if limit not in self.windows:
            self.told[limit] = self.top(limit)
        return super().window(limit, key)

    def drop_window(self, limit: int) -> None:
        super().drop_window(limit)
        self.told.pop(limit, None)

    def short_of(self, limit: int) -> bool:
        if self.boundary is None:
            return False
        known = islice(self._ordered(), self.sorted.bisect_right(self.boundary))
        return len(self.distinct.first(known, limit)[0]) < limit

    def read_size(self, limit: int | None = None) -> int:
        """At least as many objects as are known to be needed; twice as
        many when those were not enough."""
        base = super().read_size(limit)
        known = len(self.sorted) if self.boundary is None \
            else self.sorted.bisect_right(self.boundary)
        return max(base, 2 * known if self.short_of(base) else known)

    def _upsert(self, id_: Hashable, obj: dict, old: dict | None, matches: bool) -> None:
        if old is not None:
            self.sorted.remove(self.keys.pop(id_))
            del self.objects[id_]
        if matches:
            key = self._key(id_, obj)
            self.objects[id_] = obj
            self.keys[id_] = key
            self.sorted.add(key)
        self._tell()

    def _delete(self, id_: Hashable, old: dict) -> None:
        self.sorted.remove(self.keys.pop(id_))
        self._tell()

    def replace(self, objects: Iterable[tuple[Hashable, dict]]) -> list[Window]:
        changed = super().replace(objects)
        for limit in self.windows:
            self.told[limit] = self.top(limit)
        return changed

    def _tell(self) -> None:
        if not self.windows:
            return
        state = self.top(max(self.windows))
        id_field = self.id_field
        for limit, w in self.windows.items():
            now = state[:limit]
            before = self.told.get(limit, [])
            if before == now:
                continue
            was = {o.get(id_field): o for o in before}
            is_ = {o.get(id_field): o for o in now}
            for i, o in was.items():
                if i not in is_:
                    w.deleted(o)
            for i, o in is_.items():
                if i in was and was[i] != o:
                    w.updated(o, was[i])
            for i, o in is_.items():
                if i not in was:
                    w.inserted(o)
            self.told[limit] = now


def make_query(bound: BoundView) -> Query:
    """The query a bound view needs."""
    return DistinctQuery(bound) if bound.spec.distinct is not None else Query(bound)
