"""The real backend: memcached servers over Twisted's memcache protocol.

One connection per server, each kept by a ``ClientService`` (reconnecting
with ``backoffPolicy``). Keys are spread by ketama-compatible consistent
hashing (``uhashring``). A server whose connection fails, drops or misses a
per-operation deadline is marked down for ``retry_delay`` seconds: its keys
move to the other servers meanwhile, and come back when it is connected
again and the delay has passed. Every operation ends, within ``timeout``
seconds, with an answer or a :class:`CacheUnavailable` failure.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterable, Mapping, cast

from twisted.application.internet import ClientService, backoffPolicy
from twisted.application.service import MultiService
from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP6ClientEndpoint
from twisted.internet.interfaces import (
    IDelayedCall, IProtocol, IProtocolFactory, IReactorTCP, IReactorTime, IStreamClientEndpoint)
from twisted.logger import Logger
from twisted.protocols.memcache import ClientError, ServerError
from twisted.python.failure import Failure
from uhashring import HashRing
from zope.interface import implementer

from pushengine.memcache.errors import (
    BadValue,
    CacheError,
    CacheTimeout,
    CacheUnavailable,
    KeyExists,
    NotFound,
    ValueTooLarge,
)
from pushengine.memcache.memory import check_delta, check_expire, check_value
from pushengine.memcache.protocol import (
    EXISTS, NOT_FOUND, NOT_STORED, Answer, WireFactory, WireProtocol)
from pushengine.memcache.keys import wire_key

log = Logger()

DEFAULT_PORT = 11211


def parse_servers(option: str | Iterable[str]) -> list[str]:
    """``"host:port,host"`` (or a list) → ``["host:port", ...]``.

    The port defaults to 11211; IPv6 addresses are written ``[::1]:11211``.
    """
    items = option.split(",") if isinstance(option, str) else list(option)
    servers = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, port = split_server(item)
        servers.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    if not servers:
        raise ValueError(f"no memcached server in {option!r}")
    return servers


def split_server(server: str) -> tuple[str, int]:
    if server.startswith("["):
        host, _, rest = server[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif server.count(":") == 1:
        host, _, port = server.partition(":")
    else:
        host, port = server, ""
    if not host:
        raise ValueError(f"no host in memcached server {server!r}")
    return host, int(port) if port else DEFAULT_PORT


class _NotSent(Exception):
    """The command never reached the server: safe to send elsewhere."""


@implementer(IStreamClientEndpoint)
class _ObservedEndpoint:
    """An endpoint that tells its server when a connection attempt fails."""

    def __init__(self, endpoint: IStreamClientEndpoint, server: "ServerConnection") -> None:
        self._endpoint = endpoint
        self._server = server

    def connect(self, factory: IProtocolFactory) -> Deferred[IProtocol]:
        d = self._endpoint.connect(factory)
        d.addErrback(self._failed)
        return d

    def _failed(self, failure: Failure) -> Failure:
        self._server.connect_failed(failure)
        return failure


def _get_multiple(keys: list[bytes]) -> Callable[[WireProtocol], Deferred]:
    return lambda protocol: protocol.getMultiple(keys)


class ServerConnection:
    """One memcached server: its connection, its up/down state and the
    commands waiting for it to connect."""

    def __init__(
        self,
        client: "MemcacheClient",
        name: str,
        endpoint: IStreamClientEndpoint,
        clock: IReactorTime,
        retry_delay: float,
    ) -> None:
        self.client = client
        self.name = name
        self.clock = clock
        self.retry_delay = retry_delay
        self.protocol: WireProtocol | None = None
        self.down_until = 0.0
        self.failed = False  # a connection failed or dropped, none made since
        self.failures = 0
        self.stopping = False
        self._waiting: list[tuple[Callable[[WireProtocol], Deferred], float, Deferred]] = []
        self._wait_timer: IDelayedCall | None = None
        self.service = ClientService(
            _ObservedEndpoint(endpoint, self),
            WireFactory(clock, self),
            retryPolicy=backoffPolicy(initialDelay=min(0.5, retry_delay), maxDelay=retry_delay),
            clock=clock,
        )

    # -- state ----------------------------------------------------------------

    def available(self, now: float) -> bool:
        """Whether keys may be sent here now."""
        return now >= self.down_until and (self.protocol is not None or not self.failed)

    def mark_down(self, why: str) -> None:
        was_down = self.clock.seconds() < self.down_until
        self.down_until = self.clock.seconds() + self.retry_delay
        self.failures += 1
        if not was_down:
            log.warn(
                "memcached {server} marked down for {delay}s: {why}",
                server=self.name, delay=self.retry_delay, why=why,
            )
        self.client._servers_changed()

    def connected(self, protocol: WireProtocol) -> None:
        if self.stopping:
            if protocol.transport is not None:
                protocol.transport.loseConnection()
            return
        self.protocol = protocol
        self.failed = False
        if self.failures:
            log.info("memcached {server} connected again", server=self.name)
        self.client._servers_changed()
        waiting, self._waiting = self._waiting, []
        self._cancel_wait_timer()
        for call, deadline, d in waiting:
            self._send(call, deadline).chainDeferred(d)

    def connect_failed(self, failure: Failure) -> None:
        if self.stopping:
            return
        self.failed = True
        self.mark_down(f"cannot connect: {failure.getErrorMessage()}")
        self._release_waiting(_NotSent(failure.getErrorMessage()))

    def lost(self, protocol: WireProtocol, reason: Failure) -> None:
        if protocol is not self.protocol:
            return
        self.protocol = None
        if self.stopping:
            return
        self.failed = True
        self.mark_down(f"connection lost: {reason.getErrorMessage()}")

    def timed_out(self, protocol: WireProtocol) -> None:
        self.client.counters["timeouts"] += 1
        if protocol is self.protocol:
            self.failed = True
            self.protocol = None
            self.mark_down("no answer within the timeout")

    def stop(self) -> None:
        self.stopping = True
        self._release_waiting(CacheUnavailable("the memcached client is stopped"))

    # -- commands -------------------------------------------------------------

    def submit(self, call: Callable[[WireProtocol], Deferred], deadline: float) -> Deferred:
        """Run ``call(protocol)`` now, or once connected; fail with
        ``_NotSent`` if the server goes down before it could be sent."""
        if self.stopping:
            return fail(CacheUnavailable("the memcached client is stopped"))
        if self.protocol is not None:
            return self._send(call, deadline)
        d: Deferred = Deferred()
        self._waiting.append((call, deadline, d))
        self._arm_wait_timer()
        return d

    def _send(self, call: Callable[[WireProtocol], Deferred], deadline: float) -> Deferred:
        protocol = self.protocol
        if protocol is None:
            return fail(_NotSent("not connected"))
        before = protocol.pending()
        d = call(protocol)
        if protocol.pending() > before:
            protocol.track(deadline)
        return d

    def _arm_wait_timer(self) -> None:
        if not self._waiting:
            return
        first = min(deadline for _, deadline, _ in self._waiting)
        if self._wait_timer is not None and self._wait_timer.active():
            if self._wait_timer.getTime() <= first:
                return
            self._wait_timer.cancel()
        delay = max(0.0, first - self.clock.seconds())
        self._wait_timer = self.clock.callLater(delay, self._wait_expired)

    def _cancel_wait_timer(self) -> None:
        if self._wait_timer is not None and self._wait_timer.active():
            self._wait_timer.cancel()
        self._wait_timer = None

    def _wait_expired(self) -> None:
        self._wait_timer = None
        now = self.clock.seconds()
        late = [w for w in self._waiting if w[1] <= now]
        if not late:
            self._arm_wait_timer()
            return
        self._waiting = [w for w in self._waiting if w[1] > now]
        self.client.counters["timeouts"] += len(late)
        self.failed = True
        self.mark_down("no connection within the timeout")
        for _, _, d in late:
            d.errback(CacheTimeout(f"memcached {self.name}: no connection in time"))
        self._release_waiting(_NotSent("server marked down"))

    def _release_waiting(self, error: Exception) -> None:
        waiting, self._waiting = self._waiting, []
        self._cancel_wait_timer()
        for _, _, d in waiting:
            d.errback(error)

    def health(self, now: float) -> dict[str, Any]:
        return {
            "up": self.available(now),
            "connected": self.protocol is not None,
            "down_for": round(max(0.0, self.down_until - now), 3),
            "failures": self.failures,
        }


class MemcacheClient(MultiService):
    """A :class:`~pushengine.memcache.interface.Cache` on memcached servers.

    It is a service: add it to the application's MultiService (or call
    ``startService``/``stopService``); commands issued before it connects
    wait for the connection, up to ``timeout``.
    """

    def __init__(
        self,
        reactor: IReactorTCP,
        servers: Iterable[str] | str,
        timeout: float = 1.0,
        retry_delay: float = 10.0,
        clock: IReactorTime | None = None,
        connect_timeout: float | None = None,
    ) -> None:
        super().__init__()
        self.reactor = reactor
        # the reactor is a clock too
        self.clock = clock if clock is not None else cast(IReactorTime, reactor)
        self.timeout = timeout
        self.counters = {"ops": 0, "hits": 0, "misses": 0, "errors": 0, "timeouts": 0}
        self.servers: dict[str, ServerConnection] = {}
        for name in parse_servers(servers):
            host, port = split_server(name)
            connect_within = max(1, round(connect_timeout or timeout))
            endpoint: IStreamClientEndpoint = (
                TCP6ClientEndpoint(reactor, host, port, timeout=connect_within) if ":" in host
                else TCP4ClientEndpoint(reactor, host, port, timeout=connect_within))
            server = ServerConnection(self, name, endpoint, self.clock, retry_delay)
            self.servers[name] = server
            server.service.setServiceParent(self)
        self._live: list[ServerConnection] = []
        self._ring: HashRing | None = None
        self._dirty = True
        self._recheck_at = 0.0

    @classmethod
    def from_option(cls, reactor: IReactorTCP, option: str, **kwargs: Any) -> "MemcacheClient":
        """Build from a ``--memcache host:port,host:port`` option string."""
        return cls(reactor, parse_servers(option), **kwargs)

    # -- service --------------------------------------------------------------

    def startService(self) -> None:  # noqa: N802
        for server in self.servers.values():
            server.stopping = False
        super().startService()

    def stopService(self) -> Deferred:  # noqa: N802
        for server in self.servers.values():
            server.stop()
        return super().stopService()

    # -- routing --------------------------------------------------------------

    def _servers_changed(self) -> None:
        self._dirty = True

    def _route(self) -> None:
        now = self.clock.seconds()
        live = [s for s in self.servers.values() if s.available(now)]
        pending = [s.down_until for s in self.servers.values() if s.down_until > now]
        self._recheck_at = min(pending) if pending else float("inf")
        if [s.name for s in live] != [s.name for s in self._live] or self._ring is None:
            self._live = live
            self._ring = HashRing([s.name for s in live], hash_fn="ketama") if len(live) > 1 else None
        self._dirty = False

    def server_for(self, key: bytes) -> ServerConnection | None:
        """The server that holds the wire key ``key`` now (None: all down)."""
        if self._dirty or self.clock.seconds() >= self._recheck_at:
            self._route()
        if not self._live:
            return None
        ring = self._ring
        if ring is None:            # one server up
            return self._live[0]
        return self.servers[ring.get_node(key.decode("ascii"))]

    # -- running commands -----------------------------------------------------

    def _command(
        self, key: str | bytes, call: Callable[[WireProtocol, bytes], Deferred]
    ) -> Deferred:
        """Send ``call(protocol, wire_key)`` to the key's server; re-route it
        when that server goes down before the command was sent."""
        self.counters["ops"] += 1
        try:
            k = wire_key(key)
        except Exception as e:
            return fail(e)
        deadline = self.clock.seconds() + self.timeout
        return self._send(k, call, deadline, len(self.servers)).addErrback(self._failed)

    def _send(self, k: bytes, call: Callable[[WireProtocol, bytes], Deferred],
              deadline: float, tries: int) -> Deferred:
        server = self.server_for(k)
        if server is None:
            return fail(CacheUnavailable("no memcached server is up"))
        d = server.submit(lambda protocol: call(protocol, k), deadline)

        def again(failure: Failure) -> Deferred | Failure:
            failure.trap(_NotSent)
            if tries > 1 and self.clock.seconds() < deadline:
                return self._send(k, call, deadline, tries - 1)
            return Failure(CacheUnavailable(f"memcached {server.name}: {failure.getErrorMessage()}"))

        return d.addErrback(again)

    def _failed(self, failure: Failure) -> Failure:
        """Turn protocol and connection errors into cache errors."""
        self.counters["errors"] += 1
        if failure.check(CacheError, TypeError, ValueError):
            return failure
        if failure.check(ClientError, ServerError):
            text = failure.getErrorMessage()
            if "non-numeric" in text:
                return Failure(BadValue(text))
            if "too large" in text:
                return Failure(ValueTooLarge(text))
            return Failure(CacheError(text))
        return Failure(CacheUnavailable(f"memcached: {failure.getErrorMessage()}"))

    def _value(self, result: tuple) -> bytes | None:
        value = result[-1]
        self.counters["hits" if value is not None else "misses"] += 1
        return value

    # -- the Cache interface --------------------------------------------------

    def get(self, key: str | bytes) -> Deferred:
        return self._command(key, lambda p, k: p.get(k)).addCallback(self._value)

    def get_multi(self, keys: Iterable[str | bytes]) -> Deferred:
        keys = list(keys)
        self.counters["ops"] += 1
        try:
            wire = {key: wire_key(key) for key in keys}
        except Exception as e:
            return fail(e)
        if not keys:
            return succeed({})
        deadline = self.clock.seconds() + self.timeout

        def answer(found: dict[bytes, bytes]) -> dict:
            result = {key: found[k] for key, k in wire.items() if k in found}
            self.counters["hits"] += len(result)
            self.counters["misses"] += len(keys) - len(result)
            return result

        d = self._get_multi(set(wire.values()), deadline, len(self.servers))
        return d.addCallbacks(answer, self._failed)

    def _get_multi(self, keys: set[bytes], deadline: float, tries: int) -> Deferred:
        """Fetch wire keys grouped by server; a group whose server went down
        before it was sent is grouped again over the servers still up."""
        groups: dict[str, list[bytes]] = defaultdict(list)
        for k in keys:
            server = self.server_for(k)
            if server is None:
                return fail(CacheUnavailable("no memcached server is up"))
            groups[server.name].append(k)
        calls = []
        for name, ks in groups.items():
            d = self.servers[name].submit(_get_multiple(ks), deadline)

            def again(failure: Failure, ks: list[bytes] = ks) -> Deferred | Failure:
                failure.trap(_NotSent)
                if tries > 1 and self.clock.seconds() < deadline:
                    return self._get_multi(set(ks), deadline, tries - 1)
                return Failure(CacheUnavailable(f"memcached: {failure.getErrorMessage()}"))

            calls.append(d.addErrback(again))

        def merge(results: list[tuple[bool, Any]]) -> dict[bytes, bytes] | Failure:
            found: dict[bytes, bytes] = {}
            errors: list[Failure] = []
            for ok, result in results:
                if not ok:
                    errors.append(result)
                    continue
                for k, value in result.items():
                    if isinstance(value, tuple):  # (flags, value) from the protocol
                        value = value[-1]
                    if value is not None:
                        found[k] = value
            if errors and len(errors) == len(results):
                return errors[0]
            for failure in errors:
                self.counters["errors"] += 1
                log.warn(
                    "memcached get_multi lost one server's keys: {e}",
                    e=failure.getErrorMessage(),
                )
            return found

        return DeferredList(calls, consumeErrors=True).addCallback(merge)

    def _verb(self, key: str | bytes, verb: str, args: tuple[object, ...],
              refusals: Mapping[Answer, type[CacheError]],
              value: Callable[[Any], object] = lambda _: True) -> Deferred:
        """Send ``verb(wire key, *args)`` (a MemCacheProtocol method); an
        answer of ``refusals`` fails with its error, any other fires with
        ``value(answer)`` (True by default)."""
        def answer(result: object) -> object:
            refused = refusals.get(result) if isinstance(result, Answer) else None
            if refused is not None:
                raise refused(key)
            return value(result)

        return self._command(key, lambda p, k: getattr(p, verb)(k, *args)).addCallback(answer)

    def set(self, key: str | bytes, value: bytes, expire: int = 0) -> Deferred:
        try:
            check_value(value), check_expire(expire)
        except Exception as e:
            return fail(e)
        return self._command(key, lambda p, k: p.set(k, value, 0, expire))

    def _store(self, verb: str, key: str | bytes, value: bytes, expire: int,
               missing: type[CacheError]) -> Deferred:
        try:
            check_value(value), check_expire(expire)
        except Exception as e:
            return fail(e)
        return self._verb(key, verb, (value, 0, expire), {NOT_STORED: missing})

    def add(self, key: str | bytes, value: bytes, expire: int = 0) -> Deferred:
        return self._store("add", key, value, expire, KeyExists)

    def replace(self, key: str | bytes, value: bytes, expire: int = 0) -> Deferred:
        return self._store("replace", key, value, expire, NotFound)

    def _incrdecr(self, verb: str, key: str | bytes, delta: int) -> Deferred:
        try:
            check_delta(delta)
        except Exception as e:
            return fail(e)
        return self._verb(key, verb, (delta,), {NOT_FOUND: NotFound}, lambda n: n)

    def incr(self, key: str | bytes, delta: int = 1) -> Deferred:
        return self._incrdecr("increment", key, delta)

    def decr(self, key: str | bytes, delta: int = 1) -> Deferred:
        return self._incrdecr("decrement", key, delta)

    def _pend(self, verb: str, key: str | bytes, value: bytes) -> Deferred:
        try:
            check_value(value)
        except Exception as e:
            return fail(e)
        return self._verb(key, verb, (value,), {NOT_STORED: NotFound})

    def append(self, key: str | bytes, value: bytes) -> Deferred:
        return self._pend("append", key, value)

    def prepend(self, key: str | bytes, value: bytes) -> Deferred:
        return self._pend("prepend", key, value)

    def delete(self, key: str | bytes) -> Deferred:
        return self._command(key, lambda p, k: p.delete(k)).addCallback(
            lambda result: result is not NOT_FOUND
        )

    def gets(self, key: str | bytes) -> Deferred:
        def answer(result: tuple) -> tuple[bytes, bytes] | None:
            _flags, cas_token, value = result
            self._value(result)
            return None if value is None else (value, cas_token)

        return self._command(key, lambda p, k: p.get(k, withIdentifier=True)).addCallback(answer)

    def cas(
        self, key: str | bytes, value: bytes, cas_token: bytes, expire: int = 0
    ) -> Deferred:
        try:
            check_value(value), check_expire(expire)
            token = bytes(cas_token)
            if not token.isdigit():
                raise ValueError("a cas token is the digits gets returned")
        except Exception as e:
            return fail(e)
        return self._verb(key, "checkAndSet", (value, token, 0, expire),
                          {EXISTS: KeyExists, NOT_FOUND: NotFound})

    def flush_all(self) -> Deferred:
        now = self.clock.seconds()
        deadline = now + self.timeout
        calls = [
            s.submit(lambda p: p.flushAll(), deadline).addErrback(self._failed)
            for s in self.servers.values()
            if s.available(now)
        ]
        if not calls:
            return fail(CacheUnavailable("no memcached server is up"))
        return DeferredList(calls, fireOnOneErrback=True, consumeErrors=True).addCallbacks(
            lambda _: True, lambda f: f.value.subFailure
        )

    # -- operations -----------------------------------------------------------

    def health(self) -> dict[str, Any]:
        now = self.clock.seconds()
        servers = {name: s.health(now) for name, s in self.servers.items()}
        return {
            "up": any(s["up"] for s in servers.values()),
            "backend": "memcached",
            "servers": servers,
        }

    def stats(self) -> dict[str, float]:
        now = self.clock.seconds()
        return {
            **self.counters,
            "servers_up": sum(1 for s in self.servers.values() if s.available(now)),
            "servers_total": len(self.servers),
        }
