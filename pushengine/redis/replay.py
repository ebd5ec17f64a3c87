"""The ids of the ``admin.disconnect`` messages a node applied, in Redis
(``--redis``), so that a node that restarts still refuses a copy of one it
applied before (``pushengine.admin.disconnect``, its ``SeenIds``).

One key per node and message id, ``{prefix}disconnect:{node}:{id}``, set
with ``SET ... NX PX``: only if absent, expiring when the message leaves its
replay window. Each node keeps its own keys: every node applies a message
once, whoever else applied it.
"""
from __future__ import annotations

from typing import Any

from twisted.application import service
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime, IStreamClientEndpoint

from pushengine.redis.link import RedisLink, RedisUrl


class SeenUnavailable(Exception):
    """Redis cannot say whether a message was applied (it is down)."""


class RedisSeenIds(service.MultiService):
    """``SeenIds`` in Redis: ``first(id, keep)`` fires True when this node
    had not applied ``id`` (and remembers it for ``keep`` seconds), False
    when it had; it fails at once with ``SeenUnavailable`` while Redis is
    down (the node then decides alone)."""

    kind = "redis"

    def __init__(self, reactor: IReactorTime, url: str | RedisUrl, node_id: str,
                 endpoint: IStreamClientEndpoint | None = None) -> None:
        super().__init__()
        self.link = RedisLink(reactor, url, SeenUnavailable, endpoint=endpoint)
        self.link.setServiceParent(self)         # starts and stops with the store
        self.prefix = f"{self.link.url.prefix}disconnect:{node_id}:"

    def whenReady(self) -> Deferred:
        """Fires once connected (tests)."""
        return self.link.whenReady()

    def key(self, message_id: str) -> str:
        return self.prefix + message_id

    def first(self, message_id: str, keep: float) -> Deferred[bool]:
        """``SET key 1 NX PX ms``: "OK" when the key was absent (set now),
        nil when it was there."""
        ms = max(1, int(keep * 1000))

        def answered(reply: Any) -> bool:
            return reply is not None and str(reply).upper() == "OK"
        d: Deferred[Any] = self.link.send("SET", self.key(message_id), "1", "NX", "PX", ms)
        return d.addCallback(answered)

    def health(self) -> dict[str, Any]:
        return {"kind": "redis", "up": self.link.connected, "error": self.link.error}
