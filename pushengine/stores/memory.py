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
"""
from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Sequence, cast

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from pushengine.core.changes import (
    UPSERT, Change, MalformedChange, changes_from_json, decode_json)
from pushengine.stores.scan import MAX_CHUNK, MIN_CHUNK, Scan, first
from pushengine.views.operators import Move, StoreIndex
from pushengine.views.operators.eq import FieldIndex
from pushengine.views.operators.near import GeoIndex
from pushengine.views.spec import BoundView, ViewSpec
from pushengine.views.values import sort_key

SMALL = 2_000            # candidates answered at once
ANSWER_MAX = 500         # an answer holds the first this many matches (or limit)
SLICE_SECONDS = 0.005    # the work of one reactor turn, at most (about)
SLICE_OBJECTS = 20_000   # ... and never more objects than this in one turn
CHUNK_SECONDS = 0.001    # the work of one scan between two looks at the time


class MemoryStore:
    def __init__(self, id_fields: dict[str, str] | None = None,
                 clock: IReactorTime | None = None, *, small: int = SMALL,
                 answer_max: int = ANSWER_MAX, slice_seconds: float = SLICE_SECONDS,
                 slice_objects: int = SLICE_OBJECTS, slice_delay: float = 0.0) -> None:
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
        self._scans: deque[Scan] = deque()
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
        for ``near``, the LSH of a ``similar`` field."""
        for spec in specs:
            for c in spec.conditions:
                wanted = c.op.store_index(c) if c.op.wants_store_index(c) else None
                if wanted is not None:
                    key, make = wanted
                    self.add_index(spec.type, key, make)

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
        for type_, found in moves.items():
            for index in type_indexes[type_].values():
                index.move_many(found)

    # -- answers ---------------------------------------------------------------
    def query(self, view: ViewSpec, params: dict[str, Any], limit: int) -> Deferred[list[dict]]:
        """Fire with the objects matching ``view`` under ``params``, in view
        order (the first ``answer_max`` of them, or ``limit`` if more): at
        once from a small candidate set, else after slices."""
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
        if self._call is None and self._scans and self.clock is not None:
            self._call = self.clock.callLater(self.slice_delay, self._turn)

    def _turn(self) -> None:
        """One reactor turn of scanning: a chunk of every scan in turn until
        the time or object budget is spent."""
        self._call = None
        scans, now = self._scans, self.now
        started = now()
        deadline = started + self.slice_seconds
        examined = 0
        try:
            while scans and examined < self.slice_objects:
                scan = scans[0]
                try:
                    examined += scan.step(min(scan.chunk, self.slice_objects - examined))
                    if scan.done:
                        scans.popleft()
                        self._forget(scan)
                        scan.deferred.callback(scan.answer(self.objects.get(scan.type, {})))
                    else:
                        scans.rotate(-1)
                except Exception:
                    if scans and scans[0] is scan:
                        scans.popleft()
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
