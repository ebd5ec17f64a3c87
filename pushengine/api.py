"""The JSON-RPC methods (SPEC section 3), free of any transport.

``Api.methods()`` maps method names to ``rpc.Method`` objects: the fixed
``session.*`` and ``stats.*`` methods plus one alias per view declared with a
``method`` in the views file.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.logger import Logger

from pushengine.auth import TokenVerifier
from pushengine.engine import Engine
from pushengine.errors import BadParams, NotAuthorized, UnknownView
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
                 resume: Callable[[str], Deferred] | None = None) -> None:
        self.engine = engine
        self.sessions = engine.sessions
        self.tokens = tokens
        self.online = online
        self.resume = resume
        self.hooks: list[Any] = []

    # -- helpers -------------------------------------------------------------
    def _session(self, sid: Any) -> Deferred:
        """Fire with the session; try to resume it from the registry first."""
        try:
            return succeed(self.sessions.get(sid))
        except Exception as e:
            if self.resume is None or not isinstance(sid, str):
                raise e
            return self.resume(sid)

    def methods(self) -> dict[str, Method]:
        m = {
            "session.create": Method(self.session_create),
            "session.destroy": Method(self.session_destroy),
            "session.authorize": Method(self.session_authorize),
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

    def session_create(self) -> str:
        session = self.sessions.create()
        self._count_online(session)
        for hook in self.hooks:
            hook.created(session)
        return session.id

    def session_destroy(self, sid: Any) -> Deferred:
        def destroy(session):
            self.sessions.destroy(session)
            for hook in self.hooks:
                hook.destroyed(session)
            return True
        return self._session(sid).addCallback(destroy)

    def session_authorize(self, sid: Any, token: Any) -> Deferred:
        def authorize(session):
            user = self.tokens.user(token)
            if session.user is not None and session.user != user:
                raise NotAuthorized("this session is authorized as another user")
            session.user = user
            for hook in self.hooks:
                hook.changed(session)
            return user
        return self._session(sid).addCallback(authorize)

    def session_subscribe(self, sid: Any, view: Any, params: Any = None,
                          limit: Any = None) -> Deferred:
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
                for hook in self.hooks:
                    hook.changed(session)
                return result
            return d.addCallback(subscribed)
        return self._session(sid).addCallback(subscribe)

    def session_unsubscribe(self, sid: Any, key: Any) -> Deferred:
        def unsubscribe(session):
            self.sessions.unsubscribe(session, key)
            for hook in self.hooks:
                hook.changed(session)
            return True
        return self._session(sid).addCallback(unsubscribe)

    def session_get_events(self, sid: Any, timeout: Any = DEFAULT_POLL_TIMEOUT,
                           ack: Any = None) -> Deferred:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
                or not _finite(timeout) or timeout < 0:
            raise BadParams("timeout must be a number of seconds, 0 or more")
        if ack is not None and (isinstance(ack, bool) or not isinstance(ack, int) or ack < 0):
            raise BadParams("ack must be an integer sequence number, 0 or more")

        def poll(session):
            if ack is not None and ack >= session.next_seq:
                raise BadParams(f"ack {ack} is ahead of the last event "
                                f"({session.next_seq - 1})")
            self._count_online(session)
            for hook in self.hooks:
                hook.polled(session)
            return self.sessions.get_events(session, float(timeout), ack)
        return self._session(sid).addCallback(poll)

    def stats_online(self, key: Any = None) -> Deferred:
        if key is not None and not isinstance(key, str):
            raise BadParams("key must be a view key (a string)")
        return maybeDeferred(self.online.count, key)
