"""Segments in Redis (``--redis``), shared by every node (SPEC 15).

The layout of the keys, the upload into a temporary set and the swap in one
Lua step are described in :mod:`pushengine.segments.store`.
"""
from __future__ import annotations

import json
import os
import threading
from typing import Any, cast

from twisted.application import service
from twisted.internet.defer import Deferred, FirstError, gatherResults, succeed
from twisted.internet.interfaces import IReactorThreads, IReactorTime, IStreamClientEndpoint
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.redis.link import RedisArg, RedisLink, RedisUrl, hash_pairs, parse_redis_url
from pushengine.segments.store import (
    IN_FLIGHT, POLL_INTERVAL, UPLOAD_TTL, Digests, DigestGroups, SegmentStore,
    SegmentsUnavailable, _unavailable, text)

log = Logger()

COMMIT = """
redis.call('UNLINK', KEYS[2])
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('RENAME', KEYS[1], KEYS[2])
  redis.call('PERSIST', KEYS[2])
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
return redis.call('HINCRBY', KEYS[4], ARGV[1], 1)
"""
# KEYS: segment set, metadata hash, versions hash; ARGV: name -> the new
# version, 0 when there was no such segment
DELETE = """
redis.call('UNLINK', KEYS[1])
if redis.call('HDEL', KEYS[2], ARGV[1]) == 1 then
  return redis.call('HINCRBY', KEYS[3], ARGV[1], 1)
end
return 0
"""
MEMBERS_CHUNK = 10_000   # digests per SMISMEMBER
# KEYS: metadata hash; ARGV: key prefix of the sets, digest, ... -> names
MEMBER_OF = """
local found = {}
for _, name in ipairs(redis.call('HKEYS', KEYS[1])) do
  local key = ARGV[1] .. name
  for i = 2, #ARGV do
    if redis.call('SISMEMBER', key, ARGV[i]) == 1 then
      table.insert(found, name)
      break
    end
  end
end
return found
"""


class RedisUpload:
    """An upload into a temporary set in Redis. ``add`` is called from the
    reader's thread: it sends a chunk through the reactor and returns at
    once unless IN_FLIGHT chunks are still unanswered (back-pressure)."""

    def __init__(self, store: "RedisSegments", name: str) -> None:
        self.store = store
        self.name = name
        self.key = f"{store.prefix}segment:{name}:upload:{os.urandom(8).hex()}"
        self.added = 0
        self.error: BaseException | None = None
        self.slots = threading.Semaphore(IN_FLIGHT)
        self.idle = threading.Condition()
        self.outstanding = 0

    def add(self, chunk: list[bytes]) -> None:
        if self.error is not None:
            raise self.error
        if threading.current_thread() is threading.main_thread():
            with self.idle:
                self.outstanding += 1
            self._send_chunk(chunk, False)
            return
        self.slots.acquire()
        with self.idle:
            self.outstanding += 1
        self.store.threads.callFromThread(self._send_chunk, chunk, True)

    def _send_chunk(self, chunk: list[bytes], slot: bool) -> None:
        d = self.store.send("SADD", self.key, *chunk)

        def added(n: str | int) -> Deferred[Any]:
            self.added += int(n)
            return self.store.send("EXPIRE", self.key, UPLOAD_TTL)
        d.addCallback(added)
        d.addBoth(self._answered, slot)

    def _answered(self, result: object, slot: bool) -> None:
        error = getattr(result, "value", None)
        if error is not None and self.error is None:
            self.error = error if isinstance(error, SegmentsUnavailable) else \
                SegmentsUnavailable(f"writing the segment to Redis failed: {error}")
        with self.idle:
            self.outstanding -= 1
            self.idle.notify_all()
        if slot:
            self.slots.release()

    def total(self) -> int:
        """Wait for every chunk's answer (from the reader's thread)."""
        if threading.current_thread() is not threading.main_thread():
            with self.idle:
                while self.outstanding:
                    self.idle.wait(1.0)
        if self.error is not None:
            raise self.error
        return self.added

    def commit(self, meta: dict[str, Any]) -> Deferred:
        s = self.store
        d = s.send("EVAL", COMMIT, 4, self.key, f"{s.prefix}segment:{self.name}",
                   s.meta_key, s.versions_key, self.name, json.dumps(meta))
        return d.addCallback(lambda version: s.changed_here(self.name, version))

    def abort(self) -> Deferred:
        d = self.store.send("UNLINK", self.key)
        return d.addErrback(lambda f: log.warn("dropping a failed upload from Redis failed: "
                                               "{e}", e=f.getErrorMessage()))


class RedisSegments(SegmentStore, service.MultiService):
    kind = "redis"

    def __init__(self, reactor: IReactorTime, url: str | RedisUrl,
                 endpoint: IStreamClientEndpoint | None = None) -> None:
        SegmentStore.__init__(self)
        service.MultiService.__init__(self)
        self.reactor = reactor
        self.threads = cast(IReactorThreads, reactor)   # uploads are read in a thread
        self.url = parse_redis_url(url) if isinstance(url, str) else url
        # an upload's chunks are large: a longer reply timeout than the URL's
        self.link = RedisLink(reactor, self.url, _unavailable, endpoint=endpoint,
                              timeout=max(self.url.timeout, 10.0))
        self.link.setServiceParent(self)         # starts and stops with the store
        self.prefix = self.url.prefix
        self.meta_key = f"{self.prefix}segments"
        self.versions_key = f"{self.prefix}segments:versions"
        self.seen: dict[str, int] | None = None     # versions last seen (None: not polled yet)
        self.poll_interval = POLL_INTERVAL
        self._poller = LoopingCall(self.poll)
        self._poller.clock = reactor

    def startService(self) -> None:
        super().startService()
        self._poller.start(self.poll_interval, now=False).addErrback(
            lambda f: log.failure("polling segment versions stopped", f))

    def stopService(self) -> Deferred:
        if self._poller.running:
            self._poller.stop()
        return super().stopService()

    # -- changes made by other nodes ---------------------------------------------
    def changed_here(self, name: str, version: str | int | None) -> None:
        """This node uploaded or deleted ``name``: note its new version (so
        that the poll does not report it again) and tell the listeners."""
        if self.seen is not None and version:
            self.seen[name] = int(version)
        self.changed(name)

    def poll(self) -> Deferred:
        """Read every segment's version; tell the listeners about the
        segments whose version moved since the last poll (uploaded or
        deleted by another node, or while Redis was out of reach). The
        first poll reports every segment: a session may have read its
        segments before it (a session resumed at start-up), and a change
        that reaches nobody costs a scan. Never fails: Redis down is retried
        at the next tick."""
        d = self.send("HGETALL", self.versions_key)

        def read(reply: dict[str, str] | list[str]) -> None:
            versions = {text(k): int(v) for k, v in hash_pairs(reply)}
            seen, self.seen = self.seen or {}, versions
            for name in sorted(set(seen) | set(versions)):
                if seen.get(name) != versions.get(name):
                    self.changed(name)

        def failed(f: Failure) -> None:
            if not f.check(SegmentsUnavailable):
                log.failure("reading segment versions failed", f)
        return d.addCallbacks(read, failed)

    def whenReady(self) -> Deferred:
        """Fires once connected (tests)."""
        return self.link.whenReady()

    def send(self, *args: RedisArg) -> Deferred[Any]:
        return self.link.send(*args)

    def begin(self, name: str) -> RedisUpload:
        return RedisUpload(self, name)

    def list(self) -> Deferred:
        def decode(reply: dict[str, str] | list[str]) -> list[dict[str, Any]]:
            out = []
            for name, value in hash_pairs(reply):
                try:
                    meta = json.loads(value)
                except (TypeError, ValueError):
                    meta = {}
                out.append(dict(meta, name=name))
            return sorted(out, key=lambda m: m["name"])
        return self.send("HGETALL", self.meta_key).addCallback(decode)

    def delete(self, name: str) -> Deferred:
        d = self.send("EVAL", DELETE, 3, f"{self.prefix}segment:{name}", self.meta_key,
                      self.versions_key, name)

        def deleted(version: str | int) -> bool:
            if int(version):
                self.changed_here(name, version)
            return bool(int(version))
        return d.addCallback(deleted)

    def segments_of(self, digests: Digests) -> Deferred:
        if not digests:
            return succeed([])
        d = self.send("EVAL", MEMBER_OF, 1, self.meta_key, f"{self.prefix}segment:", *digests)
        return d.addCallback(lambda names: sorted(names or []))

    def members(self, name: str, groups: DigestGroups) -> Deferred:
        """For each group of a session's digests: is one in the segment?
        One SMISMEMBER per MEMBERS_CHUNK digests, all sent at once."""
        flat = [d for group in groups for d in group]
        key = f"{self.prefix}segment:{name}"
        chunks = [self.send("SMISMEMBER", key, *flat[i:i + MEMBERS_CHUNK])
                  for i in range(0, len(flat), MEMBERS_CHUNK)]

        def regroup(answers: list[list[str]]) -> list[bool]:
            hits = [int(a) == 1 for answer in answers for a in answer]
            out, at = [], 0
            for group in groups:
                out.append(any(hits[at:at + len(group)]))
                at += len(group)
            return out

        def first_error(f: Failure) -> Failure:
            return f.value.subFailure if isinstance(f.value, FirstError) else f
        return gatherResults(chunks, consumeErrors=True).addCallback(regroup).addErrback(
            first_error)

    def health(self) -> dict[str, Any]:
        return {"kind": "redis", "up": self.link.connected, "error": self.link.error}
