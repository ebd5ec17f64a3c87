"""An in-process session registry with the semantics of the Redis one.

:class:`SharedTable` plays the Redis server (entries with expiry on an
injected clock, a message bus between nodes); each node gets its own
:class:`MemoryRegistry` on it. Several engine nodes in one process (tests,
a simulation on a ``Clock``) can so move sessions between each other, and a
test can take the "server" down (``table.up = False``).
"""
from __future__ import annotations

from typing import Any, Callable

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorTime

from pushengine.cluster.record import SessionRecord
from pushengine.cluster.registry import MISSING, MOVED, OK, RegistryUnavailable, new_counters


class SharedTable:
    """The entries of every node, with expiry on ``clock``."""

    def __init__(self, clock: IReactorTime) -> None:
        self.clock = clock
        self.entries: dict[str, tuple[dict[str, str], float]] = {}
        self.nodes: dict[str, "MemoryRegistry"] = {}
        self.up = True

    def get(self, sid: str) -> dict[str, str] | None:
        entry = self.entries.get(sid)
        if entry is None:
            return None
        if entry[1] <= self.clock.seconds():
            del self.entries[sid]
            return None
        return entry[0]

    def put(self, sid: str, fields: dict[str, str], ttl: float) -> None:
        self.entries[sid] = (fields, self.clock.seconds() + ttl)

    def ttl(self, sid: str) -> float | None:
        """Seconds left (for tests), None when absent."""
        if self.get(sid) is None:
            return None
        return self.entries[sid][1] - self.clock.seconds()


class MemoryRegistry:
    def __init__(self, table: SharedTable, node_id: str, ttl: float) -> None:
        self.table = table
        self.node_id = node_id
        self.ttl = ttl
        self.on_moved: Callable[[str], None] | None = None
        self.counters = new_counters()
        table.nodes[node_id] = self

    @property
    def available(self) -> bool:
        return self.table.up

    def _run(self, body: Callable[[], Any]) -> Deferred:
        if not self.table.up:
            return fail(RegistryUnavailable("the in-process registry is down"))
        return succeed(body())

    def write(self, sid: str, record: SessionRecord, take: bool = False,
              ttl: float | None = None) -> Deferred:
        def body():
            current = self.table.get(sid)
            owner = current.get("owner") if current else None
            if owner is not None and owner != self.node_id and not take:
                return MOVED, owner
            fields = record.fields()
            fields["owner"] = self.node_id
            self.table.put(sid, fields, self.ttl if ttl is None else ttl)
            self.counters["writes"] += 1
            return OK, owner
        return self._run(body)

    def refresh(self, sid: str, fields: dict[str, str] | None = None,
                ttl: float | None = None) -> Deferred:
        def body():
            current = self.table.get(sid)
            if current is None:
                return MISSING
            if current.get("owner") != self.node_id:
                return MOVED
            current.update(fields or {})
            self.table.put(sid, current, self.ttl if ttl is None else ttl)
            self.counters["refreshes"] += 1
            return OK
        return self._run(body)

    def lookup(self, sid: str) -> Deferred:
        def body():
            self.counters["lookups"] += 1
            current = self.table.get(sid)
            return None if current is None else SessionRecord.parse(dict(current))
        if not self.table.up:
            return fail(RegistryUnavailable("the in-process registry is down"))
        try:
            return succeed(body())
        except Exception as e:
            return fail(e)

    def owner(self, sid: str) -> Deferred:
        def body():
            current = self.table.get(sid)
            return None if current is None else current.get("owner")
        return self._run(body)

    def delete(self, sid: str) -> Deferred:
        def body():
            self.counters["deletes"] += 1
            return self.table.entries.pop(sid, None) is not None
        return self._run(body)

    def release(self, sid: str) -> Deferred:
        def body():
            current = self.table.get(sid)
            if current is None or current.get("owner") != self.node_id:
                return False
            self.counters["deletes"] += 1
            del self.table.entries[sid]
            return True
        return self._run(body)

    def moved(self, sid: str, previous_owner: str) -> Deferred:
        def body():
            node = self.table.nodes.get(previous_owner)
            if node is not None and node is not self and node.on_moved is not None:
                node.on_moved(sid)
        return self._run(body)

    def health(self) -> dict[str, Any]:
        return {"up": self.table.up, "kind": "memory"}

    def stats(self) -> dict[str, float]:
        return {**self.counters, "connected": int(self.table.up)}
