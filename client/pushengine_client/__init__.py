"""A backend's client of a pushengine node, over HTTP: the distribution
``pushengine-client``, which needs nothing of the engine.

Three flavours with the same calls (described once in ``calls.Calls``, run
through the same retry steps, ``retry.exchange``, raising the same errors):

- ``SyncClient`` (``sync.py``): blocking, on the standard library's
  http.client alone, for Django, Flask, scripts and task workers;
- ``TwistedClient`` (``tx.py``): Deferreds, on treq (or a treq-like client
  given to it), the reactor given to it: ``pushengine-client[twisted]``;
- ``AsyncClient`` (``aio.py``): coroutines, on httpx, for FastAPI and other
  asyncio code: ``pushengine-client[asyncio]``.

    from pushengine_client import SyncClient
    node = SyncClient("http://127.0.0.1:8080", publish_key="...")
    node.upsert("Stream", {"id": 1, "title": "Cats", "live": True, "public": True})

Errors are ``PushengineError`` subclasses (``errors.py``); 429 and 503 are
retried with back-off (``retry.py``). Importing this package loads neither
Twisted nor httpx: each flavour loads its library when it is asked for.
See docs/backend.md.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pushengine_client.calls import BloomInfo, Segment, delete_change, upsert_change
from pushengine_client.errors import (
    BadInput, NotFound, PushengineError, RateLimited, Rejected, ServerError, Unauthorized,
    Unavailable)
from pushengine_client.retry import NO_RETRY, RetryPolicy
from pushengine_client.sync import SyncClient
from pushengine_client.upload import Upload

if TYPE_CHECKING:
    from pushengine_client.aio import AsyncClient
    from pushengine_client.tx import TwistedClient

__version__ = "0.1.0"
__all__ = [
    "AsyncClient", "BadInput", "BloomInfo", "NO_RETRY", "NotFound", "PushengineError",
    "RateLimited", "Rejected", "RetryPolicy", "Segment", "ServerError", "SyncClient",
    "TwistedClient", "Unauthorized", "Unavailable", "Upload", "delete_change", "upsert_change",
]


def __getattr__(name: str) -> Any:
    # the Twisted and asyncio flavours are imported when they are asked for,
    # so that the synchronous one never loads Twisted or httpx
    if name == "TwistedClient":
        from pushengine_client.tx import TwistedClient
        return TwistedClient
    if name == "AsyncClient":
        from pushengine_client.aio import AsyncClient
        return AsyncClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
