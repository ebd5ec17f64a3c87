"""A backend's client of a pushengine node, over HTTP.

Two flavours with the same calls (described once in ``calls.Calls``):

- ``pushengine.client.SyncClient`` (``sync.py``): blocking, on the standard
  library's http.client, for Django, Flask, scripts and task workers;
- ``pushengine.client.TwistedClient`` (``tx.py``): Deferreds, on treq (or a
  treq-like client given to it), the reactor given to it.

    from pushengine.client import SyncClient
    node = SyncClient("http://127.0.0.1:8080", publish_key="...")
    node.upsert("Stream", {"id": 1, "title": "Cats", "live": True, "public": True})

Errors are ``PushengineError`` subclasses (``errors.py``); 429 and 503 are
retried with back-off (``retry.py``). It imports nothing of the engine:
a backend that never runs a node can use it, and the synchronous flavour
does not import Twisted. See docs/backend.md.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pushengine.client.calls import BloomInfo, Segment, delete_change, upsert_change
from pushengine.client.errors import (
    BadInput, NotFound, PushengineError, RateLimited, Rejected, ServerError, Unauthorized,
    Unavailable)
from pushengine.client.retry import NO_RETRY, RetryPolicy
from pushengine.client.sync import SyncClient
from pushengine.client.upload import Upload

if TYPE_CHECKING:
    from pushengine.client.tx import TwistedClient

__all__ = [
    "BadInput", "BloomInfo", "NO_RETRY", "NotFound", "PushengineError", "RateLimited",
    "Rejected", "RetryPolicy", "Segment", "ServerError", "SyncClient", "TwistedClient",
    "Unauthorized", "Unavailable", "Upload", "delete_change", "upsert_change",
]


def __getattr__(name: str) -> Any:
    # the Twisted flavour is imported when it is asked for, so that the
    # synchronous one never loads Twisted
    if name == "TwistedClient":
        from pushengine.client.tx import TwistedClient
        return TwistedClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
