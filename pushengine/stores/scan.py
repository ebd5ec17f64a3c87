"""One answer of the in-process store built a slice at a time.

``MemoryStore`` runs the scans in progress round-robin, a few milliseconds
per reactor turn, so that a subscription never holds the reactor for long;
an index built on demand (``Build``) takes its turns among them.
"""
from __future__ import annotations

from operator import itemgetter
from typing import Callable, Hashable

from twisted.internet.defer import Deferred

from pushengine.views.operators import Move, StoreIndex

FIRST_CHUNK, MIN_CHUNK, MAX_CHUNK = 64, 8, 4_096
first = itemgetter(0)    # sort (key, object) pairs by key alone


class Scan:
    """One answer being built from some buckets of objects (id -> object), a
    slice at a time. A bucket is copied to a list (``snapshot``) when the
    scan reaches it; every id changed in the store from the scan's start on
    is in ``changed``, so a copy may be taken late and still be made good.

    It keeps the first ``keep`` hits in view order (sorting and cutting when
    twice as many have gathered); ``boundary`` is the key of the last one kept
    once some were cut: the answer is then exact up to it and holds nothing
    after it. Hits are the objects themselves (their keys are made when
    sorting and dropped after), so that a scan leaves no garbage for the
    collector's young generation to walk."""

    __slots__ = ("type", "id_field", "sources", "snapshot", "objects", "pos", "match", "key",
                 "reverse", "keep", "hits", "boundary", "changed", "deferred", "chunk")

    def __init__(self, type_: str, id_field: str, sources: list[dict],
                 snapshot: Callable[[str, dict], list[dict]], match: Callable[[dict], bool],
                 key: Callable[[dict], tuple], reverse: bool, keep: int) -> None:
        self.type = type_
        self.id_field = id_field
        self.sources = sources[::-1]   # popped from the end
        self.snapshot = snapshot
        self.objects: list[dict] = []
        self.pos = 0
        self.match = match
        self.key = key
        self.reverse = reverse
        self.keep = keep
        self.hits: list[dict] = []
        self.boundary: tuple | None = None
        self.changed: set[Hashable] = set()  # ids changed in the store since the start
        self.deferred: Deferred[list[dict]] = Deferred()
        self.chunk = FIRST_CHUNK       # objects per step, adapted to their cost

    def step(self, count: int) -> int:
        """Examine up to ``count`` more candidates; return how many."""
        pos = self.pos
        if pos >= len(self.objects):
            if not self.sources:
                return 0
            self.objects, pos = self.snapshot(self.type, self.sources.pop()), 0
        match, boundary = self.match, self.boundary
        end = min(pos + count, len(self.objects))
        chunk = self.objects[pos:end]
        if boundary is None:
            hits = [o for o in chunk if match(o)]
        elif self.reverse:             # only what comes before the last kept
            key = self.key
            hits = [o for o in chunk if match(o) and key(o) > boundary]
        else:
            key = self.key
            hits = [o for o in chunk if match(o) and key(o) < boundary]
        if hits:
            self.hits.extend(hits)
            if len(self.hits) >= 2 * self.keep:
                self._cut()
        self.pos = end
        return end - pos

    def _cut(self) -> None:
        hits = self.hits
        hits.sort(key=self.key, reverse=self.reverse)
        if len(hits) > self.keep:
            self.boundary = self.key(hits[self.keep - 1])
            del hits[self.keep:]

    @property
    def done(self) -> bool:
        return self.pos >= len(self.objects) and not self.sources

    def answer(self, current: dict[Hashable, dict]) -> list[dict]:
        """The answer, with the store's own copy of every object changed
        since the snapshot (``current``: the type's objects now)."""
        hits, match, key = self.hits, self.match, self.key
        if self.changed:
            changed, id_field = self.changed, self.id_field
            hits = [o for o in hits if o.get(id_field) not in changed]
            for id_ in changed:
                obj = current.get(id_)
                if obj is not None and match(obj):
                    hits.append(obj)
        pairs = [(key(o), o) for o in hits]
        pairs.sort(key=first, reverse=self.reverse)
        boundary = self.boundary
        if boundary is not None:
            # nothing after the last object kept: what lay between was cut
            if self.reverse:
                pairs = [p for p in pairs if p[0] >= boundary]
            else:
                pairs = [p for p in pairs if p[0] <= boundary]
        return [o for _, o in pairs[:self.keep]]


class Build:
    """An index asked for on demand (``MemoryStore.hold``) being filled from
    the store's objects of its type, a slice at a time, in the turns the
    scans share. Its ids are listed at the start; each step reads the
    objects' current state from the store, so that a change applied to the
    index meanwhile (the index sees every change from the start on) is never
    undone: an object deleted since is skipped, one changed since is read as
    it is now. ``keep``: the objects the index holds (those a view using it
    could show). ``waiters`` fire once it is complete (``finish``)."""

    __slots__ = ("type", "key", "index", "ids", "objects", "keep", "pos", "waiters",
                 "chunk", "batch")

    def __init__(self, type_: str, key: Hashable, index: StoreIndex,
                 objects: dict[Hashable, dict], keep: Callable[[dict], bool],
                 batch: int = 64) -> None:
        self.type = type_
        self.key = key
        self.index = index
        self.ids = list(objects)
        self.objects = objects         # the store's own (it changes under the build)
        self.keep = keep
        self.pos = 0
        self.waiters: list[Deferred[None]] = []
        self.chunk = FIRST_CHUNK
        self.batch = batch             # objects indexed together, at least (64: ~4 ms)

    def step(self, count: int) -> int:
        """Index up to ``max(count, batch)`` more objects (those kept among
        at most 64 times as many ids); return how many ids were read."""
        want = max(count, self.batch)
        ids, objects, keep = self.ids, self.objects, self.keep
        pos, end = self.pos, len(ids)
        stop = min(end, pos + 64 * want)
        moves: list[Move] = []
        while pos < stop and len(moves) < want:
            id_ = ids[pos]
            pos += 1
            obj = objects.get(id_)
            if obj is not None and keep(obj):
                moves.append((id_, None, obj))
        if moves:
            self.index.move_many(moves)
        read, self.pos = pos - self.pos, pos
        return read

    @property
    def done(self) -> bool:
        return self.pos >= len(self.ids)

    def finish(self) -> list[Deferred[None]]:
        """Its waiters, taken: the store fires them in its turns, a slice's
        worth at a time (each reads a view's answer)."""
        waiters, self.waiters = self.waiters, []
        return waiters
