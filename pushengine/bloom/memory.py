"""The in-process backend: a bit array (``bytearray``) per layer.

Every command runs at once, atomically (the reactor runs one thing at a
time), and returns a Deferred that has fired. Filters inserted with a
``ttl`` are dropped that long after their last insert (checked when the key
is used, and swept every minute of the clock on writes).
"""
from __future__ import annotations

import time
from typing import Any

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorTime

from pushengine.bloom import errors
from pushengine.bloom.base import CANNOT_GROW_CODE, FULL_CODE, BloomCommands
from pushengine.bloom.hashing import item_hash
from pushengine.bloom.params import MAX_BYTES, MAX_LAYERS, FilterSpec, layer_shape

SWEEP_EVERY = 60.0


class Layer:
    __slots__ = ("capacity", "bits", "hashes", "count", "array")

    def __init__(self, capacity: int, bits: int, hashes: int) -> None:
        self.capacity = capacity
        self.bits = bits
        self.hashes = hashes
        self.count = 0
        self.array = bytearray((bits + 7) >> 3)

    def has(self, index: int, h: tuple[int, int, int]) -> bool:
        m, arr = self.bits, self.array
        a = (h[0] + index * h[2]) % m
        b = h[1] % m
        for _ in range(self.hashes):
            if not arr[a >> 3] & (1 << (a & 7)):
                return False
            a += b
            if a >= m:
                a -= m
        return True

    def set(self, index: int, h: tuple[int, int, int]) -> None:
        m, arr = self.bits, self.array
        a = (h[0] + index * h[2]) % m
        b = h[1] % m
        for _ in range(self.hashes):
            arr[a >> 3] |= 1 << (a & 7)
            a += b
            if a >= m:
                a -= m


class ScalableFilter:
    """One filter: its arguments and its layers."""

    __slots__ = ("spec", "nlog", "layers", "items", "size", "expires", "max_bytes")

    def __init__(self, spec: FilterSpec, max_bytes: int = MAX_BYTES) -> None:
        self.spec = spec
        self.nlog = spec.nlog_error
        self.layers: list[Layer] = []
        self.items = 0
        self.size = 0               # bytes of all layers
        self.expires: float | None = None
        self.max_bytes = max_bytes

    @classmethod
    def create(cls, spec: FilterSpec, max_bytes: int = MAX_BYTES) -> "ScalableFilter | None":
        f = cls(spec, max_bytes)
        return f if f.grow(spec.capacity) else None

    def grow(self, capacity: int) -> bool:
        """Add a layer for ``capacity`` items; False when it would be too large."""
        index = len(self.layers)
        if index >= MAX_LAYERS:
            return False
        bits, hashes = layer_shape(self.nlog, self.spec.nonscaling, index, capacity)
        nbytes = (bits + 7) >> 3
        if self.size + nbytes > self.max_bytes:
            return False
        self.layers.append(Layer(capacity, bits, hashes))
        self.size += nbytes
        return True

    def has(self, h: tuple[int, int, int]) -> bool:
        layers = self.layers
        for i in range(len(layers) - 1, -1, -1):
            if layers[i].has(i, h):
                return True
        return False

    def add(self, h: tuple[int, int, int]) -> int:
        """1 added, 0 (probably) there already, or a failure code."""
        if self.has(h):
            return 0
        last = self.layers[-1]
        if last.count >= last.capacity:
            if self.spec.nonscaling:
                return FULL_CODE
            if not self.grow(last.capacity * self.spec.expansion):
                return CANNOT_GROW_CODE
            last = self.layers[-1]
        last.set(len(self.layers) - 1, h)
        last.count += 1
        self.items += 1
        return 1

    def info(self) -> dict[str, Any]:
        return {"Capacity": sum(layer.capacity for layer in self.layers),
                "Size": self.size,
                "Number of filters": len(self.layers),
                "Number of items inserted": self.items,
                "Expansion rate": None if self.spec.nonscaling else self.spec.expansion}


class MemoryBloom(BloomCommands):
    """Scalable Bloom filters in this process (SPEC section 14)."""

    kind = "memory"

    def __init__(self, clock: IReactorTime | None = None, max_bytes: int = MAX_BYTES) -> None:
        self.clock = clock
        self.max_bytes = max_bytes
        self.filters: dict[str, ScalableFilter] = {}
        self._next_sweep = 0.0
        self.counters = {"commands": 0}

    def _now(self) -> float:
        return self.clock.seconds() if self.clock is not None else time.monotonic()

    def _get(self, key: str) -> ScalableFilter | None:
        f = self.filters.get(key)
        if f is not None and f.expires is not None and f.expires <= self._now():
            del self.filters[key]
            return None
        return f

    def _sweep(self) -> None:
        now = self._now()
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_EVERY
        for key in [k for k, f in self.filters.items()
                    if f.expires is not None and f.expires <= now]:
            del self.filters[key]

    # -- primitives ------------------------------------------------------------
    def _reserve(self, key: str, spec: FilterSpec) -> Deferred:
        self.counters["commands"] += 1
        if self._get(key) is not None:
            return fail(errors.BloomError(errors.ITEM_EXISTS))
        f = ScalableFilter.create(spec, self.max_bytes)
        if f is None:
            return fail(errors.BloomError(errors.TOO_LARGE))
        self.filters[key] = f
        return succeed("OK")

    def _add(self, key: str, items: list[bytes], spec: FilterSpec | None,
             ttl: float | None) -> Deferred:
        self.counters["commands"] += 1
        self._sweep()
        f = self._get(key)
        if f is None:
            if spec is None:
                return fail(errors.BloomError(errors.NOT_FOUND))
            f = ScalableFilter.create(spec, self.max_bytes)
            if f is None:
                return fail(errors.BloomError(errors.TOO_LARGE))
            self.filters[key] = f
        codes = []
        for data in items:
            code = f.add(item_hash(data))
            codes.append(code)
            if code < 0:
                break
        if ttl is not None:
            f.expires = self._now() + ttl
        return succeed(codes)

    def _exists(self, key: str, items: list[bytes]) -> Deferred:
        self.counters["commands"] += 1
        f = self._get(key)
        if f is None:
            return succeed([0] * len(items))
        return succeed([1 if f.has(item_hash(data)) else 0 for data in items])

    def _info(self, key: str) -> Deferred:
        self.counters["commands"] += 1
        f = self._get(key)
        if f is None:
            return fail(errors.BloomError(errors.NOT_FOUND))
        return succeed(f.info())

    # -- operations --------------------------------------------------------------
    @property
    def available(self) -> bool:
        return True

    def health(self) -> dict[str, Any]:
        return {"up": True, "kind": "memory", "filters": len(self.filters)}

    def stats(self) -> dict[str, int]:
        return {"filters": len(self.filters), "bytes": sum(f.size for f in self.filters.values()),
                **self.counters}

    counter_names = ("commands",)
