"""One Redis connection, kept up on the injected reactor: what every Redis
adapter (session registry, Bloom filters, segments, presence) connects with.

txredisapi's own factories and pool reconnect by themselves on the global
reactor, so they are not used. A :class:`RedisLink` keeps one connection with
a ``ClientService`` and ``backoffPolicy`` on the injected reactor around
txredisapi's protocol, whose timers are moved to that reactor as well
(through its ``callLater`` attribute, not a documented hook: checked with
txredisapi 1.6.0). A command that gets no answer within the timeout fails
and drops the connection, which is then made again. Each new connection
logs in (AUTH), chooses the database (SELECT) and runs the adapter's own
preparation (loading scripts, subscribing) before it serves commands.

Redis down: :meth:`RedisLink.send` fails at once with the adapter's own
"unavailable" exception (nothing queues up), and :meth:`RedisLink.health`
says since when and why.

URL: ``redis://[[user]:password@]host[:port][/db][?prefix=P&timeout=S&refresh=S]``
(``rediss://`` for TLS). ``prefix`` (default ``pushengine:``) starts every
key; ``timeout`` (2 s) bounds each command; ``refresh`` (10 s) is how often a
polling session's entry in the registry has its TTL renewed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Iterable, Mapping, Protocol as TypingProtocol, Sequence, \
    TypeVar, cast
from urllib.parse import parse_qsl, unquote, urlsplit

import txredisapi
from twisted.application import service
from twisted.application.internet import ClientService, backoffPolicy
from twisted.internet.abstract import isIPAddress as isIPv4Address, isIPv6Address
from twisted.internet.defer import CancelledError, Deferred, fail, maybeDeferred, succeed
from twisted.internet.endpoints import (
    HostnameEndpoint, TCP4ClientEndpoint, TCP6ClientEndpoint, wrapClientTLS)
from twisted.internet.interfaces import (
    IAddress, IProtocol, IProtocolFactory, IReactorTCP, IReactorTime, IStreamClientEndpoint)
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

log = Logger()

DEFAULT_PORT = 6379
_PREFIX = re.compile(r"^[A-Za-z0-9_.:{}-]{0,100}$")


# a Redis command's arguments, as txredisapi sends them
RedisArg = str | bytes | int | float


T = TypeVar("T")


def hash_pairs(reply: Mapping[T, T] | Sequence[T]) -> Iterable[tuple[T, T]]:
    """The (field, value) pairs of an HGETALL reply: a mapping, or the
    flat list field, value, field, value..."""
    if isinstance(reply, Mapping):
        return reply.items()
    return zip(reply[::2], reply[1::2])


def run_script(send: Callable[..., Deferred[Any]], sha: str, source: str,
               keys: Sequence[str], args: Sequence[RedisArg]) -> Deferred[Any]:
    """A Lua script by its SHA-1 (``send("EVALSHA", ...)``), sent whole
    with EVAL when the server does not know it (restarted or flushed since
    the connection loaded it)."""
    d = send("EVALSHA", sha, len(keys), *keys, *args)

    def noscript(failure: Failure) -> Failure | Deferred[Any]:
        failure.trap(txredisapi.ResponseError)
        if not str(failure.value).startswith("NOSCRIPT"):
            return failure
        return send("EVAL", source, len(keys), *keys, *args)
    return d.addErrback(noscript)


class RedisConnection(TypingProtocol):
    """What the adapters use of a txredisapi connection."""

    def execute_command(self, *args: RedisArg) -> Deferred[Any]: ...

    def whenDisconnected(self) -> Deferred[Any]: ...  # noqa: N802 (txredisapi's name)


@dataclass(frozen=True)
class RedisUrl:
    """Where Redis is; ``str()`` never shows the password."""

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


def redis_endpoint(reactor: IReactorTCP, url: RedisUrl) -> IStreamClientEndpoint:
    """The endpoint of a parsed Redis URL. An address needs no name
    resolution (which would start the reactor's thread pool for getaddrinfo)."""
    host, port, timeout = url.host, url.port, max(1, int(url.timeout))
    endpoint: IStreamClientEndpoint
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


class _CommandProtocol(txredisapi.RedisProtocol):
    """txredisapi's protocol with its timers on the injected reactor and
    replies as text (numbers are not guessed: a user id stays what it was)."""

    def __init__(self, clock: IReactorTime, timeout: float | None) -> None:
        super().__init__(charset="utf-8", replyTimeout=timeout, convertNumbers=False)
        self.callLater = clock.callLater


class _Factory(Factory):
    noisy = False

    def __init__(self, make: Callable[[], Protocol]) -> None:
        self.make = make

    def buildProtocol(self, addr: IAddress | None) -> Protocol:
        p = self.make()
        p.factory = self
        return p


@implementer(IStreamClientEndpoint)
class _ObservedEndpoint:
    """An endpoint that tells the link when connecting fails."""

    def __init__(self, endpoint: IStreamClientEndpoint, failed: Callable[[Failure], None]) -> None:
        self._endpoint = endpoint
        self._failed = failed

    def connect(self, factory: IProtocolFactory) -> Deferred[IProtocol]:
        d = self._endpoint.connect(factory)

        def failed(f: Failure) -> Failure:
            self._failed(f)
            return f
        return d.addErrback(failed)


class RedisLink(service.Service):
    """One connection to Redis, made again whenever it is lost; a service
    the adapter owning it starts and stops.

    - ``unavailable(text)`` makes the exception :meth:`send` fails with
      while there is no connection (the adapter's own class).
    - ``on_ready(proto)``, the adapter's preparation of a new connection
      after AUTH and SELECT (a Deferred, or None); the connection serves
      commands once it is done.
    - ``endpoint`` replaces the URL's (tests); ``timeout`` the URL's reply
      timeout; ``protocol`` makes another protocol than the command one
      (a subscriber), and ``select=False`` skips SELECT for it.
    - ``name``: the link logs when it connects and, once per outage, when
      it goes down, with ``effect`` saying what that means for the node
      (no name: it logs nothing).
    - ``counters``: the dict in which ``connects`` and ``disconnects`` are
      counted (its own by default).
    """

    def __init__(self, reactor: IReactorTime, url: str | RedisUrl,
                 unavailable: Callable[[str], Exception], *,
                 endpoint: IStreamClientEndpoint | None = None,
                 on_ready: Callable[[RedisConnection], object] | None = None,
                 timeout: float | None = None,
                 protocol: Callable[[], txredisapi.RedisProtocol] | None = None,
                 select: bool = True, name: str | None = None, effect: str = "",
                 counters: dict[str, int] | None = None) -> None:
        self.reactor = reactor
        self.url = parse_redis_url(url) if isinstance(url, str) else url
        self.unavailable = unavailable
        self.on_ready = on_ready
        self.select = select
        self.name = name
        self.effect = effect
        self.counters = counters if counters is not None else {"connects": 0, "disconnects": 0}
        self.proto: RedisConnection | None = None   # the connection serving commands
        self.error: str | None = None        # why it is down
        self.down_since: float | None = reactor.seconds()
        self._said_down = False
        if protocol is None:
            protocol = partial(_CommandProtocol, reactor,
                               self.url.timeout if timeout is None else timeout)
        if endpoint is None:       # the reactor makes TCP connections too
            endpoint = redis_endpoint(cast(IReactorTCP, reactor), self.url)
        self._client = ClientService(
            _ObservedEndpoint(endpoint, self._connect_failed), _Factory(protocol),
            retryPolicy=backoffPolicy(initialDelay=0.2, maxDelay=5.0), clock=reactor,
            prepareConnection=self._prepare)

    @property
    def connected(self) -> bool:
        return self.proto is not None

    def startService(self) -> None:
        super().startService()
        self._client.startService()

    def stopService(self) -> Deferred:
        super().stopService()
        self.proto = None
        return self._client.stopService()

    def whenReady(self) -> Deferred:
        """Fires once connected and prepared (tests)."""
        return self._client.whenConnected().addCallback(lambda _: None)

    # -- the connection's life ---------------------------------------------------
    def _prepare(self, connection: IProtocol) -> Deferred[None]:
        """Log in, choose the database, run the adapter's preparation: then
        the connection serves commands. On a failure the link drops the
        connection itself and lets ClientService take it for connected: a
        failure handed to ClientService leaves it waiting to retry while the
        connection it did not close is still open, and its loss then finds
        no transition in that state (an unhandled error in Twisted 26)."""
        proto = cast(RedisConnection, connection)     # a txredisapi protocol
        d: Deferred[Any] = succeed(None)
        url = self.url
        if url.password is not None:
            creds = [url.username, url.password] if url.username else [url.password]
            d.addCallback(lambda _: proto.execute_command("AUTH", *creds))
        if self.select:
            d.addCallback(lambda _: proto.execute_command("SELECT", url.db))
        on_ready = self.on_ready
        if on_ready is not None:
            d.addCallback(lambda _: maybeDeferred(on_ready, proto))
        d.addCallback(lambda _: self._ready(proto))
        d.addErrback(self._prepare_failed, proto)
        return d

    def _prepare_failed(self, failure: Failure, proto: RedisConnection) -> Failure | None:
        if failure.check(CancelledError):
            return failure      # the service stops while connecting: ClientService's own
        self._went_down(f"Redis refused the connection setup: {failure.getErrorMessage()}")
        transport = getattr(proto, "transport", None)
        if transport is not None:
            transport.loseConnection()      # ClientService connects again
        return None

    def _ready(self, proto: RedisConnection) -> None:
        self.proto = proto
        self.counters["connects"] += 1
        if self.name is not None:
            if self._said_down:
                log.info("{name}: connected to Redis {url} again after {seconds:.1f} s",
                         name=self.name, url=str(self.url),
                         seconds=self.reactor.seconds() - (self.down_since or 0))
            else:
                log.info("{name}: connected to Redis {url}", name=self.name, url=str(self.url))
        self.down_since = None
        self._said_down = False
        self.error = None
        # (``proto`` is ClientService's proxy; the Deferred fires with the protocol)
        proto.whenDisconnected().addCallback(lambda _: self._lost(proto)).addErrback(
            lambda f: log.failure("noting a lost Redis connection failed", f))

    def _lost(self, proto: RedisConnection) -> None:
        if proto is not self.proto:
            return
        self.proto = None
        self.counters["disconnects"] += 1
        if self.running:
            self._went_down("the connection to Redis was lost")

    def _connect_failed(self, failure: Failure) -> None:
        self._went_down(f"cannot connect to Redis: {failure.getErrorMessage()}")

    def _went_down(self, why: str) -> None:
        self.error = why
        if self.down_since is None:
            self.down_since = self.reactor.seconds()
        if not self._said_down:
            self._said_down = True
            if self.name is not None:
                log.warn("{name}: {why} ({url}); {effect}", name=self.name, why=why,
                         url=str(self.url), effect=self.effect)

    # -- use -----------------------------------------------------------------------
    def send(self, *args: RedisArg) -> Deferred[Any]:
        """One command; fails at once with ``unavailable`` while there is
        no connection, and with ``unavailable`` too when the connection is
        lost before the answer (Redis stopped, or the node shutting down):
        an expected outage, which callers report without a traceback."""
        proto = self.proto
        if proto is None:
            return fail(self.unavailable(self.error or "Redis is not connected"))
        try:
            d = proto.execute_command(*args)
        except txredisapi.ConnectionError as e:     # lost, and not noticed yet
            return fail(self.unavailable(str(e)))
        except Exception as e:
            return fail(e)
        return d.addErrback(self._lost_mid_command)

    def _lost_mid_command(self, failure: Failure) -> None:
        failure.trap(txredisapi.ConnectionError)
        raise self.unavailable(failure.getErrorMessage())

    def health(self, **extra: object) -> dict[str, Any]:
        """``{"up", "kind", "server", **extra}``, and while down ``down_for``
        and ``error``."""
        report: dict[str, Any] = {"up": self.connected, "kind": "redis",
                                  "server": str(self.url), **extra}
        if not self.connected:
            if self.down_since is not None:
                report["down_for"] = round(self.reactor.seconds() - self.down_since, 1)
            if self.error:
                report["error"] = self.error
        return report


__all__ = ["DEFAULT_PORT", "RedisArg", "RedisConnection", "RedisLink", "RedisUrl",
           "hash_pairs", "parse_redis_url", "redis_endpoint", "run_script"]
