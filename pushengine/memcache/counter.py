"""An atomic counter: memcached incr, created by add on first use.

``incr`` on a missing key fails, so the first increment adds the key; when
two clients race to create it, the one whose add fails (KeyExists) retries
its incr, and no increment is lost. Eviction between the calls is retried
the same way.

Key: the counter's name → ASCII decimal.
"""
from __future__ import annotations

from typing import Callable

from twisted.internet.defer import Deferred

from pushengine.memcache.codec import decode_int, encode_int
from pushengine.memcache.deferreds import as_deferred
from pushengine.memcache.errors import CacheError, KeyExists, NotFound
from pushengine.memcache.interface import Cache

MAX_TRIES = 5


async def _step_or_add(cache: Cache, step: Callable[[str, int], Deferred], key: str,
                       delta: int, created: int, expire: int) -> int:
    """``step(key, delta)`` (incr or decr); when the key is missing, add it
    as ``created``. Two clients racing to create it: the one whose add fails
    (KeyExists) steps again."""
    for _ in range(MAX_TRIES):
        try:
            value: int = await step(key, delta)
            return value
        except NotFound:
            pass
        try:
            await cache.add(key, encode_int(created), expire)
            return created
        except KeyExists:
            continue  # someone else created it: step again
    raise CacheError(f"counter {key} kept vanishing")


async def incr_or_add(cache: Cache, key: str, delta: int, expire: int = 0) -> int:
    """incr ``key`` by ``delta``, creating it with ``delta`` (and ``expire``)
    when missing. Race-safe between clients; fires with the new value."""
    return await _step_or_add(cache, cache.incr, key, delta, delta, expire)


async def decr_or_add(cache: Cache, key: str, delta: int, expire: int = 0) -> int:
    """decr ``key`` by ``delta`` (stopping at 0), creating it at 0."""
    return await _step_or_add(cache, cache.decr, key, delta, 0, expire)


class AtomicCounter:
    """A counter shared by every client of the cache."""

    def __init__(self, cache: Cache, key: str, expire: int = 0) -> None:
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
        stored: bool = await self.cache.set(self.key, encode_int(value), self.expire)
        return stored
