"""The internal view of node statistics, and the sink that feeds it.

Every node's ``pushengine.NodeStats`` objects arrive on the change feed. The
node's sink (``AdminSink``) hands them here and the rest to the engine, so
that they never reach the store, an ordinary view or ``pushengine_changes``.
The hub keeps the last object of each node and a short history of its
rates (for the chart), and sends ``insert`` / ``update`` / ``delete`` events
keyed ``ADMIN_VIEW_KEY`` to the sessions that ``admin.subscribe`` admitted.
A node not heard from for ``stale`` seconds is deleted.

Each object is signed (``sig``: HMAC-SHA256 under the admin key of its
canonical JSON): a backend that may publish changes but does not know the
admin key cannot show forged figures. Nodes of one cluster share the key.
"""
from __future__ import annotations

import hashlib
import hmac
import json
from collections import deque
from typing import Any, Protocol, Sequence

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from pushengine.admin import ADMIN_TYPE, ADMIN_VIEW_KEY, DISCONNECT_TYPE
from pushengine.core.changes import UPSERT, Change
from pushengine.core.events import DELETE, INSERT, UPDATE, encode_event
from pushengine.core.hooks import SessionHooksBase
from pushengine.core.interfaces import ChangeSink
from pushengine.core.sessions import Session, SessionManager

log = Logger()
# the engine's own types, which the sink keeps away from the engine
INTERNAL_TYPES = frozenset((ADMIN_TYPE, DISCONNECT_TYPE))


class AdminHub(SessionHooksBase):
    """The NodeStats objects of every node, and the admin pages' sessions."""

    def __init__(self, sessions: SessionManager, clock: IReactorTime, key: bytes,
                 stale: float = 10.0,
                 history: int = 300) -> None:
        """``sessions``: the SessionManager (its sessions, ``flush``);
        ``key``: the admin key, which signs the objects;
        ``history``: rate points kept per node (one a second: 5 minutes)."""
        self.sessions = sessions
        self.key = key
        self.forged = 0
        self.clock = clock
        self.stale = stale
        self.history_size = history
        self.nodes: dict[str, dict] = {}
        self.heard: dict[str, float] = {}
        self.history: dict[str, deque] = {}
        self.subscribers: set[Session] = set()
        self.received = 0
        self.delivered = 0            # events queued to admin sessions

    # -- the feed side ------------------------------------------------------------
    def apply(self, changes: Sequence[Change]) -> None:
        for change in changes:
            node = str(change.id)
            # nodes send upserts only (a node gone is deleted for its silence)
            if change.action == UPSERT:
                obj = dict(change.obj)
                if not self.genuine(obj):
                    if not self.forged:
                        log.warn("ignored node statistics that are not signed with this "
                                 "node's admin key (another --admin-key, or forged)")
                    self.forged += 1
                    continue
                self.received += 1
                obj.pop("history", None)       # a node sends figures, not history
                action = UPDATE if node in self.nodes else INSERT
                self.nodes[node] = obj
                self.heard[node] = self.clock.seconds()
                points = self.history.setdefault(node, deque(maxlen=self.history_size))
                point = _point(obj)
                if point is not None:
                    points.append(point)
                self._send(action, obj)
        self.sessions.flush()

    def sign(self, obj: dict) -> dict:
        """``obj`` with its signature."""
        return dict(obj, sig=signature(self.key, obj))

    def genuine(self, obj: dict) -> bool:
        """Signed with this key (``sig`` is removed from ``obj``)."""
        sig = obj.pop("sig", None)
        try:
            return isinstance(sig, str) and hmac.compare_digest(sig, signature(self.key, obj))
        except (TypeError, ValueError):
            return False

    def expire(self) -> None:
        """Delete the nodes not heard from for ``stale`` seconds (run each tick)."""
        oldest = self.clock.seconds() - self.stale
        gone = [node for node, when in self.heard.items() if when < oldest]
        for node in gone:
            self._forget(node)
        if gone:
            self.sessions.flush()

    def _forget(self, node: str) -> None:
        obj = self.nodes.pop(node)
        self.heard.pop(node, None)
        self.history.pop(node, None)
        self._send(DELETE, {"id": obj.get("id", node), "node": node})

    def _send(self, action: str, obj: dict) -> None:
        if not self.subscribers:
            return
        fragment = encode_event(ADMIN_VIEW_KEY, action, obj)
        live = self.sessions.sessions
        for session in list(self.subscribers):
            if live.get(session.id) is not session:
                # ended without a hook (moved to another node): forget it
                self.subscribers.discard(session)
                continue
            session.deliver(fragment, ADMIN_VIEW_KEY)
            self.delivered += 1

    # -- the sessions side -------------------------------------------------------------
    def state(self) -> list[dict]:
        """Every node's last object with its rate history, by node id."""
        return [dict(self.nodes[node], history=[list(p) for p in self.history.get(node, ())])
                for node in sorted(self.nodes)]

    def subscribe(self, session: Session) -> list[Any]:
        """``[key, state]``, as ``session.subscribe`` answers."""
        self.subscribers.add(session)
        return [ADMIN_VIEW_KEY, self.state()]

    def unsubscribe(self, session: Session) -> bool:
        if session in self.subscribers:
            self.subscribers.discard(session)
            return True
        return False

    # one of the node's session hooks (core.hooks): an admin session that
    # ends leaves the hub
    def destroyed(self, session: Session) -> None:
        self.subscribers.discard(session)

    expired = destroyed


def signature(key: bytes, obj: dict) -> str:
    """HMAC-SHA256 of the object's canonical JSON (sorted keys)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
    return hmac.new(key, text.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()


def _point(obj: dict) -> list | None:
    """``[time, in per second, out per second]`` of a NodeStats object."""
    try:
        return [round(float(obj["time"]), 3), float(obj.get("in_rate", 0)),
                float(obj.get("out_rate", 0))]
    except (KeyError, TypeError, ValueError):
        return None


class DisconnectSink(Protocol):
    """Takes ``pushengine.Disconnect`` messages (``admin.disconnect.Disconnector``)."""

    def apply(self, changes: Sequence[Change]) -> None: ...


class AdminSink:
    """The feed's sink: NodeStats to the hub (when there is one; a node
    without ``--admin-key`` drops them), Disconnect messages to the
    disconnector (dropped without one), everything else to the engine."""

    def __init__(self, engine: ChangeSink, hub: AdminHub | None = None,
                 disconnector: DisconnectSink | None = None) -> None:
        self.engine = engine
        self.hub = hub
        self.disconnector = disconnector
        self.ignored = 0

    def apply_changes(self, changes: Sequence[Change]) -> None:
        for c in changes:
            if c.type in INTERNAL_TYPES:
                break
        else:
            self.engine.apply_changes(changes)
            return
        stats = [c for c in changes if c.type == ADMIN_TYPE]
        disconnects = [c for c in changes if c.type == DISCONNECT_TYPE]
        rest = [c for c in changes if c.type not in INTERNAL_TYPES]
        if disconnects and self.disconnector is not None:
            try:
                self.disconnector.apply(disconnects)
            except Exception:
                log.failure("applying a disconnect failed")
        if not stats:
            pass
        elif self.hub is not None:
            try:
                self.hub.apply(stats)
            except Exception:
                log.failure("applying node statistics failed")
        else:
            self.ignored += len(stats)
        if rest:
            self.engine.apply_changes(rest)

    def feed_gap(self) -> None:
        self.engine.feed_gap()
