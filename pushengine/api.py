"""The JSON-RPC methods (SPEC section 3), free of any transport.

``Api.methods()`` maps method names to ``rpc.Method`` objects: the fixed
``session.*`` and ``stats.*`` methods plus one alias per view declared with a
``method`` in the views file.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from twisted.internet.defer import Deferred, gatherResults, maybeDeferred
from twisted.logger import Logger

from pushengine.auth import TokenVerifier
from pushengine.engine import Engine
from pushengine.errors import BadParams, NotAuthorized, UnknownKey, UnknownView
from pushengine.rpc import Method
from pushengine.views.conditions import ParamError
from pushengine.views.spec import ViewSpec

log = Logger()
DEFAULT_POLL_TIMEOUT = 30.0


def _finite(value: int | float) -> bool:
    """A number that is a float too (an integer of 400 digits is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


class Api:
    def __init__(self, engine: Engine, tokens: TokenVerifier, online: Any,
                 resume: Callable[..., Deferred] | None = None) -> None:
        """``resume(sid, ack=None)`` → Deferred[Session] re-creates a session
        this node does not hold (from the cluster's registry; it fails with
        UnknownSession when it cannot). It may also offer
        ``resume.ahead(session, ack)`` → Deferred[Session | None], asked when
        a poll acknowledges more than the session numbered (see
        pushengine.cluster.resume). ``hooks`` are told, after the action,
        of sessions ``created``, ``destroyed``, ``changed`` and ``polled``."""
        self.engine = engine
        self.sessions = engine.sessions
        self.tokens = tokens
        self.online = online
        self.resume = resume
        self.hooks: list[Any] = []

    # -- helpers -------------------------------------------------------------
    def _with_session(self, sid: Any, then: Callable[[Any], Any],
                      ack: int | None = None) -> Any:
        """``then(session)`` for a session this node holds, at once (no
        Deferred on the hot path); otherwise a Deferred that first resumes
        it from the cluster registry."""
        try:
            session = self.sessions.get(sid)
        except Exception as e:
            if self.resume is None or not isinstance(sid, str):
                raise e
            return self.resume(sid, ack).addCallback(then)
        return then(session)

    def _tell(self, event: str, session: Any) -> list[Deferred]:
        """Call the hooks; a failing hook never fails the client's call.
        Returns the Deferreds some hooks give back (a hook that must finish
        before the client may rely on the action, e.g. a registry write)."""
        waits = []
        for hook in self.hooks:
            try:
                result = getattr(hook, event)(session)
            except Exception:
                log.failure("the {event} hook {hook!r} failed", event=event, hook=hook)
                continue
            if isinstance(result, Deferred):
                waits.append(result.addErrback(
                    lambda f: log.failure("the {event} hook failed", f, event=event)))
        return waits

    def methods(self) -> dict[str, Method]:
        m = {
            "session.create": Method(self.session_create, with_caller=True),
            "session.destroy": Method(self.session_destroy),
            # a token may carry more claims than the 1 KiB other strings get
            "session.authorize": Method(self.session_authorize, max_string=8192),
            "session.subscribe": Method(self.session_subscribe),
            "session.unsubscribe": Method(self.session_unsubscribe),
            "session.get_events": Method(self.session_get_events),
            "stats.online": Method(self.stats_online),
        }
        for name, spec in self.engine.catalog.methods.items():
            m[name] = self._alias(spec)
        return m

    def _alias(self, spec: ViewSpec) -> Method:
        names = ["sid", *spec.params]
        # limit may be left out when it is the last declared parameter
        required = len(names) - 1 if spec.params and spec.params[-1] == "limit" else len(names)

        def alias(sid: Any, *values: Any) -> Deferred:
            given = dict(zip(spec.params, values))
            limit = given.pop("limit", None)
            return self.session_subscribe(sid, spec.name, given, limit)
        return Method(alias, names, required)

    # -- methods -------------------------------------------------------------
    def _count_online(self, session) -> None:
        """A session counts online from its creation and each time it polls
        or subscribes (once per period; never fails the caller)."""
        d = self.online.touch(session.id, list(session.subs))
        d.addErrback(lambda f: log.failure("counting a session online failed", f))

    def session_create(self, caller: Any = None) -> str | Deferred:
        """``caller`` (a ``pushengine.caller.Caller``) says who asks: sessions
        per client address are capped."""
        session = self.sessions.create(client=getattr(caller, "address", None))
        self._count_online(session)
        # the next call may reach another node (a balancer hashes on the id,
        # which it did not know for this call): answer once the session
        # registry has the session, so that that node can resume it
        waits = self._tell("created", session)
        if waits:
            return gatherResults(waits, consumeErrors=True).addBoth(lambda _: session.id)
        return session.id

    def session_destroy(self, sid: Any) -> Any:
        def destroy(session):
            self.sessions.destroy(session)
            self._tell("destroyed", session)
            return True
        return self._with_session(sid, destroy)

    def session_authorize(self, sid: Any, token: Any) -> Any:
        def authorize(session):
            user = self.tokens.user(token)
            if session.user is not None and session.user != user:
                raise NotAuthorized("this session is authorized as another user")
            session.user = user
            self._tell("changed", session)
            return user
        return self._with_session(sid, authorize)

    def session_subscribe(self, sid: Any, view: Any, params: Any = None,
                          limit: Any = None) -> Any:
        def subscribe(session):
            if not isinstance(view, str) or view not in self.engine.catalog.views:
                raise UnknownView(f"unknown view {str(view)[:100]!r}")
            spec = self.engine.catalog.views[view]
            if spec.needs_user and session.user is None:
                raise NotAuthorized(f"view {view} needs an authorized session")
            if isinstance(params, dict) and any(k.startswith("session.") for k in params):
                raise BadParams("session.* parameters cannot be supplied")
            try:
                bound = spec.bind(params, session.user, limit)
            except ParamError as e:
                raise BadParams(str(e)) from None
            d = self.sessions.subscribe(session, bound)

            def subscribed(result):
                self._count_online(session)
                self._tell("changed", session)
                return result
            return d.addCallback(subscribed)
        return self._with_session(sid, subscribe)

    def session_unsubscribe(self, sid: Any, key: Any) -> Any:
        def unsubscribe(session):
            self.sessions.unsubscribe(session, key)
            self._tell("changed", session)
            return True
        return self._with_session(sid, unsubscribe)

    def session_get_events(self, sid: Any, timeout: Any = DEFAULT_POLL_TIMEOUT,
                           ack: Any = None) -> Any:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
                or not _finite(timeout) or timeout < 0:
            raise BadParams("timeout must be a number of seconds, 0 or more")
        if ack is not None and (isinstance(ack, bool) or not isinstance(ack, int) or ack < 0):
            raise BadParams("ack must be an integer sequence number, 0 or more")

        def ahead(session) -> BadParams:
            return BadParams(f"ack {ack} is ahead of the last event ({session.next_seq - 1})")

        def poll(session):
            if ack is not None and ack >= session.next_seq:
                behind = getattr(self.resume, "ahead", None)
                if behind is None:
                    raise ahead(session)
                # with a registry: a session resumed here, or this node's
                # copy is stale (the client was served elsewhere since)
                return behind(session, ack).addCallback(checked, session)
            return polled(session)

        def checked(resumed, session):
            if resumed is None or ack >= resumed.next_seq:
                raise ahead(resumed or session)
            return polled(resumed)

        def polled(session):
            self._count_online(session)
            self._tell("polled", session)
            return self.sessions.get_events(session, float(timeout), ack)
        return self._with_session(sid, poll, ack)

    def stats_online(self, key: Any = None, sid: Any = None) -> Any:
        """Sessions online in the service, or in the view ``key``. The figure
        of a view bound to ``$session.user`` tells whether that user is
        online: it is answered only to a session subscribed to that key
        (error 1005 otherwise)."""
        if key is not None and not isinstance(key, str):
            raise BadParams("key must be a view key (a string)")
        if key is None or not self._user_bound(key):
            return maybeDeferred(self.online.count, key)
        if sid is None:
            raise UnknownKey("the figure of a personal view is given to its subscribers "
                             "only: pass your session id")

        def count(session):
            if key not in session.subs:
                raise UnknownKey("this session has no subscription with that key")
            return maybeDeferred(self.online.count, key)
        return self._with_session(sid, count)

    def _user_bound(self, key: str) -> bool:
        name = key.partition("(")[0]
        spec = self.engine.catalog.views.get(name)
        # an unknown name is not a key any session can hold; treat it as personal
        # only when it looks like one (the figure of a non-key is 0 anyway)
        return spec is not None and spec.needs_user
