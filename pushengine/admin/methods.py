"""The ``admin.*`` JSON-RPC methods, each behind the admin key.

The key comes in the call's params (the admin page sends it in the body) or
in ``Authorization: Bearer <key>`` (a script with curl); never from a URL,
which proxies and access logs keep. It is compared with
``hmac.compare_digest``. Without ``--admin-key`` every method answers 1003
(closed). A client that gives a wrong key ``max_failures`` times within
``window`` seconds is refused (1007, HTTP 429) for its wrong keys until the
window passes; the right key is never refused, whoever shares the address.

- ``admin.subscribe(sid, key)``: the session receives the node statistics
  (the internal view ``$admin.NodeStats``); answers ``[key, state]`` as
  ``session.subscribe`` does.
- ``admin.unsubscribe(sid, key)``.
- ``admin.stats(key)``: the statistics of every node, now.
- ``admin.publish(key, changes)``: publish one change or a list, as
  ``POST /api/publish`` does (so the page needs no publish key).
- ``admin.session(key, sid)``: one session's user, delivery and
  subscriptions (from the Redis registry when another node holds it), or
  ``null``.
- ``admin.disconnect(key, user)``: end every session of ``user`` on this
  node and, through the feed, on every node (``disconnect.py``); answers
  the number ended here.
"""
from __future__ import annotations

import hmac
from collections import deque
from typing import Any, NoReturn, Protocol, Sequence, cast

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.admin import ADMIN_TYPE
from pushengine.admin.disconnect import Disconnector
from pushengine.admin.hub import AdminHub
from pushengine.api.auth import normalize_user
from pushengine.core.changes import changes_from_json
from pushengine.core.errors import ApiError, BadParams, NotAuthorized, RateLimited, UnknownSession
from pushengine.core.interfaces import ChangeFeed, FeedUnavailable
from pushengine.core.sessions import Session
from pushengine.api.methods import Api
from pushengine.api.rpc import Method
from pushengine.views.spec import BoundView
from pushengine.views.window import Window

log = Logger()
CLOSED = "the admin interface is closed: start the node with --admin-key"


class RecordLookup(Protocol):
    """The session registry of the cluster (``pushengine.cluster``), as far
    as the admin methods read it: ``lookup`` fires with a session's record
    (``owner``, ``user``, ``seq``, ``subs``), or None."""

    def lookup(self, sid: str) -> Deferred[Any]: ...


class RecordedSubscription(Protocol):
    """A subscription of a session record (``cluster.record.Subscription``)."""

    def as_json(self) -> dict[str, Any]: ...


class SessionRecord(Protocol):
    """What the admin methods read of a session's record in the registry
    (``cluster.record.SessionRecord``)."""

    @property
    def owner(self) -> str: ...

    @property
    def user(self) -> object: ...

    @property
    def seq(self) -> int: ...

    @property
    def subs(self) -> Sequence[RecordedSubscription]: ...


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


class AdminKey:
    """The admin key check, with a bound on wrong guesses per client."""

    def __init__(self, key: str | None, clock: IReactorTime, max_failures: int = 10,
                 window: float = 60.0) -> None:
        self.key = _bytes(key) if key else None
        self.clock = clock
        self.max_failures = max_failures
        self.window = window
        self.failures: dict[str, deque[float]] = {}
        self.refused = 0

    @property
    def open(self) -> bool:
        return self.key is not None

    def check(self, caller: object, presented: object) -> None:
        """Return when ``presented`` (or the caller's bearer token) is the
        key; raise NotAuthorized, or RateLimited when the caller's address
        gave ``max_failures`` wrong keys within ``window`` seconds.

        The right key is compared first and always accepted: a lockout
        holds back the source of wrong keys only, so that nobody who shares
        the operator's address (a proxy, a NAT) can keep the operator out.
        Guessing stays out of reach because the key has at least 16
        characters and every call counts against ``--client-rate``."""
        if self.key is None:
            raise NotAuthorized(CLOSED)
        if presented is None:
            presented = getattr(caller, "bearer", None)
        if isinstance(presented, str) and hmac.compare_digest(_bytes(presented), self.key):
            return
        address = getattr(caller, "address", None) or "?"
        now = self.clock.seconds()
        recent = self.failures.get(address)
        if recent is not None:
            while recent and recent[0] <= now - self.window:
                recent.popleft()
            if not recent:
                del self.failures[address]
            elif len(recent) >= self.max_failures:
                raise RateLimited("too many wrong admin keys from this client",
                                  retry_after=recent[0] + self.window - now)
        self.refused += 1
        if len(self.failures) > 10000:          # bounded: forget the oldest client
            self.failures.pop(next(iter(self.failures)))
        self.failures.setdefault(address, deque()).append(now)
        raise NotAuthorized("a valid admin key is required" if presented is not None else
                            "the admin key is required (in the params, or in "
                            "Authorization: Bearer)")


class AdminMethods:
    def __init__(self, key: AdminKey, hub: AdminHub | None, api: Api, feed: ChangeFeed,
                 id_fields: dict[str, str], node_id: str,
                 registry: RecordLookup | None = None,
                 disconnector: Disconnector | None = None) -> None:
        """``api``: the node's Api (its sessions and ``with_session``, which
        resumes a session from the cluster registry); ``registry``: the
        Redis session registry, for sessions held by other nodes;
        ``disconnector``: ends a user's sessions (with the admin key)."""
        self.key = key
        self.hub = hub
        self.api = api
        self.feed = feed
        self.id_fields = id_fields
        self.node_id = node_id
        self.registry = registry
        self.disconnector = disconnector

    def methods(self) -> dict[str, Method]:
        return {
            "admin.subscribe": Method(self.subscribe, ["sid", "key"], 1, with_caller=True),
            "admin.unsubscribe": Method(self.unsubscribe, ["sid", "key"], 1, with_caller=True),
            "admin.stats": Method(self.stats, ["key"], 0, with_caller=True),
            "admin.publish": Method(self.publish, ["key", "changes"], 2, with_caller=True),
            "admin.session": Method(self.session, ["key", "sid"], 2, with_caller=True),
            "admin.disconnect": Method(self.disconnect, ["key", "user"], 2, with_caller=True),
        }

    def _hub(self) -> AdminHub:
        if self.hub is None:
            raise NotAuthorized(CLOSED)
        return self.hub

    def subscribe(self, caller: object, sid: object, key: object = None) -> object:
        self.key.check(caller, key)
        hub = self._hub()
        return self.api.with_session(sid, hub.subscribe, caller=caller)

    def unsubscribe(self, caller: object, sid: object, key: object = None) -> object:
        self.key.check(caller, key)
        hub = self._hub()
        return self.api.with_session(sid, hub.unsubscribe, caller=caller)

    def stats(self, caller: object, key: object = None) -> list[dict]:
        self.key.check(caller, key)
        return self._hub().state()

    def publish(self, caller: object, key: object, changes: object) -> Deferred[dict[str, int]]:
        self.key.check(caller, key)
        # the dispatcher checked every param (strictjson) before the call
        found, errors = changes_from_json(changes, self.id_fields, checked=True)
        if errors:
            raise BadParams("malformed change: " + "; ".join(errors[:5]))
        if not found:
            raise BadParams("no changes to publish")
        if any(c.type == ADMIN_TYPE for c in found):
            raise BadParams(f"{ADMIN_TYPE} objects are the engine's own")

        def failed(f: Failure) -> NoReturn:
            if f.check(FeedUnavailable):
                raise ApiError("the change feed is not available; retry")
            log.failure("publishing {n} changes from the admin page failed", f, n=len(found))
            raise ApiError("publishing failed")
        d = maybeDeferred(self.feed.publish, found)
        return d.addCallbacks(lambda n: {"accepted": n}, failed)

    def disconnect(self, caller: object, key: object, user: object) -> Deferred[int]:
        """End every session of ``user`` here and on every node sharing the
        feed; the number ended here."""
        self.key.check(caller, key)
        if self.disconnector is None:
            raise NotAuthorized(CLOSED)
        if isinstance(user, bool) or not isinstance(user, (str, int)) or user == "":
            raise BadParams("user must be a user id (a string or an integer)")
        return self.disconnector.everywhere(normalize_user(user))

    def session(self, caller: object, key: object,
                sid: object) -> dict[str, Any] | Deferred[dict[str, Any] | None] | None:
        self.key.check(caller, key)
        if not isinstance(sid, str) or not sid:
            raise BadParams("sid must be a session id (a string)")
        sessions = self.api.sessions
        try:
            session = sessions.get(sid)
        except UnknownSession:
            return self._elsewhere(sid)
        return self._describe(session)

    def _describe(self, session: Session) -> dict[str, Any]:
        delivery = session.delivery
        subs = []
        for key, live in session.subs.items():
            # the core holds them by its protocols; they are the views' own
            bound = cast("BoundView | None", session.bounds.get(key))
            window = cast(Window, live)
            subs.append({"key": key, "view": bound.spec.name if bound else key.partition("(")[0],
                         "params": bound.params if bound else {},
                         "limit": bound.limit if bound else window.limit,
                         "subscribers": len(window.subscribers),
                         "objects": len(window.state())})
        if self.hub is not None and session in self.hub.subscribers:
            subs.append({"key": "$admin.NodeStats", "view": "(admin statistics)", "params": {},
                         "limit": None, "subscribers": len(self.hub.subscribers),
                         "objects": len(self.hub.nodes)})
        return {"session": session.id, "node": self.node_id, "here": True,
                "user": session.user,
                "delivery": None if delivery is None else
                ("stream" if delivery.holds_session else "longpoll"),
                "queued": session.log.pending, "last_seq": session.log.last_seq,
                "subscriptions": subs}

    def _elsewhere(self, sid: str) -> Deferred[dict[str, Any] | None] | None:
        """A session this node does not hold: its record in the Redis
        registry (another node's), or None."""
        if self.registry is None:
            return None

        def found(record: SessionRecord | None) -> dict[str, Any] | None:
            if record is None:
                return None
            return {"session": sid, "node": record.owner, "here": False, "user": record.user,
                    "delivery": None, "queued": None, "last_seq": record.seq,
                    "subscriptions": [dict(s.as_json(), subscribers=None, objects=None)
                                      for s in record.subs]}

        def unavailable(f: Failure) -> None:
            log.warn("looking a session up in the registry failed: {e}", e=f.getErrorMessage())
            raise ApiError("the session registry is not available; retry")
        return self.registry.lookup(sid).addCallbacks(found, unavailable)
