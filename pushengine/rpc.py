"""JSON-RPC 2.0 (and the legacy answer form) over any transport.

``Dispatcher.handle(body)`` decodes a request body, runs each call and gives
the encoded answer (or a Deferred of it when a call waits). Results that are ``RawJSON`` are spliced in as they
are, so events encoded once are not encoded again. A request without
``"jsonrpc": "2.0"`` is legacy: its answer is ``[result]`` and its error
``{"faultCode": ..., "faultString": ...}``.
"""
from __future__ import annotations

import inspect
import json
import math
from typing import Any, Callable

from twisted.internet.defer import CancelledError, Deferred, gatherResults, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.errors import ApiError, BadParams, InvalidRequest, MethodNotFound, ParseError
from pushengine.events import RawJSON

log = Logger()
_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def encode(value: Any) -> str:
    return value if isinstance(value, RawJSON) else _encoder.encode(value)


class Method:
    """A callable with the names of its parameters, for named params."""

    def __init__(self, func: Callable, names: list[str] | None = None,
                 required: int | None = None) -> None:
        self.func = func
        if names is None:
            sig = inspect.signature(func)
            ps = [p for p in sig.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            names = [p.name for p in ps]
            required = sum(1 for p in ps if p.default is p.empty)
        self.names = names
        self.required = len(names) if required is None else required

    def call(self, params: Any) -> Any:
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
        return self.func(*args)


def _valid_id(value: Any) -> bool:
    if value is None or isinstance(value, str):
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value)


class Dispatcher:
    def __init__(self, methods: dict[str, Method], max_batch: int = 100,
                 on_error: Callable[[int], None] | None = None) -> None:
        self.methods = methods
        self.max_batch = max_batch
        self.on_error = on_error or (lambda code: None)

    def handle(self, body: bytes) -> bytes | None | Deferred:
        """The answer's bytes, or None when nothing is to be sent; a Deferred
        firing with either when a call waits (a long-poll, a store query).
        Calls that answer at once cost no Deferred at all: every poll is one."""
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return self._whole_error(ParseError("the body is not UTF-8"))
        try:
            request = json.loads(text)
        except (ValueError, RecursionError):
            return self._whole_error(ParseError("the body is not valid JSON"))
        if isinstance(request, list):
            if not request:
                return self._whole_error(InvalidRequest("an empty batch"))
            if len(request) > self.max_batch:
                return self._whole_error(InvalidRequest(
                    f"a batch may hold at most {self.max_batch} calls"))
            answers = [self._one(call) for call in request]
            if any(isinstance(a, Deferred) for a in answers):
                d = gatherResults([a if isinstance(a, Deferred) else succeed(a)
                                   for a in answers])
                return d.addCallback(_join)
            return _join(answers)
        answer = self._one(request)
        if isinstance(answer, Deferred):
            return answer.addCallback(_utf8)
        return _utf8(answer)

    def _whole_error(self, error: ApiError) -> bytes:
        return self._error_text(error, None, modern=True).encode("utf-8")

    def _error_text(self, error: ApiError, id_: Any, modern: bool) -> str:
        self.on_error(error.code)
        if modern:
            return _encoder.encode({"jsonrpc": "2.0", "error": {
                "code": error.code, "message": error.message}, "id": id_})
        return _encoder.encode({"faultCode": error.code, "faultString": error.message})

    def _one(self, call: Any) -> str | None | Deferred:
        """Run one call: its encoded answer, None (a notification), or a
        Deferred firing with either."""
        if not isinstance(call, dict):
            return self._error_text(InvalidRequest("a call must be an object"), None, True)
        modern = "jsonrpc" in call
        id_ = call.get("id")
        if modern and call["jsonrpc"] != "2.0":
            return self._error_text(InvalidRequest("jsonrpc must be \"2.0\""), None, True)
        if not _valid_id(id_):
            return self._error_text(InvalidRequest("id must be a string, number or null"),
                                    None, modern)
        notification = modern and "id" not in call
        method_name = call.get("method")
        if not isinstance(method_name, str):
            return self._error_text(InvalidRequest("method must be a string"), id_, modern)

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
            if f.check(CancelledError):
                return None
            if f.check(ApiError):
                error = f.value
            else:
                log.failure("method {m} failed", f, m=method_name)
                error = ApiError("internal error")
            return None if notification else self._error_text(error, id_, modern)

        method = self.methods.get(method_name)
        try:
            if method is None:
                raise MethodNotFound(f"unknown method {method_name[:100]!r}")
            result = method.call(call.get("params"))
        except Exception:
            return failed(Failure())
        if isinstance(result, Deferred):
            return result.addCallbacks(answered, failed)
        return answered(result)


def _utf8(answer: str | None) -> bytes | None:
    return None if answer is None else answer.encode("utf-8")


def _join(answers: list) -> bytes | None:
    answers = [a for a in answers if a is not None]
    return ("[" + ",".join(answers) + "]").encode("utf-8") if answers else None
