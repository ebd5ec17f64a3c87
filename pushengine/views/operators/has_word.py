"""``field: {has_word: $word}``: the text holds the word in any inflected
form (views/morphology.py). Routes by the word's normal forms."""
from __future__ import annotations

from typing import Any, Hashable

from pushengine.views import morphology
from pushengine.views.operators.base import (
    Condition, Operator, Predicate, bad_param, register, resolve)

MAX_WORD = 100


def _forms(word: str) -> frozenset[str]:
    return morphology.word_forms(morphology.single_word(word) or word)


@register
class HasWord(Operator):
    name = "has_word"
    cost = 1
    roles = ("has_word",)
    route_rank = 2

    def check(self, name: str, role: str, value: object) -> object:
        if not isinstance(value, str) or len(value) > MAX_WORD \
                or morphology.single_word(value) is None:
            raise bad_param(name, "a single word")
        return value

    def bind(self, condition: Condition, values: dict[str, Any]) -> Predicate:
        field, wanted = condition.field, _forms(resolve(condition.operand, values))

        def has_word(obj: dict) -> bool:
            text = obj.get(field)
            return isinstance(text, str) and not wanted.isdisjoint(morphology.text_forms(text))
        return has_word

    def query_keys(self, condition: Condition, values: dict[str, Any]) -> set[Hashable]:
        return set(_forms(resolve(condition.operand, values)))

    def object_keys(self, condition: Condition, obj: dict) -> set[Hashable]:
        text = obj.get(condition.field)
        return set(morphology.text_forms(text)) if isinstance(text, str) else set()
