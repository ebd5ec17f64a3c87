"""The session registry in Redis: ``--redis redis://host:6379/0``.

Each session is one hash, ``{prefix}session:{sid}`` (fields in
:mod:`pushengine.cluster.record`), with a TTL. Writes, refreshes and the
release on expiry compare the ``owner`` field in a short Lua script, so a
node never overwrites or deletes an entry another node took over. A node
that takes a session over publishes its id on the previous owner's channel,
``{prefix}moved:{db}:{node id}``, and that node drops its stale copy.

Connections: txredisapi's own factories and pool reconnect by themselves on
the global reactor, so they are not used. Instead there are two connections
(commands, and the subscriber of this node's channel), each kept by a
``ClientService`` with ``backoffPolicy`` on the injected reactor around
txredisapi's protocol, whose timers are moved to that reactor as well. A
command that gets no answer within ``timeout`` fails and drops the
connection, which is then made again.

Redis down: every operation fails at once with RegistryUnavailable (nothing
queues up); the hooks count the dropped writes and write again on the next
poll, the resumer answers 1001 as a node without a registry does.

URL: ``redis://[[user]:password@]host[:port][/db][?prefix=P&timeout=S&refresh=S]``
(``rediss://`` for TLS). ``prefix`` (default ``pushengine:``) starts every
key; ``timeout`` (2 s) bounds each command; ``refresh`` (10 s) is how often a
polling session's entry has its TTL renewed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import parse_qsl, unquote, urlsplit

import txredisapi
from twisted.application import service
from twisted.application.internet import ClientService, backoffPolicy
from twisted.internet import protocol
from twisted.internet.defer import Deferred, fail, gatherResults, succeed
from twisted.internet.abstract import isIPAddress as isIPv4Address, isIPv6Address
from twisted.internet.endpoints import (
    HostnameEndpoint, TCP4ClientEndpoint, TCP6ClientEndpoint, wrapClientTLS)
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from pushengine.cluster.record import SessionRecord
from pushengine.cluster.registry import MISSING, MOVED, OK, RegistryUnavailable, new_counters

log = Logger()

DEFAULT_PORT = 6379
_PREFIX = re.compile(r"^[A-Za-z0-9_.:{}-]{0,100}$")

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


def redis_endpoint(reactor: Any, url: Any) -> IStreamClientEndpoint:
    """The endpoint of a parsed Redis URL. An address needs no name
    resolution (which would start the reactor's thread pool for getaddrinfo).
    Every Redis adapter (registry, Bloom filters, segments) connects this way."""
    host, port, timeout = url.host, url.port, max(1, int(url.timeout))
    if isIPv4Address(host):
        endpoint = TCP4ClientEndpoint(reactor, host, port, timeout=timeout)
    elif isIPv6Address(host):
        endpoint = TCP6ClientEndpoint(reactor, host, port, timeout=timeout)
    else:
        endpoint = HostnameEndpoint(reactor, host, port, timeout=timeout)
    if url.tls:
        from twisted.internet.ssl import optionsForClientTLS
        endpoint = wrapClientTLS(optionsForClientTLS(host), endpoint)
    return endpoint


@dataclass(frozen=True)
class RedisUrl:
    """Where the registry is; ``str()`` never shows the password."""

    host: str = "localhost"
    port: int = DEFAULT_PORT
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    prefix: str = "pushengine:"
    timeout: float = 2.0
    refresh: float = 10.0

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'rediss' if self.tls else 'redis'}://{host}:{self.port}/{self.db}"


def parse_redis_url(url: str) -> RedisUrl:
    """Parse a ``--redis`` URL; ValueError says what is wrong."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("redis", "rediss"):
        raise ValueError(f"not a redis:// URL: {url!r}")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise ValueError(f"bad port in {url!r}") from None
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise ValueError(f"the database in {url!r} must be a number")
    options: dict[str, Any] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == "prefix":
            if not _PREFIX.match(value):
                raise ValueError("prefix may hold letters, digits and _ . : - { } only")
            options["prefix"] = value
        elif name in ("timeout", "refresh"):
            try:
                options[name] = float(value)
            except ValueError:
                raise ValueError(f"{name} must be a number of seconds") from None
            if not 0 < options[name] < 3600:
                raise ValueError(f"{name} must be between 0 and 3600 seconds")
        else:
            raise ValueError(f"unknown parameter {name!r} in {url!r}")
    return RedisUrl(
        host=parts.hostname or "localhost", port=port, db=int(path or 0),
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        tls=parts.scheme == "rediss", **options)


class _CommandProtocol(txredisapi.RedisProtocol):
    """txredisapi's protocol with its timers on the injected reactor and
    replies as text (numbers are not guessed: a user id stays what it was)."""

    def __init__(self, clock: Any, timeout: float | None) -> None:
        super().__init__(charset="utf-8", replyTimeout=timeout, convertNumbers=False)
        self.callLater = clock.callLater


class _SubscriberProtocol(txredisapi.SubscriberProtocol):
    def __init__(self, clock: Any, on_message: Callable[[Any, Any], None]) -> None:
        super().__init__(charset="utf-8", convertNumbers=False)
        self.callLater = clock.callLater
        self.on_message = on_message

    def messageReceived(self, pattern: Any, channel: Any, message: Any) -> None:
        self.on_message(channel, message)


class _Factory(protocol.Factory):
    noisy = False

    def __init__(self, make: Callable[[], protocol.Protocol]) -> None:
        self.make = make

    def buildProtocol(self, addr: Any) -> protocol.Protocol:
        p = self.make()
        p.factory = self
        return p


@implementer(IStreamClientEndpoint)
class _ObservedEndpoint:
    """An endpoint that tells the registry when connecting fails."""

    def __init__(self, endpoint: IStreamClientEndpoint, failed: Callable[[Failure], None]) -> None:
        self._endpoint = endpoint
        self._failed = failed

    def connect(self, factory: Any) -> Deferred:
        d = self._endpoint.connect(factory)

        def failed(f: Failure) -> Failure:
            self._failed(f)
            return f
        return d.addErrback(failed)


class RedisRegistry(service.Service):
    """The registry of one node; a service (add it to the application)."""

    def __init__(self, reactor: Any, url: str | RedisUrl, node_id: str, ttl: float,
                 endpoint: IStreamClientEndpoint | None = None) -> None:
        self.reactor = reactor
        self.url = parse_redis_url(url) if isinstance(url, str) else url
        self.node_id = node_id
        self.ttl = ttl
        self.on_moved: Callable[[str], None] | None = None
        self.counters = new_counters()
        self.channel = f"{self.url.prefix}moved:{self.url.db}:{node_id}"
        self._proto: _CommandProtocol | None = None
        self._subscribed: _SubscriberProtocol | None = None
        self._shas: dict[str, str] = {}
        self._down_since: float | None = reactor.seconds()
        self._last_error: str | None = None
        self._said_down = False
        base = endpoint or self._endpoint()
        timeout = self.url.timeout

        def policy() -> Callable[[int], float]:
            return backoffPolicy(initialDelay=0.2, maxDelay=5.0)
        self._commands = ClientService(
            _ObservedEndpoint(base, self._connect_failed),
            _Factory(lambda: _CommandProtocol(reactor, timeout)),
            retryPolicy=policy(), clock=reactor, prepareConnection=self._prepare)
        self._subscriber = ClientService(
            _ObservedEndpoint(base, lambda f: None),
            _Factory(lambda: _SubscriberProtocol(reactor, self._message)),
            retryPolicy=policy(), clock=reactor, prepareConnection=self._prepare_subscriber)

    def _endpoint(self) -> IStreamClientEndpoint:
        return redis_endpoint(self.reactor, self.url)

    # -- the connections --------------------------------------------------------
    def startService(self) -> None:
        super().startService()
        self._commands.startService()
        self._subscriber.startService()

    def stopService(self) -> Deferred:
        super().stopService()
        self._proto = None
        self._subscribed = None
        return gatherResults([self._commands.stopService(), self._subscriber.stopService()],
                             consumeErrors=True)

    def _login(self, proto: Any) -> Deferred:
        if self.url.password is None:
            return succeed(None)
        creds = [self.url.username, self.url.password] if self.url.username else [
            self.url.password]
        return proto.execute_command("AUTH", *creds)

    def _prepare(self, proto: _CommandProtocol) -> Deferred:
        """Log in, choose the database, load the scripts: then the
        connection serves commands."""
        d = self._login(proto)
        d.addCallback(lambda _: proto.execute_command("SELECT", self.url.db))
        for name, source in SCRIPTS.items():
            def load(_: Any, name: str = name, source: str = source) -> Deferred:
                return proto.execute_command("SCRIPT", "LOAD", source).addCallback(
                    lambda sha: self._shas.__setitem__(name, sha))
            d.addCallback(load)
        d.addCallback(lambda _: self._ready(proto))
        d.addErrback(self._prepare_failed)
        return d

    def _prepare_failed(self, failure: Failure) -> Failure:
        self._went_down(f"Redis refused the connection setup: {failure.getErrorMessage()}")
        return failure  # ClientService drops the connection and tries again

    def _ready(self, proto: _CommandProtocol) -> None:
        self._proto = proto
        self.counters["connects"] += 1
        if self._said_down:
            log.info("connected to Redis {url} again after {seconds:.1f} s", url=str(self.url),
                     seconds=self.reactor.seconds() - (self._down_since or 0))
        else:
            log.info("connected to Redis {url}", url=str(self.url))
        self._down_since = None
        self._said_down = False
        self._last_error = None
        # (``proto`` is ClientService's proxy; the Deferred fires with the protocol)
        proto.whenDisconnected().addCallback(lambda _: self._lost(proto))

    def _lost(self, proto: _CommandProtocol) -> None:
        if proto is not self._proto:
            return
        self._proto = None
        self.counters["disconnects"] += 1
        if self.running:
            self._went_down("the connection to Redis was lost")

    def _connect_failed(self, failure: Failure) -> None:
        self._went_down(f"cannot connect to Redis: {failure.getErrorMessage()}")

    def _went_down(self, why: str) -> None:
        self._last_error = why
        if self._down_since is None:
            self._down_since = self.reactor.seconds()
        if not self._said_down:
            self._said_down = True
            log.warn("{why} ({url}); the sessions this node holds keep working, resuming "
                     "sessions of other nodes is unavailable until Redis is back",
                     why=why, url=str(self.url))

    def _prepare_subscriber(self, proto: _SubscriberProtocol) -> Deferred:
        d = self._login(proto)
        d.addCallback(lambda _: proto.subscribe(self.channel))

        def subscribed(_: Any) -> None:
            self._subscribed = proto
            proto.whenDisconnected().addCallback(lambda _: self._unsubscribed(proto))
        return d.addCallback(subscribed)

    def _unsubscribed(self, proto: _SubscriberProtocol) -> None:
        if proto is self._subscribed:
            self._subscribed = None

    def _message(self, channel: Any, message: Any) -> None:
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
        return self._proto is not None

    def key(self, sid: str) -> str:
        return f"{self.url.prefix}session:{sid}"

    def _send(self, *args: Any) -> Deferred:
        proto = self._proto
        if proto is None:
            return fail(RegistryUnavailable(self._last_error or "Redis is not connected"))
        try:
            return proto.execute_command(*args)
        except Exception as e:
            return fail(e)

    def _failed(self, failure: Failure) -> Failure:
        self.counters["errors"] += 1
        if failure.check(txredisapi.ConnectionError):
            raise RegistryUnavailable(failure.getErrorMessage())
        return failure

    def _run(self, *args: Any) -> Deferred:
        return self._send(*args).addErrback(self._failed)

    def _script(self, name: str, keys: list[str], args: list[Any]) -> Deferred:
        sha = self._shas.get(name)
        d = self._send("EVALSHA", sha, len(keys), *keys, *args)

        def noscript(failure: Failure) -> Any:
            failure.trap(txredisapi.ResponseError)
            if not str(failure.value).startswith("NOSCRIPT"):
                return failure
            return self._send("EVAL", SCRIPTS[name], len(keys), *keys, *args)
        return d.addErrback(noscript).addErrback(self._failed)

    def _ttl_ms(self) -> int:
        return max(1, int(self.ttl * 1000))

    def write(self, sid: str, record: SessionRecord, take: bool = False) -> Deferred:
        fields = record.fields()
        fields.pop("owner", None)
        args: list[Any] = [self.node_id, self._ttl_ms(), "1" if take else "0"]
        for name, value in fields.items():
            args += [name, value]

        def done(reply: list) -> tuple[str, str | None]:
            status, owner = reply
            if status != 1:
                return MOVED, owner
            self.counters["writes"] += 1
            return OK, owner or None
        return self._script("write", [self.key(sid)], args).addCallback(done)

    def refresh(self, sid: str, fields: dict[str, str] | None = None) -> Deferred:
        args: list[Any] = [self.node_id, self._ttl_ms()]
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
        report: dict[str, Any] = {"up": self.available, "kind": "redis", "server": str(self.url),
                                  "subscribed": self._subscribed is not None}
        if not self.available:
            if self._down_since is not None:
                report["down_for"] = round(self.reactor.seconds() - self._down_since, 1)
            if self._last_error:
                report["error"] = self._last_error
        return report

    def stats(self) -> dict[str, float]:
        return {**self.counters, "connected": int(self.available),
                "subscribed": int(self._subscribed is not None)}
