"""Presence: who is online in a view, across nodes (SPEC section 16).

A *room* is a view with its parameters bound (the subscription key without
its limit: two sessions watching the same list with different limits are in
the same room). A session that is authorized and subscribed to a view is
*present* there as its user; a user is present while any of its sessions,
on any node, is.

Presence is opt-in per view (SPEC section 16): only a view declared with
``presence: true`` has rooms. A subscription to any other view is never
counted, never written to the cache, and never listed, so that watching a
public list does not tell strangers who you are.

- ``presence.list(sid, key)`` answers the users present in the room of the
  session's subscription ``key`` (error 1005 for a key the session does not
  hold, 1013 for a view without ``presence: true``), sorted, every node's
  included.
- A view declared with ``presence: true`` also gets ``join`` and ``leave``
  events, ``{"key", "seq", "action": "join", "obj": {"user": "340699"}}``,
  sent only to the sessions subscribed to that view. A user joins when its
  first session enters the room anywhere and leaves when its last one goes
  (unsubscribed, destroyed or expired). The events change nothing in the
  view's list: a client applying events to its state ignores them.

Across nodes, each node writes its own members of each room into the cache
(memcached with ``--memcache``; Redis with ``--redis`` alone; the in-process
store otherwise) under one key per room, ``{node: [time, [users]]}``,
updated with gets/cas (in Redis: one hash per room, a field per node): when its
members change (at the next tick) and every ``heartbeat`` seconds while it
has any. An entry older than ``ttl`` (a node that died) no longer counts.
Each node reads the rooms its ``presence: true`` subscribers watch every
``interval`` seconds and sends the joins and leaves it finds; changes of its
own sessions are sent at once. The cache down: each node answers and
announces what it knows (its own sessions, the last figures read).
"""
from __future__ import annotations

import json
from collections import Counter
from typing import Any, Callable, Protocol, cast

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from pushengine.core.engine import Engine
from pushengine.core.errors import BadParams, NoPresence, NotAuthorized, UnknownKey
from pushengine.core.hooks import SessionHooksBase
from pushengine.core.interfaces import SessionLookup
from pushengine.core.sessions import Session, SessionManager
from pushengine.core.events import encode_event
from pushengine.api.rpc import Method
from pushengine.views.spec import Catalog

log = Logger()
JOIN, LEAVE = "join", "leave"


class RoomStore(Protocol):
    """Where every node keeps its members of each room: the memcached-style
    cache (``pushengine.memcache.presence``) or Redis
    (``pushengine.redis.presence``)."""

    node_id: str
    writes: int
    reads: int
    errors: int

    def write(self, room: str, users: list) -> Deferred:
        """Set this node's members of ``room`` (none: remove its entry)."""

    def read(self, room: str) -> Deferred:
        """Fire with ``{node: [users]}`` of the fresh entries of ``room``."""


class PresenceUnavailable(Exception):
    """Presence cannot reach its store (Redis down)."""


def encode_entry(value: Any) -> bytes:
    """A room entry as compact UTF-8 JSON (the form every store keeps)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class Presence(SessionHooksBase):
    """Keeps the rooms of this node's sessions (one of the node's session
    hooks, ``core.hooks``), publishes them, and sends ``join`` / ``leave``
    to ``presence: true`` subscribers."""

    counter_names = ("joins", "leaves", "errors")

    def __init__(self, engine: Engine, store: RoomStore, clock: IReactorTime,
                 heartbeat: float = 10.0, with_session: SessionLookup | None = None) -> None:
        """``with_session(sid, then)``: ``then(session)`` for a session this
        node holds or resumes from the cluster registry (``Api.with_session``);
        without it, the sessions this node holds only."""
        self.engine = engine
        self.catalog = cast(Catalog, engine.catalog)    # the views file (the core types less)
        self.sessions: SessionManager = engine.sessions
        self.with_session: SessionLookup = with_session or self._held
        self.store = store
        self.clock = clock
        self.heartbeat = heartbeat
        self.node_id = store.node_id
        self.members: dict[str, tuple[Any, dict[str, str]]] = {}   # sid -> (user, key->room)
        self.local: dict[str, Counter] = {}       # room -> user -> sessions here
        self.watchers: dict[str, dict[Session, set]] = {}   # room -> session -> its keys
        self.remote: dict[str, set] = {}          # room -> users of the other nodes
        self.shown: dict[str, set] = {}           # room -> users the watchers were told of
        self.dirty: set[str] = set()              # rooms whose entry must be written
        self.published: set[str] = set()          # rooms this node has an entry in
        self.last_heartbeat = clock.seconds()
        self.joins = self.leaves = self.errors = 0

    def _held(self, sid: Any, then: Callable[[Session], Any], *, caller: Any = None) -> Any:
        return then(self.sessions.get(sid))

    # -- hooks ---------------------------------------------------------------------
    def changed(self, session: Session) -> None:
        # only the views that declare presence have rooms
        rooms = {key: bound.query_key for key, bound in session.bounds.items()
                 if self._presence_view(bound.query_key)}
        self._set(session, session.user, rooms)

    def destroyed(self, session: Session) -> None:
        self._set(session, None, {})

    expired = destroyed

    def _personal(self, key: str) -> bool:
        """Whether ``key`` names a view bound to ``$session.user``."""
        spec = self.catalog.views.get(key.partition("(")[0])
        return bool(getattr(spec, "needs_user", False))

    def _presence_view(self, room: str) -> bool:
        spec = self.catalog.views.get(room.partition("(")[0])
        return bool(getattr(spec, "presence", False))

    def _set(self, session: Session, user: Any, rooms: dict[str, str]) -> None:
        old_user, old_rooms = self.members.pop(session.id, (None, {}))
        if rooms:
            self.members[session.id] = (user, rooms)
        touched = set()
        # this node's members of each room
        if old_user is not None:
            for room in set(old_rooms.values()):
                if user is None or room not in rooms.values() or user != old_user:
                    counts = self.local[room]
                    counts[old_user] -= 1
                    if counts[old_user] <= 0:
                        del counts[old_user]
                        touched.add(room)
                    if not counts:
                        del self.local[room]
        if user is not None:
            for room in set(rooms.values()):
                if old_user is None or room not in old_rooms.values() or user != old_user:
                    counts = self.local.setdefault(room, Counter())
                    if not counts[user]:
                        touched.add(room)
                    counts[user] += 1
        # the presence: true subscriptions
        for key, room in old_rooms.items():
            if rooms.get(key) != room and room in self.watchers:
                keys = self.watchers[room].get(session)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self.watchers[room][session]
                    if not self.watchers[room]:
                        del self.watchers[room]
                        self.shown.pop(room, None)
                        self.remote.pop(room, None)
        for key, room in rooms.items():
            watching = self.watchers.get(room)
            if watching is None:
                watching = self.watchers[room] = {}
                self.shown[room] = self._everyone(room)
                self._prime(room)
            watching.setdefault(session, set()).add(key)
        self.dirty |= touched
        for room in touched:
            self._announce(room)
        if touched:
            self.sessions.flush()

    # -- who is there ------------------------------------------------------------------
    def _everyone(self, room: str) -> set:
        return set(self.local.get(room, ())) | self.remote.get(room, set())

    def _announce(self, room: str) -> None:
        """Tell the room's watchers who joined and who left since last time."""
        watching = self.watchers.get(room)
        if not watching:
            return
        now, before = self._everyone(room), self.shown.get(room, set())
        joined, left = sorted(now - before, key=str), sorted(before - now, key=str)
        if not joined and not left:
            return
        self.shown[room] = now
        self.joins += len(joined)
        self.leaves += len(left)
        for session, keys in list(watching.items()):
            for key in keys:
                for user in joined:
                    session.deliver(encode_event(key, JOIN, {"user": user}), key)
                for user in left:
                    session.deliver(encode_event(key, LEAVE, {"user": user}), key)

    def users(self, room: str) -> Deferred:
        """Everyone present in ``room``, every node's, sorted."""
        def union(nodes: dict[str, list]) -> list:
            users = set(self.local.get(room, ()))
            for node, members in nodes.items():
                if node != self.node_id:
                    users.update(members)
            return sorted(users, key=str)

        def unreadable(failure: Any) -> list:
            self.errors += 1
            log.warn("reading presence from the cache failed: {error}",
                     error=failure.getErrorMessage())
            return sorted(self._everyone(room), key=str)
        return self.store.read(room).addCallbacks(union, unreadable)

    # -- the timer -----------------------------------------------------------------------
    def tick(self) -> None:
        """Write the rooms that changed (all of this node's, at each heartbeat),
        read the watched ones and announce what other nodes changed."""
        now = self.clock.seconds()
        rooms = self.dirty
        if now - self.last_heartbeat >= self.heartbeat:
            self.last_heartbeat = now
            rooms = rooms | set(self.local)
        self.dirty = set()
        for room in rooms:
            users = sorted(self.local.get(room, ()), key=str)
            if not users and room not in self.published:
                continue
            if users:
                self.published.add(room)
            else:
                self.published.discard(room)
            self.store.write(room, users).addErrback(self._failed, room, users)
        for room in list(self.watchers):
            self.store.read(room).addCallbacks(self._read, self._unread, callbackArgs=(room,),
                                               errbackArgs=(room,))

    def _prime(self, room: str) -> None:
        """A room gets its first watcher here: learn who is there already,
        without announcing them (presence.list tells the newcomer)."""
        def known(nodes: dict[str, list]) -> None:
            if room in self.watchers:
                self.remote[room] = {u for node, members in nodes.items()
                                     if node != self.node_id for u in members}
                self.shown[room] = self._everyone(room)
        self.store.read(room).addCallbacks(known, self._unread, errbackArgs=(room,))

    def _failed(self, failure: Any, room: str, users: list) -> None:
        self.errors += 1
        if users:
            self.dirty.add(room)          # written again at the next tick
        log.warn("writing presence to the cache failed: {error}",
                 error=failure.getErrorMessage())

    def _unread(self, failure: Any, room: str) -> None:
        self.errors += 1

    def _read(self, nodes: dict[str, list], room: str) -> None:
        if room not in self.watchers:
            return
        self.remote[room] = {u for node, members in nodes.items() if node != self.node_id
                             for u in members}
        self._announce(room)
        self.sessions.flush()

    # -- JSON-RPC ------------------------------------------------------------------------
    def methods(self) -> dict[str, Method]:
        return {"presence.list": Method(self.presence_list, caller_keyword=True)}

    def presence_list(self, sid: Any, key: Any, *, caller: Any = None) -> Any:
        if not isinstance(key, str):
            raise BadParams("key must be a subscription key (a string)")

        def listed(session: Session) -> Deferred:
            bound = session.bounds.get(key)
            if bound is None and session.user is None and self._personal(key):
                raise NotAuthorized("the presence of a personal view needs an "
                                    "authorized session")
            if bound is None:
                raise UnknownKey("this session has no subscription with that key")
            if not self._presence_view(bound.query_key):
                raise NoPresence(f"the view {bound.query_key.partition('(')[0]} does not "
                                 f"declare presence: true")
            return self.users(bound.query_key)
        return self.with_session(sid, listed, caller=caller)

    def stats(self) -> dict[str, int]:
        return {"rooms": len(self.local), "watched_rooms": len(self.watchers),
                "joins": self.joins, "leaves": self.leaves, "errors": self.errors}


