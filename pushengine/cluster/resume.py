"""Resuming on this node a session another node held (SPEC section 8).

A request names a session this node does not hold: the resumer reads the
session's entry from the registry and re-creates it here under the same id,
with the same user and subscriptions, then queues one ``reset`` per view
with the view's current state (the client's copy may have missed anything
while it moved). The entry now belongs to this node, and the previous owner
is told to drop its copy.

Numbering: the client acknowledges seqs the old node gave it, and an
``ack`` ahead of the session's last seq is refused. So the resumed session
continues above both the seq stored in the entry and the ``ack`` of the
request that resumed it; and when the session was resumed by a call without
an ``ack`` (a subscribe, say) and the first poll then acknowledges more, the
events queued since the resume, which the client has not seen, are numbered
again above that ``ack``.

Without the registry (Redis down), or without an entry, the answer is the
usual 1001: the client creates a new session.
"""
from __future__ import annotations

import re
import weakref
from typing import Any, cast

from twisted.internet.defer import Deferred, FirstError, fail, gatherResults, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.cluster.hooks import RegistryHooks
from pushengine.cluster.record import BadRecord, SessionRecord
from pushengine.cluster.registry import RegistryUnavailable
from pushengine.core.engine import Engine
from pushengine.core.errors import ApiError, LimitReached, UnknownSession
from pushengine.core.sessions import Session
from pushengine.views.conditions import ParamError
from pushengine.views.spec import Catalog

log = Logger()

# ids this engine gives out are URL-safe base64; anything else is not looked up
_SID = re.compile(r"^[A-Za-z0-9_-]{8,64}$")


class Resumer:
    """``Api.resume``: ``resumer(sid, ack=None, client=None)`` → Deferred[Session].

    A session resumed here counts toward ``client``'s ``--max-client-sessions``
    on this node, as one it created would (the SessionManager's count: the
    resume is refused with 1007 past it); the node it left stops counting
    it when it drops its copy (``RegistryHooks.drop`` destroys it there)."""

    def __init__(self, engine: Engine, registry: Any, hooks: RegistryHooks,
                 online: Any = None) -> None:
        self.engine = engine
        self.sessions = engine.sessions
        self.registry = registry
        self.hooks = hooks
        self.online = online
        self._pending: dict[str, list[Deferred]] = {}
        # resumed session → the seq of its first reset
        self._fresh: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __call__(self, sid: Any, ack: int | None = None, client: Any = None) -> Deferred:
        if not isinstance(sid, str) or not _SID.match(sid):
            return fail(UnknownSession("unknown session; create a new one"))
        waiters = self._pending.get(sid)
        if waiters is not None:  # a resume of this id is under way: share it
            d: Deferred[Any] = Deferred()
            waiters.append(d)
            return d
        if not self.registry.available:
            return fail(UnknownSession("unknown session; create a new one "
                                       "(the session registry is unavailable)"))
        self._pending[sid] = waiters = []
        d = self.registry.lookup(sid)
        d.addCallback(self._build, sid, ack, client)
        d.addErrback(self._failed, sid)

        def share(result: Any) -> Any:
            del self._pending[sid]
            for w in waiters:
                w.callback(result)
            return result
        return d.addBoth(share)

    def _failed(self, failure: Failure, sid: str) -> Failure:
        """Registry trouble and unreadable entries are 1001 (the client makes
        a new session); the API's own errors pass as they are; anything else
        is an internal error the API logs, and the client tries again."""
        if failure.check(ApiError):
            return failure
        self.registry.counters["resume_failures"] += 1
        if failure.check(RegistryUnavailable):
            return Failure(UnknownSession("unknown session; create a new one "
                                          "(the session registry is unavailable)"))
        if failure.check(BadRecord):
            log.warn("cannot resume session {sid}: {why}", sid=sid[:8],
                     why=failure.getErrorMessage())
            return Failure(UnknownSession("unknown session; create a new one"))
        return failure

    def _build(self, record: SessionRecord | None, sid: str, ack: int | None,
               client: Any = None) -> Deferred:
        if record is None:
            self.registry.counters["resume_misses"] += 1
            raise UnknownSession("unknown session; create a new one")
        existing = self.sessions.sessions.get(sid)
        if existing is not None:  # came back meanwhile (another call resumed it)
            return succeed(existing)
        # as for a new session: LimitReached (1004) past --max-sessions,
        # RateLimited (1007) past the client's --max-client-sessions here
        session = self.sessions.create(sid, client=client)
        # the authorization ends when it would have on the node that held it
        self.sessions.authorize(session, record.user,
                                record.until if record.user is not None else None)
        self.sessions.continue_numbering(session, max(record.seq, ack or 0))
        catalog = cast(Catalog, self.engine.catalog)   # the views file (the core types less)
        opening = []
        for sub in record.subs:
            spec = catalog.views.get(sub.view)
            try:
                if spec is None:
                    raise ParamError(f"the view {sub.view} is no longer declared")
                bound = spec.bind(sub.params, session.user, sub.limit)
                # the record holds no contact digests (the segments package
                # keeps them per session, on the node that authorized it): a
                # view bound to $session.segments gets none (fail closed),
                # under the key the client knows (docs/segments.md)
                if bound.key != sub.key and getattr(spec, "needs_segments", False):
                    d = self.sessions.subscribe(session, bound, sub.key)
                else:
                    if bound.key != sub.key:
                        log.warn("session {sid}: {old} is now keyed {new}", sid=sid[:8],
                                 old=sub.key, new=bound.key)
                    d = self.sessions.subscribe(session, bound)
            except (ParamError, LimitReached) as e:
                log.warn("session {sid}: subscription {key} not resumed: {why}",
                         sid=sid[:8], key=sub.key, why=str(e))
                continue
            opening.append(d)

        def opened(_: Any) -> Any:
            if self.sessions.sessions.get(sid) is not session:
                raise UnknownSession("the session ended while it was resumed")
            # events of the windows as they opened: replaced by the resets below
            self.sessions.clear_events(session)
            self._fresh[session] = self.sessions.pending_from(session)
            self.sessions.reset_session(session)
            # a stream held it there: counted in every period while held,
            # this one included, though the entry was written earlier
            period = self.hooks.period() if record.held else record.period
            self.online.mark_counted(sid, list(session.subs), period)
            self.registry.counters["resumes"] += 1
            if record.owner != self.registry.node_id:
                self.registry.counters["moved_in"] += 1
            log.info("resumed session {sid} from node {owner}: {subs} subscriptions",
                     sid=sid[:8], owner=record.owner, subs=len(session.subs))
            self.sessions.flush()
            # answer once the entry is ours: the client's next call, wherever
            # it lands, then finds this node as the owner
            written = self.hooks.resumed(session, record.owner)
            if written is None:
                return session
            return written.addCallback(lambda _: session)

        def not_opened(failure: Failure) -> Failure:
            self.sessions.destroy(session)  # half a session helps no one; the entry stays
            if isinstance(failure.value, FirstError):
                sub: Failure = failure.value.subFailure
                return sub
            return failure
        return gatherResults(opening, consumeErrors=True).addCallbacks(opened, not_opened)

    def ahead(self, session: Session, ack: int) -> Deferred:
        """A poll acknowledges more than ``session`` numbered. Fire with the
        session to poll (renumbered, or resumed again because this copy was
        stale), or None when the ``ack`` is simply wrong."""
        start = self._fresh.get(session)
        if start is not None and self.sessions.pending_from(session) == start:
            # resumed by another call: nothing delivered yet
            self.sessions.renumber(session, ack)
            self._fresh[session] = ack + 1
            return succeed(session)
        if not self.registry.available:
            return succeed(None)

        def check(owner: str | None) -> Any:
            if owner is None or owner == self.registry.node_id:
                return None
            # the client was served by another node since: this copy is stale
            self.hooks.drop(session)
            return self(session.id, ack, session.client)

        def unknown(failure: Failure) -> None:
            if not failure.check(RegistryUnavailable):
                log.failure("checking the owner of session {sid} failed", failure,
                            sid=session.id[:8])
            return None
        return self.registry.owner(session.id).addCallbacks(check, unknown)
