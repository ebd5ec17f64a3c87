"""A time-bucketed event log: a ring of ``num_chunks`` keys of
``time_chunk`` seconds each.

``append(event)`` appends one line (``[time, event]`` as JSON) to the key of
the current chunk with memcached ``append``; the first append of a chunk
adds the key (race-safe: a failed add appends again), with an expiry that
keeps it for ``num_chunks`` chunks. ``fetch(first, last)`` reads the chunks
covering the interval with one ``get_multi`` and returns the events within
it in time order. Only the last ``num_chunks`` chunks exist: older events
are gone.

Keys: ``{name}:{c}`` with c = floor(time / time_chunk), named by absolute
chunk number so that a chunk that expires a little late (memcached counts
whole seconds) never mixes with the chunk that reuses its place in the
ring. A chunk holds at most memcached's item size (1 MiB by default) of
events; appends beyond it fail.

Part of the layer's public library, not used by the engine itself: kept
because the specification lists a time-bucketed event log among the layer's
structures, for applications built on the engine; nothing on the engine's
request path needs one, and writing one there would cost a memcached round
trip. docs/memcache.md documents the API.
"""
from __future__ import annotations

import json
import math
from typing import Any

from twisted.internet.interfaces import IReactorTime

from pushengine.memcache.codec import encode_json
from pushengine.memcache.deferreds import as_deferred
from pushengine.memcache.errors import CacheError, KeyExists, NotFound
from pushengine.memcache.interface import MAX_RELATIVE_EXPIRE, Cache


class EventLog:
    """Recent events shared by every node, kept for
    ``time_chunk * num_chunks`` seconds."""

    def __init__(
        self,
        cache: Cache,
        clock: IReactorTime,
        name: str,
        time_chunk: float = 60,
        num_chunks: int = 10,
    ) -> None:
        if time_chunk <= 0 or num_chunks < 1 or time_chunk * (num_chunks + 1) > MAX_RELATIVE_EXPIRE:
            raise ValueError("bad time_chunk/num_chunks")
        self.cache = cache
        self.clock = clock
        self.name = name
        self.time_chunk = time_chunk
        self.num_chunks = num_chunks

    def chunk(self, when: float) -> int:
        return int(when // self.time_chunk)

    def key(self, chunk: int) -> str:
        return f"{self.name}:{chunk}"

    @as_deferred
    async def append(self, event: object) -> float:
        """Log ``event`` (any JSON value) now; fire with its time."""
        now = self.clock.seconds()
        c = self.chunk(now)
        line = encode_json([now, event]) + b"\n"
        key = self.key(c)
        expire = max(1, math.ceil((c + self.num_chunks) * self.time_chunk - now))
        for _ in range(5):
            try:
                await self.cache.append(key, line)
                return now
            except NotFound:
                pass
            try:
                await self.cache.add(key, line, expire)
                return now
            except KeyExists:
                continue
        raise CacheError(f"event log chunk {key} kept vanishing")

    @as_deferred
    async def fetch(self, first: float | None = None, last: float | None = None) -> list[tuple[float, Any]]:
        """The ``(time, event)`` pairs logged in ``[first, last]`` (default:
        everything still kept), oldest first."""
        now = self.clock.seconds()
        if last is None:
            last = now
        if first is None:
            first = now - self.time_chunk * self.num_chunks
        newest = min(self.chunk(last), self.chunk(now))
        oldest = max(self.chunk(first), self.chunk(now) - self.num_chunks + 1)
        if newest < oldest:
            return []
        keys = [self.key(c) for c in range(oldest, newest + 1)]
        found = await self.cache.get_multi(keys)
        events = []
        for key in keys:
            for line in found.get(key, b"").splitlines():
                try:
                    when, event = json.loads(line)
                except (ValueError, TypeError):
                    continue  # a torn line is dropped, not fatal
                if first <= when <= last:
                    events.append((when, event))
        events.sort(key=lambda pair: pair[0])
        return events
