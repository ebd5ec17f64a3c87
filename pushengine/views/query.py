"""A live query: every object matching one bound view, kept in view order.

The query holds all matching objects it knows (not only the first ``limit``),
so when an object leaves a full window the next one can enter at once. Its
windows (one per limit) share the sorted set; each change is turned into the
window events by comparing the object's rank before and after, in
O(log n) per change and window.
"""
from __future__ import annotations

from typing import Any, Iterable

from sortedcontainers import SortedList

from pushengine.views.spec import BoundView
from pushengine.views.values import Descending, sort_key
from pushengine.views.window import Window


class Query:
    def __init__(self, bound: BoundView) -> None:
        self.bound = bound
        self.key = bound.query_key
        self.match = bound.predicate()
        self.order_field = bound.spec.order_field
        self.descending = bound.spec.descending
        self.objects: dict[Any, dict] = {}
        self.keys: dict[Any, Any] = {}
        self.sorted = SortedList()
        self.windows: dict[int, Window] = {}
        self.touched: set | None = None   # ids changed while loading
        # The store's answer may stop short of every match (it promises the
        # first ``limit`` at least). Then only the objects that sort up to the
        # answer's last one (``boundary``) are known to be the true first
        # ones: an object never seen may sort anywhere after it. When fewer
        # than the largest window's limit are left before the boundary
        # (deleted, or updated to sort after it), ``on_short(self)`` is
        # called so that the registry reads the query again.
        self.boundary: Any = None
        self.on_short: Any = None

    # -- order -------------------------------------------------------------
    def _key(self, id_: Any, obj: dict) -> Any:
        key = (sort_key(obj.get(self.order_field)), sort_key(id_), id_)
        return Descending(key) if self.descending else key

    @staticmethod
    def _id(key: Any) -> Any:
        return (key.key if isinstance(key, Descending) else key)[2]

    def _at(self, index: int) -> dict:
        return self.objects[self._id(self.sorted[index])]

    def top(self, limit: int) -> list[dict]:
        return [self.objects[self._id(k)] for k in self.sorted.islice(0, limit)]

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
    def load(self, objects: Iterable[tuple[Any, dict]]) -> None:
        """Fill from the store; no events (nobody has seen a state yet). The
        first copy of an id wins; the keys go into the sorted set at once (an
        answer in view order costs one pass, not a search per object)."""
        match, have = self.match, self.objects
        fresh: dict[Any, dict] = {}
        for id_, obj in objects:
            if id_ not in have and id_ not in fresh and match(obj):
                fresh[id_] = obj
        if not fresh:
            return
        key = self._key
        keys = [key(id_, obj) for id_, obj in fresh.items()]
        have.update(fresh)
        self.keys.update(zip(fresh, keys))
        self.sorted.update(keys)

    def replace(self, objects: Iterable[tuple[Any, dict]]) -> list[Window]:
        """Rebuild from a fresh store answer; return windows whose state changed."""
        before = {limit: w.state() for limit, w in self.windows.items()}
        self.objects.clear()
        self.keys.clear()
        self.sorted.clear()
        self.boundary = None
        self.load(objects)
        return [w for limit, w in self.windows.items() if w.state() != before[limit]]

    # -- changes -----------------------------------------------------------
    def upsert(self, id_: Any, obj: dict) -> None:
        old = self.objects.get(id_)
        if old is not None and old == obj:
            return
        matches = self.match(obj)
        if old is None and not matches:
            return
        self._upsert(id_, obj, old, matches)
        if self.boundary is not None and old is not None:
            self._check_short()

    def _upsert(self, id_: Any, obj: dict, old: dict | None, matches: bool) -> None:
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
            was_in = old_pos is not None and old_pos < limit
            now_in = new_pos is not None and new_pos < limit
            if was_in and now_in:
                w.updated(obj, old)
            elif was_in:
                w.deleted(old)
                if size >= limit:
                    w.inserted(self._at(limit - 1))
            elif now_in:
                if size > limit:
                    w.deleted(self._at(limit))
                w.inserted(obj)

    def mark_partial(self, last_id: Any, last: dict) -> None:
        """The store's answer ended with ``last`` and may have had more."""
        self.boundary = self._key(last_id, last)

    def _check_short(self) -> None:
        if self.on_short is not None and self.windows \
                and self.sorted.bisect_right(self.boundary) < max(self.windows):
            self.on_short(self)

    def delete(self, id_: Any) -> None:
        old = self.objects.pop(id_, None)
        if old is None:
            return
        try:
            self._delete(id_, old)
        finally:
            if self.boundary is not None:
                self._check_short()

    def _delete(self, id_: Any, old: dict) -> None:
        key = self.keys.pop(id_)
        pos = self.sorted.index(key)
        self.sorted.remove(key)
        size = len(self.sorted)
        for limit, w in self.windows.items():
            if pos < limit:
                w.deleted(old)
                if size >= limit:
                    w.inserted(self._at(limit - 1))
