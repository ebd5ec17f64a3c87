"""The memcached layer: one Deferred-returning cache interface, two backends
(in-process and real memcached) and the classic structures built on it.

Build the cache from the ``--memcache`` option with :func:`build_cache`.

Everything below is exported alike. The engine itself uses the cache, its
backends, the lock, the visitor counters and the tagged cache;
``AtomicCounter``, ``EventLog``, ``LockedArray``, ``AppendArray`` and
``Table`` are the layer's public library for applications built on it
(docs/memcache.md).
"""
from __future__ import annotations

from typing import Any, cast

from twisted.internet.interfaces import IReactorTCP, IReactorTime

from pushengine.memcache.arrays import AppendArray, LockedArray
from pushengine.memcache.client import MemcacheClient, parse_servers
from pushengine.memcache.counter import AtomicCounter
from pushengine.memcache.errors import (
    BadValue,
    CacheError,
    CacheTimeout,
    CacheUnavailable,
    KeyExists,
    NotFound,
    NotStored,
    ValueTooLarge,
)
from pushengine.memcache.eventlog import EventLog
from pushengine.memcache.interface import Cache
from pushengine.memcache.lock import Lock, LockNotAcquired
from pushengine.memcache.memory import InMemoryCache
from pushengine.memcache.table import Table
from pushengine.memcache.tagged import TaggedCache
from pushengine.memcache.visitors import SlotCounter, VisitorCounter


def build_cache(reactor: IReactorTCP, option: str | None = None, **kwargs: Any) -> Cache:
    """The cache for a ``--memcache`` option: a :class:`MemcacheClient`
    (a service: add it to the application) for ``"host:port,..."``, an
    :class:`InMemoryCache` for None or an empty string (on the reactor's
    clock)."""
    if option:
        return MemcacheClient.from_option(reactor, option, **kwargs)
    return InMemoryCache(cast(IReactorTime, reactor))


__all__ = [
    "AppendArray",
    "AtomicCounter",
    "BadValue",
    "Cache",
    "CacheError",
    "CacheTimeout",
    "CacheUnavailable",
    "EventLog",
    "InMemoryCache",
    "KeyExists",
    "Lock",
    "LockNotAcquired",
    "LockedArray",
    "MemcacheClient",
    "NotFound",
    "NotStored",
    "SlotCounter",
    "Table",
    "TaggedCache",
    "ValueTooLarge",
    "VisitorCounter",
    "build_cache",
    "parse_servers",
]
