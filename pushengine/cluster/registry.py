"""The session registry: what every backend (Redis, in-process) offers.

Every entry is a :class:`~pushengine.cluster.record.SessionRecord` under the
session id, with an expiry, and belongs to one node (its ``owner``). A node
writes and refreshes only entries it owns; taking an entry over (a resume)
is explicit, and the node that lost it is told, so that a session never
lives on as a stale copy on two nodes.

Every operation returns a Deferred. A backend that cannot be reached fails
it with :class:`RegistryUnavailable` at once (nothing is queued: the caller
drops the write and counts it; the next poll writes again).
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable

from twisted.internet.defer import Deferred

from pushengine.cluster.record import SessionRecord

#: write/refresh outcomes
OK = "ok"            # done
MOVED = "moved"      # the entry belongs to another node: this node's copy is stale
MISSING = "missing"  # no entry (expired, or a write was dropped): write it whole


class RegistryUnavailable(Exception):
    """The registry cannot be reached now."""


@runtime_checkable
class SessionRegistry(Protocol):
    node_id: str
    ttl: float
    #: called with a session id when another node took over one of ours
    on_moved: Callable[[str], None] | None
    counters: dict[str, int]

    @property
    def available(self) -> bool:
        """Whether operations may succeed now (connected)."""

    def write(self, sid: str, record: SessionRecord, take: bool = False,
              ttl: float | None = None) -> Deferred:
        """Store the whole entry, owned by this node, with a fresh expiry
        (``ttl`` seconds; None: the registry's ``ttl``).
        Without ``take`` an entry owned by another node is left alone and the
        result is ``(MOVED, owner)``; otherwise ``(OK, previous owner or None)``."""

    def refresh(self, sid: str, fields: dict[str, str] | None = None,
                ttl: float | None = None) -> Deferred:
        """Renew the expiry (``ttl`` seconds; None: the registry's ``ttl``)
        and set ``fields`` if this node owns the entry: OK, MISSING or MOVED."""

    def lookup(self, sid: str) -> Deferred:
        """Fire with the SessionRecord, or None when there is none; fail
        with BadRecord when it cannot be read."""

    def owner(self, sid: str) -> Deferred:
        """Fire with the owning node id, or None."""

    def delete(self, sid: str) -> Deferred:
        """Remove the entry whoever owns it (the client destroyed the
        session); fire with whether it was there."""

    def release(self, sid: str) -> Deferred:
        """Remove the entry only if this node owns it (the session expired
        here); fire with whether it was removed."""

    def moved(self, sid: str, previous_owner: str) -> Deferred:
        """Tell ``previous_owner`` that this node took ``sid`` over."""

    def health(self) -> dict[str, Any]:
        """A JSON-able state for /health with ``"up": bool``."""

    def stats(self) -> dict[str, float]:
        """Numbers for /metrics."""


def new_counters() -> dict[str, int]:
    """The counters every backend keeps (the hooks and the resumer add to
    them): they appear in /metrics as ``pushengine_redis_<name>``."""
    return dict.fromkeys((
        "writes", "refreshes", "deletes", "lookups", "errors",
        "writes_dropped", "resumes", "resume_misses", "resume_failures",
        "moved_in", "moved_out", "connects", "disconnects"), 0)
