"""The backend client, now the distribution ``pushengine-client``
(client/, package ``pushengine_client``): ``pip install pushengine-client``
alone, on the standard library, or with ``[twisted]`` / ``[asyncio]``.
The engine's install brings it too.

This package keeps the old names working: ``pushengine.client.SyncClient``,
``pushengine.client.TwistedClient``, ``pushengine.client.errors`` ... are
the objects and modules of ``pushengine_client``. See docs/backend.md.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pushengine_client import (  # noqa: F401
    NO_RETRY, BadInput, BloomInfo, NotFound, PushengineError, RateLimited, Rejected,
    RetryPolicy, Segment, ServerError, SyncClient, Unauthorized, Unavailable, Upload,
    delete_change, upsert_change)

if TYPE_CHECKING:
    from pushengine_client.aio import AsyncClient
    from pushengine_client.tx import TwistedClient

__all__ = [
    "AsyncClient", "BadInput", "BloomInfo", "NO_RETRY", "NotFound", "PushengineError",
    "RateLimited", "Rejected", "RetryPolicy", "Segment", "ServerError", "SyncClient",
    "TwistedClient", "Unauthorized", "Unavailable", "Upload", "delete_change", "upsert_change",
]


def __getattr__(name: str) -> Any:
    # the Twisted and asyncio flavours load their libraries when asked for
    if name in ("TwistedClient", "AsyncClient"):
        import pushengine_client
        return getattr(pushengine_client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
