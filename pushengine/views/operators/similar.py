"""``similar: {field: title, text: $text, threshold: 0.6}``: the field's text
is similar to the given text: the Jaccard similarity of their word sets
(``shingle: k``: k-word shingles; ``stem: true``: words reduced as
``has_word`` reduces them) is at least ``threshold``, checked exactly, among
the candidates of a MinHash LSH (views/similarity.py).

- The views that compare the same field of the same type the same way
  (shingle, stem) share one LSH index in the store; its banding is chosen
  (``link``) for the lowest threshold among them. The store keeps it only
  while one of those views is subscribed, over the objects one of them could
  show (``store_index_on_demand``): with no similar subscriber a change
  costs no tokens and no MinHash.
- Routing: a view's keys are its text's bands, an object's keys its text's
  bands, so a change reaches only the similar-views whose text shares a band
  with it (and those that show the object now).
- The initial state comes from the store's index: the LSH candidates (a
  set of ids, at once), then exact Jaccard from the tokens the index keeps,
  in the store's slices like any scan (``verifier``): a text with thousands
  of candidates never holds the reactor for long (SPEC section 18).
- It computes ``_similarity`` (the Jaccard similarity, a double) for the
  objects a view shows; ``order: -_similarity`` puts the most similar first.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Hashable, Mapping

from pushengine.views import extra
from pushengine.views.operators.base import (
    Condition, Move, Operator, ParamError, Predicate, Ref, StoreIndex, ViewDefinitionError,
    bad_param, parse_operand, register, resolve)
from pushengine.views.tokens import (
    MAX_SHINGLE, Features, choose_bands, jaccard, shares_band, shingler, words)

if TYPE_CHECKING:
    import numpy as np

    from pushengine.views.similarity import Scheme

# numpy and datasketch (the ``similar`` extra, views/extra.py) are imported
# through views/similarity.py when the first Scheme is made: a views file
# without a similar view never loads them.


def scheme_for(shingle: int, stem: bool, bands: int, rows: int) -> Scheme:
    """The shared Scheme of these settings (views/similarity.py)."""
    from pushengine.views.similarity import scheme_for as shared
    return shared(shingle, stem, bands, rows)

MAX_TEXT = 1024          # characters in a text parameter (as any string param)
SIMILARITY = "_similarity"
KEYS = ("field", "text", "threshold", "shingle", "stem")
# routing keys: a band's hash salted with its position, so that one
# dictionary holds the keys of every band
_SALTS = [(0x9E3779B97F4A7C15 * (i + 1)) & ((1 << 64) - 1) for i in range(256)]


def _threshold(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 < value <= 1 else None


def parse_settings(spec: object, view: str, what: str,
                   required: tuple[str, ...]) -> tuple[str, float, int, bool]:
    """field, threshold, shingle and stem of a ``similar`` or ``distinct``
    mapping; ViewDefinitionError says what is wrong."""
    allowed = set(required) | {"shingle", "stem"}
    if not isinstance(spec, dict) or not set(required) <= set(spec) \
            or not set(spec) <= allowed:
        raise ViewDefinitionError(
            f"{view}: '{what}' takes {{{', '.join(required)}}} and optionally "
            f"shingle and stem")
    field = spec["field"]
    if not isinstance(field, str) or not field:
        raise ViewDefinitionError(f"{view}: '{what}': 'field' must be a field name")
    threshold = _threshold(spec["threshold"])
    if threshold is None:
        raise ViewDefinitionError(
            f"{view}: '{what}': 'threshold' must be a number above 0 and at most 1, "
            f"not {str(spec['threshold'])[:50]}")
    shingle = spec.get("shingle", 1)
    if isinstance(shingle, bool) or not isinstance(shingle, int) \
            or not 1 <= shingle <= MAX_SHINGLE:
        raise ViewDefinitionError(
            f"{view}: '{what}': 'shingle' must be a number of words from 1 to "
            f"{MAX_SHINGLE}")
    stem = spec.get("stem", False)
    if not isinstance(stem, bool):
        raise ViewDefinitionError(f"{view}: '{what}': 'stem' must be true or false")
    return field, threshold, shingle, stem


class SimilarOperand:
    """The text (literal or parameter) and the comparison's settings; the
    Scheme is set when the views file is linked."""

    def __init__(self, text: str | Ref, threshold: float, shingle: int, stem: bool) -> None:
        self.text = text
        self.threshold = threshold
        self.shingle = shingle
        self.stem = stem
        self.scheme: Scheme | None = None

    def get_scheme(self) -> Scheme:
        if self.scheme is None:     # a condition never linked: banded for itself
            self.scheme = scheme_for(self.shingle, self.stem, *choose_bands(self.threshold))
        return self.scheme

    def __repr__(self) -> str:
        return (f"SimilarOperand(text={self.text!r}, threshold={self.threshold}, "
                f"shingle={self.shingle}, stem={self.stem}, scheme={self.scheme!r})")


class SimilarStoreIndex:
    """The store's LSH index over one field of one type's objects, with each
    indexed object's tokens, so that the candidates of a query are verified
    (exact Jaccard) here, a set intersection each, before the view's
    predicate sees the few that pass."""

    BATCH = 32      # moves from which signatures are computed together

    def __init__(self, field: str, scheme: Scheme) -> None:
        self.field = field
        self.scheme = scheme
        from pushengine.views.similarity import SimilarityIndex
        self.lsh = SimilarityIndex(scheme)
        self.objects: dict[Hashable, dict] = {}      # the indexed ones (they have a text)
        self.tokens: dict[Hashable, frozenset[str]] = {}

    def move(self, id_: Hashable, old: dict | None, new: dict | None) -> None:
        self.move_many([(id_, old, new)])

    def _drop(self, id_: Hashable) -> None:
        if self.objects.pop(id_, None) is not None:
            del self.tokens[id_]
            self.lsh.discard(id_)

    def move_many(self, moves: list[Move]) -> None:
        if len(moves) < self.BATCH:
            for id_, old, new in moves:
                self._move(id_, new)
            return
        # many (a seed, a batch): only each object's last state matters, and
        # the new texts are hashed and indexed together
        final: dict[Hashable, dict | None] = {}
        for id_, old, new in moves:
            final[id_] = new
        field, objects, tokenize = self.field, self.objects, self.scheme.shingler._tokens
        ids: list[Hashable] = []
        token_sets: list[frozenset[str]] = []
        found: list[dict] = []
        for id_, new in final.items():
            text = new.get(field) if new is not None else None
            if new is None or not isinstance(text, str):
                self._drop(id_)
                continue
            before = objects.get(id_)
            if before is not None and before.get(field) == text:
                objects[id_] = new          # same text: same bands
                continue
            tokens = tokenize(text)
            if not tokens:                  # no words
                self._drop(id_)
                continue
            ids.append(id_)
            token_sets.append(tokens)
            found.append(new)
        if ids:
            scheme = self.scheme
            self.lsh.insert_many(ids, scheme.band_matrix(scheme.signatures(token_sets)),
                                 [len(t) for t in token_sets])
            self.tokens.update(zip(ids, token_sets))
            objects.update(zip(ids, found))

    def _move(self, id_: Hashable, new: dict | None) -> None:
        text = new.get(self.field) if new is not None else None
        if new is None or not isinstance(text, str):
            self._drop(id_)
            return
        before = self.objects.get(id_)
        if before is not None and before.get(self.field) == text:
            self.objects[id_] = new         # same text: same bands
            # the routing of this change looks them up next: from here, not
            # hashed again
            self.scheme.features.remember(text, Features(self.tokens[id_],
                                                         self.lsh.bands_of(id_)))
            return
        features = self.scheme.features(text)
        if features is None:                # no words
            self._drop(id_)
            return
        self.lsh.insert_bands(id_, features.bands, len(features.tokens))
        self.objects[id_] = new
        self.tokens[id_] = features.tokens

    def _query(self, condition: Condition,
               values: dict[str, Any]) -> tuple[Features, set[int]] | None:
        """The bound text's features and the sizes a token set may have to
        reach the threshold (J <= min/max), tested as the exact check tests
        them; None when nothing can match."""
        text = resolve(condition.operand.text, values)
        query = self.scheme.features(text) if isinstance(text, str) else None
        if query is None:
            return None
        size, threshold = len(query.tokens), condition.operand.threshold
        sizes = {n for n in range(1, int(size / threshold) + 2)
                 if (n / size if n < size else size / n) >= threshold}
        return (query, sizes) if sizes else None

    def candidates(self, condition: Condition, values: dict[str, Any]) -> list[Any] | None:
        """The LSH candidates of the bound text whose token sets have a
        size that can reach the threshold, as a ``Candidates`` bucket that
        looks them up when the store's scan reaches it: not yet checked
        exactly (that is ``verifier``'s work, in the scan's slices too), so
        that a text with thousands of candidates never holds the reactor."""
        found = self._query(condition, values)
        if found is None:
            return []
        query, sizes = found
        return [Candidates(self, query.bands, (min(sizes), max(sizes)))]

    def verifier(self, condition: Condition, values: dict[str, Any],
                 id_field: str) -> Callable[[dict], bool]:
        """The exact check of a candidate from the tokens kept here (a set
        intersection); one that passes has its tokens and bands handed to
        the view's filter, which checks it again without hashing its text."""
        found = self._query(condition, values)
        if found is None:
            return lambda obj: False
        query, sizes = found
        wanted, threshold, size = query.tokens, condition.operand.threshold, len(query.tokens)
        tokens, common, field, bands_of = (self.tokens, query.tokens.intersection, self.field,
                                           self.lsh.bands_of)
        remember, shingled = self.scheme.features.remember, self.scheme.shingler.tokens.remember

        def verified(obj: dict) -> bool:
            id_ = obj.get(id_field)
            have = tokens.get(id_) if id_ is not None else None
            if have is None or len(have) not in sizes:
                return False
            c = len(common(have))
            if c / (len(have) + size - c) < threshold:
                return False
            text = obj.get(field)
            if isinstance(text, str):
                shingled(text, have)
                remember(text, Features(have, bands_of(id_)))
            return True
        return verified

    def __len__(self) -> int:
        return len(self.objects)


class Candidates:
    """The candidates of one query, found on first use (the LSH's rows, in
    arrays) and turned into objects a slice at a time: a bucket the store
    scans without copying (``sliced``). An object changed after the rows
    were found is one the store's scan reads again at its end; a row whose
    key went away is skipped."""

    sliced = True

    def __init__(self, index: SimilarStoreIndex, bands: tuple[int, ...],
                 sizes: tuple[int, int]) -> None:
        self.index = index
        self.bands = bands
        self.sizes = sizes
        self._rows: np.ndarray | None = None

    @property
    def rows(self) -> np.ndarray:
        if self._rows is None:
            self._rows = self.index.lsh.query_rows(self.bands, self.sizes)
        return self._rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, where: slice) -> list[dict]:
        key_of, objects = self.index.lsh.keys.key_of, self.index.objects
        found = [objects.get(key_of[row]) for row in self.rows[where].tolist()]
        return [o for o in found if o is not None]

    def values(self) -> list[dict]:
        return self[:]


@register
class Similar(Operator):
    name = "similar"
    cost = 10
    own_key = True
    roles = ("similar.text",)
    route_rank = 3
    computes = (SIMILARITY,)
    once_per_view = True
    check_literals = True
    store_index_on_demand = True

    # -- the views file ------------------------------------------------------------------
    def parse(self, field: str | None, spec: object, view: str) -> Condition:
        if not extra.available():
            raise ViewDefinitionError(extra.refusal(view))
        field, threshold, shingle, stem = parse_settings(
            spec, view, "similar", ("field", "text", "threshold"))
        assert isinstance(spec, dict)               # parse_settings says so
        text = parse_operand(spec["text"])
        if not isinstance(text, Ref):
            try:
                self.check("text", "similar.text", text)
            except ParamError as e:
                raise ViewDefinitionError(f"{view}: similar: {e}") from None
            assert isinstance(text, str)            # check says so
        operand = SimilarOperand(text, threshold, shingle, stem)
        if not isinstance(text, Ref):
            try:
                self._fits(operand, text, "text")
            except ParamError as e:
                raise ViewDefinitionError(f"{view}: similar: {e}") from None
        return Condition("similar", field, operand)

    def refs(self, condition: Condition) -> list[tuple[Ref, str]]:
        text = condition.operand.text
        return [(text, "similar.text")] if isinstance(text, Ref) else []

    def link(self, uses: list[tuple[str, Condition]], views: Mapping[str, object]) -> None:
        """One banding per (type, field, shingle, stem): for the lowest
        threshold of the views that share it."""
        lowest: dict[tuple[str, str | None, int, bool], float] = {}
        for type_, c in uses:
            o = c.operand
            key = (type_, c.field, o.shingle, o.stem)
            lowest[key] = min(lowest.get(key, 1.0), o.threshold)
        for type_, c in uses:
            o = c.operand
            threshold = lowest[(type_, c.field, o.shingle, o.stem)]
            o.scheme = scheme_for(o.shingle, o.stem, *choose_bands(threshold))

    # -- parameters ------------------------------------------------------------------------
    def check(self, name: str, role: str, value: object) -> object:
        if not isinstance(value, str) or not value.strip():
            raise bad_param(name, "a text with at least one word")
        if len(value) > MAX_TEXT:
            raise bad_param(name, f"a text of at most {MAX_TEXT} characters")
        found = words(value)
        if not found:
            raise bad_param(name, "a text with at least one word (letters or digits)")
        # bound as its words, lower-cased: "Cats, playing!" and "cats playing"
        # are one view (one key, one query)
        normal = " ".join(found)
        return normal if words(normal) == found else value

    def validate(self, condition: Condition, values: dict[str, Any]) -> None:
        text = condition.operand.text
        if isinstance(text, Ref):
            self._fits(condition.operand, values[text.name], text.name)

    @staticmethod
    def _fits(operand: SimilarOperand, text: str, name: str) -> None:
        """A text must have as many words as a shingle, and some tokens."""
        count = shingler().count(text)
        if count < operand.shingle:
            raise ParamError(f"parameter {name!r} must have at least {operand.shingle} "
                             f"words (the view compares {operand.shingle}-word shingles); "
                             f"it has {count}")
        if not operand.get_scheme().shingler.tokens(text):
            raise bad_param(name, "a text with at least one word")

    # -- matching -----------------------------------------------------------------------
    def _similarity(self, condition: Condition,
                    values: dict[str, Any]) -> Callable[[dict], float | None]:
        """The object's similarity when it is shown (a candidate at or above
        the threshold), else None."""
        o = condition.operand
        scheme = o.get_scheme()
        query = scheme.features(resolve(o.text, values))
        if query is None:                       # refused by validate; never matches
            return lambda obj: None
        field, threshold = condition.field, o.threshold
        wanted, bands = query.tokens, query.bands
        tokens, features = scheme.shingler.tokens, scheme.features
        size = len(wanted)

        def similar(obj: dict) -> float | None:
            text = obj.get(field)
            if not isinstance(text, str):
                return None
            found = tokens(text)
            n = len(found)
            # J <= min/max: most texts are refused on their size alone
            if not n or (n / size if n < size else size / n) < threshold:
                return None
            j = jaccard(wanted, found)
            if j < threshold:
                return None
            f = features(text)
            if f is None or not shares_band(bands, f.bands):
                return None
            return j
        return similar

    def bind(self, condition: Condition, values: dict[str, Any]) -> Predicate:
        similar = self._similarity(condition, values)
        return lambda obj: similar(obj) is not None

    def computed(self, condition: Condition,
                 values: dict[str, Any]) -> dict[str, Callable[[dict], Any]]:
        o = condition.operand
        wanted = o.get_scheme().shingler.tokens(resolve(o.text, values))
        field, tokens = condition.field, o.get_scheme().shingler.tokens

        def value(obj: dict) -> float | None:
            text = obj.get(field)
            return jaccard(wanted, tokens(text)) if isinstance(text, str) else None
        return {SIMILARITY: value}

    # -- routing -----------------------------------------------------------------------------
    def routable(self, condition: Condition) -> bool:
        return True         # by the bands of its text, a parameter or a literal

    def query_keys(self, condition: Condition, values: dict[str, Any]) -> set[Hashable]:
        o = condition.operand
        features = o.get_scheme().features(resolve(o.text, values))
        return set() if features is None else _salted(features.bands)

    def object_keys(self, condition: Condition, obj: dict) -> set[Hashable]:
        text = obj.get(condition.field)
        if not isinstance(text, str):
            return set()
        features = condition.operand.get_scheme().features(text)
        return set() if features is None else _salted(features.bands)

    # -- the store -------------------------------------------------------------------------
    def store_index(self,
                    condition: Condition) -> tuple[Hashable, Callable[[], StoreIndex]] | None:
        field, scheme = condition.field, condition.operand.get_scheme()
        assert field is not None                    # parse gives every similar its field
        return ("similar", field, scheme.key), lambda: SimilarStoreIndex(field, scheme)


def _salted(bands: tuple[int, ...]) -> set[Hashable]:
    return {h ^ s for h, s in zip(bands, _SALTS)}
