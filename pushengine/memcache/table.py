"""A table: a set of strings with membership by key.

Each member has a key of its own, so ``contains`` is one ``get`` and
``add`` is one race-free ``add`` (two clients adding one member: one
wins, the other learns it was there). The members are also listed in an
:class:`AppendArray` index so the table can be enumerated; ``members()``
checks the listed members against their keys with one ``get_multi``, so a
member whose key was evicted or removed is not reported.

Keys: ``{name}:m:{member}`` → ``1``; ``{name}:index`` → the index records.

Part of the layer's public library, not used by the engine itself: kept
because the specification asks the layer for a shared set, for applications
built on the engine; the engine's own sets (subscriptions, audience
segments) live in the process or in Redis, which does not evict them.
docs/memcache.md documents the API.
"""
from __future__ import annotations

from pushengine.memcache.arrays import AppendArray
from pushengine.memcache.deferreds import as_deferred
from pushengine.memcache.errors import KeyExists
from pushengine.memcache.interface import Cache


class Table:
    """A set of strings shared by every client."""

    def __init__(self, cache: Cache, name: str, expire: int = 0) -> None:
        self.cache = cache
        self.name = name
        self.expire = expire
        self.index = AppendArray(cache, f"{name}:index", expire=expire)

    def key(self, member: str) -> str:
        return f"{self.name}:m:{member}"

    @as_deferred
    async def add(self, member: str) -> bool:
        """Add ``member``; fire with False if it was there already."""
        try:
            await self.cache.add(self.key(member), b"1", self.expire)
        except KeyExists:
            return False
        await self.index.append(member)
        return True

    @as_deferred
    async def remove(self, member: str) -> bool:
        """Remove ``member``; fire with False if it was not there."""
        if not await self.cache.delete(self.key(member)):
            return False
        await self.index.remove(member)
        return True

    @as_deferred
    async def contains(self, member: str) -> bool:
        return await self.cache.get(self.key(member)) is not None

    @as_deferred
    async def members(self) -> list[str]:
        """The members, in the order they were added."""
        listed = list(dict.fromkeys(await self.index.read()))
        if not listed:
            return []
        found = await self.cache.get_multi([self.key(m) for m in listed])
        return [m for m in listed if self.key(m) in found]

    @as_deferred
    async def clear(self) -> None:
        """Remove every member."""
        for member in await self.members():
            await self.cache.delete(self.key(member))
        await self.cache.delete(self.index.key)
