"""The live queries of one node, and the routing of changes to them.

Queries are shared: one per (view, parameters, session user), each with one
window per limit. A change reaches only the queries it can affect: those that
hold the object now, plus those found through the view's index (the value of
an equality field, the words of a text, the users who may see it), so 100,000
per-user views cost a dictionary look-up per change, not a scan.
"""
from __future__ import annotations

from typing import Callable, Hashable, Iterable

from twisted.internet.defer import (
    Deferred, FirstError, gatherResults, maybeDeferred, succeed)
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.core.changes import UPSERT, Change
from pushengine.core.errors import StoreUnavailable
from pushengine.core.interfaces import Interest, ObjectStore
from pushengine.core.positions import State
from pushengine.core.timings import Timings
from pushengine.core.tracing import Span, Tracer, active
from pushengine.core.topics import NO_INTEREST, Topic
from pushengine.views.once import Gate, MemorySeen, SeenFilter
from pushengine.views.query import Query, make_query
from pushengine.views.spec import ALL, BoundView, Catalog, IndexRule
from pushengine.views.window import Window

log = Logger()


def _first_failure(f: Failure) -> Failure:
    """The failure inside gatherResults' FirstError."""
    error = f.value
    return error.subFailure if isinstance(error, FirstError) else f


class SpecIndex:
    """The queries of one view, found by routing key."""

    def __init__(self, rule: IndexRule | None) -> None:
        self.rule = rule
        self.every: set[Query] = set()
        self.buckets: dict[Hashable, set[Query]] = {}

    def add(self, query: Query, keys: set[Hashable] | None) -> None:
        self.every.add(query)
        for k in keys or ():
            self.buckets.setdefault(k, set()).add(query)

    def remove(self, query: Query, keys: set[Hashable] | None) -> None:
        self.every.discard(query)
        for k in keys or ():
            bucket = self.buckets.get(k)
            if bucket is not None:
                bucket.discard(query)
                if not bucket:
                    del self.buckets[k]

    def lookup(self, obj: dict) -> Iterable[Query]:
        if self.rule is None or not self.every:
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
    def __init__(self, catalog: Catalog, store: ObjectStore,
                 schedule: Callable[[Callable[[], None]], object] | None = None,
                 seen: SeenFilter | None = None,
                 on_reset: Callable[[], None] | None = None,
                 interest: Interest | None = None,
                 timings: Timings | None = None,
                 clock: Callable[[], float] | None = None,
                 tracer: Tracer | None = None) -> None:
        """``schedule(f)`` runs ``f`` soon, outside the change being applied
        (the engine passes ``clock.callLater(0, f)``); it re-reads queries that
        ran short of a partial answer. ``on_reset`` is called after windows
        were reset outside a change (the engine answers the woken polls).
        ``interest``: what the node asks of a feed that routes changes by
        interest (``core.topics``); a new query's topics are wanted, and
        confirmed, before its initial state is read, so that no change
        falls between the store's answer and the first change delivered.
        ``timings``: each subscription's initial-state time (``open`` to its
        window), read from ``clock``, labelled with the store's ``kind``.
        ``tracer``: a span per read of the store (``_read``)."""
        self.catalog = catalog
        self.tracer = active(tracer)
        self.timings = timings if clock is not None else None
        self.clock: Callable[[], float] = clock or (lambda: 0.0)
        self.store_kind: str = getattr(store, "kind", "other")
        self.store = store
        self.interest: Interest = interest if interest is not None else NO_INTEREST
        self.wanted: dict[Query, set[Topic]] = {}
        self.schedule = schedule
        self.on_reset: Callable[[], None] = on_reset or (lambda: None)
        self._refilling: set[str] = set()
        self.refills = 0
        self.queries: dict[str, Query] = {}
        self.indexes = {name: SpecIndex(spec.index) for name, spec in catalog.views.items()}
        # per type, the indexes of its views that some query holds: a change
        # looks only there (of a type's many views, most are held by no one)
        self.held_indexes: dict[str, list[SpecIndex]] = {}
        self.holders: dict[tuple[str, Hashable], set[Query]] = {}
        self._loading: dict[str, Deferred[Query]] = {}
        # queries whose state is being read from the store: how many reads,
        # and the changes read from a WAL (with a transaction id) meanwhile,
        # applied once the read is in, unless its snapshot saw them
        self._reading: dict[Query, tuple[int, list[Change]]] = {}
        # once_per_user views: the users' seen filters (pushengine.views.once);
        # the node's are on its Bloom backend; without one, an in-process
        # exact record (views.once.MemorySeen) is made when first needed
        self.seen = seen
        self.awaiting: dict[tuple[str, Hashable], set[Query]] = {}  # gates asking about an object
        # a store that keeps some indexes only while a view using them is
        # subscribed (the in-process store's ``similar`` LSH) hears of each
        # query made and forgotten: a query holds its view's indexes
        self._hold: Callable[[object], None] | None = getattr(store, "hold", None)
        self._release: Callable[[object], None] | None = getattr(store, "release", None)

    # -- lifecycle of queries and windows -----------------------------------
    def open(self, bound: BoundView) -> Deferred:
        """Fire with the shared window for ``bound``, loading its query first
        if it is new. Concurrent first subscriptions share one store query.
        Timed (``timings``) until the window is there; a failure is not."""
        if self.timings is None:
            return self._open(bound)
        start = self.clock()
        return self._open(bound).addCallback(self._opened, start)

    def _opened(self, window: Window, start: float) -> Window:
        assert self.timings is not None
        self.timings.observe(self.store_kind, self.clock() - start)
        return window

    def _open(self, bound: BoundView) -> Deferred:
        query = self.queries.get(bound.query_key)
        if query is not None and bound.query_key not in self._loading:
            if query.short_of(bound.limit):
                return self._widen(query, bound)
            return succeed(query.window(bound.limit, bound.key))
        pending = self._loading.get(bound.query_key)
        if pending is None:
            pending = self._start_loading(bound)
        done: Deferred[Window] = Deferred()

        def loaded(query: Query) -> Query:
            if query.short_of(bound.limit):     # a distinct view hid too many
                self._widen(query, bound).addCallbacks(done.callback, done.errback)
            else:
                done.callback(query.window(bound.limit, bound.key))
            return query

        def failed(f: Failure) -> None:
            done.errback(f)
            return None
        pending.addCallbacks(loaded, failed)
        return done

    def _widen(self, query: Query, bound: BoundView) -> Deferred:
        """A window larger than what a partial query is sure of: read the
        query again, as large as the new window, before answering."""
        size = query.read_size(bound.limit)
        d = self._read(query, size)
        d.addErrback(self._read_failed, query)

        def read(objects: list[dict]) -> Deferred[Window] | Window:
            held = self._read_done(query)
            if self.queries.get(query.key) is not query:
                return self._open(bound)          # forgotten meanwhile: start afresh
            if self._replaced(objects, query, size, held):
                self.on_reset()
            if query.short_of(bound.limit) and query.read_size(bound.limit) > size:
                return self._widen(query, bound)  # a distinct view: still short
            return query.window(bound.limit, bound.key)
        return d.addCallback(read)

    def _start_loading(self, bound: BoundView) -> Deferred:
        query = make_query(bound)
        if bound.spec.once_per_user:
            query.gate = self._gate(bound)
        self.queries[query.key] = query
        if self._hold is not None:
            # before its initial state is read: the store answers it once
            # the indexes it holds are complete
            self._hold(bound.spec)
        index = self.indexes[bound.spec.name]
        index.add(query, bound.index_keys())
        if len(index.every) == 1:
            self._held_changed(bound.spec.type)
        touched: set[Hashable] = set()
        query.touched = touched
        chain: Deferred[Query] = Deferred()
        self._loading[query.key] = chain

        def loaded(objects: list[dict]) -> None:
            del self._loading[query.key]
            held = self._read_done(query)
            id_field = bound.spec.id_field
            query.load((o.get(id_field), o) for o in objects
                       if isinstance(o, dict) and o.get(id_field) not in touched)
            query.touched = None
            query.hand_off(objects.snapshot if isinstance(objects, State) else None)
            self._note_partial(query, objects, bound.limit)
            for id_ in query.objects:
                self.holders.setdefault((bound.spec.type, id_), set()).add(query)
            self._catch_up(query, held)
            chain.callback(query)

        def failed(f: Failure) -> None:
            self._loading.pop(query.key, None)
            self._read_done(query)
            self._forget(query)
            if f.check(StoreUnavailable):
                # expected while the database is away or busy: the caller
                # answers 1012; one line, no traceback
                log.warn("initial state of {key}: {why}", key=query.key,
                         why=f.getErrorMessage())
            else:
                log.failure("initial state of {key} failed", f, key=query.key)
            chain.errback(f)

        topics = bound.topics()
        if not topics:
            d = self._read(query, bound.limit)
        else:
            self.wanted[query] = topics
            wanted = gatherResults([maybeDeferred(self.interest.want, t) for t in topics],
                                   consumeErrors=True)
            wanted.addErrback(_first_failure)
            d = wanted.addCallback(lambda _: self._read(query, bound.limit))
        d.addCallbacks(loaded, failed)
        return chain

    def _read(self, query: Query, size: int) -> Deferred:
        """The store's first ``size`` objects of ``query``, less those its
        once-per-user gate keeps out. Until the answer is in, changes from a
        WAL wait for it (``_read_done`` gives them back)."""
        reads, held = self._reading.get(query, (0, []))
        self._reading[query] = (reads + 1, held)
        tracer = self.tracer
        if tracer is not None:
            # the child of the call that subscribed, when it reads at once
            span = tracer.start("view.initial_state", {
                "pushengine.view": query.bound.spec.name, "pushengine.store": self.store_kind,
                "pushengine.limit": size})
        d = maybeDeferred(self.store.query, query.bound.spec, query.bound.values, size)
        if query.gate is not None:
            d.addCallback(query.gate.screen, query)
        if tracer is not None:
            d.addBoth(self._read_traced, span)
        return d

    def _read_traced(self, result: object, span: Span) -> object:
        """A read's span ends with its rows (or as failed); ``result`` goes on."""
        if span.is_recording():
            if isinstance(result, Failure):
                assert self.tracer is not None
                self.tracer.failed(span, f"the store failed: {type(result.value).__name__}")
            elif isinstance(result, list):
                span.set_attribute("pushengine.rows", len(result))
        span.end()
        return result

    def _read_done(self, query: Query) -> list[Change]:
        """One read of ``query`` is in: the WAL changes held meanwhile (kept
        for a read still out, so that its answer is caught up too)."""
        reads, held = self._reading.pop(query, (1, []))
        if reads > 1:
            self._reading[query] = (reads - 1, held)
        return list(held)

    def _catch_up(self, query: Query, held: list[Change]) -> None:
        """Apply to ``query`` the WAL changes that arrived while its state was
        read, but those of transactions its snapshot saw: they are in it."""
        for change in held:
            if not query.saw(change.xid):
                self._apply_to(query, change)

    def _gate(self, bound: BoundView) -> Gate:
        from pushengine.views.conditions import SESSION_USER
        if self.seen is None:
            self.seen = SeenFilter(MemorySeen())
        return Gate(self.seen, bound.spec.name, bound.values.get(SESSION_USER), self._late,
                    self._wait)

    def _wait(self, query: Query, id_: Hashable, waiting: bool) -> None:
        """A gate awaits (or no longer awaits) the filter about ``id_``: its
        changes reach the query meanwhile, even a delete."""
        ident = (query.bound.spec.type, id_)
        if waiting:
            self.awaiting.setdefault(ident, set()).add(query)
        else:
            queries = self.awaiting.get(ident)
            if queries is not None:
                queries.discard(query)
                if not queries:
                    del self.awaiting[ident]

    def _late(self, query: Query, id_: Hashable) -> None:
        """An object entered ``query`` after its change (a gate answered later)."""
        if self.queries.get(query.key) is not query:
            return
        self.holders.setdefault((query.bound.spec.type, id_), set()).add(query)
        self.on_reset()

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
            if self._release is not None:
                self._release(query.bound.spec)
        for topic in self.wanted.pop(query, ()):
            try:
                self.interest.release(topic)
            except Exception:
                log.failure("releasing {topic} failed", topic=topic)
        if query.gate is not None:
            for id_ in list(query.gate.pending):
                self._wait(query, id_, False)
            query.gate.close()
        index = self.indexes[query.bound.spec.name]
        index.remove(query, query.bound.index_keys())
        type_ = query.bound.spec.type
        if not index.every:
            self._held_changed(type_)
        for id_ in query.objects:
            holders = self.holders.get((type_, id_))
            if holders is not None:
                holders.discard(query)
                if not holders:
                    del self.holders[(type_, id_)]

    def _held_changed(self, type_: str) -> None:
        """A view of ``type_`` got its first query or lost its last one."""
        held = [index for index in (self.indexes[spec.name]
                                    for spec in self.catalog.by_type.get(type_, ()))
                if index.every]
        if held:
            self.held_indexes[type_] = held
        else:
            self.held_indexes.pop(type_, None)

    # -- changes -------------------------------------------------------------
    def apply(self, change: Change) -> int:
        """Apply ``change`` to every query it may concern; their number."""
        if change.type not in self.catalog.by_type:
            return 0
        ident = (change.type, change.id)
        holders = self.holders.get(ident)
        candidates = set(holders) if holders else set()
        if self.awaiting:
            candidates.update(self.awaiting.get(ident, ()))
        if change.action == UPSERT:
            for index in self.held_indexes.get(change.type, ()):
                candidates.update(index.lookup(change.obj))
        xid = change.xid
        if xid is not None:
            # from a WAL: a query whose state is being read takes it once the
            # answer is in (exact, by the answer's snapshot); a query whose
            # snapshot saw its transaction has it already
            if self._reading:
                for query, (_, held) in self._reading.items():
                    if query.bound.spec.type == change.type:
                        held.append(change)
                        candidates.discard(query)
        elif self._loading:
            # a query still loading must not take this object from the store's
            # (older) answer: the change it just saw is newer
            for key in self._loading:
                query = self.queries[key]
                if query.bound.spec.type == change.type and query.touched is not None:
                    query.touched.add(change.id)
        for query in candidates:
            if xid is not None and query.saw(xid):
                continue
            self._apply_to(query, change)
        return len(candidates)

    def _apply_to(self, query: Query, change: Change) -> None:
        """Apply one change to one query and keep ``holders`` right."""
        if change.action == UPSERT:
            query.upsert(change.id, change.obj)
        else:
            query.delete(change.id)
        ident = (change.type, change.id)
        holders = self.holders.get(ident)
        if change.id in query.objects:
            if holders is None:
                holders = self.holders[ident] = set()
            holders.add(query)
        elif holders is not None:
            holders.discard(query)
            if not holders:
                del self.holders[ident]

    def reload(self) -> Deferred:
        """Re-read every query from the store (after a feed gap) and reset the
        windows whose state changed. Fires with the number of windows reset."""
        work: list[Deferred[int]] = []
        for query in list(self.queries.values()):
            if query.key in self._loading:
                continue
            size = query.read_size()
            d = self._read(query, size)
            d.addErrback(self._read_failed, query)
            d.addCallback(self._reread, query, size)
            work.append(d)
        return gatherResults(work, consumeErrors=True).addCallback(sum)

    def _reread(self, objects: list[dict], query: Query, size: int) -> int:
        """A query read again by ``reload``: 1 if its windows were reset."""
        return self._replaced(objects, query, size, self._read_done(query))

    def _note_partial(self, query: Query, objects: list[dict], limit: int) -> None:
        """An answer as long as the store's promise may hold only the first
        matches: the query asks again when it runs short (Query.boundary)."""
        promise = getattr(self.store, "promised", None)
        promised = promise(query.bound.spec, limit) if promise is not None else limit
        last = objects[-1] if objects else None
        if len(objects) >= promised and isinstance(last, dict) and query.match(last):
            query.mark_partial(last.get(query.bound.spec.id_field), last)
            query.on_short = self._short
        else:
            query.boundary = None

    def _short(self, query: Query) -> None:
        if self.schedule is None or query.key in self._refilling:
            return
        self._refilling.add(query.key)
        self.schedule(lambda: self._refill(query))

    def _refill(self, query: Query) -> None:
        """Read a query that ran short again; reset the windows that change."""
        if self.queries.get(query.key) is not query:
            self._refilling.discard(query.key)
            return
        self.refills += 1
        size = query.read_size()
        d = self._read(query, size)

        def done(objects: list[dict]) -> None:
            self._refilling.discard(query.key)
            if self._replaced(objects, query, size, self._read_done(query)):
                self.on_reset()

        def failed(f: Failure) -> None:
            self._refilling.discard(query.key)
            self._read_done(query)
            log.failure("re-reading {key} after it ran short failed", f, key=query.key)
        d.addCallbacks(done, failed)

    def _read_failed(self, f: Failure, query: Query) -> Failure:
        """A re-read failed: its held changes go to the query as they are."""
        self._catch_up(query, self._read_done(query))
        return f

    def _replaced(self, objects: list[dict], query: Query, size: int,
                  held: list[Change] | None = None) -> int:
        """Rebuild ``query`` from a fresh answer, reset the windows whose
        state changed, then apply what the WAL brought meanwhile."""
        if self.queries.get(query.key) is not query:
            return 0
        id_field = query.bound.spec.id_field
        type_ = query.bound.spec.type
        for id_ in query.objects:
            self.holders.get((type_, id_), set()).discard(query)
        changed = query.replace((o.get(id_field), o) for o in objects if isinstance(o, dict))
        query.hand_off(objects.snapshot if isinstance(objects, State) else None)
        self._note_partial(query, objects, size)
        for id_ in query.objects:
            self.holders.setdefault((type_, id_), set()).add(query)
        for window in changed:
            window.reset()
        self._catch_up(query, held or [])
        return len(changed)

    def windows(self) -> Iterable[Window]:
        for query in self.queries.values():
            yield from query.windows.values()
