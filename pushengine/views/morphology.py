"""Word forms for ``has_word``: a word matches any inflected form of itself.

Russian words are reduced to their dictionary forms with pymorphy3 (every
possible lemma of an ambiguous word, so that matching never misses); other
words get the English Snowball stem. Results are cached: titles repeat.
"""
from __future__ import annotations

import re
from functools import lru_cache

import pymorphy3
import snowballstemmer

_WORD = re.compile(r"\w+", re.UNICODE)
_CYRILLIC = re.compile(r"[а-яё]")
_morph: pymorphy3.MorphAnalyzer | None = None
_english = snowballstemmer.stemmer("english")


def _analyzer() -> pymorphy3.MorphAnalyzer:
    global _morph
    if _morph is None:
        _morph = pymorphy3.MorphAnalyzer()
    return _morph


@lru_cache(maxsize=200_000)
def word_forms(word: str) -> frozenset[str]:
    """The normal forms a single word may stand for (lower case)."""
    word = word.lower().replace("ё", "е")
    if not word:
        return frozenset()
    if _CYRILLIC.search(word):
        forms = {p.normal_form.replace("ё", "е") for p in _analyzer().parse(word)}
        return frozenset(forms or {word})
    return frozenset({_english.stemWord(word)})


@lru_cache(maxsize=50_000)
def text_forms(text: str) -> frozenset[str]:
    """Every normal form of every word in ``text``."""
    forms: set[str] = set()
    for word in _WORD.findall(text):
        forms |= word_forms(word)
    return frozenset(forms)


def single_word(text: str) -> str | None:
    """The one word in ``text``, or None when it holds none or several."""
    words = _WORD.findall(text)
    return words[0] if len(words) == 1 else None
