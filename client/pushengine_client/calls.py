"""Every call of a node's HTTP API, described once, as data.

A ``Call`` holds what to send (a ``Request``) and how to read what comes
back (``read``: the result, or the PushengineError of the answer). Nothing
here does network I/O: both flavours — ``tx.TwistedClient`` (treq, Deferreds)
and ``sync.SyncClient`` (http.client, blocking) — take their calls from
``Calls``, run them through the same retry steps (``retry.exchange``) and
offer the same methods, made from these by name (``api.Api``).

What each call is on the wire (docs/api.md, docs/bloom.md, docs/segments.md,
docs/admin.md):

- ``publish``, ``upsert``, ``delete`` (and the ``_many`` forms):
  ``POST /api/publish`` with a JSON array of changes → ``{"accepted": N}``;
- ``bf_*``: ``POST /api/jsonrpc``, ``bf.reserve`` ... ``bf.info`` with named
  params;
- ``upload_segment``, ``segments``, ``delete_segment``:
  ``POST|GET|DELETE /api/segments[/NAME]``;
- ``online``, ``unique``: ``stats.online``, ``stats.unique``;
- ``admin_*``: ``admin.stats``, ``admin.publish``, ``admin.session``,
  ``admin.subscribe``, ``admin.unsubscribe``, the admin key as their ``key``
  param;
- ``rpc``: any JSON-RPC method; ``health``: ``GET /health``.

Every request carries ``Authorization: Bearer <publish key>`` and
``X-Api-Key`` when the client has them.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Generic, Optional, TypedDict, TypeVar, Union, cast
from urllib.parse import quote, urlsplit

from pushengine_client.errors import (
    BadInput, Rejected, ServerError, Unauthorized, http_error,
    kind_of_status, rpc_error)
from pushengine_client.upload import BLOCK, Progress, Source, Upload, open_upload

T = TypeVar("T")
Item = Union[str, int]
"""A Bloom filter item: text, or an integer (``42`` and ``"42"`` are one item)."""
JSON_TYPE = "application/json"
USER_AGENT = "pushengine-client/1"
HASHES = ("md5", "sha256")
_TOKEN = re.compile(r"[\x21-\x7e]+")
_DIGITS = re.compile(r"[0-9]{1,9}")

BloomInfo = TypedDict("BloomInfo", {
    "Capacity": int, "Size": int, "Number of filters": int,
    "Number of items inserted": int, "Expansion rate": Optional[int]})


class Segment(TypedDict, total=False):
    """A segment's counts (``GET /api/segments``; an upload adds ``seconds``)."""

    name: str
    rows: int
    valid: int
    invalid: int
    duplicates: int
    hashed: str
    updated: float
    seconds: float


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Request:
    """One HTTP request: ``body`` is bytes, a streamed ``Upload`` or None;
    ``timeout`` the seconds its answer may take."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes | Upload | None = None
    timeout: float | None = None

    def rewind(self) -> bool:
        """Ready the body to be sent again; False when it cannot be."""
        return not isinstance(self.body, Upload) or self.body.rewind()


@dataclass(frozen=True)
class Response:
    """An HTTP answer; header names in lower case."""

    status: int
    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class Call(Generic[T]):
    """What to send, how to read its answer, and what to release once done
    (a file opened for an upload)."""

    name: str
    request: Request
    read: Callable[[Response], T]
    close: Callable[[], None] = _nothing


# -- changes ---------------------------------------------------------------------

def upsert_change(type_: str, obj: Mapping[str, Any],
                  was: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The change "this is the object's whole new state"; ``was``: the old
    values of routing fields the change alters (a cluster that routes by
    interest then also tells the nodes of the old values, docs/amqp.md)."""
    change = {"type": type_, "action": "upsert", "obj": dict(obj)}
    if was is not None:
        change["was"] = dict(was)
    return change


def delete_change(type_: str, id_: Item, id_field: str = "id",
                  route: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The change "this object is gone" (``id_field``: the type's id field
    in the views file; ``route``: the object's routing fields, so that a
    cluster that routes by interest tells only their nodes)."""
    return {"type": type_, "action": "delete", "obj": {**(route or {}), id_field: id_}}


def _batch(changes: object) -> list[object]:
    """One change (a mapping) or an iterable of them, as a list: the node
    names a bad change by its index in the list."""
    if isinstance(changes, Mapping) or hasattr(changes, "to_json"):
        return [changes]
    if isinstance(changes, (str, bytes, bytearray)) or not isinstance(changes, Iterable):
        raise BadInput("changes are a change (a mapping) or an iterable of them")
    return list(changes)


def _to_json(value: object) -> object:
    to_json = getattr(value, "to_json", None)
    if callable(to_json):
        return to_json()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def encode(value: object) -> bytes:
    """UTF-8 JSON, strictly: NaN, infinities and text UTF-8 cannot carry (a
    lone surrogate) are refused here with BadInput, before anything is sent."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"),
                          default=_to_json).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as e:
        raise BadInput(f"cannot be sent as JSON: {e}") from None


# -- answers ---------------------------------------------------------------------

def retry_after(response: Response) -> float | None:
    """The seconds ``Retry-After`` asks for: digits, or an HTTP date counted
    from the answer's own ``Date`` (so that the clocks need not agree)."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    if _DIGITS.fullmatch(value):
        return float(value)
    try:
        then = parsedate_to_datetime(value)
        now = parsedate_to_datetime(response.headers.get("date", ""))
    except (TypeError, ValueError, IndexError):
        return None
    if then.tzinfo is None or now.tzinfo is None:
        return None
    return max((then - now).total_seconds(), 0.0)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode(response: Response) -> Any:
    """The answer's JSON; an answer that is not JSON (a proxy's page) is the
    error of its status."""
    try:
        return json.loads(response.body.decode("utf-8"), parse_constant=_refuse_constant)
    except ValueError:
        text = response.body[:200].decode("utf-8", "replace")
        if response.status >= 400:
            raise kind_of_status(response.status)(
                f"HTTP {response.status}: {text}", status=response.status,
                retry_after=retry_after(response)) from None
        raise ServerError(f"the answer is not JSON: {text!r}", status=response.status) from None


def rpc_reader(convert: Callable[[Any], T]) -> Callable[[Response], T]:
    """Read a JSON-RPC 2.0 answer: its result, converted, or its error."""
    def read(response: Response) -> T:
        body = decode(response)
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            raise rpc_error(body["error"], response.status, retry_after(response))
        if response.status != 200:
            raise http_error(response.status, body, retry_after(response))
        if not isinstance(body, dict) or "result" not in body:
            raise ServerError("the answer is not a JSON-RPC answer", status=response.status)
        return convert(body["result"])
    return read


def rest_reader(convert: Callable[[Any], T], ok: tuple[int, ...] = (200,)
                ) -> Callable[[Response], T]:
    """Read a JSON answer of ``/api/publish``, ``/api/segments`` or ``/health``."""
    def read(response: Response) -> T:
        body = decode(response)
        if response.status in ok:
            return convert(body)
        raise http_error(response.status, body, retry_after(response))
    return read


def _unexpected(what: str, value: object) -> ServerError:
    return ServerError(f"expected {what} in the answer, not {str(value)[:100]!r}")


def _int(value: object) -> int:
    if type(value) is not int:
        raise _unexpected("an integer", value)
    return value


def _bool(value: object) -> bool:
    if value not in (0, 1) or type(value) not in (int, bool):
        raise _unexpected("1 or 0", value)
    return bool(value)


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise _unexpected("a string", value)
    return value


def _dict(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _unexpected("an object", value)
    return value


def _list(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise _unexpected("a list", value)
    return value


def _bools(value: object) -> list[bool]:
    return [_bool(v) for v in _list(value)]


def _bools_or_rejections(value: object) -> list[bool | Rejected]:
    """A madd/insert answer: 1/0 per item, or the error in the place of an
    item a full non-scaling filter refused (a ``Rejected``, not raised)."""
    out: list[bool | Rejected] = []
    for v in _list(value):
        if isinstance(v, dict) and isinstance(v.get("error"), dict):
            error = rpc_error(v["error"])
            out.append(error if isinstance(error, Rejected) else
                       Rejected(error.message, code=error.code, data=error.data))
        else:
            out.append(_bool(v))
    return out


def _dicts(value: object) -> list[dict[str, Any]]:
    return [_dict(v) for v in _list(value)]


def _accepted(value: object) -> int:
    return _int(_dict(value).get("accepted"))


def _subscription(value: object) -> tuple[str, list[dict[str, Any]]]:
    pair = _list(value)
    if len(pair) != 2:
        raise _unexpected("[key, state]", value)
    return _str(pair[0]), _dicts(pair[1])


def _read_deleted(response: Response) -> bool:
    """A segment's DELETE: True; False for the node's 404 ``not_found``
    (any other 404 is a route this node does not have: NotFound)."""
    body = decode(response)
    error = body.get("error") if isinstance(body, dict) else None
    if response.status == 404 and isinstance(error, dict) and error.get("code") == "not_found":
        return False
    if response.status != 200:
        raise http_error(response.status, body, retry_after(response))
    return bool(_dict(body).get("deleted"))


def _anything(value: Any) -> Any:
    return value


def _named(**params: object) -> dict[str, object]:
    """Named params without those left at the node's default (None)."""
    return {k: v for k, v in params.items() if v is not None}


# -- the calls ----------------------------------------------------------------------

class Calls:
    """The calls of one node: its base URL (``http(s)://host[:port][/prefix]``),
    the keys, and the seconds an answer may take (``upload_timeout`` for a
    segment upload, whose answer comes once the node has read the file)."""

    def __init__(self, url: str, *, publish_key: str | None = None,
                 api_key: str | None = None, admin_key: str | None = None,
                 timeout: float = 10.0, upload_timeout: float = 3600.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname \
                or parts.query or parts.fragment:
            raise ValueError(f"the node's URL is http(s)://host[:port][/prefix], not {url!r}")
        for name, key in (("publish_key", publish_key), ("api_key", api_key),
                          ("admin_key", admin_key)):
            if key is not None and not _TOKEN.fullmatch(key):
                raise ValueError(f"{name} must be printable ASCII without spaces")
        if not timeout > 0 or not upload_timeout > 0:
            raise ValueError("timeouts are seconds, more than 0")
        self.url = url.rstrip("/")
        self.publish_key = publish_key
        self.api_key = api_key
        self.admin_key = admin_key
        self.timeout = timeout
        self.upload_timeout = upload_timeout

    def _headers(self, content_type: str | None = JSON_TYPE) -> dict[str, str]:
        headers = {"Accept": JSON_TYPE, "User-Agent": USER_AGENT}
        if content_type is not None:
            headers["Content-Type"] = content_type
        if self.publish_key:
            headers["Authorization"] = f"Bearer {self.publish_key}"
        if self.api_key:
            headers["X-Api-Key"] = self.api_key
        return headers

    def _rpc(self, method: str, params: list[Any] | dict[str, Any] | None,
             convert: Callable[[Any], T]) -> Call[T]:
        call: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
        if params is not None:
            call["params"] = params
        return Call(method, Request("POST", self.url + "/api/jsonrpc", self._headers(),
                                    encode(call), self.timeout), rpc_reader(convert))

    def _rest(self, method: str, path: str, read: Callable[[Response], T],
              body: bytes | None = None) -> Call[T]:
        return Call(f"{method} {path}", Request(method, self.url + path, self._headers(
            JSON_TYPE if body is not None else None), body, self.timeout), read)

    def _admin_key(self) -> str:
        if not self.admin_key:
            raise Unauthorized("the client was given no admin key (admin_key=)")
        return self.admin_key

    # -- any method --------------------------------------------------------------
    def rpc(self, method: str, params: list[Any] | dict[str, Any] | None = None) -> Call[Any]:
        """Any JSON-RPC method with positional (a list) or named params:
        its result as the node sent it."""
        return self._rpc(method, params, _anything)

    # -- publishing ----------------------------------------------------------------
    def publish(self, changes: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> Call[int]:
        """Publish one change or a batch (``POST /api/publish``); the number
        the node accepted. A batch with any bad change publishes nothing:
        BadInput, whose ``changes`` maps each bad one's index to why."""
        return self._rest("POST", "/api/publish", rest_reader(_accepted),
                          encode(_batch(changes)))

    def upsert(self, type_: str, obj: Mapping[str, Any], *,
               was: Mapping[str, Any] | None = None) -> Call[int]:
        """Publish an object's whole new state (``was``: the old values of
        routing fields it changes)."""
        return self.publish([upsert_change(type_, obj, was)])

    def upsert_many(self, type_: str, objs: Iterable[Mapping[str, Any]]) -> Call[int]:
        """Publish the new state of many objects of one type, in one batch."""
        return self.publish([upsert_change(type_, obj) for obj in objs])

    def delete(self, type_: str, id_: Item, *, id_field: str = "id",
               route: Mapping[str, Any] | None = None) -> Call[int]:
        """Publish that an object is gone (``route``: its routing fields)."""
        return self.publish([delete_change(type_, id_, id_field, route)])

    def delete_many(self, type_: str, ids: Iterable[Item], *, id_field: str = "id") -> Call[int]:
        """Publish that many objects of one type are gone, in one batch."""
        return self.publish([delete_change(type_, id_, id_field) for id_ in ids])

    # -- Bloom filters (bf.*) ----------------------------------------------------------
    def bf_reserve(self, key: str, error_rate: float, capacity: int,
                   expansion: int | None = None, nonscaling: bool = False) -> Call[str]:
        """Create a filter: ``"OK"``; Rejected ``item exists`` if the key is taken."""
        return self._rpc("bf.reserve", _named(
            key=key, error_rate=error_rate, capacity=capacity, expansion=expansion,
            nonscaling=True if nonscaling else None), _str)

    def bf_add(self, key: str, item: Item) -> Call[bool]:
        """Add an item: True when it was not there (False: it may have been)."""
        return self._rpc("bf.add", {"key": key, "item": item}, _bool)

    def bf_madd(self, key: str, items: Iterable[Item]) -> Call[list[bool | Rejected]]:
        """Add items (at most 1,000): per item True/False, or a Rejected in
        the place of one a full non-scaling filter refused."""
        return self._rpc("bf.madd", {"key": key, "items": list(items)}, _bools_or_rejections)

    def bf_exists(self, key: str, item: Item) -> Call[bool]:
        """Whether the item may be there (never False for one added)."""
        return self._rpc("bf.exists", {"key": key, "item": item}, _bool)

    def bf_mexists(self, key: str, items: Iterable[Item]) -> Call[list[bool]]:
        """``bf_exists`` per item (at most 1,000)."""
        return self._rpc("bf.mexists", {"key": key, "items": list(items)}, _bools)

    def bf_insert(self, key: str, items: Iterable[Item], *, capacity: int | None = None,
                  error: float | None = None, expansion: int | None = None,
                  nocreate: bool = False, nonscaling: bool = False
                  ) -> Call[list[bool | Rejected]]:
        """``bf_madd`` that creates a missing filter with these options
        (Rejected ``not found`` with ``nocreate``)."""
        return self._rpc("bf.insert", _named(
            key=key, items=list(items), capacity=capacity, error=error, expansion=expansion,
            nocreate=True if nocreate else None, nonscaling=True if nonscaling else None),
            _bools_or_rejections)

    def bf_info(self, key: str) -> Call[BloomInfo]:
        """A filter's ``Capacity``, ``Size``, ``Number of filters``, ``Number
        of items inserted``, ``Expansion rate``; Rejected ``not found``."""
        return self._rpc("bf.info", {"key": key},
                         lambda value: cast(BloomInfo, _dict(value)))

    # -- audience segments -------------------------------------------------------------
    def upload_segment(self, name: str, source: Source | str, *, hashed: str | None = None,
                       size: int | None = None, progress: Progress | None = None,
                       block: int = BLOCK) -> Call[Segment]:
        """Upload a contact file as the segment ``name``, streamed
        (``POST /api/segments/NAME``): ``source`` is a path, a binary file,
        bytes or an iterable of bytes (give ``size`` for an iterable);
        ``progress(sent, total)`` follows it; ``hashed`` ``md5``/``sha256``
        for files of digests. The segment's counts; BadInput with ``code``
        (``header_validation``, ``encoding``, ``too_few_unique``, ``format``)
        and ``line`` when the node refuses the file."""
        if hashed is not None and hashed not in HASHES:
            raise BadInput("hashed is md5 or sha256")
        path = "/api/segments/" + quote(name, safe="")
        url = self.url + path + (f"?hashed={hashed}" if hashed else "")
        upload, close = open_upload(source, size=size, progress=progress, block=block)
        return Call(f"POST {path}", Request("POST", url, self._headers("text/csv"), upload,
                                            self.upload_timeout),
                    rest_reader(lambda value: cast(Segment, _dict(value))), close)

    def segments(self) -> Call[list[Segment]]:
        """Every segment with its counts (``GET /api/segments``)."""
        return self._rest("GET", "/api/segments", rest_reader(
            lambda value: cast(list[Segment], _dicts(_dict(value).get("segments")))))

    def delete_segment(self, name: str) -> Call[bool]:
        """Delete a segment: True, or False when there was none."""
        return self._rest("DELETE", "/api/segments/" + quote(name, safe=""), _read_deleted)

    # -- statistics --------------------------------------------------------------------
    def online(self, key: str | None = None, sid: str | None = None) -> Call[int]:
        """Sessions online in the view with that key, or in the whole
        service (``stats.online``); ``sid``: a session subscribed to the key
        of a personal view."""
        params: list[Any] = [] if key is None and sid is None else \
            [key] if sid is None else [key, sid]
        return self._rpc("stats.online", params, _int)

    def unique(self, key: str, sid: str | None = None) -> Call[int]:
        """Distinct authorized users of a view key in this ``--online-period``
        (``stats.unique``)."""
        return self._rpc("stats.unique", [key] if sid is None else [key, sid], _int)

    def health(self) -> Call[dict[str, Any]]:
        """``GET /health``: the node's report, also when it says ``unavailable``."""
        return self._rest("GET", "/health", rest_reader(_dict, ok=(200, 503)))

    # -- the operator's calls (admin.*) ------------------------------------------------
    def admin_stats(self) -> Call[list[dict[str, Any]]]:
        """Every node's statistics, now (``admin.stats``)."""
        return self._rpc("admin.stats", [self._admin_key()], _dicts)

    def admin_publish(self, changes: Mapping[str, Any] | Iterable[Mapping[str, Any]]
                      ) -> Call[int]:
        """Publish as ``publish`` does (at most 100 changes), with the admin
        key instead of the publish key (``admin.publish``)."""
        return self._rpc("admin.publish", [self._admin_key(), _batch(changes)], _accepted)

    def admin_session(self, sid: str) -> Call[dict[str, Any] | None]:
        """One session's node, user, delivery and subscriptions, or None
        (``admin.session``)."""
        return self._rpc("admin.session", [self._admin_key(), sid],
                         lambda value: None if value is None else _dict(value))

    def admin_subscribe(self, sid: str) -> Call[tuple[str, list[dict[str, Any]]]]:
        """Subscribe the session ``sid`` to the node statistics
        (``admin.subscribe``): ``(key, state)``."""
        return self._rpc("admin.subscribe", [sid, self._admin_key()], _subscription)

    def admin_unsubscribe(self, sid: str) -> Call[bool]:
        """End it (``admin.unsubscribe``): whether the session was subscribed."""
        return self._rpc("admin.unsubscribe", [sid, self._admin_key()], _bool)

