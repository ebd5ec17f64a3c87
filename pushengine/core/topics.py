"""Topics: which changes a view needs, for a feed that routes by interest.

A type may declare *routing fields* in the views file
(``types: {Stream: {id: id, route: [user_id]}}``). A ``Topic`` names the
changes of one type whose routing fields hold given values: one entry per
routing field, in declared order, each a ``Pin`` (one JSON value) or ``ANY``.
A view pinned to ``user_id: 340699`` needs ``Topic("Stream", (pin(340699),))``;
a view that pins no routing field needs ``Topic("Stream", (ANY,))``, every
change of the type.

The view registry asks its ``Interest`` (``core.interfaces``) for the topics
of a query before it reads the query's initial state, and releases them when
the query goes. A feed that routes (the AMQP feed in ``interest`` mode) turns
topics into bindings; every other feed delivers every change anyway and
answers with ``NO_INTEREST``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from twisted.internet.defer import Deferred, succeed

# the JSON kinds of a pinned value: Python's True == 1 must not make
# ``live: true`` and ``live: 1`` one topic
NULL, BOOL, NUMBER, STRING, OTHER = "null", "bool", "number", "string", "other"

Pin = tuple[str, Any]
ANY: None = None


def pin(value: object) -> Pin:
    """One JSON value as a pin: equal for JSON-equal values (1 and 1.0 alike,
    true and 1 not). A list or object is ``OTHER`` (kept as its JSON text)."""
    if value is None:
        return (NULL, None)
    if isinstance(value, bool):
        return (BOOL, value)
    if isinstance(value, (int, float)):
        return (NUMBER, value)
    if isinstance(value, str):
        return (STRING, value)
    import json
    return (OTHER, json.dumps(value, sort_keys=True, separators=(",", ":")))


@dataclass(frozen=True)
class Topic:
    """The changes of ``type`` whose routing fields hold ``values`` (a ``Pin``
    or ``ANY`` per field, in the type's declared order)."""

    type: str
    values: tuple[Pin | None, ...]

    @property
    def catch_all(self) -> bool:
        """True when no routing field is pinned: every change of the type."""
        return all(v is ANY for v in self.values)


def object_pins(obj: Mapping[str, Any], fields: Sequence[str]) -> tuple[Pin, ...]:
    """The pins of an object's routing fields; a missing field is null (an
    equality with null matches a missing field)."""
    return tuple(pin(obj.get(f)) for f in fields)


def covers(topic: Topic, pins: Sequence[Pin]) -> bool:
    """Whether a change whose routing fields hold ``pins`` is one of ``topic``'s."""
    return len(topic.values) == len(pins) and all(
        want is ANY or want == got for want, got in zip(topic.values, pins))


class NoInterest:
    """The ``Interest`` of a feed that delivers every change to every node
    (the in-process feed, AMQP in ``fanout`` mode): nothing to bind."""

    def want(self, topic: Topic) -> Deferred[None]:
        return succeed(None)

    def release(self, topic: Topic) -> None:
        return None


NO_INTEREST = NoInterest()
