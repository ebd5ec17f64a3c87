"""JSON value semantics shared by conditions, ordering and the routing index.

Python says ``True == 1``; JSON does not. These helpers compare and hash values
the JSON way so that ``live: true`` never matches ``live: 1``.
"""
from __future__ import annotations

import json


def _rank(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, bool):
        return 1
    if isinstance(value, (int, float)):
        return 2
    if isinstance(value, str):
        return 3
    return 4


def index_key(value: object) -> tuple[int, object]:
    """A hashable key equal for JSON-equal values (1 and 1.0 alike, true and 1 not)."""
    rank = _rank(value)
    if rank == 4:
        return (4, json.dumps(value, sort_keys=True, separators=(",", ":")))
    return (rank, value)


def json_equal(a: object, b: object) -> bool:
    return index_key(a) == index_key(b)


def comparable(a: object, b: object) -> bool:
    """gt/lt compare numbers with numbers and strings with strings only."""
    ra, rb = _rank(a), _rank(b)
    return ra == rb and ra in (2, 3)


def sort_key(value: object) -> tuple[int, object]:
    """A total order over JSON values: null < booleans < numbers < strings < other."""
    rank = _rank(value)
    if rank == 4:
        return (4, json.dumps(value, sort_keys=True, separators=(",", ":")))
    if rank == 0:
        return (0, 0)
    return (rank, value)


class Descending:
    """Wraps a sort key so that a sorted container keeps it in descending order."""

    __slots__ = ("key",)

    def __init__(self, key: tuple[object, ...]) -> None:
        self.key = key

    def __lt__(self, other: "Descending") -> bool:
        return other.key < self.key

    def __gt__(self, other: "Descending") -> bool:
        return other.key > self.key

    def __le__(self, other: "Descending") -> bool:
        return other.key <= self.key

    def __ge__(self, other: "Descending") -> bool:
        return other.key >= self.key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Descending) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"Descending({self.key!r})"
