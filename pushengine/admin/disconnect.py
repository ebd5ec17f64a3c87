"""``admin.disconnect``: ending every session of a user, here and on every node.

The node that is asked ends the user's sessions it holds at once, then
publishes a ``pushengine.Disconnect`` object through the change feed, signed
with the admin key as the node statistics are (``hub.signature``). Every
node's sink (``hub.AdminSink``) takes those objects out of the batch before
the engine sees them and hands them here; a node ends the user's sessions
only when the signature verifies under its own admin key, so a backend that
may publish changes but does not know the key cannot end anybody's sessions.
A session ended so is destroyed as ``session.destroy`` destroys it (its
stream is closed, the hooks hear ``destroyed``).

A signed message cannot be used twice: one whose ``time`` is more than
``REPLAY_WINDOW`` seconds away from this node's clock is dropped (a copy
replayed later, or a message that waited that long in a queue: ending
sessions the user opened since would be wrong), and within the window each
message id is applied once (a copy published again at once). Nodes' clocks
must agree to well within the window (NTP).

Once, also across a restart of the receiving node (SPEC section 22): with
``--redis`` the ids a node applied are kept in Redis (``SeenIds``: one key
per node and id, set only if absent, expiring when the message leaves its
window), so a node that restarts still refuses a copy it applied before.
Without Redis (or while Redis cannot answer) a node refuses every message
sent before it started: it cannot know whether it applied it, and every
session it holds is newer than its start (without Redis no session moves
to it from another node), so such a message has nothing to end here that
its sender meant. The ids remembered in memory are bounded (``MAX_SEEN``):
one forgotten within its window raises that floor to its time, so it is
not applied again either.
"""
from __future__ import annotations

import secrets
from collections import OrderedDict
from typing import Any, Protocol, Sequence

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.admin import DISCONNECT_TYPE
from pushengine.admin.hub import signature
from pushengine.core.changes import UPSERT, Change
from pushengine.core.hooks import Hooks
from pushengine.core.interfaces import ChangeFeed
from pushengine.core.sessions import SessionManager

log = Logger()
# seconds a disconnect message stays valid after (and before) its time
REPLAY_WINDOW = 600.0
# message ids remembered to refuse a copy within the window (bounded)
MAX_SEEN = 10_000
# the longest message id taken (a node's are 16 characters)
MAX_ID = 64


class SeenIds(Protocol):
    """Where a node keeps the ids of the disconnects it applied, beyond its
    own life (``pushengine.redis.replay.RedisSeenIds`` with ``--redis``)."""

    def first(self, message_id: str, keep: float) -> Deferred[bool]:
        """Remember ``message_id`` for ``keep`` seconds: True when it was not
        remembered already (this node applies it now), False when it was."""


class Disconnector:
    """Ends a user's sessions on this node, and tells the other nodes to."""

    def __init__(self, sessions: SessionManager, hooks: Hooks, feed: ChangeFeed,
                 clock: IReactorTime, key: bytes, node_id: str,
                 seen: SeenIds | None = None) -> None:
        """``hooks``: the node's session hooks (told of each session ended);
        ``key``: the admin key, which signs the messages; ``seen``: where
        the ids applied are kept across restarts (Redis; None: in memory
        only, and messages sent before this node started are refused)."""
        self.sessions = sessions
        self.hooks = hooks
        self.feed = feed
        self.clock = clock
        self.key = key
        self.node_id = node_id
        self.ended = 0            # sessions ended, by a call here or a message
        self.received = 0         # genuine messages of other nodes
        self.forged = 0           # messages whose signature did not verify
        self.replayed = 0         # genuine messages seen before or out of their window
        self._seen: OrderedDict[str, float] = OrderedDict()   # id -> when it was sent
        self.started = clock.seconds()
        self.shared = seen
        self._floor = float("-inf")   # the latest time of an id forgotten within its window
        self._said_unshared = False

    def here(self, user: Any) -> int:
        """End every session of ``user`` this node holds; how many."""
        mine = [s for s in self.sessions.sessions.values()
                if s.user is not None and s.user == user and type(s.user) is type(user)]
        for session in mine:
            self.sessions.destroy(session)
            self.hooks.destroyed(session)
        self.ended += len(mine)
        return len(mine)

    def everywhere(self, user: Any) -> Deferred[int]:
        """End ``user``'s sessions here and publish the message that ends
        them on the other nodes; fires with the number ended here (also when
        the feed refuses the message: that is logged)."""
        count = self.here(user)
        nonce = secrets.token_urlsafe(12)
        obj = {"id": nonce, "user": user, "origin": self.node_id,
               "time": round(self.clock.seconds(), 3)}
        change = Change(DISCONNECT_TYPE, UPSERT, nonce, dict(obj, sig=signature(self.key, obj)))

        def refused(f: Failure) -> int:
            log.warn("the disconnect of a user could not be published on the feed "
                     "({e}): only this node's sessions ended", e=f.getErrorMessage())
            return count
        return maybeDeferred(self.feed.publish, [change]).addCallbacks(
            lambda _: count, refused)

    def apply(self, changes: Sequence[Change]) -> None:
        """Messages from the feed: each genuine one of another node ends its
        user's sessions here."""
        for change in changes:
            obj = dict(change.obj) if isinstance(change.obj, dict) else {}
            sig = obj.pop("sig", None)
            if change.action != UPSERT or not isinstance(sig, str) \
                    or not _verifies(self.key, obj, sig):
                if not self.forged:
                    log.warn("ignored a disconnect that is not signed with this node's "
                             "admin key (another --admin-key, or forged)")
                self.forged += 1
                continue
            if obj.get("origin") == self.node_id:
                continue          # this node ended them when it was asked
            fresh = self._fresh(obj)
            if isinstance(fresh, Deferred):
                fresh.addCallback(self._decided, obj.get("user")).addErrback(
                    lambda f: log.failure("applying a disconnect failed", f))
            else:
                self._decided(fresh, obj.get("user"))

    def _decided(self, fresh: bool, user: Any) -> None:
        if not fresh:
            self.replayed += 1
            return
        self.received += 1
        self.here(user)

    def _fresh(self, obj: dict) -> bool | Deferred[bool]:
        """Whether to apply a genuine message (then remembered): within its
        window and not applied before, by this node in this life, nor, with
        the shared ids, before a restart."""
        now = self.clock.seconds()
        sent = obj.get("time")
        message_id = obj.get("id")
        if isinstance(sent, bool) or not isinstance(sent, (int, float)) \
                or not isinstance(message_id, str) or not 0 < len(message_id) <= MAX_ID \
                or not abs(now - sent) <= REPLAY_WINDOW:
            return False
        sent = float(sent)
        while self._seen:                     # forget what left the window
            oldest, at = next(iter(self._seen.items()))
            if now - at > REPLAY_WINDOW:
                del self._seen[oldest]
            elif len(self._seen) >= MAX_SEEN:
                # forgotten within its window: nothing sent by then is taken
                del self._seen[oldest]
                self._floor = max(self._floor, at)
            else:
                break
        if message_id in self._seen or sent <= self._floor:
            return False
        known_here = sent >= self.started     # else: perhaps applied before a restart
        self._seen[message_id] = sent
        if self.shared is None:
            return known_here
        keep = sent + REPLAY_WINDOW - now + 1.0

        def unshared(failure: Failure) -> bool:
            if not self._said_unshared:
                self._said_unshared = True
                log.warn("the ids of applied disconnects cannot be read from Redis "
                         "({e}): messages sent before this node started are refused "
                         "meanwhile", e=failure.getErrorMessage())
            return known_here

        def shared(first: bool) -> bool:
            self._said_unshared = False
            return bool(first)
        return self.shared.first(message_id, keep).addCallbacks(shared, unshared)

    def stats(self) -> dict[str, int]:
        """Counters for /metrics."""
        return {"disconnect_sessions_ended": self.ended,
                "disconnects_received": self.received,
                "disconnects_forged": self.forged,
                "disconnects_replayed": self.replayed}


def _verifies(key: bytes, obj: dict, sig: str) -> bool:
    import hmac
    try:
        return hmac.compare_digest(sig, signature(key, obj))
    except (TypeError, ValueError):
        return False
