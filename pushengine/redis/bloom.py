"""The Redis backend: every node shares the filters (SPEC section 14).

On a stock Redis each command is one ``EVALSHA`` of a Lua script over
bitmaps (:mod:`pushengine.redis.bloom_scripts`): one round trip, atomic for every
node. A server that has the bloom module's own ``BF.*`` commands gets those
instead; which one it is, is found out once per connection (a ``BF.EXISTS``
that answers, or "unknown command").

The connection is a :class:`pushengine.redis.link.RedisLink`: made again
when lost, on the injected reactor; a command without an answer within the
URL's ``timeout`` fails and the connection is made again. Redis down: every
command fails at once with :class:`BloomUnavailable` (nothing queues up) and
``health()`` says so.

Keys: ``{prefix}bf:{KEY}`` (the module's filter, or the scripts' hash) and
``{prefix}bf:{KEY}:bits``, ``prefix`` from the ``--redis`` URL.

``max_total`` (``--bloom-max-bytes``) bounds the bytes of the filters this
node knows: those it created or added to (their size as the scripts answer
it after each command), until it deletes them or their ``ttl`` passes. A
script that would create or grow a filter past what is left is refused
inside Redis, atomically. Filters only other nodes wrote count on those
nodes; so all nodes together hold at most their caps added up.
"""
from __future__ import annotations

from typing import Any

import txredisapi
from twisted.application import service
from twisted.internet.defer import Deferred, fail, gatherResults, succeed
from twisted.internet.interfaces import IReactorTime, IStreamClientEndpoint
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.bloom import errors
from pushengine.bloom.base import CANNOT_GROW_CODE, FULL_CODE, INFO_FIELDS, BloomCommands
from pushengine.bloom.hashing import item_hash, pack
from pushengine.bloom.params import DEFAULT_MAX_TOTAL, MAX_BYTES, FilterSpec, layer_shape
from pushengine.redis.bloom_scripts import sources
from pushengine.redis.link import RedisArg, RedisConnection, RedisLink, RedisUrl, run_script

log = Logger()
SWEEP_EVERY = 60.0       # seconds between forgetting the filters whose ttl passed


def _unavailable(why: str) -> errors.BloomUnavailable:
    return errors.BloomUnavailable(f"Bloom filters are unavailable: {why}")


def _number(value: float) -> str:
    """A float as text that parses back to the same double (txredisapi's own
    formatting keeps six decimals)."""
    return repr(float(value))


class RedisBloom(BloomCommands, service.MultiService):
    """Scalable Bloom filters in Redis; a service (add it to the application)."""

    kind = "redis"

    def __init__(self, reactor: IReactorTime, url: str | RedisUrl,
                 endpoint: IStreamClientEndpoint | None = None,
                 max_bytes: int = MAX_BYTES, use_module: bool = True,
                 max_total: int = DEFAULT_MAX_TOTAL) -> None:
        """``use_module=False`` runs the Lua scripts even on a server with
        the bloom module (to compare the two)."""
        service.MultiService.__init__(self)
        self.reactor = reactor
        self.max_total = max_total
        self.sizes: dict[str, int] = {}          # bytes of the filters this node knows
        self.expires: dict[str, float] = {}      # of those with a ttl
        self.known_bytes = 0
        self._next_sweep = 0.0
        self.use_module = use_module
        self.native: bool | None = None          # known once connected
        self.counters = {"commands": 0, "errors": 0, "unavailable": 0}
        self._scripts = sources(max_bytes)
        self._shas: dict[str, str] = {}
        self.link = RedisLink(
            reactor, url, _unavailable, endpoint=endpoint, on_ready=self._prepare,
            name="Bloom filters", effect="bf.*, stats.unique and once_per_user are unavailable "
                                         "until Redis is back; pushing goes on")
        self.link.setServiceParent(self)         # starts and stops with the filters
        self.url = self.link.url
        self.prefix = f"{self.url.prefix}bf:"

    # -- the connection ------------------------------------------------------------

    def _prepare(self, proto: RedisConnection) -> Deferred[Any]:
        """Find out whether the server has the module, load the scripts if
        not: then the connection serves commands."""
        def loaded(native: bool) -> Deferred[Any] | None:
            if native:
                return None
            work: list[Deferred[None]] = []
            for name, source in self._scripts.items():
                def keep(sha: str, name: str = name) -> None:
                    self._shas[name] = sha
                work.append(proto.execute_command("SCRIPT", "LOAD", source).addCallback(keep))
            return gatherResults(work, consumeErrors=True)
        return self._detect(proto).addCallback(loaded)

    def _detect(self, proto: RedisConnection) -> Deferred[bool]:
        if not self.use_module:
            self.native = False
            return succeed(False)

        def answered(_: object) -> bool:
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

    @property
    def available(self) -> bool:
        return self.link.connected

    # -- sending -----------------------------------------------------------------
    def _send(self, *args: RedisArg) -> Deferred[Any]:
        self.counters["commands"] += 1
        if not self.link.connected:
            self.counters["unavailable"] += 1
        return self.link.send(*args).addErrback(self._failed)

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
            raise _unavailable(failure.getErrorMessage())
        return failure

    def _script(self, name: str, keys: list[str], args: list[RedisArg]) -> Deferred[Any]:
        return run_script(self._send, self._shas.get(name, "0" * 40), self._scripts[name],
                          keys, args)

    def _keys(self, key: str) -> list[str]:
        meta = f"{self.prefix}{{{key}}}"
        return [meta, meta + ":bits"]

    # -- the budget ------------------------------------------------------------------
    def _room(self, key: str) -> int:
        """The bytes filter ``key`` may hold in all: --bloom-max-bytes less
        the other filters this node knows (forgetting those whose ttl passed)."""
        now = self.reactor.seconds()
        if now >= self._next_sweep:             # at most once a minute: O(filters)
            self._next_sweep = now + SWEEP_EVERY
            for gone in [k for k, t in self.expires.items() if t <= now]:
                self._forget(gone)
        return max(0, self.max_total - (self.known_bytes - self.sizes.get(key, 0)))

    def _known(self, key: str, size: int, ttl: float | None = None) -> None:
        self.known_bytes += size - self.sizes.get(key, 0)
        self.sizes[key] = size
        if ttl:
            self.expires[key] = self.reactor.seconds() + ttl

    def _forget(self, key: str) -> None:
        self.known_bytes -= self.sizes.pop(key, 0)
        self.expires.pop(key, None)

    # -- primitives ---------------------------------------------------------------
    def _reserve(self, key: str, spec: FilterSpec) -> Deferred:
        keys = self._keys(key)
        room = self._room(key)
        bits, _ = layer_shape(spec.nlog_error, spec.nonscaling, 0, spec.capacity)
        first = (bits + 7) >> 3

        def made(answer: object) -> object:
            self._known(key, first)
            return answer
        if self.native:
            if first > room:
                self.counters["errors"] += 1
                return fail(errors.BloomError(errors.NO_ROOM))
            args: list[RedisArg] = ["BF.RESERVE", keys[0], _number(spec.error), spec.capacity]
            if spec.nonscaling:
                args.append("NONSCALING")
            else:
                args += ["EXPANSION", spec.expansion]
            return self._send(*args).addCallback(made)
        return self._script("reserve", keys, [
            _number(spec.nlog_error), _number(spec.error), spec.capacity, spec.expansion,
            1 if spec.nonscaling else 0, room]).addCallback(made)

    def _add(self, key: str, items: list[bytes], spec: FilterSpec | None,
             ttl: float | None) -> Deferred:
        keys = self._keys(key)
        ttl_ms = max(1, int(ttl * 1000)) if ttl else 0
        if self.native:
            args: list[RedisArg] = ["BF.INSERT", keys[0]]
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
            create: list[RedisArg] = ["0", "0", "0", 0, 0, 0]
        else:
            create = ["1", _number(spec.nlog_error), _number(spec.error), spec.capacity,
                      spec.expansion, 1 if spec.nonscaling else 0]
        blob = pack([item_hash(data) for data in items])

        def answered(reply: list) -> list[int]:
            codes, size = reply
            self._known(key, int(size), ttl)
            return [int(c) for c in codes]
        return self._script("add", keys, [*create, ttl_ms, blob, self._room(key)]).addCallback(
            answered)

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

    def _delete(self, key: str) -> Deferred:
        keys = self._keys(key)

        def deleted(n: object) -> int:
            self._forget(key)
            return 1 if n else 0
        if self.native:
            return self._send("DEL", keys[0]).addCallback(deleted)
        return self._script("delete", keys, []).addCallback(deleted)

    # -- operations ---------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return self.link.health(
            engine=None if self.native is None else ("module" if self.native else "lua"))

    def stats(self) -> dict[str, float]:
        return {**self.counters, "connects": self.link.counters["connects"],
                "connected": int(self.available), "filters": len(self.sizes),
                "bytes": self.known_bytes, "max_bytes": self.max_total}

    counter_names = ("commands", "errors", "unavailable", "connects")


__all__ = ["RedisBloom"]
