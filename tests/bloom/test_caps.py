"""SPEC 18, Bloom filters: a memory cap for all filters of a node's backend
(--bloom-max-bytes), a largest capacity, no error rate below 1e-9, and
bf.del; on both backends."""
from __future__ import annotations

import math

import pytest
import pytest_twisted
from hypothesis import given, settings
from hypothesis import strategies as st

from pushengine.bloom import errors
from pushengine.bloom.params import MAX_CAPACITY, MIN_ERROR, layer_shape

from tests.bloom.conftest import outcome

pytestmark = pytest.mark.service  # the "redis" half needs Redis

CAP = 64 * 1024


def size(error: float, capacity: int, index: int = 0) -> int:
    bits, _ = layer_shape(-math.log(error), False, index, capacity)
    return (bits + 7) // 8


@pytest.fixture(params=["memory", "redis"])
def capped(request):
    """A backend whose filters may take CAP bytes together."""
    if request.param == "memory":
        from pushengine.bloom.memory import MemoryBloom
        return MemoryBloom(max_total=CAP)
    return request.getfixturevalue("redis_bloom")(max_total=CAP)


@pytest.mark.parametrize("call, error", [
    (lambda b: b.reserve("k", 5e-324, 100), errors.ERROR_RATE_TOO_LOW),
    (lambda b: b.reserve("k", 1e-300, 100), errors.ERROR_RATE_TOO_LOW),
    (lambda b: b.reserve("k", MIN_ERROR / 2, 100), errors.ERROR_RATE_TOO_LOW),
    (lambda b: b.insert("k", ["x"], error=1e-10), errors.ERROR_RATE_TOO_LOW),
    (lambda b: b.reserve("k", 0.01, MAX_CAPACITY + 1), errors.CAPACITY_TOO_LARGE),
    (lambda b: b.reserve("k", 0.01, 380_000_000), errors.CAPACITY_TOO_LARGE),
    (lambda b: b.insert("k", ["x"], capacity=MAX_CAPACITY + 1), errors.CAPACITY_TOO_LARGE),
])
@pytest_twisted.ensureDeferred
async def test_bounds_of_the_arguments(capped, call, error):
    assert await outcome(call(capped)) == ("BloomArgumentError", error)
    assert await capped.exists("k", "x") == 0           # nothing was made
    assert await capped.reserve("k", MIN_ERROR, 100) == "OK"


@pytest_twisted.ensureDeferred
async def test_the_filters_of_a_node_stay_under_the_cap(capped):
    one = size(0.01, 20_000)                  # 23,963 bytes: two fit, not three
    assert 2 * one <= CAP < 3 * one
    assert await capped.reserve("a", 0.01, 20_000) == "OK"
    assert await capped.reserve("b", 0.01, 20_000) == "OK"
    assert await outcome(capped.reserve("c", 0.01, 20_000)) == ("BloomError", errors.NO_ROOM)
    assert await outcome(capped.insert("c", ["x"], capacity=20_000)) == (
        "BloomError", errors.NO_ROOM)
    assert await capped.exists("c", "x") == 0
    # a filter that would grow past the cap stops at its item
    assert await capped.reserve("g", 0.01, 1000) == "OK"
    last = None
    for batch in range(20):
        results = await outcome(capped.madd("g", [f"i{batch}-{i}" for i in range(1000)]))
        last = results[-1]
        if last != 1 and last != 0:
            break
    assert last == ("BloomError", errors.NO_ROOM_TO_GROW)
    assert await capped.exists("g", "i0-1") == 1        # what it held stays
    # bf.del frees the room
    assert await capped.delete("a") == 1
    assert await capped.delete("a") == 0
    assert await outcome(capped.info("a")) == ("BloomError", errors.NOT_FOUND)
    assert await capped.exists("a", "x") == 0
    assert await capped.reserve("c", 0.01, 20_000) == "OK"
    total = sum([(await capped.info(k))["Size"] for k in ("b", "c", "g")])
    assert total <= CAP
    assert capped.stats()["bytes"] == total


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["reserve", "madd", "insert", "del"]),
                          st.sampled_from(["a", "b", "c", "d"]),
                          st.integers(min_value=1, max_value=30_000),
                          st.sampled_from([0.1, 0.01, 1e-4, 1e-9])), max_size=25))
def test_whatever_the_calls_the_cap_holds(calls):
    """Property (in process): after any sequence of reserve / madd / insert /
    del, the filters' bytes add up to the budget's count and never pass it."""
    from pushengine.bloom.memory import MemoryBloom
    bloom = MemoryBloom(max_total=CAP)
    for op, key, n, error in calls:
        if op == "reserve":
            bloom.reserve(key, error, n).addErrback(lambda f: f.trap(errors.BloomError))
        elif op == "madd":
            bloom.madd(key, [f"{key}{i}" for i in range(min(n, 1000))]).addErrback(
                lambda f: f.trap(errors.BloomError))
        elif op == "insert":
            bloom.insert(key, ["x"], capacity=n, error=error).addErrback(
                lambda f: f.trap(errors.BloomError))
        else:
            bloom.delete(key)
        held = sum(f.size for f in bloom.filters.values())
        assert held == bloom.budget.used <= CAP
