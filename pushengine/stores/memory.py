"""The in-process object store: every object seen on the feed, by type and id.

It answers a new view's initial state without holding the reactor for long
(SPEC section 12): from an index where the view has one (the views'
operators say which, views/operators: an equality index per declared field,
so ``subscribe_user(user_id=X)`` looks at X's objects only, a grid of
one-degree cells for ``near``, a MinHash LSH of a text field for
``similar``), otherwise by scanning a
snapshot of the type's objects in slices of a few milliseconds, one slice per
reactor turn, shared round-robin between every scan in progress. A small
candidate set (or a store without a clock) is answered at once.

An answer is the matching objects in view order, built once: filtered with
the view's predicate and sorted by the view's key. A change that arrives
while a scan runs is re-read from the store when the scan ends, so the
answer never holds a copy older than the store's. The store can be seeded
from a JSON-lines file of change messages or objects.

An index an operator asks for ``on demand`` (``similar``'s LSH: a MinHash of
every text) is kept only while a view using it is subscribed (``hold`` /
``release``, called by the view registry), and only over the objects one of
the views using it could show (``ViewSpec.could_show``: e.g. the live public
streams). The first subscription builds it from the stored objects, in the
scans' slices, before its initial state is read; ``index_linger`` seconds
after the last one ends it is dropped. With no such subscriber a change
costs nothing for it.
"""
from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Sequence, cast

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from pushengine.core.changes import (
    UPSERT, Change, MalformedChange, changes_from_json, decode_json)
from pushengine.stores.scan import MAX_CHUNK, MIN_CHUNK, Build, Scan, first
from pushengine.views.operators import Move, Predicate, StoreIndex
from pushengine.views.operators.eq import FieldIndex
from pushengine.views.operators.near import GeoIndex
from pushengine.views.spec import BoundView, ViewSpec
from pushengine.views.values import sort_key

log = Logger()

SMALL = 2_000            # candidates answered at once
ANSWER_MAX = 500         # an answer holds the first this many matches (or limit)
SLICE_SECONDS = 0.005    # the work of one reactor turn, at most (about)
SLICE_OBJECTS = 20_000   # ... and never more objects than this in one turn
CHUNK_SECONDS = 0.001    # the work of one scan between two looks at the time
BUILD_AT_ONCE = 128      # objects an index asked for on demand is built from at once
INDEX_LINGER = 60.0      # seconds an on-demand index outlives its last subscription


class Demand:
    """An index kept only while a view using it is subscribed (an
    operator's ``store_index_on_demand``), over the objects one of the views
    declared with it could show."""

    __slots__ = ("type", "key", "make", "shows", "keep", "held", "build", "linger")

    def __init__(self, type_: str, key: Hashable, make: Callable[[], StoreIndex]) -> None:
        self.type = type_
        self.key = key
        self.make = make
        self.shows: dict[str, Predicate] = {}    # view name -> what it could show
        self.keep: Predicate = lambda obj: False
        self.held = 0                             # subscriptions (queries) using it
        self.build: Build | None = None           # while it is being built
        self.linger: IDelayedCall | None = None   # its drop, after the last release

    def show(self, view: str, could_show: Predicate) -> None:
        self.shows[view] = could_show
        shows = list(self.shows.values())
        if len(shows) == 1:
            self.keep = shows[0]
        else:
            self.keep = lambda obj: any(s(obj) for s in shows)


class MemoryStore:
    kind = "memory"         # the store label of /metrics' initial-state times

    def __init__(self, id_fields: dict[str, str] | None = None,
                 clock: IReactorTime | None = None, *, small: int = SMALL,
                 answer_max: int = ANSWER_MAX, slice_seconds: float = SLICE_SECONDS,
                 slice_objects: int = SLICE_OBJECTS, slice_delay: float = 0.0,
                 index_linger: float = INDEX_LINGER, build_at_once: int = BUILD_AT_ONCE) -> None:
        self.id_fields = id_fields or {}
        self.objects: dict[str, dict[Hashable, dict]] = {}
        self.clock = clock
        self.small = small
        self.answer_max = answer_max
        self.slice_seconds = slice_seconds
        self.slice_objects = slice_objects
        self.slice_delay = slice_delay
        self.now: Callable[[], float] = time.perf_counter
        # type -> index key -> the index: every index an operator asked for
        # (views/operators: a field's values for eq/in, a grid for near, an
        # LSH for similar), kept up to date with every change
        self.type_indexes: dict[str, dict[Hashable, StoreIndex]] = {}
        # the indexes kept on demand: (type, index key) -> Demand, and the
        # ones each view uses (by view name)
        self.demands: dict[tuple[str, Hashable], Demand] = {}
        self._view_demands: dict[str, list[Demand]] = {}
        self.index_linger = index_linger
        self.build_at_once = build_at_once
        self.builds = 0          # on-demand indexes built (for tests and benchmarks)
        self._scans: deque[Scan | Build] = deque()
        self._ready: deque[Deferred[None]] = deque()   # queries a build held back
        self._scanning: dict[str, set[Scan]] = {}
        # type -> id(bucket) -> (bucket, its objects): copies taken for scans
        self._snapshots: dict[str, dict[int, tuple[dict, list[dict]]]] = {}
        self._call: IDelayedCall | None = None
        # what the slicing did, for tests and benchmarks
        self.turns = 0
        self.examined = 0
        self.max_turn = 0

    # -- indexes ---------------------------------------------------------------
    def add_index(self, type_: str, key: Hashable,
                  make: Callable[[], StoreIndex]) -> StoreIndex:
        """Keep the index ``make()`` over ``type_`` objects under ``key``
        (filled from the objects stored so far), unless there is one."""
        indexes = self.type_indexes.setdefault(type_, {})
        index = indexes.get(key)
        if index is None:
            index = indexes[key] = make()
            objects = self.objects.get(type_)
            if objects:
                index.move_many([(id_, None, obj) for id_, obj in objects.items()])
        return index

    def index_fields(self, type_: str, fields: Iterable[str]) -> None:
        """Keep an equality index on ``fields`` of ``type_`` objects."""
        for field in fields:
            self.add_index(type_, ("field", field), _field_index(field))

    def index_geo(self, type_: str) -> None:
        """Keep a grid of ``type_`` objects by their ``lat``/``lon``."""
        self.add_index(type_, "geo", GeoIndex)

    def index_views(self, specs: Iterable[ViewSpec]) -> None:
        """The indexes the views' operators ask for: the values of every
        field an equality (``eq``/``in``) takes a parameter for, the grid
        for ``near``; the LSH of a ``similar`` field is only declared here,
        and built when a view using it is first subscribed (``hold``)."""
        for spec in specs:
            for c in spec.conditions:
                wanted = c.op.store_index(c) if c.op.wants_store_index(c) else None
                if wanted is None:
                    continue
                key, make = wanted
                if not c.op.store_index_on_demand:
                    self.add_index(spec.type, key, make)
                    continue
                demand = self.demands.get((spec.type, key))
                if demand is None:
                    demand = self.demands[(spec.type, key)] = Demand(spec.type, key, make)
                demand.show(spec.name, spec.could_show(skip=c))
                uses = self._view_demands.setdefault(spec.name, [])
                if demand not in uses:
                    uses.append(demand)
                if self._index_of(demand) is not None:
                    # kept over other objects now: built again if in use
                    self._drop(demand, force=True)
                    if demand.held:
                        self._build(demand)

    # -- indexes kept on demand ------------------------------------------------
    def hold(self, view: ViewSpec) -> None:
        """A subscription to ``view`` begins (the registry made its query):
        keep the on-demand indexes it uses, building a missing one from the
        stored objects; ``query`` waits for it to be complete."""
        for demand in self._view_demands.get(view.name, ()):
            demand.held += 1
            if demand.linger is not None:
                if demand.linger.active():
                    demand.linger.cancel()
                demand.linger = None
            if self._index_of(demand) is None:
                self._build(demand)

    def release(self, view: ViewSpec) -> None:
        """A subscription to ``view`` ended: an on-demand index no view uses
        any more is dropped ``index_linger`` seconds later (at once without
        a clock), unless a subscription holds it again meanwhile."""
        for demand in self._view_demands.get(view.name, ()):
            if demand.held <= 0:
                continue
            demand.held -= 1
            if demand.held:
                continue
            if self.clock is None or self.index_linger <= 0:
                self._drop(demand)
            elif demand.linger is None:
                demand.linger = self.clock.callLater(self.index_linger, self._drop, demand)

    def _index_of(self, demand: Demand) -> StoreIndex | None:
        return self.type_indexes.get(demand.type, {}).get(demand.key)

    def _build(self, demand: Demand) -> None:
        """Make the index and fill it: at once from a few objects (or
        without a clock), else in the scans' slices. It sees every change
        from now on."""
        index = demand.make()
        self.type_indexes.setdefault(demand.type, {})[demand.key] = index
        self.builds += 1
        objects = self.objects.setdefault(demand.type, {})
        build = Build(demand.type, demand.key, index, objects, demand.keep)
        if self.clock is None or len(objects) <= self.build_at_once:
            try:
                while not build.done:
                    build.step(len(objects))
            except Exception:
                self._failed(demand, build)
            return
        demand.build = build
        self._scans.append(build)
        self._schedule()

    def _drop(self, demand: Demand, force: bool = False) -> None:
        """Stop keeping the index of ``demand`` (unless it is held again)."""
        demand.linger = None
        if demand.held and not force:
            return
        indexes = self.type_indexes.get(demand.type)
        if indexes is not None:
            indexes.pop(demand.key, None)
            if not indexes:
                del self.type_indexes[demand.type]
        build, demand.build = demand.build, None
        if build is not None:
            if build in self._scans:
                self._scans.remove(build)
            self._answer(build)     # its waiters answer without it (a scan)

    def _failed(self, demand: Demand, build: Build) -> None:
        """An index that could not be built is not kept: the views using it
        are answered by scans (the next first subscription tries again)."""
        log.failure("building the index {key} of {type} failed", key=build.key,
                    type=build.type)
        if self.type_indexes.get(demand.type, {}).get(demand.key) is build.index:
            self._drop(demand, force=True)

    def _built(self, build: Build) -> None:
        demand = self.demands.get((build.type, build.key))
        if demand is not None and demand.build is build:
            demand.build = None
        self._answer(build)

    def _answer(self, build: Build) -> None:
        """Let the queries that waited for ``build`` go on, in the next
        turns: many subscriptions may have waited, and each gathers its
        candidates when it goes on (up to a few milliseconds)."""
        waiters = build.finish()
        if self.clock is None:          # no turns (a build without one is never waited for)
            for d in waiters:
                d.callback(None)
            return
        self._ready.extend(waiters)
        self._schedule()

    def _waiting(self, view: ViewSpec) -> Build | None:
        """A build of an index ``view`` uses, in progress."""
        for demand in self._view_demands.get(view.name, ()):
            if demand.build is not None:
                return demand.build
        return None

    @property
    def indexes(self) -> dict[tuple[str, str], dict[Hashable, dict[Hashable, dict]]]:
        """(type, field) -> value key -> id -> object: the equality indexes."""
        return {(t, index.field): index.buckets for t, found in self.type_indexes.items()
                for index in found.values() if isinstance(index, FieldIndex)}

    @property
    def grids(self) -> dict[str, GeoIndex]:
        """type -> the grid of its objects (``near``)."""
        return {t: grid for t, found in self.type_indexes.items()
                if isinstance(grid := found.get("geo"), GeoIndex)}

    # -- changes ---------------------------------------------------------------
    def apply_changes(self, changes: Sequence[Change]) -> None:
        # the moves of indexed types, handed to their indexes at the end (in
        # order), so that an index may work on a batch at once
        moves: dict[str, list[Move]] = {}
        type_indexes = self.type_indexes
        for c in changes:
            type_ = c.type
            by_id = self.objects.setdefault(type_, {})
            indexed = type_ in type_indexes
            old = by_id.get(c.id) if indexed else None
            if c.action == UPSERT:
                by_id[c.id] = new = c.obj
            else:
                by_id.pop(c.id, None)
                new = None
            if indexed:
                moves.setdefault(type_, []).append((c.id, old, new))
            if type_ in self._snapshots:
                del self._snapshots[type_]
            scans = self._scanning.get(type_)
            if scans:
                for scan in scans:
                    scan.changed.add(c.id)
        demands = self.demands
        for type_, found in moves.items():
            for key, index in type_indexes[type_].items():
                demand = demands.get((type_, key)) if demands else None
                if demand is None:
                    index.move_many(found)
                    continue
                # an on-demand index holds only what its views could show: an
                # object they could not is absent to it (the old state is the
                # store's, which the index may not hold)
                keep = demand.keep
                index.move_many([(i, o, n) if n is None or keep(n) else (i, o, None)
                                 for i, o, n in found])

    # -- answers ---------------------------------------------------------------
    def query(self, view: ViewSpec, params: dict[str, Any], limit: int) -> Deferred[list[dict]]:
        """Fire with the objects matching ``view`` under ``params``, in view
        order (the first ``answer_max`` of them, or ``limit`` if more): at
        once from a small candidate set, else after slices (and after the
        build of an on-demand index the view uses, when one is running)."""
        building = self._waiting(view) if self._view_demands else None
        if building is not None:
            built: Deferred[None] = Deferred()
            building.waiters.append(built)
            return built.addCallback(lambda _: self.query(view, params, limit))
        values = dict(params)
        bound = BoundView(view, values, limit)
        match = bound.predicate()
        by_id = self.objects.get(view.type)
        if not by_id:
            return succeed([])
        id_field = getattr(view, "id_field", None) or self.id_fields.get(view.type, "id")
        key = _key_function(view.order_field, id_field,
                            bound.computed().get(view.order_field))
        keep = self.promised(view, limit)
        sources, verify = self._candidates(view, values, id_field)
        size = len(by_id) if sources is None else sum(len(b) for b in sources)
        small = self.small
        if verify is not None:
            # candidates that the index checks exactly as part of the scan
            # (``similar``): each costs more than a plain filter, so fewer
            # are done at once
            match = _verified(verify, match)
            small //= 4
        elif sources is None or size * 2 > len(by_id):
            sources, size = [by_id], len(by_id)  # no index, or one that narrows little
        assert sources is not None
        if self.clock is None or size <= small:
            try:
                hits = [(key(o), o) for b in sources for o in b.values() if match(o)]
            except Exception:
                return fail()
            hits.sort(key=first, reverse=view.descending)
            return succeed([o for _, o in hits[:keep]])
        scan = Scan(view.type, id_field, sources, self._snapshot, match, key,
                     view.descending, keep)
        self._scans.append(scan)
        self._scanning.setdefault(view.type, set()).add(scan)
        self._schedule()
        return scan.deferred

    def promised(self, view: ViewSpec, limit: int) -> int:
        """How many objects an answer holds when there are as many matches:
        an answer this long may have stopped short of every match."""
        return max(self.answer_max, limit, getattr(view, "limit_max", 0))

    def _snapshot(self, type_: str, bucket: dict) -> list[dict]:
        """A bucket's objects as a list, shared by the scans that reach it
        before the type's next change."""
        if getattr(bucket, "sliced", False):
            # a bucket that hands out its objects a slice at a time
            return cast("list[dict]", bucket)
        copies = self._snapshots.setdefault(type_, {})
        found = copies.get(id(bucket))
        if found is None or found[0] is not bucket:
            found = copies[id(bucket)] = (bucket, list(bucket.values()))
        return found[1]

    def _candidates(self, view: ViewSpec, values: dict[str, Any], id_field: str
                    ) -> tuple[list[dict] | None, Callable[[dict], bool] | None]:
        """The buckets of the index that narrows ``view`` most, or None; and
        the exact check of its candidates when that index leaves it to the
        scan (``verifier``: the LSH of ``similar``), else None."""
        best: list[dict] | None = None
        best_size = 0
        best_index: StoreIndex | None = None
        best_condition = None
        indexes = self.type_indexes.get(view.type)
        if not indexes:
            return None, None
        for c in view.conditions:
            found = None
            wanted = c.op.store_index(c)
            index = indexes.get(wanted[0]) if wanted is not None else None
            if index is not None:
                found = index.candidates(c, values)
            if found is not None:
                size = sum(len(b) for b in found)
                if best is None or size < best_size:
                    best, best_size, best_index, best_condition = found, size, index, c
        verifier = getattr(best_index, "verifier", None)
        if verifier is None or best_condition is None:
            return best, None
        return best, verifier(best_condition, values, id_field)

    # -- slices ----------------------------------------------------------------
    def _schedule(self) -> None:
        if self._call is None and (self._scans or self._ready) and self.clock is not None:
            self._call = self.clock.callLater(self.slice_delay, self._turn)

    def _turn(self) -> None:
        """One reactor turn of scanning: the queries a finished build held
        back, then a chunk of every scan in turn, until the time or object
        budget is spent."""
        self._call = None
        scans, now = self._scans, self.now
        started = now()
        deadline = started + self.slice_seconds
        examined = 0
        try:
            ready = self._ready
            if ready:
                # the queries a build held back go on (each may start a scan)
                ready.popleft().callback(None)
                while ready and now() < deadline:
                    ready.popleft().callback(None)
                started = now()
                if started >= deadline:
                    return
            while scans and examined < self.slice_objects:
                scan = scans[0]
                try:
                    examined += scan.step(min(scan.chunk, self.slice_objects - examined))
                    if scan.done:
                        scans.popleft()
                        if isinstance(scan, Build):
                            self._built(scan)
                        else:
                            self._forget(scan)
                            scan.deferred.callback(
                                scan.answer(self.objects.get(scan.type, {})))
                    else:
                        scans.rotate(-1)
                except Exception:
                    if scans and scans[0] is scan:
                        scans.popleft()
                    if isinstance(scan, Build):
                        demand = self.demands.get((scan.type, scan.key))
                        if demand is not None:
                            self._failed(demand, scan)
                        self._answer(scan)
                        continue
                    self._forget(scan)
                    if not scan.deferred.called:
                        scan.deferred.errback()
                    continue
                finished = now()
                # about a millisecond per chunk, so that a costly predicate
                # cannot overrun the turn by much
                spent, started = finished - started, finished
                if spent < CHUNK_SECONDS / 2 and scan.chunk < MAX_CHUNK:
                    scan.chunk *= 2
                elif spent > CHUNK_SECONDS * 2 and scan.chunk > MIN_CHUNK:
                    scan.chunk //= 2
                if finished >= deadline:
                    break
        finally:
            self.turns += 1
            self.examined += examined
            self.max_turn = max(self.max_turn, examined)
            self._schedule()

    def _forget(self, scan: Scan) -> None:
        scans = self._scanning.get(scan.type)
        if scans is not None:
            scans.discard(scan)
            if not scans:
                del self._scanning[scan.type]
                self._snapshots.pop(scan.type, None)

    @property
    def scanning(self) -> int:
        """Scans in progress."""
        return len(self._scans)

    # -- the rest ----------------------------------------------------------------
    def get(self, type_: str, id_: Hashable) -> dict | None:
        return self.objects.get(type_, {}).get(id_)

    def __len__(self) -> int:
        return sum(len(v) for v in self.objects.values())

    def seed(self, path: str | Path, default_type: str = "Stream") -> int:
        """Load a JSON-lines file: each line a change message, or a bare object
        of ``default_type``. Returns the number of objects loaded."""
        count = 0
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    data, checked = decode_json(line)   # the strict decoder of every feed
                except MalformedChange as e:
                    raise MalformedChange(f"{path}:{number}: {e}") from None
                if isinstance(data, dict) and "action" not in data:
                    data = {"type": default_type, "action": "upsert", "obj": data}
                changes, errors = changes_from_json(data, self.id_fields, checked)
                if errors:
                    raise MalformedChange(f"{path}:{number}: {errors[0]}")
                self.apply_changes(changes)
                count += len(changes)
        return count


def _verified(verify: Callable[[dict], bool],
              match: Callable[[dict], bool]) -> Callable[[dict], bool]:
    return lambda obj: verify(obj) and match(obj)


def _field_index(field: str) -> Callable[[], StoreIndex]:
    return lambda: FieldIndex(field)


def _key_function(order_field: str, id_field: str,
                  computed: Callable[[dict], Any] | None = None) -> Callable[[dict], tuple]:
    """The view's sort key of an object (as ``Query`` orders; the caller
    reverses for a descending view). ``computed``: the function giving the
    order field's value when the view computes it (``_similarity``)."""
    if computed is not None:
        def computed_key(obj: dict) -> tuple:
            id_ = obj.get(id_field)
            return sort_key(computed(obj)), sort_key(id_), id_
        return computed_key

    def key(obj: dict) -> tuple:
        id_ = obj.get(id_field)
        return sort_key(obj.get(order_field)), sort_key(id_), id_
    return key
