"""An atomic counter: memcached incr, created by add on first use.

``incr`` on a missing key fails, so the first increment adds the key; when
two clients race to create it, the one whose add fails (KeyExists) retries
its incr, and no increment is lost. Eviction between the calls is retried
the same way.

Key: the counter's name → ASCII decimal.
"""
from __future__ import annotations

from typing import Any

from pushengine.memcache.codec import decode_int, encode_int
from pushengine.memcache.deferreds import as_deferred
from pushengine.memcache.errors import CacheError, KeyExists, NotFound

MAX_TRIES = 5


async def incr_or_add(cache: Any, key: str, delta: int, expire: int = 0) -> int:
    """incr ``key`` by ``delta``, creating it with ``delta`` (and ``expire``)
    when missing. Race-safe between clients; fires with the new value."""
    for _ in range(MAX_TRIES):
        try:
            return await cache.incr(key, delta)
        except NotFound:
            pass
        try:
            await cache.add(key, encode_int(delta), expire)
            return delta
        except KeyExists:
            continue  # someone else created it: incr again
    raise CacheError(f"counter {key} kept vanishing")


async def decr_or_add(cache: Any, key: str, delta: int, expire: int = 0) -> int:
    """decr ``key`` by ``delta`` (stopping at 0), creating it at 0."""
    for _ in range(MAX_TRIES):
        try:
            return await cache.decr(key, delta)
        except NotFound:
            pass
        try:
            await cache.add(key, b"0", expire)
            return 0
        except KeyExists:
            continue
    raise CacheError(f"counter {key} kept vanishing")


class AtomicCounter:
    """A counter shared by every client of the cache."""

    def __init__(self, cache: Any, key: str, expire: int = 0) -> None:
        self.cache = cache
        self.key = key
        self.expire = expire

    @as_deferred
    async def incr(self, delta: int = 1) -> int:
        """Add ``delta``; fire with the new value."""
        return await incr_or_add(self.cache, self.key, delta, self.expire)

    @as_deferred
    async def decr(self, delta: int = 1) -> int:
        """Subtract ``delta`` (memcached stops at 0); fire with the new value."""
        return await decr_or_add(self.cache, self.key, delta, self.expire)

    @as_deferred
    async def value(self) -> int:
        """The current value (0 when missing)."""
        return decode_int(await self.cache.get(self.key))

    @as_deferred
    async def reset(self, value: int = 0) -> bool:
        """Set the counter to ``value``."""
        return await self.cache.set(self.key, encode_int(value), self.expire)
