"""Text similarity on the standard library alone: word sets, k-word
shingles, exact Jaccard, and the LSH banding's arithmetic (which bands a
threshold needs, whether two band tuples share one).

This is the part of ``similar`` and ``distinct`` that needs neither numpy nor
datasketch: ``distinct`` uses nothing else, and ``similar``'s parameters are
checked with it. The MinHash signatures and the LSH index, which need the
``similar`` extra (``pip install 'pushengine[similar]'``), are in
views/similarity.py, imported only by a views file that declares a
``similar`` view (views/extra.py).
"""
from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass
from functools import lru_cache
from itertools import product
from operator import eq
from sys import intern
from typing import Callable, Generic, Hashable, TypeVar

from pushengine.views import morphology

NUM_PERM = 128
MAX_SHINGLE = 8             # words in a shingle, at most
MAX_FORMS = 3               # normal forms of one word kept in a stemmed shingle
TOKEN_CACHE = 16_384        # texts whose token sets are kept
RECALL_AT = 0.05            # bands are chosen for recall at threshold + this ...
RECALL = 0.95               # ... of at least this

_WORD = re.compile(r"[^\W_]+")      # letters and digits (\w without "_")


def words(text: str) -> list[str]:
    """The words of ``text``, lower-cased (interned: the token sets of many
    texts share one string per word)."""
    return [intern(w.lower()) for w in _WORD.findall(text)]


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Cache(Generic[K, V]):
    """A function of one argument with an LRU cache of its results, into
    which a result known otherwise can be put (``remember``): the store's
    index hands the views the tokens and bands of the objects it answers
    with, so that their filters do not compute them again."""

    def __init__(self, compute: Callable[[K], V], size: int) -> None:
        self.compute = compute
        self.size = size
        self.data: dict[K, V] = {}

    def __call__(self, key: K) -> V:
        data = self.data
        try:
            value = data.pop(key)
        except KeyError:
            value = self.compute(key)
            if len(data) >= self.size:
                del data[next(iter(data))]
        data[key] = value
        return value

    def remember(self, key: K, value: V) -> None:
        data = self.data
        if data.pop(key, None) is None and len(data) >= self.size:
            del data[next(iter(data))]
        data[key] = value

    def cache_clear(self) -> None:
        self.data.clear()


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|A ∩ B| / |A ∪ B| as a double; 0 when either set is empty."""
    if not a or not b:
        return 0.0
    if len(a) > len(b):
        a, b = b, a
    common = len(a & b)
    return common / (len(a) + len(b) - common)


class Shingler:
    """Turns texts into token sets: words, or k-word shingles, optionally of
    stemmed words. Shared, and caches the sets of the texts it saw last."""

    def __init__(self, shingle: int = 1, stem: bool = False) -> None:
        self.shingle = shingle
        self.stem = stem
        self.tokens = Cache(self._tokens, TOKEN_CACHE)

    def __repr__(self) -> str:
        return f"Shingler(shingle={self.shingle}, stem={self.stem})"

    def _units(self, text: str) -> list[tuple[str, ...]]:
        """Per word, the forms it stands for (one, unless stemmed)."""
        if not self.stem:
            return [(w,) for w in words(text)]
        units = []
        for w in _WORD.findall(text):
            forms = sorted(morphology.word_forms(w))[:MAX_FORMS]
            if forms:
                units.append(tuple(intern(f) for f in forms))
        return units

    def count(self, text: str) -> int:
        """How many words ``text`` has."""
        return len(_WORD.findall(text))

    def _tokens(self, text: str) -> frozenset[str]:
        units = self._units(text)
        k = self.shingle
        if k == 1:
            return frozenset(form for unit in units for form in unit)
        if len(units) < k:
            return frozenset()
        found: set[str] = set()
        for i in range(len(units) - k + 1):
            window = units[i:i + k]
            if all(len(u) == 1 for u in window):
                found.add(intern(" ".join(u[0] for u in window)))
            else:
                found.update(intern(" ".join(p)) for p in product(*window))
        return frozenset(found)


@lru_cache(maxsize=None)
def shingler(shingle: int = 1, stem: bool = False) -> Shingler:
    """The shared Shingler of these settings."""
    return Shingler(shingle, stem)


_UINT32 = struct.Struct("<I").unpack_from


@lru_cache(maxsize=1 << 18)
def token_hash(token: str) -> int:
    """datasketch's default 32-bit token hash, ``sha1_hash32``: the first
    four bytes of the SHA-1 of the UTF-8 text, little-endian."""
    value: int = _UINT32(hashlib.sha1(token.encode("utf-8", "surrogatepass")).digest())[0]
    return value


def collision_probability(j: float, bands: int, rows: int) -> float:
    """The chance that two sets of Jaccard similarity ``j`` share a band."""
    return 1.0 - (1.0 - j ** rows) ** bands


def choose_bands(threshold: float, num_perm: int = NUM_PERM) -> tuple[int, int]:
    """(bands, rows) for a threshold: the most rows per band (the fewest
    false candidates to verify) that still make a pair of similarity
    ``threshold + RECALL_AT`` a candidate with probability ``RECALL``."""
    target = min(1.0, threshold + RECALL_AT)
    best = (num_perm, 1)
    for rows in range(1, num_perm // 2 + 1):
        bands = num_perm // rows
        if collision_probability(target, bands, rows) >= RECALL:
            best = (bands, rows)
    return best


@dataclass(frozen=True, eq=False)
class Features:
    """What a text is compared by: its tokens and its signature's bands."""

    tokens: frozenset[str]
    bands: tuple[int, ...]


def shares_band(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether two band tuples agree in one band (LSH candidates)."""
    return any(map(eq, a, b))
