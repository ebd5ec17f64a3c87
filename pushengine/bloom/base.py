"""The BF.* commands over any backend: arguments checked here, once; the
backend implements four primitives on checked values.

Every command returns a Deferred (the in-process backend's has fired
already). Results follow the Redis module: ``add`` → 1 (added) or 0 (may
have been there); ``madd`` / ``insert`` → a list of those, which ends with a
:class:`BloomError` instance at the first item a full non-scaling filter
refuses (nothing after it is added); ``exists`` → 1 or 0, ``mexists`` → a
list; ``info`` → ``{"Capacity", "Size", "Number of filters", "Number of
items inserted", "Expansion rate"}`` (``Expansion rate`` is None for a
non-scaling filter, as the module answers nil).
"""
from __future__ import annotations

from twisted.internet.defer import Deferred, fail

from pushengine.bloom import errors
from pushengine.bloom.params import (
    DEFAULT_SPEC, FilterSpec, check_items, check_key, insert_spec, item_bytes, reserve_spec)

INFO_FIELDS = ("Capacity", "Size", "Number of filters", "Number of items inserted",
               "Expansion rate")
#: what an add primitive answers per item besides 1 and 0
FULL_CODE = -2
CANNOT_GROW_CODE = -3
NO_ROOM_CODE = -4           # growing would pass the node's --bloom-max-bytes


def outcome(code: int) -> int | errors.BloomError:
    """An add primitive's per-item code as a command result."""
    if code == FULL_CODE:
        return errors.BloomError(errors.FULL)
    if code == CANNOT_GROW_CODE:
        return errors.BloomError(errors.CANNOT_GROW)
    if code == NO_ROOM_CODE:
        return errors.BloomError(errors.NO_ROOM_TO_GROW)
    return code


class BloomCommands:
    """Mixin: the commands, on the primitives ``_reserve(key, spec)``,
    ``_add(key, items, spec or None, ttl)`` (None: do not create; fires with
    the per-item codes), ``_exists(key, items)``, ``_info(key)`` and
    ``_delete(key)`` (fires with 1, or 0 when there was no such filter)."""

    def _reserve(self, key: str, spec: FilterSpec) -> Deferred:
        raise NotImplementedError

    def _add(self, key: str, items: list[bytes], spec: FilterSpec | None,
             ttl: float | None) -> Deferred:
        raise NotImplementedError

    def _exists(self, key: str, items: list[bytes]) -> Deferred:
        raise NotImplementedError

    def _info(self, key: str) -> Deferred:
        raise NotImplementedError

    def _delete(self, key: str) -> Deferred:
        raise NotImplementedError

    # -- the commands ----------------------------------------------------------
    def reserve(self, key: object, error_rate: object, capacity: object,
                expansion: object = None, nonscaling: object = False) -> Deferred:
        """Create an empty filter: fires with "OK"; fails with "item exists"
        when the key is taken. ``expansion`` defaults to 2; a non-scaling
        filter takes none."""
        try:
            key = check_key(key)
            spec = reserve_spec(error_rate, capacity, expansion, nonscaling)
        except errors.ApiError:
            return fail()
        return self._reserve(key, spec)

    def add(self, key: object, item: object) -> Deferred:
        """Add one item (creating a default filter: 1 %, 100, expansion 2)."""
        try:
            key = check_key(key)
            data = [item_bytes(item)]
        except errors.ApiError:
            return fail()
        return self._add(key, data, DEFAULT_SPEC, None).addCallback(_single)

    def madd(self, key: object, items: object) -> Deferred:
        try:
            key = check_key(key)
            data = check_items(items)
        except errors.ApiError:
            return fail()
        return self._add(key, data, DEFAULT_SPEC, None).addCallback(_many)

    def insert(self, key: object, items: object, capacity: object = None,
               error: object = None, expansion: object = None, nocreate: object = False,
               nonscaling: object = False, ttl: float | None = None) -> Deferred:
        """``madd`` that creates a missing filter with these options, or with
        ``nocreate`` fails with "not found". ``ttl`` (seconds, not part of
        the module's command) makes the filter expire that long after its
        last insert."""
        try:
            key = check_key(key)
            data = check_items(items)
            spec = insert_spec(capacity, error, expansion, nonscaling)
            if not isinstance(nocreate, bool):
                raise errors.BloomArgumentError("nocreate must be true or false")
        except errors.ApiError:
            return fail()
        return self._add(key, data, None if nocreate else spec, ttl).addCallback(_many)

    def exists(self, key: object, item: object) -> Deferred:
        try:
            key = check_key(key)
            data = [item_bytes(item)]
        except errors.ApiError:
            return fail()
        return self._exists(key, data).addCallback(lambda r: r[0])

    def mexists(self, key: object, items: object) -> Deferred:
        try:
            key = check_key(key)
            data = check_items(items)
        except errors.ApiError:
            return fail()
        return self._exists(key, data)

    def info(self, key: object) -> Deferred:
        try:
            key = check_key(key)
        except errors.ApiError:
            return fail()
        return self._info(key)

    def delete(self, key: object) -> Deferred:
        """Delete a filter and free its memory: fires with 1, or 0 when
        there was none."""
        try:
            key = check_key(key)
        except errors.ApiError:
            return fail()
        return self._delete(key)


def _many(codes: list[int]) -> list[int | errors.BloomError]:
    return [outcome(c) for c in codes]


def _single(codes: list[int]) -> int:
    result = outcome(codes[0])
    if isinstance(result, errors.BloomError):
        raise result
    return result
