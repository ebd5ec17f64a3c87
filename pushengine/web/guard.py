"""The checks every transport makes before it serves: one place, one rule.

API key (``?apikey=`` or ``X-Api-Key``), the page's ``Origin`` against
``--cors-origin`` (streams: a foreign page may not open them), CORS answer
headers, and who the client is (``pushengine.web.clients``).
"""
from __future__ import annotations

import json
from typing import Any

from pushengine.api.auth import ApiKeys
from pushengine.api.caller import Caller
from pushengine.web.clients import ClientAddresses

JSON = b"application/json"


def json_error(request: Any, status: int, code: int, message: str) -> bytes:
    """A JSON error answer (the body shape SPEC section 10 gives for streams)."""
    request.setResponseCode(status)
    request.setHeader(b"content-type", JSON)
    request.setHeader(b"cache-control", b"no-store")
    return json.dumps({"error": {"code": code, "message": message}},
                      separators=(",", ":")).encode()


class Guard:
    def __init__(self, api_keys: ApiKeys | None = None, cors_origin: str | None = None,
                 clients: ClientAddresses | None = None) -> None:
        self.api_keys = api_keys or ApiKeys()
        self.cors_origin = cors_origin
        self.clients = clients or ClientAddresses()

    def cors(self, request: Any) -> None:
        if self.cors_origin:
            request.setHeader(b"access-control-allow-origin", self.cors_origin.encode())
            request.setHeader(b"access-control-allow-methods", b"POST, GET, OPTIONS")
            request.setHeader(b"access-control-allow-headers",
                              b"content-type, x-api-key, authorization, last-event-id")
            request.setHeader(b"access-control-max-age", b"600")

    def key_allowed(self, request: Any) -> bool:
        """The API key where keys are configured (query or header)."""
        if not self.api_keys.required:
            return True
        presented = (request.args.get(b"apikey") or [None])[0] or \
            request.getHeader(b"x-api-key")
        if isinstance(presented, bytes):
            presented = presented.decode("utf-8", "replace")
        return self.api_keys.allows(presented)

    def origin_allowed(self, request: Any) -> bool:
        """With ``--cors-origin`` set, a page of another origin may not open a
        stream (a WebSocket is not subject to CORS: the server must check)."""
        origin = request.getHeader(b"origin")
        if not self.cors_origin or origin is None:
            return True
        if isinstance(origin, bytes):
            origin = origin.decode("latin-1")
        return origin == self.cors_origin

    def caller(self, request: Any, channel: Any = None) -> Caller:
        caller = self.clients.caller(request)
        if channel is None:
            return caller
        return Caller(caller.address, caller.loopback, caller.bearer, caller.from_page,
                      channel)

    def refuse(self, request: Any) -> bytes | None:
        """The error answer when the key or the origin is wrong, else None."""
        if not self.key_allowed(request):
            return json_error(request, 403, 1003,
                              "a valid API key is required (apikey or X-Api-Key)")
        if not self.origin_allowed(request):
            return json_error(request, 403, 1003, "this origin may not open a stream")
        return None
