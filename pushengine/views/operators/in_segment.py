"""``in_segment: NAME``: the view is limited to the sessions of one audience
segment (SPEC section 15). A session in the segment sees what the rest of
the view's conditions pass; any other session sees an empty view. The view's
key says whether the session is in the segment (``session.segments``), so
members share one query and non-members another.
"""
from __future__ import annotations

from typing import Any

from pushengine.views.operators.audience import SESSION_SEGMENTS, valid_segment_name
from pushengine.views.operators.base import (
    Condition, Operator, Predicate, Ref, ViewDefinitionError, register)


def _never(obj: dict) -> bool:
    return False


def _always(obj: dict) -> bool:
    return True


@register
class InSegment(Operator):
    name = "in_segment"
    own_key = True
    roles = ("in_segment",)
    takes_session_segments = True

    def parse(self, field: str | None, spec: object, view: str) -> Condition:
        if not valid_segment_name(spec):
            raise ViewDefinitionError(f"{view}: 'in_segment' takes a segment name "
                                      f"(letters, digits, _ . -)")
        return Condition("in_segment", None, {"segment": spec,
                                              "segments": Ref(SESSION_SEGMENTS)})

    def refs(self, condition: Condition) -> list[tuple[Ref, str]]:
        return [(condition.operand["segments"], "in_segment")]

    def check(self, name: str, role: str, value: object) -> object:  # pragma: no cover
        return value    # only ever bound to the session's segments

    def bind(self, condition: Condition, values: dict[str, Any]) -> Predicate:
        member = condition.operand["segment"] in (values.get(SESSION_SEGMENTS) or ())
        return _always if member else _never
