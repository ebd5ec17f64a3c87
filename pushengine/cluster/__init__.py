"""Many nodes behind a balancer: the session registry (SPEC section 8).

- :mod:`.record` — what is kept of a session, and how it is spelled;
- :mod:`.registry` — the interface of a registry backend;
- :mod:`.memory` — an in-process backend with the same semantics;
- :mod:`.hooks` — keeps the entries of this node's sessions up to date;
- :mod:`.resume` — re-creates here a session another node held.

:func:`build_cluster` ties them to an engine. The Redis backend (``--redis``) is
:mod:`pushengine.redis.cluster`.
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
    ``hooks`` to the node's session hooks (``core.hooks.Hooks``) and passes
    ``resume`` to the Api."""
    hooks = RegistryHooks(registry, engine.sessions, clock, refresh_interval, online)
    resumer = Resumer(engine, registry, hooks, online)
    registry.on_moved = hooks.moved_away
    return Cluster(registry, hooks, resumer)


__all__ = ["Cluster", "RegistryHooks", "Resumer", "build_cluster", "registry_ttl"]
