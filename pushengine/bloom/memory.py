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
from pushengine.bloom.base import CANNOT_GROW_CODE, FULL_CODE, NO_ROOM_CODE, BloomCommands
from pushengine.bloom.hashing import item_hash
from pushengine.bloom.params import (
    DEFAULT_MAX_TOTAL, MAX_BYTES, MAX_LAYERS, FilterSpec, layer_shape)

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


class Budget:
    """The bytes all filters of a backend may take together (--bloom-max-bytes)."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0


class ScalableFilter:
    """One filter: its arguments and its layers."""

    __slots__ = ("spec", "nlog", "layers", "items", "size", "expires", "max_bytes", "budget")

    def __init__(self, spec: FilterSpec, max_bytes: int = MAX_BYTES,
                 budget: Budget | None = None) -> None:
        self.spec = spec
        self.nlog = spec.nlog_error
        self.layers: list[Layer] = []
        self.items = 0
        self.size = 0               # bytes of all layers
        self.expires: float | None = None
        self.max_bytes = max_bytes
        self.budget = budget if budget is not None else Budget(1 << 62)

    @classmethod
    def create(cls, spec: FilterSpec, max_bytes: int = MAX_BYTES,
               budget: Budget | None = None) -> "ScalableFilter | int":
        """A new filter, or the code of why not (CANNOT_GROW_CODE: larger
        than one filter may be; NO_ROOM_CODE: past the budget)."""
        f = cls(spec, max_bytes, budget)
        code = f.grow(spec.capacity)
        return f if code == 1 else code

    def grow(self, capacity: int) -> int:
        """Add a layer for ``capacity`` items: 1, or CANNOT_GROW_CODE when
        the filter would be too large, NO_ROOM_CODE when all filters of the
        backend would pass their budget. The size is worked out before any
        memory is taken."""
        index = len(self.layers)
        if index >= MAX_LAYERS:
            return CANNOT_GROW_CODE
        bits, hashes = layer_shape(self.nlog, self.spec.nonscaling, index, capacity)
        nbytes = (bits + 7) >> 3
        if self.size + nbytes > self.max_bytes:
            return CANNOT_GROW_CODE
        if self.budget.used + nbytes > self.budget.limit:
            return NO_ROOM_CODE
        self.layers.append(Layer(capacity, bits, hashes))
        self.size += nbytes
        self.budget.used += nbytes
        return 1

    def drop(self) -> None:
        """Give the filter's bytes back to the budget (it is being forgotten)."""
        self.budget.used -= self.size
        self.size = 0
        self.layers = []

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
            grown = self.grow(last.capacity * self.spec.expansion)
            if grown != 1:
                return grown
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


def _not_created(code: int) -> errors.BloomError:
    return errors.BloomError(errors.NO_ROOM if code == NO_ROOM_CODE else errors.TOO_LARGE)


class MemoryBloom(BloomCommands):
    """Scalable Bloom filters in this process (SPEC section 14)."""

    kind = "memory"

    def __init__(self, clock: IReactorTime | None = None, max_bytes: int = MAX_BYTES,
                 max_total: int = DEFAULT_MAX_TOTAL) -> None:
        """``max_bytes``: one filter's largest size; ``max_total``: all
        filters together (--bloom-max-bytes)."""
        self.clock = clock
        self.max_bytes = max_bytes
        self.budget = Budget(max_total)
        self.filters: dict[str, ScalableFilter] = {}
        self._next_sweep = 0.0
        self.counters = {"commands": 0}

    def _now(self) -> float:
        return self.clock.seconds() if self.clock is not None else time.monotonic()

    def _get(self, key: str) -> ScalableFilter | None:
        f = self.filters.get(key)
        if f is not None and f.expires is not None and f.expires <= self._now():
            del self.filters[key]
            f.drop()
            return None
        return f

    def _sweep(self) -> None:
        now = self._now()
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_EVERY
        for key in [k for k, f in self.filters.items()
                    if f.expires is not None and f.expires <= now]:
            self.filters.pop(key).drop()

    # -- primitives ------------------------------------------------------------
    def _reserve(self, key: str, spec: FilterSpec) -> Deferred:
        self.counters["commands"] += 1
        if self._get(key) is not None:
            return fail(errors.BloomError(errors.ITEM_EXISTS))
        f = ScalableFilter.create(spec, self.max_bytes, self.budget)
        if isinstance(f, int):
            return fail(_not_created(f))
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
            made = ScalableFilter.create(spec, self.max_bytes, self.budget)
            if isinstance(made, int):
                return fail(_not_created(made))
            self.filters[key] = f = made
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

    def _delete(self, key: str) -> Deferred:
        self.counters["commands"] += 1
        f = self._get(key)
        if f is None:
            return succeed(0)
        del self.filters[key]
        f.drop()
        return succeed(1)

    # -- operations --------------------------------------------------------------
    @property
    def available(self) -> bool:
        return True

    def health(self) -> dict[str, Any]:
        return {"up": True, "kind": "memory", "filters": len(self.filters)}

    def stats(self) -> dict[str, int]:
        return {"filters": len(self.filters), "bytes": self.budget.used,
                "max_bytes": self.budget.limit, **self.counters}

    counter_names = ("commands",)
