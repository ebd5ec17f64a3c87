"""The construction: layer shapes, the error budget, memory against the
theoretical optimum, and the hashing both backends share."""
from __future__ import annotations

import math

import pytest

from pushengine.bloom.hashing import item_hash, pack, positions
from pushengine.bloom.memory import ScalableFilter
from pushengine.bloom.params import (
    LN2, FilterSpec, layer_error, layer_shape, reserve_spec)


def test_ln2_is_spelled_exactly():
    assert LN2 == math.log(2)


@pytest.mark.parametrize("error", [0.1, 0.01, 0.001, 0.0001])
@pytest.mark.parametrize("capacity", [100, 10_000, 1_000_000])
def test_each_layer_is_the_optimum_for_its_capacity_and_error(error, capacity):
    nl = -math.log(error)
    for i in range(6):
        c = capacity * 2 ** i
        bits, hashes = layer_shape(nl, False, i, c)
        e = layer_error(error, False, i)
        optimum = c * -math.log(e) / math.log(2) ** 2        # bits of an optimal Bloom filter
        assert optimum <= bits <= optimum + 1
        assert bits / optimum < 1.10                          # the target: within 10 %
        assert hashes == math.ceil(-math.log2(e) - 1e-9) or hashes == math.ceil(-math.log2(e))
        # the false-positive rate of k hashes in m bits holding c items
        fp = (1 - math.exp(-hashes * c / bits)) ** hashes
        assert fp <= e * 1.05


def test_the_layers_error_rates_add_up_to_less_than_the_filters():
    for error in (0.1, 0.01, 0.001):
        assert sum(layer_error(error, False, i) for i in range(20)) < error
        assert sum(layer_error(error, False, i) for i in range(64)) <= error  # 1 - 2**-64
        assert layer_error(error, True, 0) == error


def test_a_non_scaling_filter_spends_its_whole_budget_on_one_layer():
    bits, hashes = layer_shape(-math.log(0.01), True, 0, 1_000_000)
    assert round(bits / 1_000_000, 2) == 9.59 and hashes == 7      # RedisBloom: ~9.6 bits/item


def test_memory_per_million_items():
    """What docs/benchmarks.md reports: bytes for 10**6 items."""
    for error, per_item in ((0.01, 9.585), (0.001, 14.378)):
        f = ScalableFilter.create(reserve_spec(error, 1_000_000, nonscaling=True))
        assert f.size * 8 / 1_000_000 == pytest.approx(per_item, abs=0.001)
        scaling = ScalableFilter.create(FilterSpec(error, 1_000_000))
        # a scaling filter's first layer is built for half the error rate
        assert scaling.size * 8 / 1_000_000 == pytest.approx(per_item + 1.4427, abs=0.001)


def test_positions_are_double_hashing_of_one_murmur3_hash():
    h = item_hash(b"hello")
    assert all(0 <= w < 2 ** 32 for w in h)
    assert item_hash(b"hello") == h and item_hash(b"hellp") != h
    got = positions(h, 0, 1000, 7)
    a, b = h[0] % 1000, h[1] % 1000
    assert got == [(a + j * b) % 1000 for j in range(7)]
    assert positions(h, 1, 1000, 7) != got                 # another layer, other bits
    assert len(pack([h, h])) == 24
