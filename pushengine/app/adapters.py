"""Which adapter serves each outside service, from the options.

Every function here picks between the in-process implementation (the
embedded default) and the adapter of a real service; nothing outside
``pushengine.app`` imports an adapter package to build one.
"""
from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import IReactorTime

from pushengine.admin.disconnect import SeenIds
from pushengine.api.presence import RoomStore
from pushengine.bloom.memory import MemoryBloom
from pushengine.cluster import Cluster, build_cluster, registry_ttl
from pushengine.memcache.presence import PresenceStore
from pushengine.segments.store import MemorySegments, SegmentStore


def build_bloom(reactor: Any, redis_url: str | None, **kwargs: Any) -> Any:
    """The node's Bloom filters: in Redis with ``--redis`` (ValueError for a
    bad URL), in process otherwise."""
    if not redis_url:
        return MemoryBloom(reactor, **kwargs)
    from pushengine.redis.bloom import RedisBloom
    return RedisBloom(reactor, redis_url, **kwargs)


def build_presence_store(cache: Any, node_id: str, clock: IReactorTime,
                         memcache: str | None = None, redis: str | None = None) -> RoomStore:
    """Where presence lives: memcached with ``--memcache``, else Redis with
    ``--redis``, else the in-process cache (one node)."""
    if redis and not memcache:
        from pushengine.redis.presence import RedisPresenceStore
        return RedisPresenceStore(clock, redis, node_id)
    return PresenceStore(cache, node_id, clock)


def build_seen_ids(reactor: Any, redis_url: str | None, node_id: str) -> SeenIds | None:
    """Where a node keeps the ids of the disconnect messages it applied
    beyond its own life: Redis with ``--redis``; None otherwise (the node
    then refuses the messages sent before it started)."""
    if not redis_url:
        return None
    from pushengine.redis.replay import RedisSeenIds
    return RedisSeenIds(reactor, redis_url, node_id)


def build_segments(reactor: Any, redis_url: str | None) -> SegmentStore:
    """Audience segments: in Redis with ``--redis``, in process otherwise."""
    if redis_url:
        from pushengine.redis.segments import RedisSegments
        return RedisSegments(reactor, redis_url)
    return MemorySegments()


def build_redis_cluster(reactor: Any, url: str, node_id: str, engine: Any,
                        online: Any) -> Cluster:
    """The cluster of a node started with ``--redis URL`` (ValueError for a bad URL)."""
    from pushengine.redis.cluster import RedisRegistry, parse_redis_url
    parsed = parse_redis_url(url)
    settings = engine.sessions.settings
    ttl = registry_ttl(settings.session_timeout, settings.max_timeout, parsed.refresh)
    registry = RedisRegistry(reactor, parsed, node_id, ttl)
    return build_cluster(registry, engine, online, reactor, parsed.refresh)
