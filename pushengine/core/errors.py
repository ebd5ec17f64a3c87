"""Errors a client is told about: each carries its JSON-RPC code."""
from __future__ import annotations


class ApiError(Exception):
    code = -32603

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class ParseError(ApiError):
    code = -32700


class InvalidRequest(ApiError):
    code = -32600


class MethodNotFound(ApiError):
    code = -32601


class BadParams(ApiError):
    code = -32602


class UnknownSession(ApiError):
    code = 1001


class UnknownView(ApiError):
    code = 1002


class NotAuthorized(ApiError):
    code = 1003


class LimitReached(ApiError):
    code = 1004


class UnknownKey(ApiError):
    code = 1005


class NoPresence(ApiError):
    """``presence.list`` of a subscription whose view does not declare
    ``presence: true``: presence is opt-in per view (SPEC section 16)."""

    code = 1013


class RateLimited(ApiError):
    """A client passed its call rate or its number of sessions; it may retry
    after ``retry_after`` seconds (HTTP 429 with Retry-After)."""

    code = 1007

    def __init__(self, message: str = "rate limited", retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class StoreUnavailable(ApiError):
    """The store of initial states cannot answer now: its database is down,
    did not answer within its statement timeout, or has too many queries
    waiting. Nothing was subscribed; the call may be retried."""

    code = 1012
