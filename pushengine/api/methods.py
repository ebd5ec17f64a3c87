"""The JSON-RPC methods (SPEC section 3), free of any transport.

``Api.methods()`` maps method names to ``rpc.Method`` objects: the fixed
``session.*`` and ``stats.*`` methods, ``user.public_profile(s)`` when the
views file declares the User type's public fields, plus one alias per view
declared with a ``method`` in the views file; with a namespace, each of them
also as ``<namespace>.<method>``.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Protocol, cast

from twisted.internet.defer import Deferred, gatherResults, maybeDeferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.api.auth import TokenVerifier, remaining
from pushengine.core.engine import Engine
from pushengine.core.errors import (
    BadParams, MethodNotFound, NotAuthorized, UnknownKey, UnknownView)
from pushengine.core.events import RawUTF8
from pushengine.core.hooks import Hooks
from pushengine.core.interfaces import Poller, SegmentLookup
from pushengine.core.sessions import Delivery, Session
from pushengine.api.profiles import PROFILE_TYPE, Profiles
from pushengine.api.rpc import Method
from pushengine.views.conditions import ParamError, ViewDefinitionError
from pushengine.views.spec import BoundView, Catalog, ViewSpec

log = Logger()
DEFAULT_POLL_TIMEOUT = 30.0


def _finite(value: int | float) -> bool:
    """A number that is a float too (an integer of 400 digits is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def method_table(tables: list[dict[str, Method]], catalog: Any,
                 namespace: str | None = None) -> dict[str, Method]:
    """The node's methods: ``tables`` merged (a name in two of them is
    refused, never one silently hiding the other) and, with ``namespace``
    (``--namespace``, e.g. ``qik``), every method also as
    ``<namespace>.<method>``, as the original engine's clients call it.
    A clash raises ViewDefinitionError naming the view when a view's alias
    is involved."""
    views = getattr(catalog, "methods", {})

    def clash(name: str, message: str) -> ViewDefinitionError:
        spec = views.get(name)
        return ViewDefinitionError(f"{spec.name}: {message}" if spec is not None else message)

    merged: dict[str, Method] = {}
    for table in tables:
        for name, method in table.items():
            if name in merged:
                raise clash(name, f"method {name} is one of the engine's own methods")
            merged[name] = method
    if not namespace:
        return merged
    named = dict(merged)
    for name, method in merged.items():
        full = f"{namespace}.{name}"
        if full in merged:
            raise clash(full, f"method {full} is also {name} under --namespace {namespace}")
        named[full] = method
    return named


class UniqueCount(Protocol):
    """``stats.unique``'s figures (``pushengine.bloom.unique.UniqueUsers``)."""

    def count(self, view_key: str) -> Deferred[int]:
        """Distinct users of ``view_key`` in the last period."""


class Api:
    def __init__(self, engine: Engine, tokens: TokenVerifier, online: Any,
                 resume: Callable[..., Deferred] | None = None, *, poller: Poller,
                 hooks: Hooks | None = None, unique: UniqueCount | None = None,
                 segments: SegmentLookup | None = None) -> None:
        """``poller`` answers ``session.get_events`` (long-polling, built by
        the service). ``resume(sid, ack=None, client=None)`` → Deferred[Session]
        re-creates a session this node does not hold (from the cluster's
        registry; it fails with UnknownSession when it cannot), counted for
        ``client`` (the caller's address) against ``--max-client-sessions``. It may also offer
        ``resume.ahead(session, ack)`` → Deferred[Session | None], asked when
        a poll acknowledges more than the session numbered (see
        pushengine.cluster.resume).

        ``hooks``: the node's session hooks (``core.hooks``), the session
        manager's (the default); they are told, after the action, of sessions
        ``created``, ``authorized``, ``changed``, ``polled`` and
        ``destroyed``. ``unique``: the figures of ``stats.unique`` (0
        without). ``segments``: the audience segments of a session, for the
        views bound to ``$session.segments`` (none without)."""
        self.engine = engine
        fields = getattr(engine.catalog, "public_fields", {}).get(PROFILE_TYPE)
        self.profiles = Profiles(getattr(engine, "store", None), fields) if fields else None
        self.sessions = engine.sessions
        self.poller = poller
        self.tokens = tokens
        self.online = online
        self._counted = getattr(online, "counted", None)
        self.resume = resume
        if hooks is not None and hooks is not engine.sessions.hooks:
            raise ValueError("the Api must be given the session manager's hooks")
        self.hooks = engine.sessions.hooks
        self.unique = unique
        self.segments = segments

    @property
    def catalog(self) -> Catalog:
        """The views file (the core knows it as a TypeCatalog only)."""
        return cast(Catalog, self.engine.catalog)

    # -- helpers -------------------------------------------------------------
    def with_session(self, sid: Any, then: Callable[[Session], Any],
                     ack: int | None = None, *, caller: Any = None) -> Any:
        """``then(session)`` for a session this node holds, at once (no
        Deferred on the hot path); otherwise a Deferred that first resumes
        it from the cluster registry. ``caller``: who asks; a session resumed
        here counts toward that client's ``--max-client-sessions`` on this
        node (1007 past it), as a session it created would."""
        try:
            session = self.sessions.get(sid)
        except Exception as e:
            if self.resume is None or not isinstance(sid, str):
                raise e
            return self.resume(sid, ack, client=getattr(caller, "address", None)) \
                .addCallback(then)
        return then(session)

    def methods(self) -> dict[str, Method]:
        m = {
            "session.create": Method(self.session_create, with_caller=True),
            # (the caller: a session resumed from the cluster counts for it)
            "session.destroy": Method(self.session_destroy, caller_keyword=True),
            # a token may carry more claims than the 1 KiB other strings get
            "session.authorize": Method(self.session_authorize, max_string=8192,
                                        caller_keyword=True),
            "session.refresh": Method(self.session_refresh, max_string=8192,
                                      caller_keyword=True),
            "session.subscribe": Method(self.session_subscribe, caller_keyword=True),
            "session.unsubscribe": Method(self.session_unsubscribe, caller_keyword=True),
            "session.get_events": Method(self.session_get_events, with_caller=True,
                                         shortcut=self.get_events_shortcut),
            "session.attach": Method(self.session_attach, with_caller=True),
            "stats.online": Method(self.stats_online, caller_keyword=True),
            "stats.unique": Method(self.stats_unique, caller_keyword=True),
        }
        if self.profiles is not None:
            # sessionless: the public fields of User objects (SPEC section 11)
            m["user.public_profile"] = Method(self.profiles.public_profile)
            m["user.public_profiles"] = Method(self.profiles.public_profiles)
        for name, spec in self.catalog.methods.items():
            if name in m:
                raise ViewDefinitionError(f"{spec.name}: method {name} is one of the "
                                          f"engine's own methods")
            m[name] = self._alias(spec)
        return m

    def _alias(self, spec: ViewSpec) -> Method:
        names = ["sid", *spec.params]
        # limit may be left out when it is the last declared parameter
        required = len(names) - 1 if spec.params and spec.params[-1] == "limit" else len(names)

        def alias(sid: Any, *values: Any, caller: Any = None) -> Any:
            given = dict(zip(spec.params, values))
            limit = given.pop("limit", None)
            return self.session_subscribe(sid, spec.name, given, limit, caller=caller)
        return Method(alias, names, required, caller_keyword=True)

    # -- methods -------------------------------------------------------------
    def _count_online(self, session: Session) -> None:
        """A session counts online from its creation and each time it polls
        or subscribes (once per period; never fails the caller)."""
        if self._counted is not None and self._counted(session.id, session.subs.keys()):
            return
        d = self.online.touch(session.id, session.subs.keys())
        if not d.called:
            d.addErrback(lambda f: log.failure("counting a session online failed", f))

    def session_create(self, caller: Any = None) -> str | Deferred:
        """``caller`` (a ``pushengine.api.caller.Caller``) says who asks: sessions
        per client address are capped; a WebSocket asking receives the new
        session's events."""
        session = self.sessions.create(client=getattr(caller, "address", None))
        channel = getattr(caller, "channel", None)
        if channel is not None:
            self.sessions.attach(session, channel)
            channel.switch_to(session)
        self._count_online(session)
        # the next call may reach another node (a balancer hashes on the id,
        # which it did not know for this call): answer once the session
        # registry has the session, so that that node can resume it
        waits = self.hooks.created(session)
        if waits:
            return gatherResults(waits, consumeErrors=True).addBoth(lambda _: session.id)
        return session.id

    def session_destroy(self, sid: Any, *, caller: Any = None) -> Any:
        def destroy(session: Session) -> bool:
            self.sessions.destroy(session)
            self.hooks.destroyed(session)
            return True
        return self.with_session(sid, destroy, caller=caller)

    def session_authorize(self, sid: Any, token: Any, *, caller: Any = None) -> Any:
        def authorize(session: Session) -> Any:
            verify = getattr(self.tokens, "verify", None)
            claims: Mapping[str, Any]
            user, claims = verify(token) if verify is not None else (self.tokens.user(token), {})
            self.sessions.authorize(session, user, self._expires_at(claims))
            # the claims go to the hooks (the segments keep the contacts' digests, SPEC 15)
            self.hooks.authorized(session, claims)
            self.hooks.changed(session)
            return user
        return self.with_session(sid, authorize, caller=caller)

    def _expires_at(self, claims: Mapping[str, Any]) -> float | None:
        """When, on the session manager's clock, the token's ``exp`` comes."""
        left = remaining(claims)
        return None if left is None else self.sessions.clock.seconds() + left

    def session_refresh(self, sid: Any, token: Any, *, caller: Any = None) -> Any:
        """A new token for the session's user: its authorization ends at the
        new token's ``exp`` (never without one). A token of another user, or
        one that does not verify, is 1003 and changes nothing."""
        def refresh(session: Session) -> Any:
            verify = getattr(self.tokens, "verify", None)
            claims: Mapping[str, Any]
            user, claims = verify(token) if verify is not None else (self.tokens.user(token), {})
            self.sessions.refresh(session, user, self._expires_at(claims))
            # the cluster's registry keeps when the authorization ends
            self.hooks.changed(session)
            return user
        return self.with_session(sid, refresh, caller=caller)

    def session_subscribe(self, sid: Any, view: Any, params: Any = None,
                          limit: Any = None, *, caller: Any = None) -> Any:
        def subscribe(session: Session) -> Any:
            if not isinstance(view, str) or view not in self.catalog.views:
                raise UnknownView(f"unknown view {str(view)[:100]!r}")
            spec = self.catalog.views[view]
            if spec.needs_user and session.user is None:
                raise NotAuthorized(f"view {view} needs an authorized session")
            if isinstance(params, dict) and any(k.startswith("session.") for k in params):
                raise BadParams("session.* parameters cannot be supplied")
            if getattr(spec, "needs_segments", False):
                return self._segments_of(session).addCallback(bound_to, session, spec)
            return bound_to(None, session, spec)

        def bound_to(segments: list[str] | None, session: Session, spec: ViewSpec) -> Deferred:
            bound: BoundView
            try:
                bound = spec.bind(params, session.user, limit, segments=segments) \
                    if segments is not None else spec.bind(params, session.user, limit)
            except ParamError as e:
                raise BadParams(str(e)) from None
            d = self.sessions.subscribe(session, bound)

            def subscribed(result: list[Any]) -> list[Any]:
                self._count_online(session)
                self.hooks.changed(session)
                return result
            return d.addCallback(subscribed)
        return self.with_session(sid, subscribe, caller=caller)

    def _segments_of(self, session: Session) -> Deferred[list[str]]:
        """The audience segments the session's hashed contacts are in
        (SPEC 15); none when the store cannot answer (fail closed)."""
        if self.segments is None:
            return succeed([])

        def unavailable(f: Failure) -> list[str]:
            log.warn("segments unavailable, subscribing without them: {e}",
                     e=f.getErrorMessage())
            return []
        return self.segments.segments_of(session).addErrback(unavailable)

    def session_unsubscribe(self, sid: Any, key: Any, *, caller: Any = None) -> Any:
        def unsubscribe(session: Session) -> bool:
            self.sessions.unsubscribe(session, key)
            self.hooks.changed(session)
            return True
        return self.with_session(sid, unsubscribe, caller=caller)

    def _at_seq(self, sid: Any, seq: int | None, then: Callable[[Session], Any],
                caller: Any = None) -> Any:
        """``then(session)`` for a client that says it received up to
        ``seq`` (a poll's ack, a stream's last seq). A seq ahead of the
        session is -32602, except where the cluster registry explains it
        (a session resumed here, or a stale copy: see cluster/resume.py)."""
        def ahead(session: Session) -> BadParams:
            return BadParams(f"{seq} is ahead of the last event "
                             f"({self.sessions.last_seq(session)})")

        def check(session: Session) -> Any:
            if seq is not None and seq > self.sessions.last_seq(session):
                behind = getattr(self.resume, "ahead", None)
                if behind is None:
                    raise ahead(session)
                return behind(session, seq).addCallback(checked, session, seq)
            return then(session)

        def checked(resumed: Session | None, session: Session, seq: int) -> Any:
            if resumed is None or seq > self.sessions.last_seq(resumed):
                raise ahead(resumed or session)
            return then(resumed)
        return self.with_session(sid, check, seq, caller=caller)

    def session_get_events(self, caller: Any, sid: Any, timeout: Any = DEFAULT_POLL_TIMEOUT,
                           ack: Any = None) -> Any:
        if getattr(caller, "channel", None) is not None:
            raise MethodNotFound("session.get_events is not answered on a WebSocket: "
                                 "events are pushed to it")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
                or not _finite(timeout) or timeout < 0:
            raise BadParams("timeout must be a number of seconds, 0 or more")
        if ack is not None and (isinstance(ack, bool) or not isinstance(ack, int) or ack < 0):
            raise BadParams("ack must be an integer sequence number, 0 or more")

        return self._at_seq(sid, ack, lambda session: self._poll(session, timeout, ack),
                            caller)

    def _poll(self, session: Session, timeout: float, ack: int | None,
              reply: Callable[[RawUTF8], object] | None = None) -> Any:
        self._count_online(session)
        self.hooks.polled(session)
        if reply is not None:
            return self.poller.get_events_to(session, float(timeout), ack, reply)
        return self.poller.get_events(session, float(timeout), ack)

    def get_events_shortcut(self, params: list, caller: Any) -> Callable[[Any], Any] | None:
        """The common ``session.get_events`` call, prepared for the
        dispatcher's shortcut (``rpc.Method.shortcut``): positional params
        ``[sid, timeout]`` or ``[sid, timeout, ack]``, a session this node
        holds, a timeout of 0 to 10**9 seconds, an ack within the session's
        numbering, over HTTP. Returns the poll to run, or None when the call
        is anything else: the method itself then answers it, errors and
        resumption included, so they keep one source. The poll, run with a
        reply, answers a parked poll by calling it (``Poller.get_events_to``);
        with None, it answers a Deferred."""
        if getattr(caller, "channel", None) is not None or not 2 <= len(params) <= 3:
            return None
        sid, timeout = params[0], params[1]
        ack = params[2] if len(params) == 3 else None
        if type(sid) is not str or type(timeout) not in (int, float) \
                or not 0 <= timeout < 1e9:
            return None
        session = self.sessions.sessions.get(sid)
        if session is None:
            return None
        if ack is not None and (type(ack) is not int or not
                                0 <= ack <= self.sessions.last_seq(session)):
            return None
        return lambda reply: self._poll(session, timeout, ack, reply)

    # -- streams (SSE, WebSocket) ----------------------------------------------
    def stream(self, sid: Any, delivery: Delivery, last_seq: int | None,
               caller: Any = None) -> Any:
        """Attach a stream to the session ``sid`` (resumed from the cluster
        registry when another node held it): the session, or a Deferred of
        it. ``last_seq``: the last seq the client received (None: a new
        stream). UnknownSession, or BadParams for a seq ahead of the session."""
        def attach(session: Session) -> Session:
            try:
                self.sessions.attach(session, delivery, last_seq)
            except ValueError as e:
                raise BadParams(str(e)) from None
            self._count_online(session)
            self.hooks.polled(session)
            return session
        return self._at_seq(sid, last_seq, attach, caller)

    def session_attach(self, caller: Any, sid: Any, last_seq: Any = 0) -> Any:
        """WebSocket only: this socket receives ``sid``'s events from now on,
        each event after ``last_seq`` (0: nothing received yet) once."""
        channel = getattr(caller, "channel", None)
        if channel is None:
            raise MethodNotFound("session.attach is answered on a WebSocket only "
                                 "(GET /api/ws); over HTTP use session.get_events or "
                                 "GET /api/events")
        if isinstance(last_seq, bool) or not isinstance(last_seq, int) or last_seq < 0:
            raise BadParams("last_seq must be an integer sequence number, 0 or more")

        def attached(session: Session) -> bool:
            channel.switch_to(session)
            return True
        result = self.stream(sid, channel, last_seq, caller)
        if isinstance(result, Deferred):
            return result.addCallback(attached)
        return attached(result)

    def touch_streams(self) -> None:
        """Sessions with a stream attached do not poll: once per online
        period, count them online together (one memcached operation per
        view key, not per stream) and tell the hooks they were kept alive
        (run periodically; the runs between do nothing). A stream attached
        or a view subscribed later in the period is counted then."""
        if not self.online.streams_due():
            return
        held = [session for session in self.sessions.sessions.values()
                if session.delivery is not None and session.delivery.holds_session]
        d = self.online.touch_many((session.id, session.subs.keys()) for session in held)
        if not d.called:
            d.addErrback(lambda f: log.failure("counting the streams online failed", f))
        for session in held:
            self.hooks.polled(session)

    def stats_online(self, key: Any = None, sid: Any = None, *, caller: Any = None) -> Any:
        """Sessions online in the service, or in the view ``key``. The figure
        of a view bound to ``$session.user`` tells whether that user is
        online: it is answered only to a session subscribed to that key
        (error 1005 otherwise)."""
        if key is not None and not isinstance(key, str):
            raise BadParams("key must be a view key (a string)")
        if key is None or not self._user_bound(key):
            return maybeDeferred(self.online.count, key)
        return self._to_subscriber(key, sid, lambda: maybeDeferred(self.online.count, key),
                                   caller)

    def stats_unique(self, key: Any, sid: Any = None, *, caller: Any = None) -> Any:
        """Distinct authorized users who subscribed to view ``key`` in the
        current online period, across nodes (SPEC section 14). A personal
        view's figure is answered as ``stats.online``'s: to its subscribers."""
        if not isinstance(key, str):
            raise BadParams("key must be a view key (a string)")
        if self.unique is None:
            return 0
        if not self._user_bound(key):
            return self.unique.count(key)
        return self._to_subscriber(key, sid, lambda: self.unique.count(key), caller)

    def _to_subscriber(self, key: str, sid: Any, figure: Any, caller: Any = None) -> Any:
        """``figure()`` of a personal view, for a session subscribed to it only."""
        if sid is None:
            raise UnknownKey("the figure of a personal view is given to its subscribers "
                             "only: pass your session id")

        def count(session: Session) -> Any:
            # a session holds a personal key only while authorized (an
            # expired authorization removes it): not subscribed is 1005
            if key not in session.subs:
                raise UnknownKey("this session has no subscription with that key")
            if session.user is None:
                raise NotAuthorized("the figure of a personal view needs an authorized session")
            return figure()
        return self.with_session(sid, count, caller=caller)

    def _user_bound(self, key: str) -> bool:
        name = key.partition("(")[0]
        spec = self.catalog.views.get(name)
        # an unknown name is not a key any session can hold; treat it as personal
        # only when it looks like one (the figure of a non-key is 0 anyway)
        return spec is not None and spec.needs_user
