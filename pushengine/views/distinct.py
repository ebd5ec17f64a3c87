"""The ``distinct`` view option: near-duplicate suppression in a window.

    distinct: {field: title, threshold: 0.9}     # optional: shingle, stem

Going down the view's order, an object is hidden when its ``field`` is
similar (exact Jaccard of the token sets, views/similarity.py) at
``threshold`` or more to an object *shown* above it; the window is the
first ``limit`` objects shown. An object hidden under another reappears (an
``insert``) when that one leaves or changes so that they differ; an object
without a text (no words) is never hidden and hides nothing. The rule is
greedy, so of a chain A ~ B ~ C where A and C differ, A and C are shown.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from pushengine.views.operators.similar import parse_settings
from pushengine.views.tokens import Shingler, jaccard, shingler


@dataclass(frozen=True)
class DistinctSpec:
    field: str
    threshold: float
    shingler: Shingler

    def tokens(self, obj: dict) -> frozenset[str]:
        text = obj.get(self.field)
        return self.shingler.tokens(text) if isinstance(text, str) else frozenset()

    def duplicate(self, tokens: frozenset[str], shown: list[frozenset[str]]) -> bool:
        """Whether ``tokens`` is that similar to one of ``shown``."""
        if not tokens:
            return False
        n, threshold = len(tokens), self.threshold
        for other in shown:
            m = len(other)
            if m and (n / m if n < m else m / n) >= threshold \
                    and jaccard(tokens, other) >= threshold:
                return True
        return False

    def first(self, objects: Iterable[dict], limit: int) -> tuple[list[dict], int]:
        """The first ``limit`` objects shown, and how many were looked at."""
        shown: list[dict] = []
        shown_tokens: list[frozenset[str]] = []
        seen = 0
        for obj in objects:
            if len(shown) >= limit:
                break
            seen += 1
            tokens = self.tokens(obj)
            if self.duplicate(tokens, shown_tokens):
                continue
            shown.append(obj)
            shown_tokens.append(tokens)
        return shown, seen


def parse_distinct(value: object, view: str) -> DistinctSpec | None:
    if value is None:
        return None
    field, threshold, shingle, stem = parse_settings(
        value, view, "distinct", ("field", "threshold"))
    return DistinctSpec(field, threshold, shingler(shingle, stem))
