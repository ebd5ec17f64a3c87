"""The contact digests of each session, kept by the segments package (SPEC 15).

``session.authorize`` tells the hooks the token's claims; this hook keeps
the digests of their ``email`` and ``phone`` (``targeting.contact_digests``:
the raw values are never kept) for as long as the session lives, and
answers the session's segments for views bound to ``$session.segments``
(``SegmentLookup``, which the API asks) and its digests for re-evaluation.

A session resumed on another node has no digests there: the registry's
record of a session carries none, so its segment-bound views are bound
without segments (fail closed) until it is authorized again.
"""
from __future__ import annotations

import weakref
from typing import Any, Mapping

from twisted.internet.defer import Deferred, succeed

from pushengine.core.hooks import SessionHooksBase
from pushengine.core.sessions import Session
from pushengine.segments.targeting import contact_digests


class SegmentMembership(SessionHooksBase):
    """Each session's contact digests, and the segments they are in."""

    def __init__(self, store: Any) -> None:
        """``store``: the segment store (``segments.store``) that answers
        ``segments_of(digests)``."""
        self.store = store
        # weak: a session dropped without a hook (a stale copy) leaves nothing
        self.digests: weakref.WeakKeyDictionary[Session, tuple[bytes, ...]] = \
            weakref.WeakKeyDictionary()

    # -- hooks -----------------------------------------------------------------
    def authorized(self, session: Session, claims: Mapping[str, Any]) -> None:
        """The token's contacts replace what the session had."""
        digests = contact_digests(dict(claims))
        if digests:
            self.digests[session] = digests
        else:
            self.digests.pop(session, None)

    def destroyed(self, session: Session) -> None:
        self.digests.pop(session, None)

    def deauthorized(self, session: Session) -> None:
        """The token's ``exp`` passed: its contacts no longer count."""
        self.digests.pop(session, None)

    expired = destroyed

    # -- lookups -----------------------------------------------------------------
    def of(self, session: Session) -> tuple[bytes, ...]:
        """The session's contact digests (none: not authorized with contacts)."""
        return self.digests.get(session, ())

    def segments_of(self, session: Session) -> Deferred[list[str]]:
        """The segments the session's contacts are in (none without contacts)."""
        digests = self.digests.get(session)
        if not digests:
            return succeed([])
        d: Deferred[list[str]] = self.store.segments_of(list(digests))
        return d

    def __len__(self) -> int:
        return len(self.digests)
