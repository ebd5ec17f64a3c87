"""Presence rooms in Redis (``--redis`` without ``--memcache``): one hash
per room, a field per node (``pushengine.api.presence``)."""
from __future__ import annotations

import hashlib
import json
from typing import Any

from twisted.application import service
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime, IStreamClientEndpoint

from pushengine.api.presence import PresenceUnavailable, encode_entry
from pushengine.redis.link import RedisArg, RedisLink, RedisUrl, hash_pairs


class RedisPresenceStore(service.MultiService):
    """Each node's members of each room in Redis (``--redis`` without
    ``--memcache``): one hash per room, ``{prefix}presence:{sha1}``, whose
    field per node holds ``[time, [users]]``. A node writes only its own
    field (HSET, or HDEL when it has nobody there), so no compare-and-set is
    needed; the hash expires ``2 * ttl`` after the last write. The
    connection is a :class:`pushengine.redis.link.RedisLink`; Redis down:
    reads and writes fail at once (the Presence class then answers what
    this node knows)."""

    kind = "redis"

    def __init__(self, reactor: IReactorTime, url: str | RedisUrl, node_id: str,
                 ttl: float = 30.0, endpoint: IStreamClientEndpoint | None = None) -> None:
        super().__init__()
        self.clock = reactor
        self.link = RedisLink(reactor, url, PresenceUnavailable, endpoint=endpoint)
        self.link.setServiceParent(self)         # starts and stops with the store
        self.url = self.link.url
        self.node_id = node_id
        self.ttl = ttl
        self.prefix = f"{self.url.prefix}presence:"
        self.writes = self.reads = self.errors = 0

    def whenReady(self) -> Deferred:
        """Fires once connected (tests)."""
        return self.link.whenReady()

    def _send(self, *args: RedisArg) -> Deferred[Any]:
        return self.link.send(*args)

    def key(self, room: str) -> str:
        return self.prefix + hashlib.sha1(room.encode("utf-8")).hexdigest()

    def write(self, room: str, users: list) -> Deferred:
        """Set this node's members of ``room`` (none: remove its field)."""
        self.writes += 1
        key = self.key(room)
        if not users:
            return self._send("HDEL", key, self.node_id).addCallback(lambda _: None)
        value = encode_entry([self.clock.seconds(), users]).decode("utf-8")
        d = self._send("HSET", key, self.node_id, value)
        d.addCallback(lambda _: self._send("PEXPIRE", key, int(self.ttl * 2000) + 1000))
        return d.addCallback(lambda _: None)

    def read(self, room: str) -> Deferred:
        """Fire with ``{node: [users]}`` of the fresh fields of ``room``."""
        self.reads += 1

        def fresh(reply: dict[str, str] | list[str]) -> dict[str, list]:
            oldest = self.clock.seconds() - self.ttl
            out = {}
            for node, raw in hash_pairs(reply):
                try:
                    when, users = json.loads(raw)
                except (TypeError, ValueError):
                    continue
                if isinstance(when, (int, float)) and when >= oldest and isinstance(users, list):
                    out[str(node)] = users
            return out
        return self._send("HGETALL", self.key(room)).addCallback(fresh)

    def health(self) -> dict[str, Any]:
        return {"kind": "redis", "up": self.link.connected, "error": self.link.error}
