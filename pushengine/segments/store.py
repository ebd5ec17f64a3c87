"""Where segments live: in process, or in Redis with ``--redis`` (SPEC 15).

A segment is a set of 32-byte SHA-256 digests (16-byte MD5 ones for a file
uploaded with ``?hashed=md5``) and a line of metadata (counts, when, how
hashed). An upload goes to a new set; the segment is replaced by it in one
step when the whole file was good, and a failed upload leaves no trace.

In Redis: ``{prefix}segment:{NAME}`` (a set), ``{prefix}segments`` (a hash:
name -> JSON metadata). An upload writes to
``{prefix}segment:{NAME}:upload:{random}`` (with a TTL, so that a node dying
in the middle leaves nothing behind for long) in chunks of one ``SADD`` each,
several in flight (pipelined), and a Lua script swaps it in with ``RENAME``
and writes the metadata in the same step, with the segment's version
(``{prefix}segments:versions``, a hash: name -> a number raised by every
upload and delete). Every node reads the versions each second
(``poll``) and tells its listeners about segments whose version moved: the
sessions subscribed there are re-evaluated (reevaluate.py) within a second
of a change made on another node, and after Redis was out of reach too,
which a publish/subscribe message would have lost. Membership of a session is one
``EVAL`` over every segment (``SISMEMBER`` of the session's few digests):
O(1) per segment.

The connection is a :class:`pushengine.redis.link.RedisLink` (made again
when lost, on the injected reactor); a command without an answer within the
timeout fails; Redis down: every operation fails at once with
SegmentsUnavailable.
"""
from __future__ import annotations

import time
from typing import Callable

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger

from pushengine.views.operators.audience import valid_segment_name

log = Logger()

POLL_INTERVAL = 1.0      # seconds between two reads of the segments' versions
IN_FLIGHT = 4            # SADD chunks sent and not answered yet, per upload
UPLOAD_TTL = 3600        # seconds a half-written upload may linger in Redis

# a session's digests, and several sessions' (the class's ``list`` method
# would shadow the builtin in its own annotations)
Digests = list[bytes]
DigestGroups = list[list[bytes]]


class SegmentsUnavailable(Exception):
    """The segment store cannot be reached (Redis down)."""


def _unavailable(why: str) -> SegmentsUnavailable:
    return SegmentsUnavailable(f"segments are unavailable: {why}")


def valid_name(name: object) -> bool:
    """A segment name views can name (``views.operators.audience``)."""
    return valid_segment_name(name)


class MemoryUpload:
    """An upload into a new set; the reader calls ``add`` (from its
    thread), ``total`` at the end."""

    def __init__(self, store: "MemorySegments", name: str) -> None:
        self.store = store
        self.name = name
        self.members: set[bytes] = set()

    def add(self, chunk: list[bytes]) -> None:
        self.members.update(chunk)

    def total(self) -> int:
        return len(self.members)

    def commit(self, meta: dict) -> Deferred:
        self.store.sets[self.name] = self.members     # swapped in whole, never changed after
        self.store.meta[self.name] = meta
        self.store.changed(self.name)
        return succeed(None)

    def abort(self) -> Deferred:
        self.members = set()
        return succeed(None)


class SegmentStore:
    """What both backends share: the listeners of a change."""

    kind = "none"

    def __init__(self) -> None:
        self.listeners: list[Callable[[str], object]] = []

    def changed(self, name: str) -> None:
        for listener in list(self.listeners):
            try:
                listener(name)
            except Exception:
                log.failure("a segment listener failed")


class MemorySegments(SegmentStore):
    kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.sets: dict[str, set[bytes]] = {}
        self.meta: dict[str, dict] = {}

    def begin(self, name: str) -> MemoryUpload:
        return MemoryUpload(self, name)

    def list(self) -> Deferred:
        return succeed([dict(self.meta[n], name=n) for n in sorted(self.meta)])

    def delete(self, name: str) -> Deferred:
        found = self.meta.pop(name, None) is not None
        self.sets.pop(name, None)
        if found:
            self.changed(name)
        return succeed(found)

    def segments_of(self, digests: Digests) -> Deferred:
        if not digests:
            return succeed([])
        return succeed(sorted(n for n, s in self.sets.items()
                              if any(d in s for d in digests)))

    def members(self, name: str, groups: DigestGroups) -> Deferred:
        """For each group of a session's digests: is one in the segment?"""
        found = self.sets.get(name, set())
        return succeed([any(d in found for d in group) for group in groups])

    def health(self) -> dict:
        return {"kind": "memory", "up": True, "segments": len(self.meta)}


# KEYS: upload set, segment set, metadata hash, versions hash; ARGV: name,
# metadata JSON -> the segment's new version
def text(value: object) -> str:
    """A Redis reply as text."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def now() -> float:
    return round(time.time(), 3)
