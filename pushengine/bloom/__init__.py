"""Scalable Bloom filters with the semantics of the Redis bloom module's
``BF.*`` commands (SPEC section 14; docs/bloom.md).

- :mod:`.params` — the arguments and the shape of each layer;
- :mod:`.hashing` — an item's hash and the bits it sets;
- :mod:`.base` — the commands, on four primitives of a backend;
- :mod:`.memory` — the in-process backend (a bit array per layer);
- the Redis backend (Lua over bitmaps, or the server's own ``BF.*``
  commands), shared by every node, is :mod:`pushengine.redis.bloom`;
- :mod:`.methods` — the ``bf.*`` JSON-RPC methods for backends;
- :mod:`.unique` — ``stats.unique``: distinct users per view key and period.

"""
from __future__ import annotations

from pushengine.bloom.errors import BloomArgumentError, BloomError, BloomUnavailable
from pushengine.bloom.memory import MemoryBloom


__all__ = ["BloomArgumentError", "BloomError", "BloomUnavailable", "MemoryBloom"]
