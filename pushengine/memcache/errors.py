"""The errors a cache operation fails with.

Every backend fails its Deferreds with these (never with a backend's own
exception), so callers trap them with ``Failure.trap`` whatever the backend.
"""
from __future__ import annotations


class CacheError(Exception):
    """Base class of every cache error."""


class NotFound(CacheError):
    """The key is missing: incr, decr, append, prepend, replace and cas need
    an existing key."""


class NotStored(CacheError):
    """The server kept the old state (a store condition was not met)."""


class KeyExists(NotStored):
    """``add`` on a key that exists, or ``cas`` after someone else changed it."""


class ValueTooLarge(NotStored):
    """The value is larger than the server's item size limit."""


class BadValue(CacheError):
    """incr/decr on a value that is not a decimal number."""


class CacheUnavailable(CacheError):
    """No server answered: all are down, the chosen one died while the
    command was in flight, or the client is stopped."""


class CacheTimeout(CacheUnavailable):
    """The server did not answer within the per-operation timeout."""
