"""The ``bf.*`` JSON-RPC methods, for backends (SPEC section 14).

``bf.reserve``, ``bf.add``, ``bf.madd``, ``bf.exists``, ``bf.mexists``,
``bf.insert``, ``bf.info`` and ``bf.del`` take the arguments of the Bloom filter
commands, key first (positional or named), and answer what the commands
answer: 1/0, lists of them, "OK", the info object. An item a full
non-scaling filter refuses is answered in its place as
``{"error": {"code": 1010, "message": "non scaling filter is full"}}`` (and
nothing after it is added), as the module answers an error inside its array.

Who may call them: :func:`may_use_backend_methods` — a caller that presents
``Authorization: Bearer <publish key>``; with no publish key configured, a
loopback client only, and never a web page (a request with an ``Origin``).
Errors: 1003 not allowed, -32602 bad arguments ("(0 < error rate range <
1)", ...), 1010 the filter refuses ("item exists", "not found", "non
scaling filter is full"), 1011 the filters' Redis is unavailable.
"""
from __future__ import annotations

import hmac
import inspect
from typing import Any, Callable

from twisted.internet.defer import Deferred

from pushengine.bloom import errors
from pushengine.bloom.base import BloomCommands
from pushengine.core.errors import NotAuthorized
from pushengine.api.rpc import Method

MAX_ITEMS = 1000       # items in one madd / mexists / insert


def _bearer(caller: object) -> str | None:
    """The Bearer token a caller presented: ``caller.bearer`` (the transport
    parsed it) or a raw ``caller.authorization`` header."""
    token = getattr(caller, "bearer", None)
    if token is None:
        header = getattr(caller, "authorization", None)
        if isinstance(header, bytes):
            header = header.decode("latin-1")
        if isinstance(header, str):
            scheme, _, value = header.strip().partition(" ")
            if scheme.lower() == "bearer" and value.strip():
                token = value.strip()
    return token if isinstance(token, str) and token else None


def may_use_backend_methods(caller: object, publish_key: str | None) -> bool:
    """Whether ``caller`` (a pushengine.api.caller.Caller, or anything with
    ``bearer``/``authorization``, ``loopback`` and ``from_page``) may call
    the backend methods. Fails closed: a caller that says nothing is refused."""
    if publish_key:
        token = _bearer(caller)
        return token is not None and hmac.compare_digest(
            token.encode("utf-8", "surrogateescape"), publish_key.encode("utf-8"))
    if getattr(caller, "from_page", True):
        return False
    return getattr(caller, "loopback", False) is True


class _Options(Method):
    """A method whose optional named params may be left out in any
    combination (``{"key": "k", "items": [...], "nonscaling": true}``)."""

    def __init__(self, func: Callable, defaults: dict[str, object], **kwargs: Any) -> None:
        super().__init__(func, **kwargs)
        self.defaults = defaults

    def call(self, params: Any, caller: Any = None) -> Any:
        if isinstance(params, dict) and not set(params) - set(self.names):
            params = {**self.defaults, **params}
        return super().call(params, caller)


def _json_results(results: list[int | errors.BloomError]) -> list[int | dict[str, Any]]:
    return [{"error": {"code": r.code, "message": r.message}}
            if isinstance(r, errors.ApiError) else r for r in results]


class BloomMethods:
    """The methods on one backend, guarded by the publish key."""

    def __init__(self, bloom: BloomCommands, publish_key: str | None) -> None:
        self.bloom = bloom
        self.publish_key = publish_key

    def _guard(self, caller: object) -> None:
        if not may_use_backend_methods(caller, self.publish_key):
            raise NotAuthorized(
                "bf.* methods need Authorization: Bearer <publish key>" if self.publish_key
                else "no publish key is configured: bf.* methods are for loopback "
                     "clients only (and never from a web page)")

    def reserve(self, caller: object, key: object, error_rate: object, capacity: object,
                expansion: object = None, nonscaling: object = False) -> Deferred:
        self._guard(caller)
        return self.bloom.reserve(key, error_rate, capacity, expansion, nonscaling)

    def add(self, caller: object, key: object, item: object) -> Deferred:
        self._guard(caller)
        return self.bloom.add(key, item)

    def madd(self, caller: object, key: object, items: object) -> Deferred:
        self._guard(caller)
        return self.bloom.madd(key, items).addCallback(_json_results)

    def exists(self, caller: object, key: object, item: object) -> Deferred:
        self._guard(caller)
        return self.bloom.exists(key, item)

    def mexists(self, caller: object, key: object, items: object) -> Deferred:
        self._guard(caller)
        return self.bloom.mexists(key, items)

    def insert(self, caller: object, key: object, items: object, capacity: object = None,
               error: object = None, expansion: object = None, nocreate: object = False,
               nonscaling: object = False) -> Deferred:
        self._guard(caller)
        return self.bloom.insert(key, items, capacity=capacity, error=error,
                                 expansion=expansion, nocreate=nocreate,
                                 nonscaling=nonscaling).addCallback(_json_results)

    def info(self, caller: object, key: object) -> Deferred:
        self._guard(caller)
        return self.bloom.info(key)

    def delete(self, caller: object, key: object) -> Deferred:
        self._guard(caller)
        return self.bloom.delete(key)

    def methods(self) -> dict[str, Method]:
        def method(func: Callable[..., Deferred], max_items: int = 100) -> Method:
            defaults = {p.name: p.default for p in inspect.signature(func).parameters.values()
                        if p.default is not p.empty}
            return _Options(func, defaults, with_caller=True, max_items=max_items)
        return {
            "bf.reserve": method(self.reserve),
            "bf.add": method(self.add),
            "bf.madd": method(self.madd, MAX_ITEMS),
            "bf.exists": method(self.exists),
            "bf.mexists": method(self.mexists, MAX_ITEMS),
            "bf.insert": method(self.insert, MAX_ITEMS),
            "bf.info": method(self.info),
            "bf.del": method(self.delete),
        }
