"""The live queries of one node, and the routing of changes to them.

Queries are shared: one per (view, parameters, session user), each with one
window per limit. A change reaches only the queries it can affect: those that
hold the object now, plus those found through the view's index (the value of
an equality field, the words of a text, the users who may see it), so 100,000
per-user views cost a dictionary look-up per change, not a scan.
"""
from __future__ import annotations

from typing import Any, Iterable

from twisted.internet.defer import Deferred, gatherResults, maybeDeferred, succeed
from twisted.logger import Logger

from pushengine.changes import UPSERT, Change
from pushengine.views.query import Query
from pushengine.views.spec import ALL, BoundView, Catalog, IndexRule
from pushengine.views.window import Window

log = Logger()


class SpecIndex:
    """The queries of one view, found by routing key."""

    def __init__(self, rule: IndexRule | None) -> None:
        self.rule = rule
        self.every: set[Query] = set()
        self.buckets: dict[Any, set[Query]] = {}

    def add(self, query: Query, keys: set | None) -> None:
        self.every.add(query)
        for k in keys or ():
            self.buckets.setdefault(k, set()).add(query)

    def remove(self, query: Query, keys: set | None) -> None:
        self.every.discard(query)
        for k in keys or ():
            bucket = self.buckets.get(k)
            if bucket is not None:
                bucket.discard(query)
                if not bucket:
                    del self.buckets[k]

    def lookup(self, obj: dict) -> Iterable[Query]:
        if self.rule is None:
            return self.every
        keys = self.rule.object_keys(obj)
        if keys is ALL:
            return self.every
        found: set[Query] = set()
        for k in keys:
            bucket = self.buckets.get(k)
            if bucket:
                found |= bucket
        return found


class ViewRegistry:
    def __init__(self, catalog: Catalog, store: Any) -> None:
        self.catalog = catalog
        self.store = store
        self.queries: dict[str, Query] = {}
        self.indexes = {name: SpecIndex(spec.index) for name, spec in catalog.views.items()}
        self.holders: dict[tuple[str, Any], set[Query]] = {}
        self._loading: dict[str, Deferred] = {}

    # -- lifecycle of queries and windows -----------------------------------
    def open(self, bound: BoundView) -> Deferred:
        """Fire with the shared window for ``bound``, loading its query first
        if it is new. Concurrent first subscriptions share one store query."""
        query = self.queries.get(bound.query_key)
        if query is not None and bound.query_key not in self._loading:
            return succeed(query.window(bound.limit, bound.key))
        pending = self._loading.get(bound.query_key)
        if pending is None:
            pending = self._start_loading(bound)
        done: Deferred = Deferred()

        def loaded(query: Query) -> Query:
            done.callback(query.window(bound.limit, bound.key))
            return query

        def failed(f):
            done.errback(f)
            return None
        pending.addCallbacks(loaded, failed)
        return done

    def _start_loading(self, bound: BoundView) -> Deferred:
        query = Query(bound)
        self.queries[query.key] = query
        self.indexes[bound.spec.name].add(query, bound.index_keys())
        query.touched = set()
        chain: Deferred = Deferred()
        self._loading[query.key] = chain

        def loaded(objects: list[dict]) -> None:
            del self._loading[query.key]
            id_field = bound.spec.id_field
            query.load((o.get(id_field), o) for o in objects
                       if isinstance(o, dict) and o.get(id_field) not in query.touched)
            query.touched = None
            for id_ in query.objects:
                self.holders.setdefault((bound.spec.type, id_), set()).add(query)
            chain.callback(query)

        def failed(f):
            self._loading.pop(query.key, None)
            self._forget(query)
            log.failure("initial state of {key} failed", f, key=query.key)
            chain.errback(f)

        d = maybeDeferred(self.store.query, bound.spec, bound.values, bound.limit)
        d.addCallbacks(loaded, failed)
        return chain

    def close(self, window: Window) -> None:
        """Called when a window lost its last subscriber."""
        query = window.query
        if window.subscribers:
            return
        query.drop_window(window.limit)
        if not query.windows and query.key not in self._loading:
            self._forget(query)

    def _forget(self, query: Query) -> None:
        if self.queries.get(query.key) is query:
            del self.queries[query.key]
        self.indexes[query.bound.spec.name].remove(query, query.bound.index_keys())
        type_ = query.bound.spec.type
        for id_ in query.objects:
            holders = self.holders.get((type_, id_))
            if holders is not None:
                holders.discard(query)
                if not holders:
                    del self.holders[(type_, id_)]

    # -- changes -------------------------------------------------------------
    def apply(self, change: Change) -> None:
        specs = self.catalog.by_type.get(change.type)
        if not specs:
            return
        ident = (change.type, change.id)
        holders = self.holders.get(ident)
        candidates = set(holders) if holders else set()
        if change.action == UPSERT:
            for spec in specs:
                candidates.update(self.indexes[spec.name].lookup(change.obj))
        if self._loading:
            # a query still loading must not take this object from the store's
            # (older) answer: the change it just saw is newer
            for key in self._loading:
                query = self.queries[key]
                if query.bound.spec.type == change.type:
                    query.touched.add(change.id)
        for query in candidates:
            if change.action == UPSERT:
                query.upsert(change.id, change.obj)
            else:
                query.delete(change.id)
            if change.id in query.objects:
                if holders is None:
                    holders = self.holders[ident] = set()
                holders.add(query)
            elif holders is not None:
                holders.discard(query)
        if holders is not None and not holders:
            self.holders.pop(ident, None)

    def reload(self) -> Deferred:
        """Re-read every query from the store (after a feed gap) and reset the
        windows whose state changed. Fires with the number of windows reset."""
        work = []
        for query in list(self.queries.values()):
            if query.key in self._loading:
                continue
            d = maybeDeferred(self.store.query, query.bound.spec, query.bound.values,
                              max([query.bound.limit, *query.windows]))
            d.addCallback(self._replaced, query)
            work.append(d)
        return gatherResults(work, consumeErrors=True).addCallback(sum)

    def _replaced(self, objects: list[dict], query: Query) -> int:
        if self.queries.get(query.key) is not query:
            return 0
        id_field = query.bound.spec.id_field
        type_ = query.bound.spec.type
        for id_ in query.objects:
            self.holders.get((type_, id_), set()).discard(query)
        changed = query.replace((o.get(id_field), o) for o in objects if isinstance(o, dict))
        for id_ in query.objects:
            self.holders.setdefault((type_, id_), set()).add(query)
        for window in changed:
            window.reset()
        return len(changed)

    def windows(self) -> Iterable[Window]:
        for query in self.queries.values():
            yield from query.windows.values()
