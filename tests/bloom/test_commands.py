"""The BF.* semantics, the same on both backends (in process and Redis):
the module's error strings, scaling (layers, capacity, info), no false
negatives, and the observed false-positive rate within the configured one."""
from __future__ import annotations

import pytest

from pushengine.bloom import errors
from pushengine.bloom.params import layer_shape
import pytest_twisted

from tests.bloom.conftest import outcome

pytestmark = pytest.mark.service  # the "redis" half needs Redis


async def info(bloom, key):
    return await bloom.info(key)


@pytest_twisted.ensureDeferred
async def test_reserve_add_exists_info(bloom):
    assert await bloom.reserve("k", 0.01, 1000) == "OK"
    assert await outcome(bloom.reserve("k", 0.1, 10)) == ("BloomError", "item exists")
    assert await bloom.add("k", "apple") == 1
    assert await bloom.add("k", "apple") == 0
    assert await bloom.exists("k", "apple") == 1
    assert await bloom.exists("k", "pear") == 0
    assert await bloom.madd("k", ["pear", "apple", "plum", "pear"]) == [1, 0, 1, 0]
    assert await bloom.mexists("k", ["plum", "fig", "pear"]) == [1, 0, 1]
    bits, _ = layer_shape(-__import__("math").log(0.01), False, 0, 1000)
    assert await info(bloom, "k") == {"Capacity": 1000, "Size": (bits + 7) // 8,
                                "Number of filters": 1, "Number of items inserted": 3,
                                "Expansion rate": 2}


@pytest_twisted.ensureDeferred
async def test_missing_filters(bloom):
    assert await outcome(bloom.info("nope")) == ("BloomError", "not found")
    assert await bloom.exists("nope", "x") == 0
    assert await bloom.mexists("nope", ["x", "y"]) == [0, 0]
    assert await outcome(bloom.insert("nope", ["x"], nocreate=True)) == ("BloomError", "not found")
    # add and insert create a filter with the module's defaults: 1 %, 100, expansion 2
    assert await bloom.add("auto", "x") == 1
    got = await info(bloom, "auto")
    assert (got["Capacity"], got["Number of filters"], got["Expansion rate"]) == (100, 1, 2)
    assert await bloom.insert("made", ["a", "b"], capacity=50, error=0.001, expansion=3) == [1, 1]
    got = await info(bloom, "made")
    assert (got["Capacity"], got["Number of items inserted"], got["Expansion rate"]) == (50, 2, 3)
    # an existing filter keeps its options
    assert await bloom.insert("made", ["c"], capacity=7, nonscaling=True) == [1]
    assert (await info(bloom, "made"))["Capacity"] == 50
    assert await bloom.insert("made", ["c", "d"], nocreate=True) == [0, 1]


@pytest.mark.parametrize("call, error", [
    (lambda b: b.reserve("k", 0, 100), errors.BAD_ERROR_RATE),
    (lambda b: b.reserve("k", 1, 100), errors.BAD_ERROR_RATE),
    (lambda b: b.reserve("k", 1.5, 100), errors.BAD_ERROR_RATE),
    (lambda b: b.reserve("k", "0.1", 100), "bad error rate"),
    (lambda b: b.reserve("k", 0.01, 0), errors.BAD_CAPACITY),
    (lambda b: b.reserve("k", 0.01, -5), errors.BAD_CAPACITY),
    (lambda b: b.reserve("k", 0.01, 2.5), "bad capacity"),
    (lambda b: b.reserve("k", 0.01, 100, 0), errors.BAD_EXPANSION),
    (lambda b: b.reserve("k", 0.01, 100, 2, True), errors.NONSCALING_EXPANSION),
    (lambda b: b.reserve("", 0.01, 100), errors.BAD_KEY),
    (lambda b: b.add("k", 1.5), errors.BAD_ITEM),
    (lambda b: b.add("k", None), errors.BAD_ITEM),
    (lambda b: b.madd("k", []), "items must be a non-empty list"),
    (lambda b: b.insert("k", ["x"], error=2), errors.BAD_ERROR_RATE),
    (lambda b: b.insert("k", ["x"], capacity=0), errors.BAD_CAPACITY),
    (lambda b: b.insert("k", ["x"], nocreate="yes"), "nocreate"),
])
@pytest_twisted.ensureDeferred
async def test_argument_errors(bloom, call, error):
    kind, message = await outcome(call(bloom))
    assert kind == "BloomArgumentError" and message.startswith(error), message
    assert await outcome(bloom.info("k")) == ("BloomError", "not found")   # nothing was made


@pytest_twisted.ensureDeferred
async def test_a_full_non_scaling_filter(bloom):
    assert await bloom.reserve("ns", 0.01, 3, nonscaling=True) == "OK"
    assert (await info(bloom, "ns"))["Expansion rate"] is None
    assert await bloom.madd("ns", ["a", "b", "c"]) == [1, 1, 1]
    assert await outcome(bloom.add("ns", "d")) == ("BloomError", "non scaling filter is full")
    assert await bloom.add("ns", "a") == 0            # an item already there is no error
    # madd answers the error in the item's place and adds nothing after it
    assert await outcome(bloom.madd("ns", ["b", "e", "f"])) == [
        0, ("BloomError", "non scaling filter is full")]
    got = await info(bloom, "ns")
    assert (got["Number of filters"], got["Number of items inserted"], got["Capacity"]) == (1, 3, 3)


@pytest_twisted.ensureDeferred
async def test_scaling_adds_layers_of_growing_capacity(bloom):
    await bloom.reserve("s", 0.01, 100, 3)
    items = [f"item-{i}" for i in range(100 + 300 + 50)]
    added = await bloom.madd("s", items)
    got = await info(bloom, "s")
    assert got["Number of filters"] == 3
    assert got["Capacity"] == 100 + 300 + 900
    assert got["Number of items inserted"] == sum(added) >= len(items) - 5
    assert got["Expansion rate"] == 3
    # each layer has the bits of its capacity at an error rate half the one before
    nl = -__import__("math").log(0.01)
    sizes = [(layer_shape(nl, False, i, c)[0] + 7) // 8 for i, c in enumerate((100, 300, 900))]
    assert got["Size"] == sum(sizes)


@pytest_twisted.ensureDeferred
async def test_no_false_negatives_across_layers(bloom):
    await bloom.reserve("fn", 0.01, 500)
    items = [f"user:{i}" for i in range(6000)]          # four layers
    for start in range(0, len(items), 1000):
        await bloom.madd("fn", items[start:start + 1000])
    assert (await info(bloom, "fn"))["Number of filters"] == 4
    for start in range(0, len(items), 1000):
        assert all(await bloom.mexists("fn", items[start:start + 1000]))


@pytest.mark.parametrize("error, capacity, inserted", [
    (0.01, 100_000, 100_000),       # one layer, full
    (0.01, 10_000, 70_000),         # scaled to four layers
    (0.001, 20_000, 50_000),
])
@pytest_twisted.ensureDeferred
async def test_false_positive_rate_within_the_configured_one(bloom, error, capacity, inserted):
    await bloom.reserve("fp", error, capacity)
    for start in range(0, inserted, 1000):
        await (bloom.madd("fp", [f"member-{i}" for i in range(start, start + 1000)]))
    positives = 0
    for start in range(0, 100_000, 1000):
        positives += sum(await (bloom.mexists(
            "fp", [f"stranger-{i}" for i in range(start, start + 1000)])))
    assert positives / 100_000 <= error, positives


@pytest_twisted.ensureDeferred
async def test_a_filter_that_cannot_grow_further(bloom):
    # expansion 1 and capacity 1: a layer per item, until the limit of layers
    await bloom.reserve("tiny", 0.1, 1, 1)
    results = await outcome(bloom.madd("tiny", [f"i{i}" for i in range(400)]))
    assert results[-1] == ("BloomError", errors.CANNOT_GROW)
    assert (await info(bloom, "tiny"))["Number of filters"] == 64
    assert await outcome(bloom.reserve("huge", 1e-9, 10 ** 8)) == ("BloomError", errors.TOO_LARGE)


@pytest_twisted.ensureDeferred
async def test_integers_are_their_decimal_text(bloom):
    await bloom.add("n", 42)
    assert await bloom.mexists("n", ["42", 42, "042"]) == [1, 1, 0]
