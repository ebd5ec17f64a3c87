"""The one cache interface every backend implements.

Every operation returns a Deferred. Values are ``bytes``; keys are ``str`` or
``bytes`` (see :mod:`pushengine.memcache.keys`). Expiry follows memcached: an
int number of seconds, 0 = never, up to 30 days relative to now, larger =
an absolute unix time, negative = already expired.

Expected outcomes that are not a plain answer fail the Deferred with an error
from :mod:`pushengine.memcache.errors`, for ``Failure.trap``:

- ``NotFound``: incr, decr, append, prepend, replace or cas on a missing key;
- ``KeyExists`` (a ``NotStored``): add on an existing key, cas mismatch;
- ``CacheUnavailable``: no server answered.
"""
from __future__ import annotations

from typing import Any, Iterable, Protocol, runtime_checkable

from twisted.internet.defer import Deferred

#: Relative expiry times above this are absolute unix times (memcached rule).
MAX_RELATIVE_EXPIRE = 30 * 24 * 3600


def expiry_deadline(expire: int, now: float) -> float | None:
    """The time an item stored at ``now`` with ``expire`` stops existing
    (None: never), by memcached's rules."""
    expire = int(expire)
    if expire == 0:
        return None
    if expire < 0:
        return now
    if expire > MAX_RELATIVE_EXPIRE:
        return float(expire)
    return now + expire


@runtime_checkable
class Cache(Protocol):
    """A memcached-like store: the in-process backend and the real client."""

    def get(self, key: str | bytes) -> Deferred:
        """Fire with the value, or None when the key is missing."""

    def get_multi(self, keys: Iterable[str | bytes]) -> Deferred:
        """Fire with ``{key: value}`` for the keys found (as the caller
        spelled them). With several servers, a server failing while the
        others answer leaves its keys out, as misses; CacheUnavailable only
        when no server answered."""

    def set(self, key: str | bytes, value: bytes, expire: int = 0) -> Deferred:
        """Store unconditionally; fire with True."""

    def add(self, key: str | bytes, value: bytes, expire: int = 0) -> Deferred:
        """Store only if missing; fire with True or fail with KeyExists."""

    def replace(self, key: str | bytes, value: bytes, expire: int = 0) -> Deferred:
        """Store only if present; fire with True or fail with NotFound."""

    def incr(self, key: str | bytes, delta: int = 1) -> Deferred:
        """Add ``delta`` (64-bit unsigned, wraps); fire with the new value,
        fail with NotFound (missing) or BadValue (not a number)."""

    def decr(self, key: str | bytes, delta: int = 1) -> Deferred:
        """Subtract ``delta``, stopping at 0; as ``incr``."""

    def append(self, key: str | bytes, value: bytes) -> Deferred:
        """Add bytes after the value (expiry unchanged); True or NotFound."""

    def prepend(self, key: str | bytes, value: bytes) -> Deferred:
        """Add bytes before the value (expiry unchanged); True or NotFound."""

    def delete(self, key: str | bytes) -> Deferred:
        """Fire with True if the key was there, False if not."""

    def gets(self, key: str | bytes) -> Deferred:
        """Fire with ``(value, cas_token)``, or None when missing."""

    def cas(
        self, key: str | bytes, value: bytes, cas_token: bytes, expire: int = 0
    ) -> Deferred:
        """Store if nobody changed the key since ``gets`` gave ``cas_token``;
        True, or KeyExists (changed) or NotFound (gone)."""

    def flush_all(self) -> Deferred:
        """Drop every item (tests and tools)."""

    def health(self) -> dict[str, Any]:
        """``{"up": bool, "servers": {name: {...}}}`` for /health."""

    def stats(self) -> dict[str, float]:
        """Numbers for /metrics: ops, hits, misses, errors, timeouts,
        servers_up, servers_total."""
