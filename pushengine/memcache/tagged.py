"""Cache entries invalidated by tags, rebuilt by one client at a time.

Every tag has a *version* in memcached (``{prefix}:tag:{tag}``): the time
it was last invalidated, with a random suffix so that two invalidations
within one clock tick still differ. An entry (``{prefix}:e:{key}``) is
stored with the versions its tags had *before* its value was computed; it
is valid only while every one of those tags still has that version, and
until its ``ttl`` (freshness) runs out. ``invalidate(tag)`` writes a new
version: every entry with the tag turns stale at once, on every node, in
one write. A tag whose version is missing (new, or evicted) gets one, so
entries stored under an evicted version are stale too.

``get_or_rebuild(key, tags, rebuild)`` serves a valid entry; otherwise one
client takes the entry's lock (``lock:{prefix}:rebuild:{key}``) and
rebuilds it while the others serve the stale value, or, when there is no
value at all (a cold start), wait for the rebuilder, polling, for up to
``wait`` seconds. Many nodes thus never rebuild one entry at once. Stale
values are kept in memcached ``stale_for`` seconds past their freshness.
With the cache down, the caller's ``rebuild`` is called directly.

An entry is ``<JSON header>\\n<value bytes>``; the header holds the tag
versions and the time the entry stops being fresh.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Callable, Iterable

from twisted.internet.defer import maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from pushengine.memcache.codec import encode_json
from pushengine.memcache.deferreds import as_deferred, sleep
from pushengine.memcache.errors import CacheError, KeyExists
from pushengine.memcache.interface import Cache
from pushengine.memcache.lock import Lock

log = Logger()


class _Entry:
    def __init__(self, value: bytes, versions: dict[str, str], fresh_until: float | None) -> None:
        self.value = value
        self.versions = versions
        self.fresh_until = fresh_until
        self.valid = False      # fresh, and every tag still has its version (_read)


def _decode(raw: bytes | None) -> _Entry | None:
    if raw is None:
        return None
    header, sep, value = raw.partition(b"\n")
    if not sep:
        return None
    try:
        meta = json.loads(header)
        return _Entry(value, dict(meta["tags"]), meta.get("fresh_until"))
    except (ValueError, KeyError, TypeError):
        return None


class TaggedCache:
    """Entries with tags; see the module docstring."""

    def __init__(
        self,
        cache: Cache,
        clock: IReactorTime,
        prefix: str = "tc",
        lock_ttl: int = 30,
        wait: float = 10.0,
        poll: float = 0.05,
        stale_for: int = 300,
    ) -> None:
        self.cache = cache
        self.clock = clock
        self.prefix = prefix
        self.lock_ttl = lock_ttl
        self.wait = wait
        self.poll = poll
        self.stale_for = stale_for
        self.rebuilds = 0  # rebuilds run by this client (for tests/metrics)

    def entry_key(self, key: str) -> str:
        return f"{self.prefix}:e:{key}"

    def tag_key(self, tag: str) -> str:
        return f"{self.prefix}:tag:{tag}"

    def _new_version(self) -> str:
        return f"{self.clock.seconds():.6f}-{os.urandom(4).hex()}"

    # -- tags -------------------------------------------------------------

    async def _versions(self, tags: Iterable[str],
                        found: dict[str, bytes] | None = None) -> dict[str, str]:
        """The current version of each tag, creating the missing ones."""
        tags = list(dict.fromkeys(tags))
        if found is None:
            found = await self.cache.get_multi([self.tag_key(t) for t in tags])
        versions = {}
        for tag in tags:
            raw = found.get(self.tag_key(tag))
            if raw is None:
                version = self._new_version()
                try:
                    await self.cache.add(self.tag_key(tag), version.encode("ascii"))
                except KeyExists:  # another client created it first
                    raw = await self.cache.get(self.tag_key(tag))
                    version = raw.decode("ascii") if raw is not None else version
                versions[tag] = version
            else:
                versions[tag] = raw.decode("ascii")
        return versions

    @as_deferred
    async def invalidate(self, tag: str) -> None:
        """Make every entry with ``tag`` stale, on every node."""
        await self.cache.set(self.tag_key(tag), self._new_version().encode("ascii"))

    # -- entries ------------------------------------------------------------

    async def _read(self, key: str, tags: list[str]) -> _Entry | None:
        """The entry (or None), ``valid`` if it is valid now."""
        keys = [self.entry_key(key)] + [self.tag_key(t) for t in tags]
        found = await self.cache.get_multi(keys)
        entry = _decode(found.get(self.entry_key(key)))
        if entry is None:
            return None
        if entry.fresh_until is not None and self.clock.seconds() >= entry.fresh_until:
            return entry
        missing = [t for t in entry.versions if self.tag_key(t) not in found and t not in tags]
        if missing:
            found.update(await self.cache.get_multi([self.tag_key(t) for t in missing]))
        for tag, version in entry.versions.items():
            raw = found.get(self.tag_key(tag))
            if raw is None or raw.decode("ascii") != version:
                return entry
        entry.valid = True
        return entry

    async def _store(self, key: str, value: bytes, versions: dict[str, str], ttl: int) -> None:
        if not isinstance(value, bytes):
            raise TypeError("tagged cache values are bytes")
        now = self.clock.seconds()
        fresh_until = now + ttl if ttl else None
        header = encode_json({"tags": versions, "fresh_until": fresh_until})
        expire = math.ceil(ttl + self.stale_for) if ttl else 0
        await self.cache.set(self.entry_key(key), header + b"\n" + value, expire)

    @as_deferred
    async def get(self, key: str, tags: Iterable[str] = ()) -> bytes | None:
        """The value if its entry is valid, else None."""
        entry = await self._read(key, list(tags))
        return entry.value if entry is not None and entry.valid else None

    @as_deferred
    async def set(self, key: str, value: bytes, tags: Iterable[str] = (), ttl: int = 0) -> None:
        """Store ``value`` under the tags' current versions (ttl 0: fresh
        until a tag is invalidated)."""
        await self._store(key, value, await self._versions(tags), ttl)

    @as_deferred
    async def delete(self, key: str) -> bool:
        return await self.cache.delete(self.entry_key(key))

    @as_deferred
    async def get_or_rebuild(
        self,
        key: str,
        tags: Iterable[str],
        rebuild: Callable[[], Any],
        ttl: int = 0,
    ) -> bytes:
        """The valid value, or one rebuilt by ``rebuild()`` (bytes, or a
        Deferred/coroutine of bytes) with the protections above."""
        tags = list(dict.fromkeys(tags))
        try:
            entry = await self._read(key, tags)
        except CacheError as e:
            log.warn("tagged cache unreadable, rebuilding {key} directly: {e}", key=key, e=e)
            return await self._call(rebuild)
        if entry is not None and entry.valid:
            return entry.value
        stale = entry.value if entry is not None else None
        lock = Lock(self.cache, self.clock, f"{self.prefix}:rebuild:{key}", ttl=self.lock_ttl)
        deadline = self.clock.seconds() + self.wait
        while True:
            try:
                taken = await lock.try_acquire()
            except CacheError as e:
                log.warn("no lock for {key}, rebuilding directly: {e}", key=key, e=e)
                return await self._call(rebuild)
            if taken:
                return await self._rebuild_locked(lock, key, tags, rebuild, ttl, stale)
            if stale is not None:
                return stale  # someone else is rebuilding it
            if self.clock.seconds() >= deadline:
                log.warn("waited {wait}s for {key} to be rebuilt; rebuilding too", wait=self.wait, key=key)
                return await self._call(rebuild)
            await sleep(self.clock, self.poll)
            try:
                entry = await self._read(key, tags)
            except CacheError:
                continue
            if entry is not None and entry.valid:
                return entry.value

    async def _call(self, rebuild: Callable[[], Any]) -> bytes:
        self.rebuilds += 1
        value: bytes = await maybeDeferred(rebuild)
        return value

    async def _rebuild_locked(self, lock: Lock, key: str, tags: list[str],
                              rebuild: Callable[[], Any], ttl: int,
                              stale: bytes | None) -> bytes:
        versions: dict[str, str] | None
        try:
            try:
                # another client may have finished a rebuild just before
                entry = await self._read(key, tags)
                if entry is not None and entry.valid:
                    return entry.value
                versions = await self._versions(tags)
            except CacheError as e:
                log.warn("tagged cache unreadable while rebuilding {key}: {e}", key=key, e=e)
                versions = None
            try:
                value = await self._call(rebuild)
            except Exception:
                if stale is None:
                    raise
                log.failure("rebuilding {key} failed; serving the stale value", key=key)
                return stale
            if versions is not None:
                try:
                    await self._store(key, value, versions, ttl)
                except CacheError as e:
                    log.warn("cannot store rebuilt {key}: {e}", key=key, e=e)
            return value
        finally:
            try:
                await lock.release()
            except CacheError as e:
                log.warn("cannot free the rebuild lock of {key}: {e}", key=key, e=e)
