"""The session registry in Redis: ``--redis redis://host:6379/0``.

Each session is one hash, ``{prefix}session:{sid}`` (fields in
:mod:`pushengine.cluster.record`), with a TTL. Writes, refreshes and the
release on expiry compare the ``owner`` field in a short Lua script, so a
node never overwrites or deletes an entry another node took over. A node
that takes a session over publishes its id on the previous owner's channel,
``{prefix}moved:{db}:{node id}``, and that node drops its stale copy.

Connections (:mod:`pushengine.redis.link`): two links, one for commands and
one subscribed to this node's channel, each made again when lost, on the
injected reactor. A command that gets no answer within ``timeout`` fails and
drops the connection, which is then made again.

Redis down: every operation fails at once with RegistryUnavailable (nothing
queues up); the hooks count the dropped writes and write again on the next
poll, the resumer answers 1001 as a node without a registry does.

URL: see :mod:`pushengine.redis.link`.
"""
from __future__ import annotations

from typing import Any, Callable, cast

import txredisapi
from twisted.application import service
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime, IStreamClientEndpoint
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.cluster.record import SessionRecord
from pushengine.cluster.registry import MISSING, MOVED, OK, RegistryUnavailable, new_counters
# (RedisUrl, parse_redis_url and redis_endpoint lived here first: importable from here still)
from pushengine.redis.link import (
    RedisArg, RedisConnection, RedisLink, RedisUrl, parse_redis_url, redis_endpoint, run_script)

log = Logger()

# KEYS[1] entry; ARGV: node, ttl ms, take ("1"/"0"), field, value, ...
# → {1, previous owner or ""} written, {0, owner} owned by another node
WRITE = """
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner and owner ~= ARGV[1] and ARGV[3] ~= '1' then return {0, owner} end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], unpack(ARGV, 4))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, owner or ''}
"""

# KEYS[1] entry; ARGV: node, ttl ms, field, value, ... → 1 done, 0 missing, -1 moved
REFRESH = """
local owner = redis.call('HGET', KEYS[1], 'owner')
if not owner then return 0 end
if owner ~= ARGV[1] then return -1 end
if #ARGV > 2 then redis.call('HSET', KEYS[1], unpack(ARGV, 3)) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

# KEYS[1] entry; ARGV: node → 1 deleted, 0 not ours (or absent)
RELEASE = """
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

SCRIPTS = {"write": WRITE, "refresh": REFRESH, "release": RELEASE}


class _SubscriberProtocol(txredisapi.SubscriberProtocol):
    def __init__(self, clock: IReactorTime,
                 on_message: Callable[[str, str | bytes], None]) -> None:
        super().__init__(charset="utf-8", convertNumbers=False)
        self.callLater = clock.callLater
        self.on_message = on_message

    def messageReceived(self, pattern: str | None, channel: str,  # noqa: N802
                        message: str | bytes) -> None:
        self.on_message(channel, message)


class RedisRegistry(service.MultiService):
    """The registry of one node; a service (add it to the application)."""

    def __init__(self, reactor: IReactorTime, url: str | RedisUrl, node_id: str, ttl: float,
                 endpoint: IStreamClientEndpoint | None = None) -> None:
        super().__init__()
        self.reactor = reactor
        self.node_id = node_id
        self.ttl = ttl
        self.on_moved: Callable[[str], None] | None = None
        self.counters = new_counters()
        self._shas: dict[str, str] = {}
        self.link = RedisLink(
            reactor, url, RegistryUnavailable, endpoint=endpoint, on_ready=self._load_scripts,
            name="session registry", counters=self.counters,
            effect="the sessions this node holds keep working, resuming sessions of other "
                   "nodes is unavailable until Redis is back")
        self.url = self.link.url
        self.channel = f"{self.url.prefix}moved:{self.url.db}:{node_id}"
        # publish/subscribe ignores the database: no SELECT on the subscriber
        self.subscriber = RedisLink(
            reactor, self.url, RegistryUnavailable, endpoint=endpoint, select=False,
            protocol=lambda: _SubscriberProtocol(reactor, self._message),
            on_ready=self._subscribe)
        # both start and stop with the registry
        self.link.setServiceParent(self)
        self.subscriber.setServiceParent(self)

    # -- the connections --------------------------------------------------------
    def _load_scripts(self, proto: RedisConnection) -> Deferred[None]:
        """A new connection serves commands once the scripts are loaded."""
        d: Deferred[Any] = succeed(None)
        for name, source in SCRIPTS.items():
            def load(_: object, name: str = name, source: str = source) -> Deferred[None]:
                return proto.execute_command("SCRIPT", "LOAD", source).addCallback(
                    lambda sha: self._shas.__setitem__(name, sha))
            d.addCallback(load)
        return d

    def _subscribe(self, proto: RedisConnection) -> Deferred[Any]:
        """The subscriber link's preparation: listen on this node's channel."""
        subscriber = cast(_SubscriberProtocol, proto)   # the subscriber link's protocol
        return subscriber.subscribe(self.channel)

    def _message(self, channel: str, message: str | bytes) -> None:
        """Another node took over a session of ours."""
        if isinstance(message, bytes):
            message = message.decode("utf-8", "replace")
        if not isinstance(message, str) or self.on_moved is None:
            return
        try:
            self.on_moved(message)
        except Exception:
            log.failure("handling a moved session failed")

    # -- commands ---------------------------------------------------------------
    @property
    def available(self) -> bool:
        return self.link.connected

    def key(self, sid: str) -> str:
        return f"{self.url.prefix}session:{sid}"

    def _send(self, *args: RedisArg) -> Deferred[Any]:
        return self.link.send(*args)

    def _failed(self, failure: Failure) -> Failure:
        self.counters["errors"] += 1
        if failure.check(txredisapi.ConnectionError):
            raise RegistryUnavailable(failure.getErrorMessage())
        return failure

    def _run(self, *args: RedisArg) -> Deferred[Any]:
        return self._send(*args).addErrback(self._failed)

    def _script(self, name: str, keys: list[str], args: list[RedisArg]) -> Deferred[Any]:
        return run_script(self._send, self._shas.get(name, ""), SCRIPTS[name], keys,
                          args).addErrback(self._failed)

    def _ttl_ms(self, ttl: float | None = None) -> int:
        return max(1, int((self.ttl if ttl is None else ttl) * 1000))

    def write(self, sid: str, record: SessionRecord, take: bool = False,
              ttl: float | None = None) -> Deferred:
        fields = record.fields()
        fields.pop("owner", None)
        args: list[RedisArg] = [self.node_id, self._ttl_ms(ttl), "1" if take else "0"]
        for name, value in fields.items():
            args += [name, value]

        def done(reply: list) -> tuple[str, str | None]:
            status, owner = reply
            if status != 1:
                return MOVED, owner
            self.counters["writes"] += 1
            return OK, owner or None
        return self._script("write", [self.key(sid)], args).addCallback(done)

    def refresh(self, sid: str, fields: dict[str, str] | None = None,
                ttl: float | None = None) -> Deferred:
        args: list[Any] = [self.node_id, self._ttl_ms(ttl)]
        for name, value in (fields or {}).items():
            args += [name, value]

        def done(status: int) -> str:
            if status == 1:
                self.counters["refreshes"] += 1
                return OK
            return MISSING if status == 0 else MOVED
        return self._script("refresh", [self.key(sid)], args).addCallback(done)

    def lookup(self, sid: str) -> Deferred:
        self.counters["lookups"] += 1

        def parse(flat: list) -> SessionRecord | None:
            if not flat:
                return None
            return SessionRecord.parse(dict(zip(flat[::2], flat[1::2])))
        return self._run("HGETALL", self.key(sid)).addCallback(parse)

    def owner(self, sid: str) -> Deferred:
        return self._run("HGET", self.key(sid), "owner")

    def delete(self, sid: str) -> Deferred:
        self.counters["deletes"] += 1
        return self._run("DEL", self.key(sid)).addCallback(lambda n: n > 0)

    def release(self, sid: str) -> Deferred:
        def done(n: int) -> bool:
            if n:
                self.counters["deletes"] += 1
            return n > 0
        return self._script("release", [self.key(sid)], [self.node_id]).addCallback(done)

    def moved(self, sid: str, previous_owner: str) -> Deferred:
        channel = f"{self.url.prefix}moved:{self.url.db}:{previous_owner}"
        return self._run("PUBLISH", channel, sid)

    # -- operations ---------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return self.link.health(subscribed=self.subscriber.connected)

    def stats(self) -> dict[str, float]:
        return {**self.counters, "connected": int(self.available),
                "subscribed": int(self.subscriber.connected)}


__all__ = ["SCRIPTS", "RedisRegistry", "RedisUrl", "parse_redis_url", "redis_endpoint"]
