"""``GET /api/openrpc.json``: the API's OpenRPC document (``api/openrpc.py``).

The same bytes ``rpc.discover`` answers, built once with the node. A page
served by twisted.web on both fronts (the fast front hands every GET on).
It follows the rules of ``POST /api/jsonrpc``, whose methods it describes:
the API's CORS headers with ``--cors-origin`` (and its preflight), and,
where the node has API keys, the key (``?apikey=`` or ``X-Api-Key``); a
request without it is 403 with ``{"error": "..."}``. HEAD answers the
headers alone.
"""
from __future__ import annotations

from typing import Any

from pushengine.api.openrpc import Discovery
from pushengine.web.policy import JSON, KEY_REQUIRED, HttpPolicy, path_error
from pushengine.web.routes import Route

PATH = "/api/openrpc.json"


def openrpc_route(discovery: Discovery, policy: HttpPolicy) -> Route:
    refused = path_error(KEY_REQUIRED)

    def serve(request: Any) -> bytes:
        policy.cors(request)
        if request.method == b"OPTIONS":
            request.setResponseCode(204)
            return b""
        if not policy.request_key_allowed(request):
            return HttpPolicy.path_answer(request, 403, refused)
        request.setHeader(b"content-type", JSON)
        # the document changes only with a restart (a new views file, a new version)
        request.setHeader(b"cache-control", b"no-cache")
        return discovery.body
    return Route.get(PATH, serve, ("GET", "HEAD", "OPTIONS"))
