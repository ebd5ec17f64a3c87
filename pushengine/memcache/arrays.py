"""Two arrays in memcached, for two access patterns.

:class:`LockedArray` — written rarely, read whole often: the whole list is
one JSON value under one key; a writer takes the array's :class:`Lock`,
reads, changes and stores it, so writers never lose each other's changes;
readers just ``get``.

Key: ``{name}`` → JSON list; lock ``lock:{name}``.

:class:`AppendArray` — appended to often (many nodes at once): each change
is one record appended with memcached ``append`` (no read, no lock):
``+<json>\\n`` adds an item, ``-<json>\\n`` removes every copy of it. A
read folds the records in order. When the value grows past
``compact_at`` bytes, a writer rewrites it folded, with ``gets``/``cas``
(a concurrent append makes the cas fail and the compaction is simply
tried later).

Key: ``{name}`` → records.

Both arrays are part of the layer's public library and not used by the
engine itself. They are kept because the specification asks the layer to
offer the classic memcached structures to applications built on the engine;
the engine keeps no list in memcached (what it shares across nodes needs
Redis, which does not evict it). docs/memcache.md documents their API, and
its examples run as a test.
"""
from __future__ import annotations

import json
from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from pushengine.memcache.codec import decode_json, encode_json
from pushengine.memcache.deferreds import as_deferred
from pushengine.memcache.errors import CacheError, KeyExists, NotFound
from pushengine.memcache.interface import Cache
from pushengine.memcache.lock import Lock


class LockedArray:
    """A list written under a lock and read whole."""

    def __init__(
        self,
        cache: Cache,
        clock: IReactorTime,
        name: str,
        expire: int = 0,
        lock_ttl: int = 10,
        wait: float = 5.0,
    ) -> None:
        self.cache = cache
        self.key = name
        self.expire = expire
        self.wait = wait
        self.lock = Lock(cache, clock, name, ttl=lock_ttl)

    @as_deferred
    async def read(self) -> list[Any]:
        """The whole list ([] when missing)."""
        items: list[Any] = decode_json(await self.cache.get(self.key), [])
        return items

    @as_deferred
    async def update(self, change: Callable[[list[Any]], list[Any]]) -> list[Any]:
        """Store ``change(current list)`` under the lock; fire with it."""

        async def apply() -> list[Any]:
            items = change(decode_json(await self.cache.get(self.key), []))
            await self.cache.set(self.key, encode_json(list(items)), self.expire)
            return items

        updated: list[Any] = await self.lock.run_locked(apply, wait=self.wait)
        return updated

    def append(self, item: object) -> Deferred[list[Any]]:
        """Add ``item`` (any JSON value) at the end."""
        return self.update(lambda items: items + [item])

    def remove(self, item: object) -> Deferred[list[Any]]:
        """Remove every copy of ``item``."""
        return self.update(lambda items: [i for i in items if i != item])

    def replace_all(self, items: list[Any]) -> Deferred[list[Any]]:
        """Store ``items`` as the whole list."""
        return self.update(lambda _: list(items))


def fold(records: bytes) -> list[Any]:
    """The list the ``+``/``-`` records describe."""
    items: list[Any] = []
    for line in records.splitlines():
        if not line:
            continue
        op, body = line[:1], line[1:]
        try:
            item = json.loads(body)
        except ValueError:
            continue
        if op == b"+":
            items.append(item)
        elif op == b"-":
            items = [i for i in items if i != item]
    return items


class AppendArray:
    """A list that many clients append to without a lock."""

    def __init__(self, cache: Cache, name: str, expire: int = 0, compact_at: int = 64 * 1024) -> None:
        self.cache = cache
        self.key = name
        self.expire = expire
        self.compact_at = compact_at
        self._written = 0

    async def _record(self, record: bytes) -> None:
        for _ in range(5):
            try:
                await self.cache.append(self.key, record)
                break
            except NotFound:
                pass
            try:
                await self.cache.add(self.key, record, self.expire)
                break
            except KeyExists:
                continue
        else:
            raise CacheError(f"array {self.key} kept vanishing")
        self._written += len(record)
        if self._written >= self.compact_at // 4:
            self._written = 0
            await self.compact()

    @as_deferred
    async def append(self, item: object) -> None:
        """Add ``item`` (any JSON value) at the end."""
        await self._record(b"+" + encode_json(item) + b"\n")

    @as_deferred
    async def remove(self, item: object) -> None:
        """Remove every copy of ``item``."""
        await self._record(b"-" + encode_json(item) + b"\n")

    @as_deferred
    async def read(self) -> list[Any]:
        """The items, in order ([] when missing)."""
        value = await self.cache.get(self.key)
        return [] if value is None else fold(value)

    @as_deferred
    async def compact(self, force: bool = False) -> bool:
        """Rewrite the records folded if they grew past ``compact_at``;
        fire with whether it was rewritten."""
        found = await self.cache.gets(self.key)
        if found is None:
            return False
        value, token = found
        if len(value) < self.compact_at and not force:
            return False
        folded = b"".join(b"+" + encode_json(i) + b"\n" for i in fold(value))
        try:
            await self.cache.cas(self.key, folded, token, self.expire)
        except (KeyExists, NotFound):
            return False
        return True
