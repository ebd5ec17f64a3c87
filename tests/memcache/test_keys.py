"""Key rules: what reaches memcached is always a valid key."""
import pytest
from hypothesis import given, strategies as st

from pushengine.memcache.client import parse_servers, split_server
from pushengine.memcache.keys import HASHED_PREFIX, is_safe, wire_key


@given(st.one_of(st.text(max_size=400), st.binary(max_size=400)))
def test_every_key_becomes_a_valid_memcached_key(key):
    k = wire_key(key)
    assert 1 <= len(k) <= 250
    assert is_safe(k)


@given(st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=250))
def test_safe_keys_are_sent_as_they_are(key):
    assert wire_key(key) == key.encode()


@given(st.text(max_size=300), st.text(max_size=300))
def test_distinct_keys_stay_distinct(a, b):
    if a != b:
        assert wire_key(a) != wire_key(b)


def test_long_spaced_control_and_unicode_keys_are_hashed():
    for key in ["x" * 251, "a b", "a\nb", "ключ", "", "\x7f"]:
        k = wire_key(key)
        assert k.startswith(HASHED_PREFIX) and len(k) == len(HASHED_PREFIX) + 40
    assert wire_key("x" * 250) == b"x" * 250


def test_keys_must_be_str_or_bytes():
    with pytest.raises(TypeError):
        wire_key(12)


def test_parse_servers():
    assert parse_servers("a:1, b ,[::1]:5,[::2]") == ["a:1", "b:11211", "[::1]:5", "[::2]:11211"]
    assert parse_servers(["h:2"]) == ["h:2"]
    assert split_server("[::1]:5") == ("::1", 5)
    with pytest.raises(ValueError):
        parse_servers(" , ")
    with pytest.raises(ValueError):
        parse_servers(":11211")
