"""JSON-RPC 2.0 (and the legacy answer form) over any transport.

``Dispatcher.handle(body, caller)`` decodes a request body, runs each call and
gives an ``RpcAnswer``: the answer's bytes with the status a transport says it
with (or a Deferred of it when a call waits). Results that are ``RawJSON``
(or ``RawUTF8``, bytes) are spliced in as they are, so events encoded once
are not encoded again. An object with a string ``method`` and no ``jsonrpc``
member is legacy: its answer is ``[result]`` and its error ``{"faultCode":
..., "faultString": ...}``; every other invalid element gets a JSON-RPC 2.0
error. Each element of a batch is validated and answered on its own (section
7 of the JSON-RPC 2.0 specification): one bad element never fails the
others, and a readable id is echoed in every error.

Everything a call holds is checked before it runs (``strictjson.problem``):
no lone surrogates, no NaN/Infinity, numbers finite, nesting at most 64
levels, strings at most ``max_string`` characters, lists at most
``max_items`` elements; a method's ``shortcut`` may take that check over for
the calls it fully checks itself. A caller that passes its call rate gets
error 1007 for every call, and the answer has status 429 with the seconds
to wait.

With a tracer (``core.tracing``: ``--otlp-endpoint``) each call that runs
is a span named after its method (``unknown method`` for a name the node
does not have), from its dispatch to its answer, and the current span while
it runs (an initial-state read it starts is its child). Its parent is the
call object's own ``traceparent`` member when it has a string one, else
the ``traceparent`` its transport read (``Caller.traceparent``: an HTTP
request's header, a WebSocket's upgrade request's). Its attributes:
``rpc.system`` (``jsonrpc``), ``rpc.method``, ``pushengine.session`` (a
hash of the session id the call names or ``session.create`` answers, never
the id) and, for a call that fails, ``rpc.jsonrpc.error_code`` and
``rpc.jsonrpc.error_message``. A call its client went away from, a request
that is no call and a request refused for the rate make none.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import math
from functools import partial
from typing import Any, Callable, Union, overload

from twisted.internet.defer import CancelledError, Deferred, gatherResults, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.api.caller import Caller
from pushengine.core import strictjson
from pushengine.core.errors import (
    ApiError, BadParams, InvalidRequest, MethodNotFound, ParseError, RateLimited)
from pushengine.core.events import RawJSON, RawUTF8
from pushengine.core.interfaces import Waiting
from pushengine.core.timings import Timings
from pushengine.core.tracing import NO_SPAN, Span, Tracer, active

log = Logger()
_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
MAX_STRING = 1024
MAX_ITEMS = 100
_ID_LIMIT = strictjson.MAX_SAFE_INTEGER

# ``shortcut(params, caller)``: the call prepared from positional params it
# has fully checked, or None to let the method's function answer it. The
# prepared call is run with a reply (a call that waits answers by calling
# it once, and returns something with ``cancel``) or with None (a call that
# waits returns a Deferred)
Shortcut = Callable[[list[Any], Any], Union[Callable[[Any], Any], None]]


def session_hash(sid: Any) -> str | None:
    """What a span says of a session id: 16 hex digits of its BLAKE2b hash
    (the same on every node; the id, a bearer of the session, never leaves)."""
    if type(sid) is not str or not sid or len(sid) > MAX_STRING:
        return None
    return hashlib.blake2b(sid.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


UNKNOWN_METHOD = "unknown method"      # the span name of a call to a method the node lacks


def encode(value: Any) -> str:
    if isinstance(value, RawJSON):
        return value
    if type(value) is RawUTF8:
        return RawJSON(value.decode("utf-8"))
    return _encoder.encode(value)


class RpcAnswer:
    """What a request is answered: ``body``, the encoded answer (None when
    nothing is to be sent: notifications, a client gone); ``status``, how an
    HTTP transport says it (200; 204 without a body; 429 when the whole
    request is refused for a while); ``retry_after``, the seconds to wait
    with a 429. A WebSocket sends the body alone."""

    __slots__ = ("body", "status", "retry_after")

    def __init__(self, body: bytes | None, status: int = 200,
                 retry_after: float | None = None) -> None:
        self.body = body
        self.status = status
        self.retry_after = retry_after

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RpcAnswer):
            return NotImplemented
        return (self.body, self.status, self.retry_after) == \
            (other.body, other.status, other.retry_after)

    def __hash__(self) -> int:
        return hash((self.body, self.status, self.retry_after))

    def __repr__(self) -> str:
        return f"RpcAnswer({self.body!r}, {self.status}, {self.retry_after})"


NOTHING = RpcAnswer(None, 204)
Answered = Union[RpcAnswer, "Deferred[RpcAnswer]"]


class Method:
    """A callable with the names of its parameters, for named params."""

    def __init__(self, func: Callable[..., Any], names: list[str] | None = None,
                 required: int | None = None, with_caller: bool = False,
                 max_string: int = MAX_STRING, max_items: int = MAX_ITEMS,
                 shortcut: Shortcut | None = None, caller_keyword: bool = False) -> None:
        """``with_caller``: ``func`` takes the caller (who sent the call, as
        the transport knows it) as its first argument, before the params;
        ``caller_keyword``: as the keyword argument ``caller`` instead (a
        method that needs it only to resume a session from the cluster, for
        the client's session count).
        ``max_string`` / ``max_items`` bound the strings and lists of params.
        ``shortcut(params, caller)``: for a method called far more often than
        the others (every long-poll is a ``session.get_events``), the call
        prepared from a list of positional params it has fully checked, or
        None to let ``func`` answer it; a prepared call skips the generic
        checks of the params (``Dispatcher._run``), nothing else."""
        self.func = func
        self.shortcut = shortcut
        self.with_caller = with_caller
        self.caller_keyword = caller_keyword
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
            args: list[Any] = []
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
        if self.caller_keyword:
            return self.func(*args, caller=caller)
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


def _id_bytes(id_: Any) -> bytes:
    """A valid id (``_valid_id``) as JSON bytes."""
    return _encoder.encode(id_).encode("utf-8")


class Dispatcher:
    def __init__(self, methods: dict[str, Method], max_batch: int = 100,
                 on_error: Callable[[int], None] | None = None,
                 admit: Callable[[Caller | None, int], float] | None = None,
                 timings: Timings | None = None,
                 clock: Callable[[], float] | None = None,
                 tracer: Tracer | None = None) -> None:
        """``admit(caller, calls)`` → seconds to wait (0: go ahead) is asked
        once per request with the number of calls in it. ``timings``: each
        call's time by method name, from its dispatch to its answer (a call
        that waits, such as a parked poll, until it answers), read from
        ``clock``; a call cancelled (its client went away) is not counted.
        ``tracer``: a span per call (the module docstring)."""
        self.methods = methods
        self.max_batch = max_batch
        self.on_error: Callable[[int], None] = on_error or (lambda code: None)
        self.admit = admit
        self.timings = timings if clock is not None else None
        self.clock: Callable[[], float] = clock or (lambda: 0.0)
        self.tracer = active(tracer)

    @overload
    def handle(self, body: bytes, caller: Caller | None = None) -> Answered: ...

    @overload
    def handle(self, body: bytes, caller: Caller | None,
               then: Callable[[RpcAnswer], object]) -> RpcAnswer | Waiting: ...

    def handle(self, body: bytes, caller: Caller | None = None,
               then: Callable[[RpcAnswer], object] | None = None) -> Answered | Waiting:
        """The answer (``RpcAnswer``), or a Deferred firing with it when a
        call waits (a long-poll, a store query). Calls that answer at once
        cost no Deferred at all: every poll is one. ``caller`` is who sent
        the body, as the transport knows it. ``then``: a call that waits
        hands its answer to ``then`` from the one callback it adds to what
        it waits on, or from the reply a prepared call is given (a woken
        poll's answer is written straight away: no Deferred); what is
        returned then only serves to cancel, and ``then`` is not called once
        it is cancelled."""
        try:
            # each call is judged on its own (_run): no scan here
            request, _ = strictjson.decode(body, judge=False)
        except strictjson.UnsafeJSON as e:
            return self._invalid(ParseError(f"parse error: {e}"), caller)
        batch = type(request) is list
        if batch:
            if not request:
                return self._invalid(InvalidRequest("an empty batch"), caller)
            if len(request) > self.max_batch:
                return self._invalid(InvalidRequest(
                    f"a batch may hold at most {self.max_batch} calls"), caller)
        if self.admit is not None:
            wait = self.admit(caller, len(request) if batch else 1)
            if wait > 0:
                return self._refuse(request, RateLimited(retry_after=wait))
        if not batch:
            return self._one(request, caller, then)
        answers = [self._one(call, caller) for call in request]
        if any(isinstance(a, Deferred) for a in answers):
            joined = gatherResults([a if isinstance(a, Deferred) else succeed(a)
                                    for a in answers]).addCallback(self._join)
            if then is not None:
                waiting: Deferred[Any] = joined
                return waiting.addCallbacks(then, _unless_cancelled)
            return joined
        return self._join(answers)          # type: ignore[arg-type]

    # -- one call -------------------------------------------------------------------
    def _one(self, call: Any, caller: Caller | None,
             then: Callable[[RpcAnswer], object] | None = None) -> Answered | Waiting:
        """Run one call: its answer (NOTHING for a notification), or a
        Deferred firing with it (or handing it to ``then``: ``handle``).
        With ``timings``, the call is timed from here to its answer
        (``start`` goes along to wherever it is answered, at once or later)."""
        if type(call) is dict and type(id_ := call.get("id")) is int \
                and -_ID_LIMIT <= id_ <= _ID_LIMIT and call.get("jsonrpc") == "2.0" \
                and type(call.get("method")) is str:
            modern, notification = True, False  # the common form, as _form finds it
        else:
            form, id_ = _form(call)
            if form == "invalid":
                return RpcAnswer(self._error_text(InvalidRequest(_why_invalid(call)), id_,
                                                  True))
            modern = form == "modern"
            notification = modern and "id" not in call
        name: str = call["method"]
        params = call.get("params")
        method = self.methods.get(name)
        start = self.clock() if self.timings is not None else None
        tracer = self.tracer
        span: Span | None = None
        if tracer is not None:
            span = self._span(tracer, call, name, method, params, caller)
            previous = tracer.enter(span)
            if span is NO_SPAN:
                span = None             # sampled out: answered as without a tracer
        try:
            try:
                if method is not None and method.shortcut is not None \
                        and type(params) is list \
                        and (run := method.shortcut(params, caller)) is not None:
                    # the params fully checked by the method itself
                    if then is None:
                        result = run(None)
                    else:
                        result = run(partial(self._answer_to, then, name, id_, modern,
                                             notification, start, span))
                        if type(result) is not RawUTF8 and not isinstance(result, Deferred):
                            waiting: Waiting = result   # waits, and answers through then
                            return waiting
                else:
                    result = self._run(method, name, params, caller)
            except Exception:
                return self._failed(Failure(), name, id_, modern, notification, start, span)
        finally:
            if tracer is not None:
                tracer.leave(previous)
        # (Deferred is an abc.Awaitable: isinstance is slow, and mostly False)
        if type(result) is not RawUTF8 and isinstance(result, Deferred):
            if then is not None:
                waits: Deferred[Any] = result
                return waits.addCallbacks(
                    partial(self._answer_to, then, name, id_, modern, notification, start,
                            span),
                    self._reply_failed,
                    errbackArgs=(then, name, id_, modern, notification, start, span))
            return result.addCallbacks(
                self._answered, self._failed,
                callbackArgs=(name, id_, modern, notification, start, span),
                errbackArgs=(name, id_, modern, notification, start, span))
        return self._answered(result, name, id_, modern, notification, start, span)

    def _span(self, tracer: Tracer, call: dict[str, Any], name: str, method: Method | None,
              params: Any, caller: Caller | None) -> Span:
        """The span of a call (the module docstring), begun."""
        traceparent = call.get("traceparent")
        if type(traceparent) is not str:
            traceparent = caller.traceparent if caller is not None else None
        span = tracer.start(name if method is not None else UNKNOWN_METHOD, None, traceparent,
                            "server")
        if not span.is_recording():
            return span                 # sampled out: nothing more to say
        span.set_attribute("rpc.system", "jsonrpc")
        span.set_attribute("rpc.method", name[:100])
        if method is not None and method.names and method.names[0] == "sid":
            sid = params[0] if type(params) is list and params else \
                params.get("sid") if type(params) is dict else None
            hashed = session_hash(sid)
            if hashed is not None:
                span.set_attribute("pushengine.session", hashed)
        return span

    def _span_done(self, span: Span, name: str, result: Any) -> None:
        """A call's span, answered with ``result``."""
        if type(result) is str and name.endswith("session.create") and span.is_recording():
            hashed = session_hash(result)
            if hashed is not None:
                span.set_attribute("pushengine.session", hashed)
        span.end()

    def _timed(self, name: str, start: float) -> None:
        """A call that began at ``start`` is answered now."""
        timings = self.timings
        if timings is not None:
            timings.observe(name, self.clock() - start)

    def _run(self, method: Method | None, name: str, params: Any,
             caller: Caller | None) -> Any:
        """The method's result with every param checked and matched to its name."""
        if method is None:
            raise MethodNotFound(f"unknown method {name[:100]!r}")
        why = strictjson.problem(params, max_string=method.max_string,
                                 max_items=method.max_items)
        if why is not None:
            raise BadParams(f"params: {why}" if not why.startswith("[") else f"params{why}")
        return method.call(params, caller)

    def _answered(self, result: Any, name: str, id_: Any, modern: bool,
                  notification: bool, start: float | None = None,
                  span: Span | None = None) -> RpcAnswer:
        """A result framed as the call's answer (``_frame``); a timed call
        (``start``) is counted with its framing, a traced one's ``span`` ends."""
        if start is None and span is None:
            return self._frame(result, name, id_, modern, notification)
        answer = self._frame(result, name, id_, modern, notification)
        if start is not None:
            self._timed(name, start)
        if span is not None:
            self._span_done(span, name, result)
        return answer

    def _frame(self, result: Any, name: str, id_: Any, modern: bool,
               notification: bool) -> RpcAnswer:
        """A result (``RawUTF8``, ``RawJSON`` or JSON-ready values) framed
        as the call's answer."""
        if notification:
            return NOTHING
        if type(result) is RawUTF8:     # a poll's events, as bytes already
            data: bytes = result
        else:
            try:
                text = encode(result)
            except (TypeError, ValueError):
                log.error("method {m} returned a value that is not JSON", m=name)
                return RpcAnswer(self._error_text(ApiError("internal error"), id_, modern))
            try:
                data = text.encode("utf-8")
            except UnicodeEncodeError:
                # nothing that is stored may hold a lone surrogate (strictjson
                # refuses it at every door); should one slip through, the client
                # gets an error, never bytes that are not UTF-8
                log.error("an answer held text that is not Unicode; answered an error instead")
                return self._whole_error(ApiError("internal error"))
        if modern:
            return RpcAnswer(b'{"jsonrpc":"2.0","result":%s,"id":%s}' % (
                data, b"%d" % id_ if type(id_) is int else _id_bytes(id_)))
        return RpcAnswer(b"[" + data + b"]")

    def _answer_to(self, then: Callable[[RpcAnswer], object], name: str, id_: Any,
                   modern: bool, notification: bool, start: float | None,
                   span: Span | None, result: Any) -> None:
        """The answer of a call that waits with ``then`` (``handle``), framed
        and handed to ``then``: the reply a prepared call is given, or the
        one callback on the Deferred another call returns."""
        then(self._answered(result, name, id_, modern, notification, start, span))

    def _reply_failed(self, f: Failure, then: Callable[[RpcAnswer], object], name: str,
                      id_: Any, modern: bool, notification: bool,
                      start: float | None = None, span: Span | None = None) -> None:
        if not f.check(CancelledError):
            then(self._failed(f, name, id_, modern, notification, start, span))

    def _failed(self, f: Failure, name: str, id_: Any, modern: bool,
                notification: bool, start: float | None = None,
                span: Span | None = None) -> RpcAnswer:
        """The error answer of a call that failed: its own ApiError, or a
        logged "internal error" that tells nothing; NOTHING when nothing is
        to be sent (the client went away, or the call was a notification).
        A call refused for a limit of its client (1007) says so with 429."""
        if f.check(CancelledError):
            return NOTHING
        if start is not None:
            self._timed(name, start)
        if isinstance(f.value, ApiError):
            error = f.value
        else:
            log.failure("method {m} failed", f, m=name)
            error = ApiError("internal error")
        if span is not None:
            self._span_failed(span, error)
        if notification:
            return NOTHING
        body = self._error_text(error, id_, modern)
        if isinstance(error, RateLimited):
            return RpcAnswer(body, 429, error.retry_after)
        return RpcAnswer(body)

    def _span_failed(self, span: Span, error: ApiError) -> None:
        """A call's span, answered with ``error``."""
        if span.is_recording():
            span.set_attribute("rpc.jsonrpc.error_code", error.code)
            span.set_attribute("rpc.jsonrpc.error_message", error.message[:200])
            assert self.tracer is not None
            self.tracer.failed(span, error.message[:200])
        span.end()

    # -- whole requests -----------------------------------------------------------------
    def _refuse(self, request: Any, error: RateLimited) -> RpcAnswer:
        """Error 1007 for every call of the request, nothing run."""
        calls = request if type(request) is list else [request]
        texts = []
        for call in calls:
            form, id_ = _form(call)
            texts.append(self._error_text(error, id_, form != "legacy"))
        body = texts[0] if type(request) is not list else b"[" + b",".join(texts) + b"]"
        return RpcAnswer(body, 429, error.retry_after)

    def _invalid(self, error: ApiError, caller: Caller | None) -> RpcAnswer:
        """A request that is no call counts against the call rate as one
        call does: a flood of invalid input is refused (1007) like valid."""
        if self.admit is not None:
            wait = self.admit(caller, 1)
            if wait > 0:
                return RpcAnswer(self._error_text(RateLimited(retry_after=wait), None, True),
                                 429, wait)
        return self._whole_error(error)

    def _whole_error(self, error: ApiError) -> RpcAnswer:
        return RpcAnswer(self._error_text(error, None, modern=True))

    def _error_text(self, error: ApiError, id_: Any, modern: bool) -> bytes:
        self.on_error(error.code)
        if modern:
            value: dict[str, Any] = {"jsonrpc": "2.0", "error": {
                "code": error.code, "message": error.message}, "id": id_}
        else:
            value = {"faultCode": error.code, "faultString": error.message}
        try:
            return _encoder.encode(value).encode("utf-8")
        except UnicodeEncodeError:
            # a message that quotes what a client sent with a lone surrogate
            log.error("an error held text that is not Unicode; answered an internal error")
            return self._error_text(ApiError("internal error"), None, True)

    def _join(self, answers: list[RpcAnswer]) -> RpcAnswer:
        bodies = [a.body for a in answers if a.body is not None]
        if not bodies:
            return NOTHING
        return RpcAnswer(b"[" + b",".join(bodies) + b"]")


def _unless_cancelled(f: Failure) -> Failure | None:
    """A batch that waits, cancelled: ``then`` is not called."""
    return None if f.check(CancelledError) else f


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
