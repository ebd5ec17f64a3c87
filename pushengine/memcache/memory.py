"""The in-process backend: memcached semantics in a dict.

Used when the engine runs without ``--memcache``, and in tests. Expiry follows
memcached's rules (whole seconds, 0 = never, > 30 days = absolute unix time)
on the injected clock, so a ``twisted.internet.task.Clock`` drives it. The
number of items is bounded; the least recently used go first, as in
memcached, so callers meet evictions here too.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any, Callable, Iterable

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorTime

from pushengine.memcache.errors import (
    BadValue,
    KeyExists,
    NotFound,
    ValueTooLarge,
)
from pushengine.memcache.interface import expiry_deadline
from pushengine.memcache.keys import wire_key

_MAX_U64 = 2**64
# what memcached's safe_strtoull accepts: blanks, a sign, digits, then the
# end of the value, a NUL or a blank (anything after that is ignored)
_NUMBER = re.compile(rb"[ \t\n\v\f\r]*([+-]?)(\d+)(?:[ \t\n\v\f\r\x00]|\Z)")


def parse_counter(value: bytes) -> int | None:
    """The number memcached's incr/decr read in ``value`` (None: it
    answers "non-numeric value")."""
    match = _NUMBER.match(value)
    if match is None:
        return None
    number = int(match.group(2))
    if number >= _MAX_U64:
        return None  # strtoull: ERANGE
    if match.group(1) == b"-":
        # strtoull negates modulo 2**64; memcached refuses the result only
        # when it would be negative as a signed number
        number = -number % _MAX_U64
        if number >= 2**63:
            return None
    return number


def check_value(value: object) -> bytes:
    if not isinstance(value, (bytes, bytearray)):
        raise TypeError(f"cache values are bytes, not {type(value).__name__}")
    return bytes(value)


def check_delta(delta: object) -> int:
    if not isinstance(delta, int) or delta < 0 or delta >= _MAX_U64:
        raise ValueError("incr/decr delta must be an int in [0, 2**64)")
    return delta


def check_expire(expire: object) -> int:
    if not isinstance(expire, int):
        raise TypeError("expire is a whole number of seconds")
    return expire


class _Item:
    __slots__ = ("value", "deadline", "cas")

    def __init__(self, value: bytes, deadline: float | None, cas: int) -> None:
        self.value = value
        self.deadline = deadline
        self.cas = cas


class InMemoryCache:
    """A :class:`~pushengine.memcache.interface.Cache` kept in this process."""

    #: memcached's default item size limit is 1 MiB including overhead.
    max_value_size = 1_000_000

    def __init__(self, clock: IReactorTime, max_items: int = 100_000) -> None:
        self._clock = clock
        self._items: OrderedDict[bytes, _Item] = OrderedDict()
        self._max_items = max_items
        self._cas = 0
        self._stats = {"ops": 0, "hits": 0, "misses": 0, "evictions": 0}

    # -- internals ---------------------------------------------------------

    def _run(self, fn: Callable[..., object], *args: object) -> Deferred:
        self._stats["ops"] += 1
        try:
            return succeed(fn(*args))
        except Exception as e:  # turned into a failed Deferred on purpose
            return fail(e)

    def _live(self, key: bytes) -> _Item | None:
        item = self._items.get(key)
        if item is None:
            return None
        if item.deadline is not None and self._clock.seconds() >= item.deadline:
            del self._items[key]
            return None
        self._items.move_to_end(key)
        return item

    def _existing(self, key: str | bytes) -> _Item:
        """The live item of ``key``; NotFound when there is none."""
        item = self._live(wire_key(key))
        if item is None:
            raise NotFound(key)
        return item

    def _next_cas(self) -> int:
        self._cas += 1
        return self._cas

    def _store(self, key: bytes, value: bytes, expire: int) -> bool:
        value = check_value(value)
        if len(value) > self.max_value_size:
            raise ValueTooLarge(f"value of {len(value)} bytes is too large")
        deadline = expiry_deadline(check_expire(expire), self._clock.seconds())
        self._items[key] = _Item(value, deadline, self._next_cas())
        self._items.move_to_end(key)
        self._sweep()
        return True

    def _sweep(self) -> None:
        now = self._clock.seconds()
        for _ in range(2):  # the oldest are the likeliest to have expired
            if not self._items:
                break
            key, item = next(iter(self._items.items()))
            if item.deadline is not None and now >= item.deadline:
                del self._items[key]
            else:
                break
        while len(self._items) > self._max_items:
            self._items.popitem(last=False)
            self._stats["evictions"] += 1

    def _count(self, item: _Item | None) -> None:
        self._stats["hits" if item is not None else "misses"] += 1

    # -- the Cache interface ------------------------------------------------

    def get(self, key: str | bytes) -> Deferred:
        def op() -> bytes | None:
            item = self._live(wire_key(key))
            self._count(item)
            return None if item is None else item.value

        return self._run(op)

    def get_multi(self, keys: Iterable[str | bytes]) -> Deferred:
        def op() -> dict:
            found = {}
            for key in keys:
                item = self._live(wire_key(key))
                self._count(item)
                if item is not None:
                    found[key] = item.value
            return found

        return self._run(op)

    def set(self, key: str | bytes, value: bytes, expire: int = 0) -> Deferred:
        return self._run(self._store, wire_key(key), value, expire)

    def add(self, key: str | bytes, value: bytes, expire: int = 0) -> Deferred:
        def op() -> bool:
            k = wire_key(key)
            check_value(value)
            if self._live(k) is not None:
                raise KeyExists(key)
            return self._store(k, value, expire)

        return self._run(op)

    def replace(self, key: str | bytes, value: bytes, expire: int = 0) -> Deferred:
        def op() -> bool:
            k = wire_key(key)
            check_value(value)
            if self._live(k) is None:
                raise NotFound(key)
            return self._store(k, value, expire)

        return self._run(op)

    def _incrdecr(self, key: str | bytes, delta: int, sign: int) -> Deferred:
        def op() -> int:
            d = check_delta(delta)
            item = self._existing(key)
            current = parse_counter(item.value)
            if current is None:
                raise BadValue("cannot increment or decrement non-numeric value")
            new = (current + d) % _MAX_U64 if sign > 0 else max(current - d, 0)
            digits = b"%d" % new
            if len(digits) <= len(item.value):
                # memcached rewrites a shorter number in place, padded with
                # spaces (a later append lands after the spaces)
                digits += b" " * (len(item.value) - len(digits))
            item.value = digits
            item.cas = self._next_cas()
            return new

        return self._run(op)

    def incr(self, key: str | bytes, delta: int = 1) -> Deferred:
        return self._incrdecr(key, delta, 1)

    def decr(self, key: str | bytes, delta: int = 1) -> Deferred:
        return self._incrdecr(key, delta, -1)

    def _pend(self, key: str | bytes, value: bytes, after: bool) -> Deferred:
        def op() -> bool:
            data = check_value(value)
            item = self._existing(key)
            joined = item.value + data if after else data + item.value
            if len(joined) > self.max_value_size:
                raise ValueTooLarge(f"value of {len(joined)} bytes is too large")
            item.value = joined
            item.cas = self._next_cas()
            return True

        return self._run(op)

    def append(self, key: str | bytes, value: bytes) -> Deferred:
        return self._pend(key, value, True)

    def prepend(self, key: str | bytes, value: bytes) -> Deferred:
        return self._pend(key, value, False)

    def delete(self, key: str | bytes) -> Deferred:
        def op() -> bool:
            k = wire_key(key)
            if self._live(k) is None:
                return False
            del self._items[k]
            return True

        return self._run(op)

    def gets(self, key: str | bytes) -> Deferred:
        def op() -> tuple[bytes, bytes] | None:
            item = self._live(wire_key(key))
            self._count(item)
            return None if item is None else (item.value, b"%d" % item.cas)

        return self._run(op)

    def cas(
        self, key: str | bytes, value: bytes, cas_token: bytes, expire: int = 0
    ) -> Deferred:
        def op() -> bool:
            k = wire_key(key)
            check_value(value)
            item = self._live(k)
            if item is None:
                raise NotFound(key)
            if b"%d" % item.cas != bytes(cas_token):
                raise KeyExists(key)
            return self._store(k, value, expire)

        return self._run(op)

    def flush_all(self) -> Deferred:
        self._items.clear()
        return succeed(True)

    def health(self) -> dict[str, Any]:
        return {"up": True, "backend": "memory", "servers": {"memory": {"up": True}}}

    def stats(self) -> dict[str, float]:
        return {
            **self._stats,
            "errors": 0,
            "timeouts": 0,
            "items": len(self._items),
            "servers_up": 1,
            "servers_total": 1,
        }
