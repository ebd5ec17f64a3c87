"""Re-evaluating subscribed sessions when a segment changes (SPEC 15).

A view bound to ``$session.segments`` has the session's relevant segments in
its key (``OfferView(session.segments=["vip"];limit=10)``): sessions in the
same segments share one window. When a segment is uploaded or deleted, a
session's segments may change, and with them the window it should see. The
client only knows the key it was given at subscribe time, so:

- the subscription keeps the client's key; the session moves to the window
  of the newly bound view;
- the difference between the two windows' states goes to the session under
  the client's key, as ordinary events: ``delete`` for what left (in the old
  window's order), ``update`` for what both show differently, ``insert`` for
  what entered (in the new window's order). The client's copy equals the old
  window's state once it has applied what was queued before (every event of
  that window is queued as it happens), so after the difference it equals the
  new window's state: the SPEC section 3 contract holds without a ``reset``
  and with nothing new for clients to learn;
- later events of the new window reach the session through a ``Route``
  (``pushengine.core.routes``): one subscriber per (window, client key) in
  the window's subscribers, which rewrites the ``"key":...`` head of the
  encoded fragment once and hands the same rewritten fragment to all of its
  sessions. The session manager installs it (``SessionManager.move``) in
  ``session.subs[key]``, where it answers ``state()`` and
  ``reset_fragment()`` under the client's key, so an overflow or a resume
  reset stays under that key too.

Which sessions: those with hashed contacts (``contacts.SegmentMembership``,
filled at ``session.authorize``) holding a subscription whose view
depends on the segment (an ``audience`` view, or ``in_segment`` naming it).
Their membership of the changed segment is asked in one batch
(``store.members``: one ``SMISMEMBER`` per 10,000 digests in Redis), so a
change costs O(1) per affected session and nothing per unaffected one beyond
a scan of the node's sessions.

Nodes learn of a change through ``SegmentStore.changed``: at once on the node
that made it, and within a second on the others (RedisSegments polls a
version per segment; see store.py).
"""
from __future__ import annotations

from typing import Any, Iterable, cast

from twisted.internet.defer import Deferred, gatherResults, succeed
from twisted.logger import Logger

from pushengine.core.hooks import SessionHooksBase
from pushengine.core.events import DELETE, INSERT, UPDATE, encode_event
from pushengine.core.sessions import Session, SessionManager
from pushengine.segments.contacts import SegmentMembership
from pushengine.views.operators.audience import SESSION_SEGMENTS
from pushengine.views.spec import BoundView

log = Logger()


def concerns(spec: Any, name: str) -> bool:
    """Whether a view's binding depends on the segment ``name``."""
    if not getattr(spec, "needs_segments", False):
        return False
    for c in spec.conditions:
        if c.kind == "audience":
            return True
        if c.kind == "in_segment" and c.operand["segment"] == name:
            return True
    return False


class Reevaluator:
    """Moves subscribed sessions to the views their segments now give them."""

    def __init__(self, manager: SessionManager, store: Any,
                 contacts: SegmentMembership) -> None:
        """``store``: the segment store, whose changes re-evaluate;
        ``contacts``: the sessions' contact digests."""
        self.manager = manager
        self.registry = manager.registry
        self.store = store
        self.contacts = contacts
        self.counters = {"changes": 0, "sessions": 0, "moved": 0, "failures": 0}
        store.listeners.append(self.changed)

    # -- a segment changed ------------------------------------------------------
    def changed(self, name: str) -> Deferred:
        """Re-evaluate the sessions whose views depend on ``name``. Fires
        (with the number of subscriptions moved) once every move is done."""
        self.counters["changes"] += 1
        affected = []
        of = self.contacts.of
        for session in list(self.manager.sessions.values()):
            hashes = of(session)
            if not hashes:
                continue
            keys = [k for k, b in session.bounds.items()
                    if concerns(cast(BoundView, b).spec, name)]
            if keys:
                affected.append((session, keys, hashes))
        if not affected:
            return succeed(0)
        self.counters["sessions"] += len(affected)
        d = self.store.members(name, [list(h) for _, _, h in affected])

        def answered(members: list[bool]) -> Deferred:
            moves = []
            for (session, keys, _), member in zip(affected, members):
                for key in keys:
                    moves.append(self._rebind(session, key, name, bool(member)))
            return gatherResults(moves, consumeErrors=True).addCallback(sum)

        def done(moved: int) -> int:
            self.manager.flush()
            return moved

        def failed(f: Any) -> int:
            # the store cannot answer: the sessions keep what they see (their
            # next subscribe asks again); logged, never raised to the uploader
            self.counters["failures"] += 1
            log.warn("re-evaluating segment {name} failed: {e}", name=name,
                     e=f.getErrorMessage())
            return 0
        return d.addCallback(answered).addCallbacks(done, failed)

    # -- a session's authorization ended ------------------------------------------
    def unbind(self, session: Session) -> Deferred:
        """Move each subscription of ``session`` bound to segments to the
        view bound to none. Fires with the number moved."""
        moves = []
        for key, b in list(session.bounds.items()):
            bound = cast(BoundView, b)
            if getattr(bound.spec, "needs_segments", False) \
                    and bound.values.get(SESSION_SEGMENTS):
                moves.append(self._bind_segments(session, key, bound, set()))
        if not moves:
            return succeed(0)

        def done(moved: int) -> int:
            self.manager.flush()
            return moved
        return gatherResults(moves, consumeErrors=True).addCallback(sum).addCallback(done)

    def _bind_segments(self, session: Session, key: str, bound: BoundView,
                       segments: set[str]) -> Deferred:
        new = bound.spec.bind(bound.params, session.user, bound.limit, segments=segments)
        d = self.registry.open(new)

        def opened(window: Any) -> int:
            if self.manager.sessions.get(session.id) is not session \
                    or session.bounds.get(key) is not bound:
                self.registry.close(window)
                return 0
            self.move(session, key, new, window)
            return 1

        def failed(f: Any) -> int:
            self.counters["failures"] += 1
            log.failure("moving {key} of session {sid} failed", f, key=key,
                        sid=session.id[:8])
            return 0
        return d.addCallback(opened).addErrback(failed)

    def _rebind(self, session: Session, key: str, name: str, member: bool) -> Deferred:
        """Bind the subscription ``key`` again with ``name`` in (or out of)
        the session's segments; move it when that gives another view."""
        if self.manager.sessions.get(session.id) is not session:
            return succeed(0)
        bound = cast("BoundView | None", session.bounds.get(key))
        if bound is None or key not in session.subs:
            return succeed(0)
        current = set(bound.values.get(SESSION_SEGMENTS) or ())
        wanted = current | {name} if member else current - {name}
        if wanted == current:
            return succeed(0)
        new = bound.spec.bind(bound.params, session.user, bound.limit, segments=wanted)
        d = self.registry.open(new)
        d.addCallback(self._opened, session, key, bound, new, name, member)

        def failed(f: Any) -> int:
            self.counters["failures"] += 1
            log.failure("moving {key} of session {sid} failed", f, key=key,
                        sid=session.id[:8])
            return 0
        return d.addErrback(failed)

    def _opened(self, window: Any, session: Session, key: str, old: Any, new: Any,
                name: str, member: bool) -> Any:
        alive = self.manager.sessions.get(session.id) is session and key in session.subs
        if not alive or session.bounds.get(key) is not old:
            self.registry.close(window)
            if alive:   # moved meanwhile (another segment's change): from where it is now
                return self._rebind(session, key, name, member)
            return 0
        self.move(session, key, new, window)
        return 1

    # -- moving one subscription ---------------------------------------------
    def move(self, session: Session, key: str, bound: Any, window: Any) -> None:
        """Show ``window`` to ``session`` under ``key`` in place of what it
        showed there, queuing the difference as events under ``key``."""
        before = session.subs[key].state()
        after = window.state()
        self.manager.move(session, key, window, bound)
        for action, obj, old in diff(before, after, bound.spec.id_field):
            session.deliver(encode_event(key, action, obj, old), key)
        self.counters["moved"] += 1


class Deauthorizations(SessionHooksBase):
    """The session hook that hears of sessions ``deauthorized`` (their
    token's ``exp`` passed): their contacts no longer count, so each
    subscription bound to segments moves to the view bound to none, with
    the difference as events (``Reevaluator.unbind``)."""

    def __init__(self, reevaluator: Reevaluator) -> None:
        self.reevaluator = reevaluator

    def deauthorized(self, session: Session) -> Deferred:
        return self.reevaluator.unbind(session)


def diff(before: list[dict], after: list[dict], id_field: str = "id") -> Iterable[tuple]:
    """The events that turn ``before`` into ``after`` (both in view order):
    deletes, then updates, then inserts in ``after``'s order, so that a client
    never holds more than the limit between two of them."""
    old = {o.get(id_field): o for o in before}
    new = {o.get(id_field): o for o in after}
    for id_, obj in old.items():
        if id_ not in new:
            yield DELETE, obj, None
    for id_, obj in new.items():
        if id_ in old and old[id_] != obj:
            yield UPDATE, obj, old[id_]
    for id_, obj in new.items():
        if id_ not in old:
            yield INSERT, obj, None
