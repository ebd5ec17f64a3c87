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
- later events of the new window reach the session through a ``Route``: one
  subscriber per (window, client key) in the window's subscribers, which
  rewrites the ``"key":...`` head of the encoded fragment once and hands the
  same rewritten fragment to all of its sessions. ``session.subs[key]`` holds
  the route, which answers ``state()`` and ``reset_fragment()`` under the
  client's key, so an overflow or a resume reset stays under that key too.

Which sessions: those with hashed contacts holding a subscription whose view
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

import json
from typing import Any, Iterable

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger

from pushengine.core.errors import LimitReached, UnknownSession
from pushengine.core.events import DELETE, INSERT, RESET, UPDATE, Fragment, encode_event
from pushengine.views.operators.audience import SESSION_SEGMENTS

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


def _head(key: str) -> str:
    return '"key":' + json.dumps(key, ensure_ascii=False, separators=(",", ":"))


class Route:
    """The sessions that see ``window`` under another key (theirs).

    It is the subscriber in the window's set: each event is rewritten once
    (its ``"key":...`` head replaced) and queued for every session here. In
    ``session.subs`` it stands for the window under the client's key."""

    __slots__ = ("window", "key", "sessions", "owner", "_cut", "_head", "_last")

    def __init__(self, owner: "Reevaluator", window: Any, key: str) -> None:
        self.owner = owner
        self.window = window
        self.key = key
        self.sessions: set = set()
        self._cut = len(_head(window.key))
        self._head = _head(key)
        self._last: tuple[Any, Fragment] | None = None

    # -- as a subscriber of the window ----------------------------------------
    def deliver(self, fragment: str, key: str) -> None:
        last = self._last
        if last is not None and last[0] is fragment:
            rewritten = last[1]
        else:
            rewritten = Fragment(self._head + fragment[self._cut:], self.key)
            self._last = (fragment, rewritten)
        for session in list(self.sessions):
            session.deliver(rewritten, self.key)

    # -- as the window in session.subs ------------------------------------------
    @property
    def query(self) -> Any:
        return self.window.query

    @property
    def limit(self) -> int:
        return self.window.limit

    def state(self) -> list[dict]:
        return self.window.state()

    def reset_fragment(self) -> str:
        return encode_event(self.key, RESET, self.window.state())

    def join(self, session: Any) -> None:
        self.sessions.add(session)
        self.window.subscribers.add(self)

    def leave(self, session: Any) -> Any:
        """The session no longer sees the window through this route; the
        real window (for SessionManager to close when nobody else holds it)."""
        self.sessions.discard(session)
        if not self.sessions:
            self.window.subscribers.discard(self)
            self.owner.routes.pop((self.window, self.key), None)
        return self.window

    def __repr__(self) -> str:
        return f"<Route {self.window.key} as {self.key}: {len(self.sessions)} sessions>"


class Reevaluator:
    """Moves subscribed sessions to the views their segments now give them."""

    def __init__(self, manager: Any, store: Any) -> None:
        self.manager = manager
        self.registry = manager.registry
        self.store = store
        self.routes: dict[tuple[Any, str], Route] = {}
        self.counters = {"changes": 0, "sessions": 0, "moved": 0, "failures": 0}
        store.listeners.append(self.changed)

    # -- a segment changed ------------------------------------------------------
    def changed(self, name: str) -> Deferred:
        """Re-evaluate the sessions whose views depend on ``name``. Fires
        (with the number of subscriptions moved) once every move is done."""
        self.counters["changes"] += 1
        affected = []
        for session in list(self.manager.sessions.values()):
            hashes = getattr(session, "segment_hashes", None)
            if not hashes:
                continue
            keys = [k for k, b in session.bounds.items() if concerns(b.spec, name)]
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
            from twisted.internet.defer import gatherResults
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

    def _rebind(self, session: Any, key: str, name: str, member: bool) -> Deferred:
        """Bind the subscription ``key`` again with ``name`` in (or out of)
        the session's segments; move it when that gives another view."""
        if self.manager.sessions.get(session.id) is not session:
            return succeed(0)
        bound = session.bounds.get(key)
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

    def _opened(self, window: Any, session: Any, key: str, old: Any, new: Any,
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
    def move(self, session: Any, key: str, bound: Any, window: Any) -> None:
        """Show ``window`` to ``session`` under ``key`` in place of what it
        showed there, queuing the difference as events under ``key``."""
        entry = session.subs[key]
        before = entry.state()
        after = window.state()
        self._leave(session, entry)
        self._install(session, key, bound, window)
        for action, obj, old in diff(before, after, bound.spec.id_field):
            session.deliver(encode_event(key, action, obj, old), key)
        self.counters["moved"] += 1

    def _leave(self, session: Any, entry: Any) -> None:
        leave = getattr(entry, "leave", None)
        window = leave(session) if leave is not None else entry
        window.subscribers.discard(session)
        self.registry.close(window)

    def _install(self, session: Any, key: str, bound: Any, window: Any) -> None:
        if window.key == key:
            window.subscribers.add(session)
            session.subs[key] = window
        else:
            route = self.routes.get((window, key))
            if route is None:
                route = self.routes[(window, key)] = Route(self, window, key)
            route.join(session)
            session.subs[key] = route
        session.bounds[key] = bound

    # -- subscribing under a given key (a session resumed on this node) ---------
    def subscribe_as(self, session: Any, bound: Any, key: str) -> Deferred:
        """As ``SessionManager.subscribe``, but under the client's ``key``
        when binding gives another one (the session's segments differ from
        those it subscribed with). Fires with ``[key, state]``."""
        if bound.key == key:
            return self.manager.subscribe(session, bound)
        limit = self.manager.settings.max_subscriptions
        if key not in session.subs and len(session.subs) >= limit:
            raise LimitReached(f"a session may hold at most {limit} subscriptions")
        d = self.registry.open(bound)

        def opened(window: Any) -> list:
            if self.manager.sessions.get(session.id) is not session:
                self.registry.close(window)
                raise UnknownSession("the session ended while subscribing")
            if key in session.subs:
                self._leave(session, session.subs.pop(key))
            self._install(session, key, bound, window)
            return [key, session.subs[key].state()]
        return d.addCallback(opened)


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
