"""What the session registry keeps of a session, and how it is spelled.

A record is a flat mapping of strings (a Redis hash), so that the owner can
be compared and the expiry refreshed by a short server-side script without
decoding anything:

    owner   the node id holding the session now
    v       the format version ("1")
    user    the authorized user, JSON (``null`` when not authorized)
    subs    the subscriptions, JSON: ``[{"view", "params", "limit", "key"}, ...]``
    seq     the last seq the session had numbered when the record was written
            (a floor for the resumed session's numbering; the client's ``ack``
            raises it further)
    until   when the user's authorization ends (its token's ``exp``, in the
            nodes' clock seconds; absent: never), so that a session resumed
            elsewhere stops being authorized at the same time
    period  the online period (``floor(time / --online-period)``) in which the
            owner last counted the session online, so that the node resuming it
            does not count it a second time in that period
    held    "1" while a stream (SSE, WebSocket) holds the session on its owner:
            the owner counts such a session online in every period without
            writing the entry again, so ``period`` may be old; absent otherwise

Nothing in it is secret: the session id is the key, and whoever knows the id
may use the session anyway.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

FORMAT = "1"

# ASCII: a lone surrogate a client sent stays an escape, never an encoding error
_encoder = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), sort_keys=True)


class BadRecord(ValueError):
    """A registry entry this version cannot read (another format, a corrupt
    value): the session cannot be resumed from it."""


@dataclass(frozen=True)
class Subscription:
    """One subscription as a client made it: enough to bind the view again."""

    view: str
    params: dict[str, Any]
    limit: int
    key: str

    def as_json(self) -> dict[str, Any]:
        return {"view": self.view, "params": self.params, "limit": self.limit, "key": self.key}


@dataclass
class SessionRecord:
    owner: str
    user: Any = None
    subs: list[Subscription] = field(default_factory=list)
    seq: int = 0
    period: int | None = None
    until: float | None = None
    held: bool = False

    @classmethod
    def of(cls, session: Any, owner: str, period: int | None = None) -> "SessionRecord":
        """The record of a live session (``Session`` of pushengine.core.sessions)."""
        subs = [Subscription(b.spec.name, b.params, b.limit, key)
                for key, b in session.bounds.items()]
        call = getattr(session, "authorized_until", None)
        until = call.getTime() if call is not None and call.active() else None
        delivery = getattr(session, "delivery", None)
        held = delivery is not None and bool(getattr(delivery, "holds_session", False))
        return cls(owner=owner, user=session.user, subs=subs, seq=session.manager.last_seq(session),
                   period=period, until=until, held=held)

    def fields(self) -> dict[str, str]:
        """The hash fields, owner included."""
        out = {"owner": self.owner, "v": FORMAT, "user": _encoder.encode(self.user),
               "subs": _encoder.encode([s.as_json() for s in self.subs]),
               "seq": str(self.seq)}
        if self.period is not None:
            out["period"] = str(self.period)
        if self.until is not None:
            out["until"] = repr(float(self.until))
        if self.held:
            out["held"] = "1"
        return out

    @classmethod
    def parse(cls, fields: dict[Any, Any]) -> "SessionRecord":
        """Read a record from its hash fields; BadRecord says what is wrong."""
        f = {_text(k): _text(v) for k, v in fields.items()}
        if f.get("v") != FORMAT:
            raise BadRecord(f"unknown record format {f.get('v')!r}")
        owner = f.get("owner")
        if not owner:
            raise BadRecord("the record has no owner")
        try:
            user = json.loads(f.get("user", "null"))
            raw_subs = json.loads(f.get("subs", "[]"))
            seq = int(f.get("seq", "0"))
            period = int(f["period"]) if f.get("period") else None
            until = float(f["until"]) if f.get("until") else None
        except (ValueError, TypeError) as e:
            raise BadRecord(f"unreadable record: {e}") from None
        if seq < 0 or not isinstance(raw_subs, list):
            raise BadRecord("unreadable record: bad seq or subs")
        subs = []
        for s in raw_subs:
            if not (isinstance(s, dict) and isinstance(s.get("view"), str)
                    and isinstance(s.get("params"), dict) and isinstance(s.get("key"), str)
                    and isinstance(s.get("limit"), int) and not isinstance(s.get("limit"), bool)):
                raise BadRecord(f"unreadable subscription {str(s)[:200]!r}")
            subs.append(Subscription(s["view"], s["params"], s["limit"], s["key"]))
        if until is not None and until != until:
            raise BadRecord("unreadable record: bad until")
        return cls(owner=owner, user=user, subs=subs, seq=seq, period=period, until=until,
                   held=f.get("held") == "1")


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)
