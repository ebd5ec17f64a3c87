"""The hash of an item and the bits it sets in a layer.

One 128-bit MurmurHash3 (mmh3, x64 variant, seed 0) per item gives three
32-bit words ``h1, h2, h3``. In layer ``i`` of ``m`` bits the ``k`` bits
are those of double hashing (Kirsch and Mitzenmacher)::

    a = (h1 + i * h3) mod m,  b = h2 mod m,  bit_j = (a + j * b) mod m,  j < k

so that one hash serves every layer and every layer sees other positions.
Every intermediate value stays below 2**53: the Lua scripts, whose numbers
are doubles, compute the same bits exactly.
"""
from __future__ import annotations

import struct
from typing import Iterable

import mmh3

M32 = 0xFFFFFFFF
SEED = 0


def item_hash(data: bytes) -> tuple[int, int, int]:
    x = mmh3.hash128(data, SEED, True, False)
    return x & M32, (x >> 32) & M32, (x >> 64) & M32


def positions(h: tuple[int, int, int], index: int, bits: int, hashes: int) -> list[int]:
    """The bits item ``h`` sets in layer ``index`` (``bits`` long, ``hashes`` of them)."""
    h1, h2, h3 = h
    a = (h1 + index * h3) % bits
    b = h2 % bits
    return [(a + j * b) % bits for j in range(hashes)]


def pack(hashes: Iterable[tuple[int, int, int]]) -> bytes:
    """Hashes as the Lua scripts read them: 12 bytes per item, little-endian."""
    flat = [w for h in hashes for w in h]
    return struct.pack(f"<{len(flat)}I", *flat)
