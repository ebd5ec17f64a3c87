"""Keeping the registry's copy of every session of this node up to date.

``RegistryHooks`` is one of the node's session hooks (``core.hooks``): the
API tells it of sessions ``created``, ``changed`` (subscribe, unsubscribe,
authorize), ``polled`` and ``destroyed`` after those actions; the session
manager of those ``expired``. What a session costs in Redis:

- a whole write when it is created or its subscriptions or user change;
- while it polls, at most one refresh every ``refresh_interval`` seconds
  (a script that checks the owner, renews the TTL and stores the current
  seq), plus one when the online period turns (so that the node resuming
  it knows whether it was counted online in this period);
- nothing for the polls in between: the check is a dictionary look-up and
  a clock read.

Writes that fail (Redis down, a timeout) are dropped and counted
(``writes_dropped``); the session is marked, and its next poll writes it
whole again. A refresh that finds the entry gone (it expired while Redis
was away) writes it whole too. A write or refresh that finds the entry
owned by another node means the client moved on: this node's copy is stale
and is dropped, without touching the entry.
"""
from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.cluster.record import SessionRecord
from pushengine.cluster.registry import MISSING, MOVED, RegistryUnavailable
from pushengine.core.hooks import SessionHooksBase
from pushengine.core.sessions import Session, SessionManager

log = Logger()


class _Mirror:
    """What this node last wrote of one session."""

    __slots__ = ("refreshed_at", "period", "dirty")

    def __init__(self, now: float, period: int | None) -> None:
        self.refreshed_at = now
        self.period = period
        self.dirty = False


class RegistryHooks(SessionHooksBase):
    def __init__(self, registry: Any, sessions: SessionManager, clock: IReactorTime,
                 refresh_interval: float = 10.0, online: Any = None) -> None:
        self.registry = registry
        self.sessions = sessions
        self.clock = clock
        self.refresh_interval = refresh_interval
        self.online = online
        self.mirrors: dict[str, _Mirror] = {}
        self._dropping_since: float | None = None

    def period(self) -> int | None:
        """The online counter's period number now (None: no counter)."""
        length = getattr(self.online, "period", None)
        if not length:
            return None
        return int(self.clock.seconds() // length)

    # -- the API's hooks ----------------------------------------------------------
    def created(self, session: Session) -> Deferred | None:
        """Fires once the entry is written (or the write failed): the API
        answers session.create then, so that any node can resume the session
        as soon as the client knows its id."""
        return self._write(session, take=True)

    def changed(self, session: Session) -> None:
        self._write(session)

    def polled(self, session: Session) -> None:
        mirror = self.mirrors.get(session.id)
        if mirror is None or mirror.dirty:
            self._write(session)
            return
        now = self.clock.seconds()
        period = self.period()
        if now - mirror.refreshed_at >= self.refresh_interval or period != mirror.period:
            self._refresh(session, mirror, now, period)

    def destroyed(self, session: Session) -> None:
        self.mirrors.pop(session.id, None)
        d = self.registry.delete(session.id)
        d.addErrback(self._dropped, "deleting", session.id)

    def expired(self, session: Session) -> None:
        """The session expired here: remove its entry if it is still ours."""
        self.mirrors.pop(session.id, None)
        d = self.registry.release(session.id)
        d.addErrback(self._dropped, "releasing", session.id)

    # -- the resumer's and the registry's -----------------------------------------
    def resumed(self, session: Session, previous_owner: str | None) -> Deferred | None:
        """This node took the session over: own the entry, and tell the
        previous owner to drop its copy. Fires once the entry is ours (or
        the write failed)."""
        def tell(result: Any) -> None:
            if previous_owner and previous_owner != self.registry.node_id:
                self.registry.moved(session.id, previous_owner).addErrback(
                    self._dropped, "announcing the move of", session.id)
        return self._write(session, take=True, then=tell)

    def moved_away(self, sid: str) -> None:
        """Another node says it took ``sid`` over; drop our copy once the
        registry confirms that it is no longer ours (it may be gone too:
        destroyed there since)."""
        session = self.sessions.sessions.get(sid)
        if session is None:
            return

        def check(owner: str | None) -> None:
            if owner != self.registry.node_id:
                self.drop(session)
        d = self.registry.owner(sid)
        d.addCallback(check)
        d.addErrback(self._dropped, "checking the owner of", sid)

    def drop(self, session: Session) -> None:
        """Forget a stale copy of a session that lives on another node now
        (its entry is not touched)."""
        self.mirrors.pop(session.id, None)
        if self.sessions.sessions.get(session.id) is not session:
            return
        self.registry.counters["moved_out"] += 1
        log.info("session {sid} moved to another node; dropping this node's copy",
                 sid=session.id[:8])
        self.sessions.destroy(session)
        forget = getattr(self.online, "forget", None)
        if forget is not None:
            forget(session.id)

    # -- writing ------------------------------------------------------------------
    def _write(self, session: Session, take: bool = False, then: Any = None) -> Deferred | None:
        now, period = self.clock.seconds(), self.period()
        mirror = self.mirrors.get(session.id)
        if mirror is None:
            mirror = self.mirrors[session.id] = _Mirror(now, period)
        if not self.registry.available:
            mirror.dirty = True
            self._count_dropped()
            return None
        mirror.refreshed_at, mirror.period, mirror.dirty = now, period, False
        record = SessionRecord.of(session, self.registry.node_id, period)

        def written(result: tuple) -> Any:
            if result[0] == MOVED:
                self.drop(session)
            elif then is not None:
                then(result)
            self._recovered()
        d = self.registry.write(session.id, record, take)
        d.addCallback(written)
        d.addErrback(self._write_failed, session)
        return d

    def _refresh(self, session: Session, mirror: _Mirror, now: float, period: int | None) -> None:
        if not self.registry.available:
            mirror.dirty = True
            self._count_dropped()
            return
        mirror.refreshed_at, mirror.period = now, period
        fields = {"seq": str(session.manager.last_seq(session))}
        if period is not None:
            fields["period"] = str(period)

        def refreshed(status: str) -> None:
            if status == MOVED:
                self.drop(session)
            elif status == MISSING and self.sessions.sessions.get(session.id) is session:
                self._write(session)
            self._recovered()
        d = self.registry.refresh(session.id, fields)
        d.addCallback(refreshed)
        d.addErrback(self._write_failed, session)

    def _write_failed(self, failure: Failure, session: Session) -> None:
        mirror = self.mirrors.get(session.id)
        if mirror is not None:
            mirror.dirty = True
        self._dropped(failure, "writing", session.id)

    def _dropped(self, failure: Failure, doing: str, sid: str) -> None:
        """A registry operation failed: count it, log the first of an outage."""
        self._count_dropped()
        if failure.check(RegistryUnavailable):
            return
        log.failure("{doing} session {sid} in the registry failed", failure,
                    doing=doing, sid=sid[:8])

    def _count_dropped(self) -> None:
        self.registry.counters["writes_dropped"] += 1
        if self._dropping_since is None:
            self._dropping_since = self.clock.seconds()
            log.warn("registry writes are being dropped (the registry is unavailable); "
                     "sessions are written again when they poll")

    def _recovered(self) -> None:
        if self._dropping_since is not None:
            log.info("registry writes go through again after {seconds:.1f} s",
                     seconds=self.clock.seconds() - self._dropping_since)
            self._dropping_since = None
