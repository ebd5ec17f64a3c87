"""``audience: $session.segments``: the view shows objects aimed at an
audience segment (``"audience": "NAME"``, or a list of names) to the
sessions in it (SPEC section 15), and untargeted objects to everybody.

Targeting fails closed, as privacy does: a view without this condition
never shows an object that has an ``audience`` (conditions.bind_all), and an
``audience`` that is neither a name nor a list of names reaches nobody.
``$session.segments`` is the sorted list of the segments the session's
hashed ``email`` / ``phone`` claims are in, found when it subscribes; a
client can never supply it. The view's key includes it, so sessions in the
same segments share one query.
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from pushengine.views.operators.base import (
    Condition, Predicate, SessionOperand, register, resolve)

SESSION_SEGMENTS = "session.segments"
# a segment's name, as views name it and uploads give it
SEGMENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def valid_segment_name(name: object) -> bool:
    """A segment name: a letter or digit, then up to 63 of them or ``_ . -``."""
    return isinstance(name, str) and SEGMENT_NAME.match(name) is not None


def untargeted(obj: dict) -> bool:
    """An object aimed at no audience (``audience`` missing or null)."""
    return obj.get("audience") is None


def reaches(obj: dict, segments: frozenset[str] | set[str]) -> bool:
    """Whether an object reaches a session in ``segments`` (fail closed)."""
    audience = obj.get("audience")
    if audience is None:
        return True
    if isinstance(audience, str):
        return audience in segments
    if isinstance(audience, list) and audience and all(isinstance(a, str) for a in audience):
        return any(a in segments for a in audience)
    return False


def relevant_segments(conditions: list[Condition],
                      segments: Iterable[str] | None) -> list[str]:
    """The session's segments a view's key needs: all of them for an
    ``audience`` view, only the named ones for ``in_segment``."""
    found = sorted(set(segments or ()))
    if any(c.kind == "audience" for c in conditions):
        return found
    named = {c.operand["segment"] for c in conditions if c.kind == "in_segment"}
    return [s for s in found if s in named]


@register
class Audience(SessionOperand):
    name = "audience"
    session_value = SESSION_SEGMENTS
    roles = ("audience",)
    takes_session_segments = True
    opens_audience = True       # this view may show targeted objects

    def bind(self, condition: Condition, values: dict[str, Any]) -> Predicate:
        segments = frozenset(resolve(condition.operand, values) or ())
        return lambda obj: reaches(obj, segments)
