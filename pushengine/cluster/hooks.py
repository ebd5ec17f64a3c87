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
  a clock read;
- while a stream (SSE, WebSocket) holds it, next to nothing: the entry is
  written with ``held`` set and a long TTL (``held_ttl``, an hour) when the
  stream attaches, and refreshed only when its seq changed since (looked at
  once per online period, when the node counts its streams online) or on a
  slow schedule (every ``held_refresh`` seconds, 20 minutes, spread over
  the half of that before it by the session id, so that streams attached
  together do not refresh together). ``held`` tells the node resuming it
  that the owner counted it online in every period while it held it. When
  the stream ends (``detached``) the entry is written again without
  ``held``, with the period the session was last counted in, and the
  usual TTL.

Writes that fail (Redis down, a timeout) are dropped and counted
(``writes_dropped``); the session is marked, and its next poll writes it
whole again. A refresh that finds the entry gone (it expired while Redis
was away) writes it whole too. A write or refresh that finds the entry
owned by another node means the client moved on: this node's copy is stale
and is dropped, without touching the entry.
"""
from __future__ import annotations

import zlib
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

    __slots__ = ("refreshed_at", "period", "dirty", "held", "seq", "due")

    def __init__(self, now: float, period: int | None) -> None:
        self.refreshed_at = now
        self.period = period
        self.dirty = False
        self.held = False    # written as held by a stream
        self.seq = -1        # the seq written
        self.due = now       # held: when the slow schedule refreshes it next


class RegistryHooks(SessionHooksBase):
    def __init__(self, registry: Any, sessions: SessionManager, clock: IReactorTime,
                 refresh_interval: float = 10.0, online: Any = None,
                 held_ttl: float = 3600.0, held_refresh: float = 1200.0) -> None:
        self.registry = registry
        self.sessions = sessions
        self.clock = clock
        self.refresh_interval = refresh_interval
        self.online = online
        self.held_refresh = held_refresh
        # a held entry is looked at once per online period: it must outlive
        # the longest wait for its refresh by a margin
        self.held_ttl = max(held_ttl, held_refresh + 2 * (getattr(online, "period", 0) or 0)
                            + refresh_interval)
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
        if mirror is None or mirror.dirty or mirror.held != _held(session):
            self._write(session)
            return
        now = self.clock.seconds()
        if mirror.held:     # a stream: the seq changed, or the slow schedule
            if now >= mirror.due or session.manager.last_seq(session) != mirror.seq:
                self._refresh(session, mirror, now, mirror.period)
            return
        period = self.period()
        if now - mirror.refreshed_at >= self.refresh_interval or period != mirror.period:
            self._refresh(session, mirror, now, period)

    def detached(self, session: Session) -> None:
        """The stream ended: the entry loses ``held`` and its long TTL, and
        says the last period the session was counted online in."""
        mirror = self.mirrors.get(session.id)
        if mirror is not None and mirror.held:
            self._write(session, period=self._counted_period(session))

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

    def _counted_period(self, session: Session) -> int | None:
        """The last online period ``session`` was counted in (it was held
        through the one before this)."""
        period = self.period()
        counted = getattr(self.online, "counted", None)
        if period is None or counted is None or counted(session.id, session.subs):
            return period
        return period - 1

    def _held_until(self, sid: str, now: float) -> float:
        """When the slow schedule refreshes a held entry next: between half
        of ``held_refresh`` and all of it from now, spread by the id."""
        spread = zlib.crc32(sid.encode("utf-8", "replace")) / 2 ** 32
        return now + self.held_refresh * (0.5 + 0.5 * spread)

    # -- writing ------------------------------------------------------------------
    def _write(self, session: Session, take: bool = False, then: Any = None,
               period: int | None = None) -> Deferred | None:
        now = self.clock.seconds()
        if period is None:
            period = self.period()
        mirror = self.mirrors.get(session.id)
        if mirror is None:
            mirror = self.mirrors[session.id] = _Mirror(now, period)
        if not self.registry.available:
            mirror.dirty = True
            self._count_dropped()
            return None
        record = SessionRecord.of(session, self.registry.node_id, period)
        mirror.refreshed_at, mirror.period, mirror.dirty = now, period, False
        mirror.held, mirror.seq = record.held, record.seq
        ttl = None
        if record.held:
            ttl, mirror.due = self.held_ttl, self._held_until(session.id, now)

        def written(result: tuple) -> Any:
            if result[0] == MOVED:
                self.drop(session)
            elif then is not None:
                then(result)
            self._recovered()
        d = self.registry.write(session.id, record, take, ttl) if ttl else \
            self.registry.write(session.id, record, take)
        d.addCallback(written)
        d.addErrback(self._write_failed, session)
        return d

    def _refresh(self, session: Session, mirror: _Mirror, now: float, period: int | None) -> None:
        if not self.registry.available:
            mirror.dirty = True
            self._count_dropped()
            return
        mirror.refreshed_at, mirror.period = now, period
        mirror.seq = session.manager.last_seq(session)
        fields = {"seq": str(mirror.seq)}
        if period is not None:
            fields["period"] = str(period)

        def refreshed(status: str) -> None:
            if status == MOVED:
                self.drop(session)
            elif status == MISSING and self.sessions.sessions.get(session.id) is session:
                self._write(session)
            self._recovered()
        if mirror.held:
            mirror.due = self._held_until(session.id, now)
            d = self.registry.refresh(session.id, fields, self.held_ttl)
        else:
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


def _held(session: Session) -> bool:
    """Whether a stream holds ``session`` (it does not poll)."""
    delivery = session.delivery
    return delivery is not None and delivery.holds_session
