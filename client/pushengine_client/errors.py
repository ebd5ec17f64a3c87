"""The errors a backend handles, one class per kind, each carrying what the
node said: the HTTP status, the error's code (a JSON-RPC number, or a
segment upload's word such as ``header_validation``), its message and, for a
refused ``/api/publish``, the per-change details.

A class says what to do about it: fix the input (``BadInput``), fix the key
(``Unauthorized``), wait (``RateLimited``, ``Unavailable``: the client
retries these by itself, see ``retry.RetryPolicy``), or nothing
(``NotFound``, ``Rejected``, ``ServerError``). Every one of them is a
``PushengineError``.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

_CHANGE = re.compile(r"^change (\d+): (.*)$", re.S)


class PushengineError(Exception):
    """An answer that is not the call's result, or a request that got none.

    ``status`` is the HTTP status (None when no answer came, or the client
    refused the call before sending it); ``code`` the node's error code;
    ``details`` its list of per-item explanations; ``data`` the error object
    as the node sent it (a segment error's ``line`` and counts);
    ``retry_after`` the seconds the node asked to wait; ``attempts`` how many
    times the call was sent; ``call`` what was called (``bf.add``,
    ``POST /api/publish``).
    """

    retryable = False

    def __init__(self, message: str, *, status: int | None = None,
                 code: int | str | None = None, details: Sequence[str] = (),
                 data: Mapping[str, Any] | None = None, retry_after: float | None = None,
                 retryable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.details = list(details)
        self.data: dict[str, Any] = dict(data or {})
        self.retry_after = retry_after
        if retryable is not None:
            self.retryable = retryable
        self.attempts = 0
        self.call = ""

    @property
    def changes(self) -> dict[int, str]:
        """The refused changes of a publish by their index in the batch:
        ``{1: "'action' must be one of upsert, insert, update, delete"}``."""
        found = {}
        for detail in self.details:
            match = _CHANGE.match(detail)
            if match:
                found[int(match.group(1))] = match.group(2)
        return found

    @property
    def line(self) -> int | None:
        """The line of a refused segment file the error is about."""
        line = self.data.get("line")
        return line if isinstance(line, int) else None

    def __str__(self) -> str:
        where = ", ".join(part for part in (
            f"HTTP {self.status}" if self.status is not None and self.status >= 300 else "",
            f"code {self.code}" if self.code is not None else "",
            f"line {self.line}" if self.line is not None else "") if part)
        text = f"{self.call}: {self.message}" if self.call else self.message
        if where:
            text += f" ({where})"
        if self.details:
            text += ": " + "; ".join(self.details)
        return text


class Unauthorized(PushengineError):
    """Refused for who asked: no or a wrong publish, API or admin key, a
    caller that is not loopback where no publish key is set (HTTP 401/403,
    error 1003)."""


class BadInput(PushengineError):
    """The request itself is wrong and will stay wrong: malformed changes
    (``details``, ``changes``), bad params (-32602), a segment file the node
    refuses (``code``, ``line``), a body over the node's limit (413)."""


class NotFound(PushengineError):
    """What the call names is not there: an unknown session, view,
    subscription key or method (1001, 1002, 1005, -32601), a segment (404)."""


class Rejected(PushengineError):
    """A valid call the state refuses: a Bloom filter's ``item exists``,
    ``not found`` or ``non scaling filter is full`` (1010), a limit reached
    (1004), ``presence.list`` of a view without ``presence: true`` (1013).
    Also the value in the place of an item a full filter refused in the
    answer of ``bf_madd`` / ``bf_insert``."""


class RateLimited(PushengineError):
    """Too many calls from this client (HTTP 429, error 1007), or too many
    uploads at once on the node; ``retry_after`` says for how long. Retried."""

    retryable = True


class Unavailable(PushengineError):
    """The node cannot do it now and did nothing: HTTP 503 (the change feed,
    the segments' Redis), error 1011 (the Bloom filters' Redis), or no
    connection could be made. Retried. Also a request that got no answer
    (a timeout, a connection lost on the way), which is not retried: the
    node may have done it."""

    retryable = True


class ServerError(PushengineError):
    """The node failed (HTTP 500, error -32603) or answered something this
    client cannot read. Not retried."""


# JSON-RPC codes (docs/api.md, "Errors") by kind
_RPC_KINDS: dict[int, type[PushengineError]] = {
    -32700: BadInput, -32600: BadInput, -32602: BadInput, -32601: NotFound,
    -32603: ServerError, 1001: NotFound, 1002: NotFound, 1003: Unauthorized,
    1004: Rejected, 1005: NotFound, 1007: RateLimited, 1010: Rejected, 1011: Unavailable,
    1012: Unavailable, 1013: Rejected,
}


def kind_of_status(status: int) -> type[PushengineError]:
    """The kind of an HTTP status that is not a success."""
    if status in (401, 403):
        return Unauthorized
    if status == 404:
        return NotFound
    if status == 429:
        return RateLimited
    if status == 503:
        return Unavailable
    if 400 <= status < 500:
        return BadInput
    return ServerError


def kind_of_code(code: object, status: int | None) -> type[PushengineError]:
    """The kind of a JSON-RPC error code; a code this client does not know
    is judged by the HTTP status it came with."""
    if isinstance(code, int) and code in _RPC_KINDS:
        return _RPC_KINDS[code]
    if status is not None and status >= 400:
        return kind_of_status(status)
    return PushengineError


def rpc_error(error: Mapping[str, Any], status: int | None = None,
              retry_after: float | None = None) -> PushengineError:
    """The exception of a JSON-RPC error object ``{"code", "message"}``."""
    code = error.get("code")
    message = error.get("message")
    kind = kind_of_code(code, status)
    return kind(message if isinstance(message, str) else "error",
                status=status, code=code if isinstance(code, (int, str)) else None,
                data=error, retry_after=retry_after)


def http_error(status: int, body: object, retry_after: float | None = None) -> PushengineError:
    """The exception of a refused REST answer (``/api/publish``,
    ``/api/segments``): ``{"error": "text", "details": [...]}`` or
    ``{"error": {"code", "message", ...}}``."""
    kind = kind_of_status(status)
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        message = error.get("message")
        code = error.get("code")
        if isinstance(code, int):
            kind = kind_of_code(code, status)
        return kind(message if isinstance(message, str) else f"HTTP {status}",
                    status=status, code=code if isinstance(code, (int, str)) else None,
                    data=error, retry_after=retry_after)
    details = body.get("details") if isinstance(body, dict) else None
    return kind(error if isinstance(error, str) else f"HTTP {status}", status=status,
                details=[str(d) for d in details] if isinstance(details, list) else (),
                retry_after=retry_after)
