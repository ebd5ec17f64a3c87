"""A lock in memcached: ``add`` with an expiry.

Whoever adds the key holds the lock until it releases it or the expiry
passes (so a holder that dies frees the lock after ``ttl`` seconds). The
value is a random token of the holder; release deletes the key only if it
still holds that token (a conditional delete made of ``gets`` and a ``cas``
with an expiry in the past), so a holder whose lock expired never frees the
lock of the next holder.

Key: ``lock:{name}`` → the holder's token.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from twisted.internet.defer import maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from pushengine.memcache.deferreds import as_deferred, sleep
from pushengine.memcache.errors import CacheError, KeyExists, NotFound
from pushengine.memcache.interface import Cache

log = Logger()


class LockNotAcquired(CacheError):
    """Another holder kept the lock for the whole wait."""


class Lock:
    """A named lock; one object per would-be holder (a process, a task)."""

    def __init__(
        self,
        cache: Cache,
        clock: IReactorTime,
        name: str,
        ttl: int = 30,
        retry_interval: float = 0.05,
    ) -> None:
        if ttl < 1:
            raise ValueError("a lock lives at least one second")
        self.cache = cache
        self.clock = clock
        self.key = f"lock:{name}"
        self.ttl = ttl
        self.retry_interval = retry_interval
        self._token: bytes | None = None

    @property
    def held(self) -> bool:
        """Whether this object believes it holds the lock (it may have
        expired in memcached)."""
        return self._token is not None

    async def _take(self) -> bytes | None:
        token = os.urandom(12).hex().encode("ascii")
        try:
            await self.cache.add(self.key, token, self.ttl)
        except KeyExists:
            return None
        return token

    async def _take_waiting(self, wait: float) -> bytes | None:
        deadline = self.clock.seconds() + wait
        while True:
            token = await self._take()
            if token is not None or self.clock.seconds() >= deadline:
                return token
            await sleep(self.clock, min(self.retry_interval, deadline - self.clock.seconds()))

    async def _free(self, token: bytes) -> bool:
        found = await self.cache.gets(self.key)
        if found is None or found[0] != token:
            return False
        try:
            # a cas with an expiry in the past: delete only if unchanged
            await self.cache.cas(self.key, b"", found[1], -1)
        except (KeyExists, NotFound):
            return False
        return True

    @as_deferred
    async def try_acquire(self) -> bool:
        """Take the lock if it is free; fire with whether it was taken."""
        return await self.acquire(0)

    @as_deferred
    async def acquire(self, wait: float = 0) -> bool:
        """Take the lock, retrying for up to ``wait`` seconds."""
        if self._token is not None:
            return False
        token = await self._take_waiting(wait)
        if token is None:
            return False
        self._token = token
        return True

    @as_deferred
    async def release(self) -> bool:
        """Free the lock; fire with False if it had expired (or was not held)."""
        token, self._token = self._token, None
        if token is None:
            return False
        return await self._free(token)

    def hold(self, wait: float = 0) -> "_Held":
        """``async with lock.hold(wait=5): ...`` runs the block under the
        lock (LockNotAcquired if it stays taken) and frees it after, even
        on error."""
        return _Held(self, wait)

    @as_deferred
    async def run_locked(self, fn: Callable[..., Any], *args: object, wait: float = 0,
                         **kwargs: object) -> Any:
        """Run ``fn(*args, **kwargs)`` (it may return a Deferred or be an
        ``async def``) under the lock; fire with its result. The lock is
        freed even when ``fn`` fails."""
        async with self.hold(wait):
            return await maybeDeferred(fn, *args, **kwargs)


class _Held:
    def __init__(self, lock: Lock, wait: float) -> None:
        self.lock = lock
        self.wait = wait
        self.token: bytes | None = None

    async def __aenter__(self) -> Lock:
        self.token = await self.lock._take_waiting(self.wait)
        if self.token is None:
            raise LockNotAcquired(self.lock.key)
        return self.lock

    async def __aexit__(self, *exc: object) -> None:
        if self.token is None:      # not entered
            return
        try:
            await self.lock._free(self.token)
        except CacheError as e:  # it expires by itself; the block's outcome stands
            log.warn("cannot free {key}: {e}", key=self.lock.key, e=e)
