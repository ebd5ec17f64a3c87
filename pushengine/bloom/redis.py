"""The Redis backend: every node shares the filters (SPEC section 14).

On a stock Redis each command is one ``EVALSHA`` of a Lua script over
bitmaps (:mod:`pushengine.bloom.scripts`): one round trip, atomic for every
node. A server that has the bloom module's own ``BF.*`` commands gets those
instead; which one it is, is found out once per connection (a ``BF.EXISTS``
that answers, or "unknown command").

Connections follow :mod:`pushengine.cluster.redis`: txredisapi's protocol
inside a ``ClientService`` with ``backoffPolicy`` on the injected reactor;
a command without an answer within the URL's ``timeout`` fails and the
connection is made again. Redis down: every command fails at once with
:class:`BloomUnavailable` (nothing queues up) and ``health()`` says so.

Keys: ``{prefix}bf:{KEY}`` (the module's filter, or the scripts' hash) and
``{prefix}bf:{KEY}:bits``, ``prefix`` from the ``--redis`` URL.
"""
from __future__ import annotations

from typing import Any

import txredisapi
from twisted.application import service
from twisted.application.internet import ClientService, backoffPolicy
from twisted.internet.defer import Deferred, fail, gatherResults, succeed
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.bloom import errors
from pushengine.bloom.base import CANNOT_GROW_CODE, FULL_CODE, INFO_FIELDS, BloomCommands
from pushengine.bloom.hashing import item_hash, pack
from pushengine.bloom.params import MAX_BYTES, FilterSpec
from pushengine.bloom.scripts import sources
from pushengine.cluster.redis import (
    RedisUrl, _CommandProtocol, _Factory, _ObservedEndpoint, parse_redis_url, redis_endpoint)

log = Logger()

def _number(value: float) -> str:
    """A float as text that parses back to the same double (txredisapi's own
    formatting keeps six decimals)."""
    return repr(float(value))


class RedisBloom(BloomCommands, service.Service):
    """Scalable Bloom filters in Redis; a service (add it to the application)."""

    kind = "redis"

    def __init__(self, reactor: Any, url: str | RedisUrl,
                 endpoint: IStreamClientEndpoint | None = None,
                 max_bytes: int = MAX_BYTES, use_module: bool = True) -> None:
        """``use_module=False`` runs the Lua scripts even on a server with
        the bloom module (to compare the two)."""
        self.reactor = reactor
        self.url = parse_redis_url(url) if isinstance(url, str) else url
        self.prefix = f"{self.url.prefix}bf:"
        self.use_module = use_module
        self.native: bool | None = None          # known once connected
        self.counters = {"commands": 0, "errors": 0, "unavailable": 0, "connects": 0}
        self._scripts = sources(max_bytes)
        self._shas: dict[str, str] = {}
        self._proto: Any = None
        self._down_since: float | None = reactor.seconds()
        self._last_error: str | None = None
        self._said_down = False
        if endpoint is None:
            endpoint = self._endpoint()
        timeout = self.url.timeout
        self._client = ClientService(
            _ObservedEndpoint(endpoint, self._connect_failed),
            _Factory(lambda: _CommandProtocol(reactor, timeout)),
            retryPolicy=backoffPolicy(initialDelay=0.2, maxDelay=5.0), clock=reactor,
            prepareConnection=self._prepare)

    def _endpoint(self) -> Any:
        return redis_endpoint(self.reactor, self.url)

    # -- the connection ------------------------------------------------------------
    def startService(self) -> None:
        super().startService()
        self._client.startService()

    def stopService(self) -> Deferred:
        super().stopService()
        self._proto = None
        return self._client.stopService()

    def _prepare(self, proto: Any) -> Deferred:
        """Log in, choose the database, find out whether the server has the
        module, load the scripts if not."""
        d = succeed(None)
        if self.url.password is not None:
            creds = [self.url.username, self.url.password] if self.url.username else [
                self.url.password]
            d.addCallback(lambda _: proto.execute_command("AUTH", *creds))
        d.addCallback(lambda _: proto.execute_command("SELECT", self.url.db))
        d.addCallback(lambda _: self._detect(proto))

        def loaded(native: bool) -> Deferred | None:
            if native:
                return None
            work = []
            for name, source in self._scripts.items():
                def keep(sha: str, name: str = name) -> None:
                    self._shas[name] = sha
                work.append(proto.execute_command("SCRIPT", "LOAD", source).addCallback(keep))
            return gatherResults(work, consumeErrors=True)
        d.addCallback(loaded)
        d.addCallback(lambda _: self._ready(proto))
        d.addErrback(self._prepare_failed)
        return d

    def _detect(self, proto: Any) -> Deferred:
        if not self.use_module:
            self.native = False
            return succeed(False)

        def answered(_: Any) -> bool:
            return True

        def refused(f: Failure) -> bool:
            f.trap(txredisapi.ResponseError)
            return False

        def known(native: bool) -> bool:
            if native != self.native:
                log.info("Bloom filters in Redis {url}: {how}", url=str(self.url),
                         how="the server's BF.* commands" if native else
                         "Lua scripts over bitmaps (the server has no bloom module)")
            self.native = native
            return native
        d = proto.execute_command("BF.EXISTS", f"{self.prefix}{{probe}}", "x")
        return d.addCallbacks(answered, refused).addCallback(known)

    def _prepare_failed(self, failure: Failure) -> Failure:
        self._went_down(f"Redis refused the connection setup: {failure.getErrorMessage()}")
        return failure

    def _ready(self, proto: Any) -> None:
        self._proto = proto
        self.counters["connects"] += 1
        if self._said_down:
            log.info("Bloom filters: connected to Redis {url} again", url=str(self.url))
        self._down_since = None
        self._said_down = False
        self._last_error = None
        proto.whenDisconnected().addCallback(lambda _: self._lost(proto))

    def _lost(self, proto: Any) -> None:
        if proto is not self._proto:
            return
        self._proto = None
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
            log.warn("{why} ({url}); Bloom filters (bf.*, stats.unique, once_per_user) are "
                     "unavailable until Redis is back; pushing goes on", why=why,
                     url=str(self.url))

    @property
    def available(self) -> bool:
        return self._proto is not None

    # -- sending -----------------------------------------------------------------
    def _send(self, *args: Any) -> Deferred:
        self.counters["commands"] += 1
        proto = self._proto
        if proto is None:
            self.counters["unavailable"] += 1
            return fail(errors.BloomUnavailable(
                f"Bloom filters are unavailable: {self._last_error or 'Redis is not connected'}"))
        try:
            d = proto.execute_command(*args)
        except Exception as e:
            return fail(e)
        return d.addErrback(self._failed)

    def _failed(self, failure: Failure) -> Failure:
        if failure.check(errors.BloomUnavailable):
            return failure
        self.counters["errors"] += 1
        if failure.check(txredisapi.ResponseError):
            message = str(failure.value)
            if message.startswith("NOSCRIPT"):
                return failure
            if message.startswith("ERR "):
                message = message[4:]
            raise errors.BloomError(message)
        if failure.check(txredisapi.ConnectionError, txredisapi.TimeoutError, TimeoutError):
            raise errors.BloomUnavailable(
                f"Bloom filters are unavailable: {failure.getErrorMessage()}")
        return failure

    def _script(self, name: str, keys: list[str], args: list[Any]) -> Deferred:
        d = self._send("EVALSHA", self._shas.get(name, "0" * 40), len(keys), *keys, *args)

        def noscript(failure: Failure) -> Any:
            failure.trap(txredisapi.ResponseError)
            if not str(failure.value).startswith("NOSCRIPT"):
                return failure
            return self._send("EVAL", self._scripts[name], len(keys), *keys, *args)
        return d.addErrback(noscript)

    def _keys(self, key: str) -> list[str]:
        meta = f"{self.prefix}{{{key}}}"
        return [meta, meta + ":bits"]

    # -- primitives ---------------------------------------------------------------
    def _reserve(self, key: str, spec: FilterSpec) -> Deferred:
        keys = self._keys(key)
        if self.native:
            args: list[Any] = ["BF.RESERVE", keys[0], _number(spec.error), spec.capacity]
            if spec.nonscaling:
                args.append("NONSCALING")
            else:
                args += ["EXPANSION", spec.expansion]
            return self._send(*args)
        return self._script("reserve", keys, [
            _number(spec.nlog_error), _number(spec.error), spec.capacity, spec.expansion,
            1 if spec.nonscaling else 0])

    def _add(self, key: str, items: list[bytes], spec: FilterSpec | None,
             ttl: float | None) -> Deferred:
        keys = self._keys(key)
        ttl_ms = max(1, int(ttl * 1000)) if ttl else 0
        if self.native:
            args: list[Any] = ["BF.INSERT", keys[0]]
            if spec is None:
                args.append("NOCREATE")
            else:
                args += ["CAPACITY", spec.capacity, "ERROR", _number(spec.error)]
                args += ["NONSCALING"] if spec.nonscaling else ["EXPANSION", spec.expansion]
            d = self._send(*args, "ITEMS", *items).addCallback(self._native_codes)
            if ttl_ms:
                d.addCallback(lambda codes: self._send("PEXPIRE", keys[0], ttl_ms).addCallback(
                    lambda _: codes))
            return d
        if spec is None:
            create: list[Any] = ["0", "0", "0", 0, 0, 0]
        else:
            create = ["1", _number(spec.nlog_error), _number(spec.error), spec.capacity,
                      spec.expansion, 1 if spec.nonscaling else 0]
        blob = pack([item_hash(data) for data in items])
        return self._script("add", keys, [*create, ttl_ms, blob]).addCallback(
            lambda codes: [int(c) for c in codes])

    @staticmethod
    def _native_codes(reply: list) -> list[int]:
        codes = []
        for r in reply:
            if isinstance(r, Exception):
                message = str(r)
                codes.append(FULL_CODE if errors.FULL in message else CANNOT_GROW_CODE)
                break
            codes.append(int(r))
        return codes

    def _exists(self, key: str, items: list[bytes]) -> Deferred:
        keys = self._keys(key)
        if self.native:
            return self._send("BF.MEXISTS", keys[0], *items).addCallback(
                lambda reply: [int(r) for r in reply])
        blob = pack([item_hash(data) for data in items])
        return self._script("exists", keys, [blob]).addCallback(
            lambda reply: [int(r) for r in reply])

    def _info(self, key: str) -> Deferred:
        keys = self._keys(key)
        if self.native:
            def parse(flat: list) -> dict[str, Any]:
                info = dict(zip(flat[::2], flat[1::2]))
                return {name: (None if info.get(name) is None else int(info[name]))
                        for name in INFO_FIELDS}
            return self._send("BF.INFO", keys[0]).addCallback(parse)

        def parse_script(reply: list) -> dict[str, Any]:
            capacity, size, filters, items, expansion = (int(v) for v in reply)
            return dict(zip(INFO_FIELDS, (capacity, size, filters, items,
                                          None if expansion < 0 else expansion)))
        return self._script("info", keys, []).addCallback(parse_script)

    # -- operations ---------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        report: dict[str, Any] = {
            "up": self.available, "kind": "redis", "server": str(self.url),
            "engine": None if self.native is None else ("module" if self.native else "lua")}
        if not self.available:
            if self._down_since is not None:
                report["down_for"] = round(self.reactor.seconds() - self._down_since, 1)
            if self._last_error:
                report["error"] = self._last_error
        return report

    def stats(self) -> dict[str, float]:
        return {**self.counters, "connected": int(self.available)}

    counter_names = ("commands", "errors", "unavailable", "connects")


__all__ = ["RedisBloom"]
