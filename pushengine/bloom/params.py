"""What a scalable Bloom filter is made of: its arguments, checked, and the
shape of each layer (docs/bloom.md has the formulas).

Layer ``i`` (0-based) of a filter reserved with error rate ``e``, capacity
``n`` and expansion ``x``:

- capacity ``n_i = n * x**i``;
- error rate ``e_i = e * r**(i + 1)`` with the tightening ratio ``r = 1/2``
  (a non-scaling filter has one layer, with ``e_0 = e``), so that the rates
  of all layers add up to less than ``e``;
- bits ``m_i = ceil(n_i * -ln(e_i) / ln(2)**2)`` and hash functions
  ``k_i = ceil(-ln(e_i) / ln(2))`` — the optimum for ``n_i`` items at
  ``e_i``.

``-ln(e_i)`` is computed as ``-ln(e) + (i + 1) * ln(2)`` from ``-ln(e)``,
which is worked out once (here, in Python) and stored with the filter: the
Lua scripts that grow a filter inside Redis then do the same additions,
multiplications and divisions in IEEE doubles and get the very same layer
shapes as the in-process backend, with no logarithm of their own.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeGuard

from pushengine.bloom import errors

LN2 = 0.6931471805599453          # math.log(2), spelled out: the Lua scripts use it too
TIGHTENING = 0.5                  # each layer's error rate is half the one before
DEFAULT_ERROR = 0.01              # BF.ADD / BF.INSERT on a missing key, as the module does
DEFAULT_CAPACITY = 100
DEFAULT_EXPANSION = 2
MAX_EXPANSION = 32768
MAX_BYTES = 1 << 29               # 512 MiB of bits per filter: the largest Redis string
MAX_LAYERS = 64
MAX_CAPACITY = 100_000_000        # items a filter may be reserved for (its first layer)
MIN_ERROR = 1e-9                  # below it a filter needs over 30 hashes per item per layer
DEFAULT_MAX_TOTAL = 1 << 29       # --bloom-max-bytes: all filters of a node's backend


@dataclass(frozen=True)
class FilterSpec:
    """The arguments a filter is created with."""

    error: float
    capacity: int
    expansion: int = DEFAULT_EXPANSION
    nonscaling: bool = False

    @property
    def nlog_error(self) -> float:
        """``-ln(error)``, the one logarithm a filter needs."""
        return -math.log(self.error)


DEFAULT_SPEC = FilterSpec(DEFAULT_ERROR, DEFAULT_CAPACITY, DEFAULT_EXPANSION, False)


def layer_shape(nlog_error: float, nonscaling: bool, index: int, capacity: int) -> tuple[int, int]:
    """``(bits, hashes)`` of layer ``index`` holding ``capacity`` items.

    The operations and their order are those of the Lua script's ``shape``:
    keep them the same, or the two backends disagree."""
    j = 0 if nonscaling else index + 1
    nl = nlog_error + j * LN2
    bpe = nl / (LN2 * LN2)
    return math.ceil(capacity * bpe), math.ceil(nl / LN2)


def layer_error(error: float, nonscaling: bool, index: int) -> float:
    """The error rate layer ``index`` is built for (documentation, tests, bench)."""
    return error if nonscaling else error * TIGHTENING ** (index + 1)


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise errors.BloomArgumentError(errors.BAD_KEY)
    return key


def check_error(error: object) -> float:
    if not _number(error):
        raise errors.BloomArgumentError("bad error rate")
    try:
        value = float(error)
    except OverflowError:
        raise errors.BloomArgumentError(errors.BAD_ERROR_RATE) from None
    if not 0 < value < 1:
        raise errors.BloomArgumentError(errors.BAD_ERROR_RATE)
    if value < MIN_ERROR:
        raise errors.BloomArgumentError(errors.ERROR_RATE_TOO_LOW)
    return value


def check_capacity(capacity: object) -> int:
    if isinstance(capacity, float) and capacity.is_integer():
        capacity = int(capacity)
    if not isinstance(capacity, int) or isinstance(capacity, bool):
        raise errors.BloomArgumentError("bad capacity")
    if capacity <= 0:
        raise errors.BloomArgumentError(errors.BAD_CAPACITY)
    if capacity > MAX_CAPACITY:
        raise errors.BloomArgumentError(errors.CAPACITY_TOO_LARGE)
    return capacity


def check_expansion(expansion: object) -> int:
    if isinstance(expansion, float) and expansion.is_integer():
        expansion = int(expansion)
    if not isinstance(expansion, int) or isinstance(expansion, bool) \
            or not 1 <= expansion <= MAX_EXPANSION:
        raise errors.BloomArgumentError(
            f"{errors.BAD_EXPANSION}: an integer from 1 to {MAX_EXPANSION}")
    return expansion


def reserve_spec(error_rate: object, capacity: object, expansion: object = None,
                 nonscaling: object = False) -> FilterSpec:
    """The arguments of ``reserve``, checked in the module's order."""
    error = check_error(error_rate)
    cap = check_capacity(capacity)
    if not isinstance(nonscaling, bool):
        raise errors.BloomArgumentError("nonscaling must be true or false")
    if expansion is not None and nonscaling:
        raise errors.BloomArgumentError(errors.NONSCALING_EXPANSION)
    x = DEFAULT_EXPANSION if expansion is None else check_expansion(expansion)
    return FilterSpec(error, cap, x, nonscaling)


def insert_spec(capacity: object = None, error: object = None, expansion: object = None,
                nonscaling: object = False) -> FilterSpec:
    """The options of ``insert`` (used only when it creates the filter)."""
    if not isinstance(nonscaling, bool):
        raise errors.BloomArgumentError("nonscaling must be true or false")
    return FilterSpec(
        DEFAULT_ERROR if error is None else check_error(error),
        DEFAULT_CAPACITY if capacity is None else check_capacity(capacity),
        DEFAULT_EXPANSION if expansion is None else check_expansion(expansion),
        nonscaling)


def item_bytes(item: object) -> bytes:
    """An item as the bytes that are hashed: text in UTF-8, an integer in
    decimal (as a Redis client sends it), bytes as they are."""
    if isinstance(item, str):
        try:
            return item.encode("utf-8")
        except UnicodeEncodeError:
            raise errors.BloomArgumentError(errors.BAD_ITEM) from None
    if isinstance(item, bytes):
        return item
    if isinstance(item, int) and not isinstance(item, bool):
        return str(item).encode("ascii")
    raise errors.BloomArgumentError(errors.BAD_ITEM)


def check_items(items: object) -> list[bytes]:
    if not isinstance(items, (list, tuple)) or not items:
        raise errors.BloomArgumentError("items must be a non-empty list")
    return [item_bytes(i) for i in items]
