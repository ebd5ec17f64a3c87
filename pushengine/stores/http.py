"""The HTTP object store: a view's initial state from a backend.

``query(view, params, limit)`` sends ``GET {url}?view=NAME&limit=N&<params>``
and expects a JSON list of objects, in view order. Parameters are sent in
name order; a string as it is, a number as JSON (``10``, ``1.5``), true,
false and null as ``true``, ``false`` and ``null``; a list as the name
repeated once per element (``tag=a&tag=b``; an empty list sends nothing).
Parameters named ``view`` or ``limit`` are left out (the query's own win).

Concurrent queries for the same (view, params, limit) share one request.
With a cache, answers are kept as tagged entries (tag ``view:NAME``) for
``ttl`` seconds: one node rebuilds an entry under a lock while the others
wait for it (cold start) or serve the previous answer, so a cold start of
many nodes makes one backend request per view and parameters. A cached
answer may be up to ``ttl`` seconds old: keep ``ttl`` short, or call
``invalidate(view_name)``.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Hashable, Protocol, Sequence, cast
from urllib.parse import urlencode

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.core import strictjson
from pushengine.core.changes import Change
from pushengine.memcache.interface import Cache
from pushengine.memcache.tagged import TaggedCache
from pushengine.stores.kept import KeptObjects
from pushengine.views.spec import ViewSpec

log = Logger()


class StoreError(Exception):
    """The backend failed or answered something that is not a list of
    objects."""


class Response(Protocol):
    """What the store reads of a treq response."""

    code: int

    def content(self) -> Deferred[bytes]: ...


class HttpClient(Protocol):
    """What the store needs of a treq client (the ``treq`` module, or a
    ``treq.HTTPClient``): ``get`` fires with a Response (Deferred being
    invariant, treq's own response class would not fit a narrower type)."""

    def get(self, url: str) -> Deferred[Any]: ...


def _scalar(value: object) -> str:
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    raise ValueError(f"a store parameter is a JSON scalar or a list of them, not {value!r}")


def encode_query(view_name: str, params: dict[str, Any], limit: int) -> str:
    """The query string for a view query (see the module docstring)."""
    pairs: list[tuple[str, str]] = [("view", view_name), ("limit", str(int(limit)))]
    for name in sorted(params):
        if name in ("view", "limit"):
            continue
        value = params[name]
        if isinstance(value, (list, tuple)):
            pairs.extend((name, _scalar(v)) for v in value)
        else:
            pairs.append((name, _scalar(value)))
    return urlencode(pairs)


def decode_answer(body: bytes, where: str) -> list[dict]:
    """The list of objects in a backend answer, or a StoreError."""
    try:
        data = strictjson.loads(body)
    except strictjson.UnsafeJSON as e:
        # a backend's answer is input like any other: what no answer can
        # carry (lone surrogates, NaN, too deep) is never stored
        raise StoreError(f"{where} answered invalid JSON: {e}") from None
    if not isinstance(data, list):
        raise StoreError(f"{where} answered a JSON {type(data).__name__}, not a list")
    for item in data:
        if not isinstance(item, dict):
            raise StoreError(f"{where} answered a list holding a {type(item).__name__}, not objects")
    return data


class HttpStore:
    """An ObjectStore that asks an HTTP backend (see the module docstring)."""

    kind = "http"           # the store label of /metrics' initial-state times

    def __init__(
        self,
        treq_client: HttpClient,
        url: str,
        cache: Cache | None = None,
        clock: IReactorTime | None = None,
        ttl: int = 5,
        timeout: float = 30.0,
        lock_wait: float = 10.0,
        keep: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        """``keep``: types whose objects are kept here from the feed and read
        by id (``get``), e.g. the User profiles; views still ask the backend."""
        if clock is None:
            from twisted.internet import reactor  # the running reactor
            clock = cast(IReactorTime, reactor)
        self.treq = treq_client
        self.url = url
        self.clock: IReactorTime = clock
        self.ttl = ttl
        self.timeout = timeout
        self.tagged = (
            TaggedCache(cache, clock, prefix="store", wait=lock_wait, stale_for=max(60, ttl))
            if cache is not None
            else None
        )
        self._pending: dict[str, list[Deferred[list[dict]]]] = {}
        self.requests = 0  # backend requests sent (tests, metrics)
        self.kept = KeptObjects(keep)

    def _url(self, query: str) -> str:
        return f"{self.url}{'&' if '?' in self.url else '?'}{query}"

    def query(self, view: ViewSpec, params: dict[str, Any], limit: int) -> Deferred[list[dict]]:
        """Fire with the view's objects from the backend (a fresh list per
        caller), or fail with StoreError."""
        try:
            query = encode_query(view.name, params or {}, limit)
        except (ValueError, TypeError) as e:
            return fail(StoreError(str(e)))
        waiter: Deferred[list[dict]] = Deferred()
        waiting = self._pending.get(query)
        if waiting is not None:
            waiting.append(waiter)
            return waiter
        self._pending[query] = [waiter]
        d = Deferred.fromCoroutine(self._answer(view.name, query))
        d.addBoth(self._deliver, query)
        return waiter

    def _deliver(self, result: list[dict] | Failure, query: str) -> None:
        for waiter in self._pending.pop(query, []):
            if isinstance(result, Failure):
                waiter.errback(result)
            else:
                waiter.callback(list(result))
        return None

    async def _answer(self, view_name: str, query: str) -> list[dict]:
        if self.tagged is None:
            return decode_answer(await self._fetch(query), self.url)
        key = f"{view_name}:{hashlib.sha1(query.encode()).hexdigest()}"
        body = await self.tagged.get_or_rebuild(
            key, [f"view:{view_name}"], lambda: Deferred.fromCoroutine(self._fetch(query)), ttl=self.ttl
        )
        return decode_answer(body, self.url)

    async def _fetch(self, query: str) -> bytes:
        """The backend's answer body (checked, so that no bad answer is
        ever cached)."""
        url = self._url(query)
        self.requests += 1
        try:
            request = self.treq.get(url)
            request.addTimeout(self.timeout, self.clock)
            response: Response = await request
            body = await response.content()
        except Exception as e:
            log.warn("store request {url} failed: {e}", url=url, e=e)
            raise StoreError(f"GET {url} failed: {e}") from e
        if not 200 <= response.code < 300:
            log.warn("store request {url} answered HTTP {code}", url=url, code=response.code)
            raise StoreError(f"GET {url} answered HTTP {response.code}")
        decode_answer(body, f"GET {url}")
        return body

    def invalidate(self, view_name: str) -> Deferred:
        """Drop the cached answers of a view on every node."""
        if self.tagged is None:
            return succeed(None)
        return self.tagged.invalidate(f"view:{view_name}")

    def apply_changes(self, changes: Sequence[Change]) -> None:
        """The backend sees changes itself; only the objects of the kept
        types are kept here."""
        self.kept.apply_changes(changes)

    def get(self, type_: str, id_: Hashable) -> dict | None:
        """A kept object by type and id, or None."""
        return self.kept.get(type_, id_)

    @property
    def keep(self) -> frozenset[str]:
        return self.kept.types

    @property
    def objects(self) -> dict[str, dict[Hashable, dict]]:
        return self.kept.objects

