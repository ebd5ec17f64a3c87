"""One interface, two backends, the same answers.

The explicit cases run against both backends; the property test runs
random sequences of commands against the in-process backend and a real
memcached and requires identical outcomes.
"""
from __future__ import annotations

import pytest
import pytest_twisted
from hypothesis import HealthCheck, given, settings, strategies as st
from twisted.internet.task import Clock

from pushengine.memcache import (
    BadValue,
    CacheError,
    InMemoryCache,
    KeyExists,
    NotFound,
    NotStored,
)


async def outcome(d):
    """``("ok", value)`` or ``("error", ErrorClass)`` of a Deferred."""
    try:
        return ("ok", await d)
    except Exception as e:
        return ("error", type(e))


@pytest_twisted.ensureDeferred
async def test_errors_are_explicit(make_cache):
    cache = make_cache()
    for op in (
        lambda: cache.incr("missing"),
        lambda: cache.decr("missing"),
        lambda: cache.append("missing", b"x"),
        lambda: cache.prepend("missing", b"x"),
        lambda: cache.replace("missing", b"x"),
        lambda: cache.cas("missing", b"x", b"1"),
    ):
        with pytest.raises(NotFound):
            await op()
    await cache.set("k", b"v")
    with pytest.raises(KeyExists):
        await cache.add("k", b"w")
    value, token = await cache.gets("k")
    await cache.set("k", b"changed")
    with pytest.raises(NotStored):  # KeyExists is a NotStored
        await cache.cas("k", b"x", token)
    with pytest.raises(BadValue):
        await cache.incr("k")
    assert issubclass(BadValue, CacheError)


@pytest_twisted.ensureDeferred
async def test_basic_commands(make_cache):
    cache = make_cache()
    assert await cache.get("k") is None
    assert await cache.set("k", b"v") is True
    assert await cache.get("k") == b"v"
    assert await cache.add("n", b"10") is True
    assert await cache.incr("n", 5) == 15
    assert await cache.decr("n", 20) == 0
    assert await cache.replace("k", b"w") is True
    assert await cache.append("k", b"!") is True
    assert await cache.prepend("k", b"<") is True
    assert await cache.get("k") == b"<w!"
    assert await cache.get_multi(["k", "missing", "a key with spaces"]) == {"k": b"<w!"}
    await cache.set("a key with spaces", b"s")
    await cache.set(b"\xff" * 300, b"long")
    assert await cache.get_multi(["a key with spaces", b"\xff" * 300]) == {
        "a key with spaces": b"s",
        b"\xff" * 300: b"long",
    }
    assert await cache.delete("k") is True
    assert await cache.delete("k") is False
    assert await cache.get_multi([]) == {}
    await cache.set("gone", b"x", -1)
    assert await cache.get("gone") is None
    assert cache.health()["up"] is True
    assert cache.stats()["ops"] > 0


@pytest_twisted.ensureDeferred
async def test_cas_with_a_past_expiry_is_a_conditional_delete(make_cache):
    cache = make_cache()
    await cache.set("k", b"mine")
    _, token = await cache.gets("k")
    assert await cache.cas("k", b"", token, -1) is True
    assert await cache.get("k") is None
    assert await cache.add("k", b"next") is True


# -- the two backends agree --------------------------------------------------

KEYS = ["n", "spaced key", "x" * 300]
# memcached refuses (at random: it looks for a "-" past the value) to
# increment numbers of 2**63 and more, so the numbers here stay well below
NUMBERS = [b"0", b"7", b"42", b"4611686018427387904"]
ODD_VALUES = [b"", b"abc", b"1 2", b"\x00\r\n", b" 5", b"+3", b"-0", b"-4", b"9x", "ключ".encode()]
NAMES = ["set"] * 4 + ["add", "replace", "append", "prepend"] + ["incr", "decr"] * 2 + [
    "get", "get", "get_multi", "delete", "gets", "cas",
]


@st.composite
def command(draw):
    """One cache command, weighted towards the ones that store."""
    name = draw(st.sampled_from(NAMES))
    key = draw(st.sampled_from(KEYS))
    value = draw(st.sampled_from(NUMBERS + NUMBERS + ODD_VALUES))
    expire = draw(st.sampled_from([0, 0, 0, 3600, -1]))
    if name in ("set", "add", "replace", "cas"):
        return (name, key, value, expire)
    if name in ("append", "prepend"):
        return (name, key, value)
    if name in ("incr", "decr"):
        return (name, key, draw(st.sampled_from([0, 1, 5, 40, 2**40])))
    if name == "get_multi":
        return (name, draw(st.lists(st.sampled_from(KEYS), max_size=4)))
    return (name, key)


COMMANDS = command()


async def run(cache, tokens, command):
    name, key, *args = command
    if name == "gets":
        r = await outcome(cache.gets(key))
        if r[0] == "ok" and r[1] is not None:
            tokens[key] = r[1][1]
            return ("ok", r[1][0])
        return r
    if name == "cas":
        return await outcome(cache.cas(key, args[0], tokens.get(key, b"999999999"), args[1]))
    if name == "get_multi":
        return await outcome(cache.get_multi(key))
    return await outcome(getattr(cache, name)(key, *args))


@pytest.mark.service
@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(commands=st.lists(COMMANDS, min_size=5, max_size=30))
@pytest_twisted.ensureDeferred
async def test_memory_backend_answers_like_memcached(memcached, client_factory, commands):
    real = _client(memcached, client_factory)
    await real.flush_all()
    memory = InMemoryCache(Clock())
    real_tokens, memory_tokens = {}, {}
    for command in commands:
        expected = await run(real, real_tokens, command)
        got = await run(memory, memory_tokens, command)
        assert got == expected, command


_clients: dict = {}


def _client(server, factory):
    """One client for all the examples of a test (each flushes it)."""
    client = _clients.get(server.address)
    if client is None or not client.running:
        client = _clients[server.address] = factory([server.address])
    return client
