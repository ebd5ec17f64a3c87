"""The two backends against each other: random sequences of BF commands
(hypothesis) give the same answers, item for item — same hash, same layer
shapes, so even their false positives agree — and the same info."""
from __future__ import annotations

import uuid

import pytest
import pytest_twisted
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pushengine.bloom.memory import MemoryBloom
from tests.bloom.conftest import outcome

pytestmark = pytest.mark.service

KEYS = ["a", "b", "c"]
items = st.one_of(st.text(alphabet="xyz01", min_size=0, max_size=3),
                  st.integers(min_value=-5, max_value=50))
errors_ = st.one_of(st.sampled_from([0.5, 0.1, 0.01, 0.001]),
                    st.floats(min_value=1e-6, max_value=0.9),
                    st.sampled_from([0, 1, -0.5, 1.5]))
capacities = st.one_of(st.integers(min_value=1, max_value=12), st.sampled_from([0, -1]))
expansions = st.one_of(st.none(), st.integers(min_value=1, max_value=4), st.just(0))
keys = st.sampled_from(KEYS)

commands = st.one_of(
    st.tuples(st.just("reserve"), keys, errors_, capacities, expansions, st.booleans()),
    st.tuples(st.just("add"), keys, items),
    st.tuples(st.just("madd"), keys, st.lists(items, min_size=1, max_size=25)),
    st.tuples(st.just("exists"), keys, items),
    st.tuples(st.just("mexists"), keys, st.lists(items, min_size=1, max_size=25)),
    st.tuples(st.just("insert"), keys, st.lists(items, min_size=1, max_size=25),
              st.fixed_dictionaries({}, optional={
                  "capacity": capacities, "error": errors_, "expansion": expansions,
                  "nocreate": st.booleans(), "nonscaling": st.booleans()})),
    st.tuples(st.just("info"), keys),
)


def run(bloom, command, ns: str):
    name, key, *args = command
    key = ns + key
    if name == "insert":
        items_, options = args
        return getattr(bloom, name)(key, items_, **options)
    return getattr(bloom, name)(key, *args)


@pytest.fixture(scope="module")
def shared_redis():
    """One Redis backend for every example (each example on keys of its own)."""
    import pytest_twisted as pt
    from twisted.internet import reactor

    from pushengine.redis.bloom import RedisBloom
    from tests.bloom.conftest import (
        BLOOM_DB, REDIS_HOST, REDIS_PORT, delete_prefix, wait_available)
    from tests.services import require_service
    require_service("Redis", REDIS_HOST, REDIS_PORT)
    prefix = f"bloomtest:{uuid.uuid4().hex[:12]}:"
    bloom = RedisBloom(reactor, f"redis://{REDIS_HOST}:{REDIS_PORT}/{BLOOM_DB}"
                                f"?prefix={prefix}&timeout=10")
    bloom.startService()
    wait_available(bloom)
    yield bloom
    pt.blockon(bloom.stopService())
    delete_prefix(prefix)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sequence=st.lists(commands, min_size=1, max_size=30))
@pytest_twisted.ensureDeferred
async def test_both_backends_answer_alike(shared_redis, sequence):
    memory = MemoryBloom()
    ns = uuid.uuid4().hex[:8] + ":"
    for command in sequence:
        mine = await outcome(run(memory, command, ns))
        theirs = await outcome(run(shared_redis, command, ns))
        assert mine == theirs, command
    for key in KEYS:
        assert await outcome(memory.info(ns + key)) == await outcome(shared_redis.info(ns + key))


@pytest_twisted.ensureDeferred
async def test_both_backends_agree_on_many_layers(shared_redis):
    """Long runs through many layers, false positives included."""
    memory = MemoryBloom()
    for ns, (error, capacity, expansion) in enumerate([(0.2, 3, 1), (0.05, 10, 2),
                                                       (0.001, 50, 4)]):
        key = f"{uuid.uuid4().hex[:8]}:layers{ns}"
        for bloom in (memory, shared_redis):
            assert await bloom.reserve(key, error, capacity, expansion) == "OK"
        values = [f"v{i}" for i in range(2000)]
        for start in range(0, 2000, 250):
            chunk = values[start:start + 250]
            assert await outcome(memory.madd(key, chunk)) == \
                await outcome(shared_redis.madd(key, chunk))
        probe = [f"p{i}" for i in range(3000)]
        assert await memory.mexists(key, probe) == await shared_redis.mexists(key, probe)
        assert await memory.info(key) == await shared_redis.info(key)
