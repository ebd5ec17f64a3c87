"""Many nodes behind a balancer: the session registry (SPEC section 8).

- :mod:`.record` — what is kept of a session, and how it is spelled;
- :mod:`.registry` — the interface of a registry backend;
- :mod:`.redis` — the Redis backend (``--redis``);
- :mod:`.memory` — an in-process backend with the same semantics;
- :mod:`.hooks` — keeps the entries of this node's sessions up to date;
- :mod:`.resume` — re-creates here a session another node held.

:func:`build_cluster` ties them to an engine. The Redis module is imported
only when ``--redis`` is given (txredisapi imports the global reactor).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pushengine.cluster.hooks import RegistryHooks
from pushengine.cluster.resume import Resumer


@dataclass
class Cluster:
    registry: Any
    hooks: RegistryHooks
    resume: Resumer


def registry_ttl(session_timeout: float, max_timeout: float, refresh: float) -> float:
    """The TTL of an entry: ``--session-timeout``, unless a parked poll
    plus the refresh interval could outlast it (the entry must live as long
    as the session can)."""
    return max(session_timeout, max_timeout + refresh + 1.0)


def build_cluster(registry: Any, engine: Any, online: Any, clock: Any,
                  refresh_interval: float = 10.0) -> Cluster:
    """Hooks and resumer for ``engine`` on ``registry``; the caller adds
    ``hooks`` to ``Api.hooks`` and passes ``resume`` to the Api."""
    hooks = RegistryHooks(registry, engine.sessions, clock, refresh_interval, online)
    resumer = Resumer(engine, registry, hooks, online)
    registry.on_moved = hooks.moved_away
    engine.sessions.expire_hooks.append(hooks.expired)
    return Cluster(registry, hooks, resumer)


def build_redis_cluster(reactor: Any, url: str, node_id: str, engine: Any, online: Any) -> Cluster:
    """The cluster of a node started with ``--redis URL`` (ValueError for a bad URL)."""
    from pushengine.cluster.redis import RedisRegistry, parse_redis_url
    parsed = parse_redis_url(url)
    settings = engine.sessions.settings
    ttl = registry_ttl(settings.session_timeout, settings.max_timeout, parsed.refresh)
    registry = RedisRegistry(reactor, parsed, node_id, ttl)
    return build_cluster(registry, engine, online, reactor, parsed.refresh)


__all__ = ["Cluster", "RegistryHooks", "Resumer", "build_cluster", "build_redis_cluster",
           "registry_ttl"]
