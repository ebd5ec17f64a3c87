"""What the rest of the node is told about sessions, and the one list that tells it.

``SessionHooks`` is the one interface: a hook hears that a session was
``created``, ``authorized`` (with the token's claims), ``deauthorized``
(its token's ``exp`` passed: its user is cleared), ``changed`` (it
subscribed, unsubscribed, was authorized or deauthorized), ``polled`` (a poll or a stream
kept it alive), ``detached`` (the stream that held it ended, the session
lives on), ``destroyed`` (by its client) or ``expired`` (destroyed for
not polling). Each is said after the action. ``SessionHooksBase`` does
nothing for every event: a hook overrides the ones it listens to.

``Hooks`` holds the node's hooks and calls them: the API for most
events, the session manager for ``expired`` and ``deauthorized``, through the same object,
so that each hook is registered once. A failing hook is logged and never
fails the caller or the other hooks. A hook may return a Deferred the
caller must wait for (the cluster registry's write of a new session): each
call returns those Deferreds, whose failures are logged. Only the hooks
that override an event are called for it: a poll costs nothing for the
hooks that do not listen to polls.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Protocol

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

if TYPE_CHECKING:
    from pushengine.core.sessions import Session

log = Logger()

EVENTS = ("created", "authorized", "deauthorized", "changed", "polled", "detached",
          "destroyed", "expired")


class SessionHooks(Protocol):
    """What a hook hears of sessions (after each action)."""

    def created(self, session: Session) -> Deferred[Any] | None:
        """``session.create`` made the session; a Deferred delays the answer."""

    def authorized(self, session: Session, claims: Mapping[str, Any]) -> Deferred[Any] | None:
        """``session.authorize`` set the session's user (``changed`` follows);
        ``claims``: the token's verified claims (empty without a verifier
        that reads them)."""

    def deauthorized(self, session: Session) -> Deferred[Any] | None:
        """The session's authorization ended (its token's ``exp``): its user
        is cleared and its subscriptions bound to the user are gone
        (``changed`` follows)."""

    def changed(self, session: Session) -> Deferred[Any] | None:
        """The session's subscriptions or user changed."""

    def polled(self, session: Session) -> None:
        """The session polled, or its stream was attached or kept alive."""

    def detached(self, session: Session) -> None:
        """The stream that held the session ended (the client went away, or
        another delivery replaced it); the session lives on, and may now
        expire."""

    def destroyed(self, session: Session) -> Deferred[Any] | None:
        """``session.destroy`` ended the session."""

    def expired(self, session: Session) -> Deferred[Any] | None:
        """The session ended for not polling (it is gone already)."""


class SessionHooksBase:
    """A hook that listens to nothing: subclasses override what they hear."""

    def created(self, session: Session) -> Deferred[Any] | None:
        return None

    def authorized(self, session: Session, claims: Mapping[str, Any]) -> Deferred[Any] | None:
        return None

    def deauthorized(self, session: Session) -> Deferred[Any] | None:
        return None

    def changed(self, session: Session) -> Deferred[Any] | None:
        return None

    def polled(self, session: Session) -> None:
        return None

    def detached(self, session: Session) -> None:
        return None

    def destroyed(self, session: Session) -> Deferred[Any] | None:
        return None

    def expired(self, session: Session) -> Deferred[Any] | None:
        return None


def _listens(hook: object, event: str) -> bool:
    """Whether ``hook`` does something on ``event`` (a ``SessionHooksBase``
    method it does not override does nothing)."""
    if not isinstance(hook, SessionHooksBase):
        return True
    mine = getattr(type(hook), event, None)
    return mine is not getattr(SessionHooksBase, event)


class Hooks:
    """The node's session hooks, in the order they were added."""

    def __init__(self, hooks: tuple[SessionHooks, ...] | list[SessionHooks] = ()) -> None:
        self._hooks: list[SessionHooks] = []
        # event -> the listeners of the hooks that listen to it
        self._listeners: dict[str, list[tuple[SessionHooks, Callable[..., Any]]]] = {
            event: [] for event in EVENTS}
        for hook in hooks:
            self.add(hook)

    def add(self, hook: SessionHooks) -> None:
        """Tell ``hook`` of every session event from now on (once each)."""
        if any(h is hook for h in self._hooks):
            raise ValueError(f"{hook!r} is already one of the hooks")
        self._hooks.append(hook)
        for event in EVENTS:
            if _listens(hook, event):
                self._listeners[event].append((hook, getattr(hook, event)))

    def __iter__(self) -> Iterator[SessionHooks]:
        return iter(list(self._hooks))

    def __len__(self) -> int:
        return len(self._hooks)

    def __contains__(self, hook: object) -> bool:
        return any(h is hook for h in self._hooks)

    def listening(self, event: str) -> list[SessionHooks]:
        """The hooks called for ``event``."""
        return [hook for hook, _ in self._listeners[event]]

    # -- telling ---------------------------------------------------------------
    def created(self, session: Session) -> list[Deferred[Any]]:
        return self._tell("created", session)

    def authorized(self, session: Session, claims: Mapping[str, Any]) -> list[Deferred[Any]]:
        return self._tell("authorized", session, claims)

    def deauthorized(self, session: Session) -> list[Deferred[Any]]:
        return self._tell("deauthorized", session)

    def changed(self, session: Session) -> list[Deferred[Any]]:
        return self._tell("changed", session)

    def polled(self, session: Session) -> None:
        # every poll comes here: no Deferreds to collect, no list to build
        for hook, listener in self._listeners["polled"]:
            try:
                listener(session)
            except Exception:
                log.failure("the polled hook {hook!r} failed", hook=hook)

    def detached(self, session: Session) -> None:
        self._tell("detached", session)

    def destroyed(self, session: Session) -> list[Deferred[Any]]:
        return self._tell("destroyed", session)

    def expired(self, session: Session) -> list[Deferred[Any]]:
        return self._tell("expired", session)

    def _tell(self, event: str, *args: Any) -> list[Deferred[Any]]:
        """Call the listeners of ``event``; the Deferreds they return, each
        logging its own failure."""
        waits: list[Deferred[Any]] = []
        for hook, listener in self._listeners[event]:
            try:
                result = listener(*args)
            except Exception:
                log.failure("the {event} hook {hook!r} failed", event=event, hook=hook)
                continue
            if isinstance(result, Deferred):
                waits.append(result.addErrback(_logged, event, hook))
        return waits


def _logged(failure: Failure, event: str, hook: object) -> None:
    log.failure("the {event} hook {hook!r} failed", failure, event=event, hook=hook)
