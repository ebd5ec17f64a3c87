"""Memcached key rules shared by every backend.

A memcached key is at most 250 bytes with no spaces or control characters.
Keys that break the rule (and keys with non-ASCII bytes, so that the wire key
is plain ASCII and hashes the same in every ketama client) are replaced by
``HASHED_PREFIX`` + the SHA-1 hex digest of the key: any string works as a
key, and two different keys never meet except through a SHA-1 collision or a
caller spelling a key of the hashed form on purpose.
"""
from __future__ import annotations

import hashlib
import re

MAX_KEY_LENGTH = 250
HASHED_PREFIX = b"~h:"

_SAFE = re.compile(rb"\A[\x21-\x7e]{1,250}\Z")


def wire_key(key: str | bytes) -> bytes:
    """The bytes sent to memcached for ``key`` (str keys are UTF-8)."""
    if isinstance(key, str):
        raw = key.encode("utf-8")
    elif isinstance(key, (bytes, bytearray)):
        raw = bytes(key)
    else:
        raise TypeError(f"cache key must be str or bytes, not {type(key).__name__}")
    if _SAFE.match(raw):
        return raw
    return HASHED_PREFIX + hashlib.sha1(raw).hexdigest().encode("ascii")


def is_safe(key: bytes) -> bool:
    """Whether ``key`` is sent as it is."""
    return bool(_SAFE.match(key))
