"""JSON-RPC 2.0 (and the legacy answer form) over any transport.

``Dispatcher.handle(body, caller)`` decodes a request body, runs each call and
gives the encoded answer (or a Deferred of it when a call waits). Results that
are ``RawJSON`` (or ``RawUTF8``, bytes) are spliced in as they are, so events
encoded once are not encoded again. An object with a string ``method`` and no ``jsonrpc`` member is
legacy: its answer is ``[result]`` and its error ``{"faultCode": ...,
"faultString": ...}``; every other invalid element gets a JSON-RPC 2.0 error.
Each element of a batch is validated and answered on its own (section 7 of the
JSON-RPC 2.0 specification): one bad element never fails the others, and a
readable id is echoed in every error.

Everything a call holds is checked before it runs (``strictjson.problem``):
no lone surrogates, no NaN/Infinity, numbers finite, nesting at most 64
levels, strings at most ``max_string`` characters, lists at most
``max_items`` elements. A caller that passes its call rate gets error 1007
for every call, and the answer is a ``Refusal`` (HTTP 429 with Retry-After).
"""
from __future__ import annotations

import inspect
import json
import math
from typing import Any, Callable

from twisted.internet.defer import CancelledError, Deferred, gatherResults, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.core import strictjson
from pushengine.core.errors import (
    ApiError, BadParams, InvalidRequest, MethodNotFound, ParseError, RateLimited)
from pushengine.core.events import RawJSON, RawUTF8

log = Logger()
_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
MAX_STRING = 1024
MAX_ITEMS = 100
_ID_LIMIT = strictjson.MAX_SAFE_INTEGER


def encode(value: Any) -> str:
    if isinstance(value, RawJSON):
        return value
    if type(value) is RawUTF8:
        return RawJSON(value.decode("utf-8"))
    return _encoder.encode(value)


class Refusal(bytes):
    """An answer that refuses the whole request for a while: the transport
    says so with its own status (HTTP 429 and ``Retry-After``)."""

    status = 429
    retry_after = 1


class Method:
    """A callable with the names of its parameters, for named params."""

    def __init__(self, func: Callable, names: list[str] | None = None,
                 required: int | None = None, with_caller: bool = False,
                 max_string: int = MAX_STRING, max_items: int = MAX_ITEMS,
                 shortcut: Callable[[list, Any], Callable[[], Any] | None] | None = None
                 ) -> None:
        """``with_caller``: ``func`` takes the caller (who sent the call, as
        the transport knows it) as its first argument, before the params.
        ``max_string`` / ``max_items`` bound the strings and lists of params.
        ``shortcut(params, caller)``: for a method called far more often than
        the others (every long-poll is a ``session.get_events``), the call
        prepared from a list of positional params it has fully checked, or
        None to let ``func`` answer it (see ``Dispatcher._shortcut``)."""
        self.func = func
        self.shortcut = shortcut
        self.with_caller = with_caller
        self.max_string = max_string
        self.max_items = max_items
        if names is None:
            sig = inspect.signature(func)
            ps = [p for p in sig.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            if with_caller:
                ps = ps[1:]
            names = [p.name for p in ps]
            required = sum(1 for p in ps if p.default is p.empty)
        self.names = names
        self.required = len(names) if required is None else required

    def call(self, params: Any, caller: Any = None) -> Any:
        if params is None:
            args: list = []
        elif isinstance(params, list):
            args = params
        elif isinstance(params, dict):
            unknown = set(params) - set(self.names)
            if unknown:
                raise BadParams(f"unknown parameter {sorted(unknown)[0]!r}")
            args = []
            for name in self.names:
                if name not in params:
                    break
                args.append(params[name])
            if len(args) < len(params):
                raise BadParams("named parameters must not skip one")
        else:
            raise InvalidRequest("params must be an array or an object")
        if not self.required <= len(args) <= len(self.names):
            expected = (str(self.required) if self.required == len(self.names)
                        else f"{self.required} to {len(self.names)}")
            raise BadParams(f"expected {expected} parameters ({', '.join(self.names)}), "
                            f"got {len(args)}")
        if self.with_caller:
            return self.func(caller, *args)
        return self.func(*args)


def _valid_id(value: Any) -> bool:
    """A string, an integer within ±2**53 or a finite number, or null: an id
    that can be echoed exactly."""
    if value is None:
        return True
    if isinstance(value, str):
        return len(value) <= MAX_STRING and strictjson.problem(value) is None
    if isinstance(value, float):
        return math.isfinite(value)
    return strictjson.safe_id(value)


class Dispatcher:
    def __init__(self, methods: dict[str, Method], max_batch: int = 100,
                 on_error: Callable[[int], None] | None = None,
                 admit: Callable[[Any, int], float] | None = None) -> None:
        """``admit(caller, calls)`` → seconds to wait (0: go ahead) is asked
        once per request with the number of calls in it."""
        self.methods = methods
        self.max_batch = max_batch
        self.on_error = on_error or (lambda code: None)
        self.admit = admit

    def handle(self, body: bytes, caller: Any = None) -> bytes | None | Deferred:
        """The answer's bytes, or None when nothing is to be sent; a Deferred
        firing with either when a call waits (a long-poll, a store query).
        Calls that answer at once cost no Deferred at all: every poll is one.
        ``caller`` is who sent the body, as the transport knows it."""
        try:
            # each call is judged on its own (problem, below): no scan here
            request, _ = strictjson.decode(body, judge=False)
        except strictjson.UnsafeJSON as e:
            return self._whole_error(ParseError(f"parse error: {e}"))
        if type(request) is dict:
            answer = self._shortcut(request, caller)
            if answer is not None:
                return answer
        calls = request if isinstance(request, list) else [request]
        if isinstance(request, list):
            if not request:
                return self._whole_error(InvalidRequest("an empty batch"))
            if len(request) > self.max_batch:
                return self._whole_error(InvalidRequest(
                    f"a batch may hold at most {self.max_batch} calls"))
        if self.admit is not None:
            wait = self.admit(caller, len(calls))
            if wait > 0:
                return self._refuse(request, RateLimited(retry_after=wait))
        if isinstance(request, list):
            answers = [self._one(call, caller) for call in request]
            if any(isinstance(a, Deferred) for a in answers):
                d = gatherResults([a if isinstance(a, Deferred) else succeed(a)
                                   for a in answers])
                return d.addCallback(self._join)
            return self._join(answers)
        answer = self._one(request, caller)
        if isinstance(answer, Deferred):
            return answer.addCallback(self._utf8)
        return self._utf8(answer)

    def _shortcut(self, call: dict, caller: Any) -> bytes | Deferred | None:
        """The answer of a lone call whose method has a shortcut, without the
        generic path's layers (a walk of every value, named params, closures,
        a chain of callbacks): the same bytes, or None to take that path.

        Only the plainest shape is taken: an object with exactly ``jsonrpc``
        "2.0" (or none: the legacy form), ``method``, ``params`` as a list and
        an ``id`` that is an integer within ±2**53 or an ASCII string of at
        most ``MAX_STRING`` characters; the method's shortcut checks the
        params themselves. The call is admitted (the client's call rate)
        only once it is known to be taken, so that nothing counts twice."""
        name = call.get("method")
        if type(name) is not str:
            return None
        method = self.methods.get(name)
        if method is None or method.shortcut is None:
            return None
        id_ = call.get("id")
        params = call.get("params")
        modern = "jsonrpc" in call
        if type(params) is not list or len(call) != (4 if modern else 3) \
                or (modern and call["jsonrpc"] != "2.0"):
            return None
        if type(id_) is int:
            if not -_ID_LIMIT <= id_ <= _ID_LIMIT:
                return None
            id_text = b"%d" % id_
        elif type(id_) is str and len(id_) <= MAX_STRING and id_.isascii():
            id_text = _encoder.encode(id_).encode()
        else:
            return None
        run = method.shortcut(params, caller)
        if run is None:
            return None
        if self.admit is not None:
            wait = self.admit(caller, 1)
            if wait > 0:
                return self._refuse(call, RateLimited(retry_after=wait))
        try:
            result = run()
        except Exception:
            return self._shortcut_failed(Failure(), name, id_, modern)
        # (Deferred is an abc.Awaitable: isinstance is slow, and mostly False)
        if type(result) is not RawUTF8 and isinstance(result, Deferred):
            return result.addCallbacks(self._framed, self._shortcut_failed,
                                       callbackArgs=(id_, id_text, modern),
                                       errbackArgs=(name, id_, modern))
        return self._framed(result, id_, id_text, modern)

    def _framed(self, result: Any, id_: Any, id_text: bytes, modern: bool) -> bytes:
        """A shortcut's result (``RawJSON``, or JSON-ready values) in its
        answer; errors as the generic path gives them (``_one``, ``_utf8``)."""
        if type(result) is RawUTF8:     # a poll's events, as bytes already
            if modern:
                return b'{"jsonrpc":"2.0","result":%s,"id":%s}' % (result, id_text)
            return b"[" + result + b"]"
        try:
            text = encode(result)
        except (TypeError, ValueError):
            log.error("a shortcut returned a value that is not JSON")
            return self._error_text(ApiError("internal error"), id_, modern).encode()
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            log.error("an answer held text that is not Unicode; answered an error instead")
            return self._whole_error(ApiError("internal error"))
        if modern:
            return b'{"jsonrpc":"2.0","result":%s,"id":%s}' % (data, id_text)
        return b"[" + data + b"]"

    def _shortcut_failed(self, f: Failure, name: str, id_: Any, modern: bool) -> bytes | None:
        return self._utf8(self._failure_text(f, name, id_, modern))

    def _failure_text(self, f: Failure, name: str, id_: Any, modern: bool,
                      notification: bool = False) -> str | None:
        """The error answer of a call that failed: its own ApiError, or a
        logged "internal error" that tells nothing; None when nothing is to
        be sent (the client went away, or the call was a notification)."""
        if f.check(CancelledError):
            return None
        if f.check(ApiError):
            error = f.value
        else:
            log.failure("method {m} failed", f, m=name)
            error = ApiError("internal error")
        if notification:
            return None
        text = self._error_text(error, id_, modern)
        if isinstance(error, RateLimited):
            text = _Limited(text)
            text.retry_after = error.retry_after
        return text

    def _refuse(self, request: Any, error: RateLimited) -> Refusal:
        """Error 1007 for every call of the request, nothing run."""
        calls = request if isinstance(request, list) else [request]
        texts = []
        for call in calls:
            form, id_ = _form(call)
            texts.append(self._error_text(error, id_, form != "legacy"))
        text = texts[0] if not isinstance(request, list) else "[" + ",".join(texts) + "]"
        answer = Refusal(text.encode("utf-8"))
        answer.retry_after = error.retry_after
        return answer

    def _whole_error(self, error: ApiError) -> bytes:
        return self._error_text(error, None, modern=True).encode("utf-8")

    def _error_text(self, error: ApiError, id_: Any, modern: bool) -> str:
        self.on_error(error.code)
        if modern:
            return _encoder.encode({"jsonrpc": "2.0", "error": {
                "code": error.code, "message": error.message}, "id": id_})
        return _encoder.encode({"faultCode": error.code, "faultString": error.message})

    def _one(self, call: Any, caller: Any = None) -> str | None | Deferred:
        """Run one call: its encoded answer, None (a notification), or a
        Deferred firing with either."""
        form, id_ = _form(call)
        if form == "invalid":
            return self._error_text(InvalidRequest(_why_invalid(call)), id_, True)
        modern = form == "modern"
        notification = modern and "id" not in call
        method_name = call["method"]

        def answered(result: Any) -> str | None:
            if notification:
                return None
            try:
                text = encode(result)
            except (TypeError, ValueError):
                log.error("method {m} returned a value that is not JSON", m=method_name)
                return self._error_text(ApiError("internal error"), id_, modern)
            if modern:
                return '{"jsonrpc":"2.0","result":%s,"id":%s}' % (text, _encoder.encode(id_))
            return "[" + text + "]"

        def failed(f: Failure) -> str | None:
            return self._failure_text(f, method_name, id_, modern, notification)

        method = self.methods.get(method_name)
        try:
            if method is None:
                raise MethodNotFound(f"unknown method {method_name[:100]!r}")
            params = call.get("params")
            why = strictjson.problem(params, max_string=method.max_string,
                                     max_items=method.max_items)
            if why is not None:
                raise BadParams(f"params: {why}" if not why.startswith("[") else
                                f"params{why}")
            result = method.call(params, caller)
        except Exception:
            return failed(Failure())
        if isinstance(result, Deferred):
            return result.addCallbacks(answered, failed)
        return answered(result)

    def _utf8(self, answer: str | None) -> bytes | None:
        if answer is None:
            return None
        if isinstance(answer, _Limited):
            # a lone call refused for a limit of its client: the whole answer is a refusal
            refusal = Refusal(answer.encode("utf-8"))
            refusal.retry_after = answer.retry_after
            return refusal
        try:
            return answer.encode("utf-8")
        except UnicodeEncodeError:
            # nothing that is stored may hold a lone surrogate (strictjson
            # refuses it at every door); should one slip through, the client
            # gets an error, never bytes that are not UTF-8
            log.error("an answer held text that is not Unicode; answered an error instead")
            return self._whole_error(ApiError("internal error"))

    def _join(self, answers: list) -> bytes | None:
        answers = [a for a in answers if a is not None]
        if not answers:
            return None
        return b"[" + b",".join(self._utf8(str(a)) for a in answers) + b"]"


class _Limited(str):
    """An error answer for a call refused by a limit of its client."""

    retry_after = 1.0


def _form(call: Any) -> tuple[str, Any]:
    """``(form, id)``: form is ``modern``, ``legacy`` or ``invalid``; the id
    is the call's when it can be echoed, else None."""
    if not isinstance(call, dict):
        return "invalid", None
    id_ = call.get("id")
    if not _valid_id(id_):
        return "invalid", None
    if "jsonrpc" in call:
        if call["jsonrpc"] != "2.0" or not isinstance(call.get("method"), str):
            return "invalid", id_
        return "modern", id_
    if isinstance(call.get("method"), str):
        return "legacy", id_
    return "invalid", id_


def _why_invalid(call: Any) -> str:
    if not isinstance(call, dict):
        return "a call must be an object"
    if not _valid_id(call.get("id")):
        return "id must be a string, an integer within ±2**53, a finite number or null"
    if "jsonrpc" in call and call["jsonrpc"] != "2.0":
        return 'jsonrpc must be "2.0"'
    return "method must be a string"
