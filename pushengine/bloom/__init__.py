"""Scalable Bloom filters with the semantics of the Redis bloom module's
``BF.*`` commands (SPEC section 14; docs/bloom.md).

- :mod:`.params` — the arguments and the shape of each layer;
- :mod:`.hashing` — an item's hash and the bits it sets;
- :mod:`.base` — the commands, on four primitives of a backend;
- :mod:`.memory` — the in-process backend (a bit array per layer);
- :mod:`.scripts` / :mod:`.redis` — the Redis backend (Lua over bitmaps, or
  the server's own ``BF.*`` commands), shared by every node;
- :mod:`.methods` — the ``bf.*`` JSON-RPC methods for backends;
- :mod:`.unique` — ``stats.unique``: distinct users per view key and period.

The Redis module is imported only with ``--redis`` (txredisapi imports the
global reactor).
"""
from __future__ import annotations

from typing import Any

from pushengine.bloom.errors import BloomArgumentError, BloomError, BloomUnavailable
from pushengine.bloom.memory import MemoryBloom


def build_bloom(reactor: Any, redis_url: str | None, **kwargs: Any) -> Any:
    """The node's filters: in Redis with ``--redis`` (ValueError for a bad
    URL), in process otherwise."""
    if not redis_url:
        return MemoryBloom(reactor, **kwargs)
    from pushengine.bloom.redis import RedisBloom
    return RedisBloom(reactor, redis_url, **kwargs)


__all__ = ["BloomArgumentError", "BloomError", "BloomUnavailable", "MemoryBloom", "build_bloom"]
