"""Similar-document views on PostgreSQL: the in-process index, loaded from
the table and kept by the feed (SPEC 20; docs/postgres.md says why this and
not band hashes kept in the database by a trigger).

SQL cannot find the texts like a given one: MinHash LSH needs every row's
signature. ``SimilarRows`` keeps, in an in-process store (stores/memory.py,
with its on-demand LSH), the rows that a ``similar`` view could show (the
view's conditions without parameters: ``live AND public`` for the built-in
one). They are read from the table once, when the first such view is
subscribed, in one snapshot; changes that arrive meanwhile wait and are
applied after, but those of transactions the snapshot saw (they are in the
rows read); from then on every change of the type is applied, a row that
no longer could be shown leaving it. The views' answers come from there.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.core.changes import DELETE, UPSERT, Change
from pushengine.core.positions import Snapshot, State
from pushengine.stores.memory import MemoryStore
from pushengine.views.spec import BoundView, ViewSpec

log = Logger()


def uses_similar(view: ViewSpec) -> bool:
    """Whether a view needs the in-process index (its store index is kept
    on demand: ``similar``'s LSH)."""
    return any(c.op.store_index_on_demand for c in view.conditions)


class SimilarRows:
    """The rows the similar views of one type could show, in memory (see the
    module docstring). ``read_all(bound)`` reads every row of a bound view
    (a Deferred of a State); ``clock`` runs the in-process store's slices."""

    def __init__(self, clock: Any, type_: str, specs: list[ViewSpec], id_field: str,
                 read_all: Callable[[BoundView], Deferred[State]]) -> None:
        self.type = type_
        self.specs = specs
        self.id_field = id_field
        self.read_all = read_all
        self.memory = MemoryStore({type_: id_field}, clock=clock)
        self.memory.index_views(specs)
        predicates = [spec.could_show() for spec in specs]
        self.could_show: Callable[[dict], bool] = (
            predicates[0] if len(predicates) == 1
            else lambda obj: any(p(obj) for p in predicates))
        self.snapshot: Snapshot | None = None
        self.state = "new"                            # new, loading, loaded
        self.waiters: list[Deferred[None]] = []       # queries waiting for the rows
        self.waiting: list[Change] | None = None      # changes while loading
        self.rows = 0

    def _load(self) -> Deferred[None]:
        """A Deferred that fires once the rows are in (read once; read
        again after a failure)."""
        waiter: Deferred[None] = Deferred()
        if self.state == "loaded":
            waiter.callback(None)
            return waiter
        self.waiters.append(waiter)
        if self.state == "new":
            self.state = "loading"
            self._read()
        return waiter

    def _read(self) -> None:
        self.waiting = []
        spec = self.specs[0]
        # the conditions every similar view of the type asks without a
        # parameter: read with the first view's, checked by could_show
        fixed = dataclasses.replace(spec, conditions=[c for c in spec.conditions
                                                      if not c.refs()])
        def read(state: State) -> None:
            self.snapshot = state.snapshot
            self.apply([Change(self.type, UPSERT, o[self.id_field], o) for o in state])
            self.rows = len(state)
            waiting, self.waiting = self.waiting or [], None
            self.state = "loaded"
            self.apply([c for c in waiting
                        if c.xid is None or self.snapshot is None
                        or not self.snapshot.sees(c.xid)])
            waiters, self.waiters = self.waiters, []
            for waiter in waiters:
                waiter.callback(None)

        def failed(f: Failure) -> None:
            self.state, self.waiting = "new", None
            waiters, self.waiters = self.waiters, []
            for waiter in waiters:
                waiter.errback(f)
        d = self.read_all(BoundView(fixed, {}, 1))
        d.addCallbacks(read, failed)
        d.addErrback(lambda f: log.failure("similar views: loading", f))

    def apply(self, changes: Sequence[Change]) -> None:
        """Changes of the type: kept, or held while the rows load."""
        if self.waiting is not None:
            self.waiting.extend(changes)
            return
        if self.state != "loaded":
            return          # not loaded: the load reads the table as it is then
        kept: list[Change] = []
        snapshot, could_show = self.snapshot, self.could_show
        for c in changes:
            if c.xid is not None and snapshot is not None and snapshot.sees(c.xid):
                continue    # in the rows read already
            if c.action == UPSERT and not could_show(c.obj):
                c = Change(c.type, DELETE, c.id, {self.id_field: c.id})
            kept.append(c)
        if kept:
            self.memory.apply_changes(kept)

    def hold(self, view: ViewSpec) -> None:
        self.memory.hold(view)
        # read the rows now; a failure is the queries' to report
        self._load().addErrback(lambda f: None)

    def release(self, view: ViewSpec) -> None:
        self.memory.release(view)

    def promised(self, view: ViewSpec, limit: int) -> int:
        return self.memory.promised(view, limit)

    def query(self, view: ViewSpec, params: dict[str, Any], limit: int) -> Deferred[State]:
        """The view's answer from memory, once the rows are in."""
        loaded = self._load()
        d: Deferred[list[dict]] = Deferred()

        def ask(_: object) -> Deferred[list[dict]]:
            return self.memory.query(view, params, limit)
        loaded.addCallback(ask).addCallbacks(d.callback, d.errback)
        # no snapshot: the answer is as current as the feed itself
        return d.addCallback(lambda objects: State(objects, None))

    def health(self) -> dict[str, Any]:
        return {"rows": len(self.memory.objects.get(self.type, {})),
                "loaded": self.state == "loaded"}
