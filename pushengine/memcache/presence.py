"""Presence rooms in a cache with memcached semantics (``--memcache``, or
the in-process cache of one node): one key per room, ``{node: [time,
[users]]}``, updated with gets/cas (``pushengine.api.presence``)."""
from __future__ import annotations

import hashlib
import json
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from pushengine.api.presence import encode_entry
from pushengine.memcache.deferreds import as_deferred
from pushengine.memcache.errors import KeyExists, NotFound
from pushengine.memcache.interface import Cache


class PresenceStore:
    """Each node's members of each room, in the cache."""

    def __init__(self, cache: Cache, node_id: str, clock: IReactorTime, ttl: float = 30.0,
                 prefix: str = "pe:presence:") -> None:
        self.cache = cache
        self.node_id = node_id
        self.clock = clock
        self.ttl = ttl
        self.prefix = prefix
        self.writes = self.reads = self.errors = 0

    def key(self, room: str) -> str:
        return self.prefix + hashlib.sha1(room.encode("utf-8")).hexdigest()

    def _fresh(self, value: bytes | None) -> dict[str, list]:
        if value is None:
            return {}
        try:
            entries = json.loads(value)
        except ValueError:
            return {}
        oldest = self.clock.seconds() - self.ttl
        return {node: entry for node, entry in entries.items()
                if isinstance(entry, list) and len(entry) == 2 and entry[0] >= oldest}

    @as_deferred
    async def write(self, room: str, users: list) -> None:
        """Set this node's members of ``room`` (none: remove its entry)."""
        key, expire = self.key(room), int(self.ttl * 2) + 1
        self.writes += 1
        for _ in range(10):
            found = await self.cache.gets(key)
            if found is None:
                if not users:
                    return
                value = {self.node_id: [self.clock.seconds(), users]}
                try:
                    await self.cache.add(key, encode_entry(value), expire)
                    return
                except KeyExists:
                    continue
            entries = self._fresh(found[0])
            if users:
                entries[self.node_id] = [self.clock.seconds(), users]
            else:
                entries.pop(self.node_id, None)
            try:
                await self.cache.cas(key, encode_entry(entries), found[1], expire)
                return
            except (KeyExists, NotFound):
                continue
        raise RuntimeError(f"presence of {room[:100]!r}: too many concurrent writes")

    def read(self, room: str) -> Deferred:
        """Fire with ``{node: [users]}`` of the fresh entries of ``room``."""
        self.reads += 1
        d = self.cache.get(self.key(room))
        return d.addCallback(lambda v: {n: e[1] for n, e in self._fresh(v).items()})
