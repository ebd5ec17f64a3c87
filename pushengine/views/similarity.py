"""Text similarity for ``similar`` and ``distinct``: word sets, exact
Jaccard, MinHash signatures and their LSH bands (datasketch).

A text becomes a set of *tokens*: its words lower-cased (a word is a run of
letters and digits; every other character separates), or with ``shingle: k``
every run of k consecutive words, and with ``stem: true`` the words first
reduced to their normal forms as ``has_word`` does (views/morphology.py).
Two texts are similar at ``t`` when the Jaccard similarity of their token
sets, |A ∩ B| / |A ∪ B| (computed as a double), is at least ``t``. A text
without tokens is similar to nothing.

Finding the similar texts among many without comparing with each one is
MinHash LSH: a text's signature is ``num_perm`` minima of its tokens' hashes
under as many permutations (datasketch's ``MinHash``, scheme ``affine32``);
the signature is cut into ``bands`` bands of ``rows`` values, and two texts
are *candidates* when one band is equal in both, which happens with
probability 1 - (1 - J^rows)^bands. A ``Scheme`` fixes those numbers and
computes signatures for many texts at once with numpy (the same values
datasketch's ``MinHash.update_batch`` gives; tests/core/test_similarity.py
checks it), each band reduced to one 64-bit integer (``band_hash``, the
value datasketch's ``MinHashLSH`` computes with it as its hash function), by
which the store's LSH index (``SimilarityIndex``) finds candidates. Every
text is hashed on its own: there is no corpus dictionary, and a change
re-hashes one object.

A view shows an object only when both hold: it is a candidate of the view's
text (one band in common) *and* its exact Jaccard similarity reaches the
threshold. Precision is therefore exact by construction; recall is the
probability above (bench/similar.py measures it).
"""
from __future__ import annotations

import struct
import sys
from functools import lru_cache
from typing import TYPE_CHECKING, Hashable, Iterable, Protocol, Sequence

import numpy as np

# the standard-library half (views/tokens.py), under the names this module
# always had
from pushengine.views.tokens import (  # noqa: F401
    MAX_FORMS, MAX_SHINGLE, NUM_PERM, RECALL, RECALL_AT, TOKEN_CACHE, Cache, Features,
    Shingler, choose_bands, collision_probability, jaccard, shares_band, shingler,
    token_hash, words)

if TYPE_CHECKING:
    from datasketch import LeanMinHash

# This module needs the ``similar`` extra (numpy, datasketch): only the
# ``similar`` operator imports it, when a views file declares a similar view
# (views/extra.py says so first when the extra is missing). datasketch itself
# is imported when the first Scheme is made: it imports scipy, about a second
# of CPU.

SEED = 1
SCHEME = "affine32"
CHUNK_TOKENS = 8192         # tokens hashed in one numpy step (bounds memory)
FEATURE_CACHE = 8_192       # texts whose signature bands are kept

_MASK = (1 << 64) - 1
_BAND_SEED = 0x9E3779B97F4A7C15
_BAND_MUL = 0xFF51AFD7ED558CCD
_BIG_ENDIAN_SWAPPED = ">" if sys.byteorder == "little" else "<"


def _fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's finalizer on uint32 values (datasketch's pre-mix)."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    mixed: np.ndarray = h ^ (h >> np.uint32(16))
    return mixed


class Scheme:
    """MinHash with ``num_perm`` permutations cut into ``bands`` bands of
    ``rows`` rows, over the tokens of one ``Shingler``."""

    def __init__(self, shingler: Shingler, bands: int, rows: int,
                 num_perm: int = NUM_PERM, seed: int = SEED) -> None:
        if bands < 2 or rows < 1 or bands * rows > num_perm:
            raise ValueError(f"bad banding {bands} x {rows} of {num_perm}")
        self.shingler = shingler
        self.bands = bands
        self.rows = rows
        self.num_perm = num_perm
        self.seed = seed
        from datasketch import MinHash
        reference = MinHash(num_perm=num_perm, seed=seed, scheme=SCHEME)
        self.permutations = reference.permutations
        a, b = reference.permutations
        self._a = np.asarray(a, dtype=np.uint32)[None, :]
        self._b = np.asarray(b, dtype=np.uint32)[None, :]
        self._unpack = struct.Struct(f"{_BIG_ENDIAN_SWAPPED}{rows}I").unpack
        self.features = Cache(self._features, FEATURE_CACHE)

    def __repr__(self) -> str:
        return (f"Scheme({self.shingler!r}, bands={self.bands}, rows={self.rows}, "
                f"num_perm={self.num_perm})")

    @property
    def key(self) -> tuple[int, bool, int, int, int, int]:
        return (self.shingler.shingle, self.shingler.stem, self.bands, self.rows,
                self.num_perm, self.seed)

    # -- signatures ------------------------------------------------------------------
    def _permuted(self, hashes: Sequence[int]) -> np.ndarray:
        hv = _fmix32(np.fromiter(hashes, dtype=np.uint32, count=len(hashes)))
        return hv[:, None] * self._a + self._b        # wraps modulo 2^32

    def signatures(self, token_sets: Sequence[Iterable[str]]) -> np.ndarray:
        """One signature row per (non-empty) token set, as datasketch's
        ``MinHash.update_batch`` computes it; a few thousand tokens a step."""
        out = np.empty((len(token_sets), self.num_perm), dtype=np.uint32)
        rows: list[int] = []
        starts: list[int] = []
        hashes: list[int] = []

        def flush() -> None:
            if rows:
                mins = np.minimum.reduceat(self._permuted(hashes), starts, axis=0)
                out[rows] = mins
                rows.clear()
                starts.clear()
                hashes.clear()

        for i, tokens in enumerate(token_sets):
            h = [token_hash(t) for t in tokens]
            if not h:
                raise ValueError("an empty token set has no signature")
            if len(h) > CHUNK_TOKENS:               # one huge text: in steps
                sig = self._permuted(h[:CHUNK_TOKENS]).min(axis=0)
                for s in range(CHUNK_TOKENS, len(h), CHUNK_TOKENS):
                    sig = np.minimum(sig, self._permuted(h[s:s + CHUNK_TOKENS]).min(axis=0))
                out[i] = sig
                continue
            if len(hashes) + len(h) > CHUNK_TOKENS:
                flush()
            rows.append(i)
            starts.append(len(hashes))
            hashes.extend(h)
        flush()
        return out

    def band_matrix(self, signatures: np.ndarray) -> np.ndarray:
        """Each signature's bands, one 64-bit integer per band (as
        ``band_hash`` makes of datasketch's band bytes): n x bands."""
        n = len(signatures)
        v = signatures[:, :self.bands * self.rows].reshape(n, self.bands, self.rows) \
            .astype(np.uint64)
        h = np.full((n, self.bands), _BAND_SEED, dtype=np.uint64)
        mul = np.uint64(_BAND_MUL)
        for j in range(self.rows):
            h ^= v[:, :, j]
            h *= mul
        return h

    def band_keys(self, signatures: np.ndarray) -> list[tuple[int, ...]]:
        """``band_matrix`` as tuples of Python integers."""
        return [tuple(row) for row in self.band_matrix(signatures).tolist()]

    def band_hash(self, data: bytes) -> int:
        """The hash of one band as ``MinHashLSH`` hands it over (the band's
        values byte-swapped): the index's ``hashfunc``."""
        h = _BAND_SEED
        for v in self._unpack(data):
            h = ((h ^ v) * _BAND_MUL) & _MASK
        return h

    def minhash(self, tokens: Iterable[str]) -> LeanMinHash:
        """A datasketch LeanMinHash of the tokens (the slow, reference way)."""
        from datasketch import LeanMinHash, MinHash
        m = MinHash(num_perm=self.num_perm, seed=self.seed, scheme=SCHEME,
                    permutations=self.permutations)
        m.update_batch([t.encode("utf-8", "surrogatepass") for t in tokens])
        return LeanMinHash(m)

    # -- texts ------------------------------------------------------------------------
    def _features(self, text: str) -> Features | None:
        tokens = self.shingler.tokens(text)
        if not tokens:
            return None
        if len(tokens) > CHUNK_TOKENS:
            return Features(tokens, self.band_keys(self.signatures([tokens]))[0])
        # one text: the same computation without the batch's bookkeeping
        sig = self._permuted([token_hash(t) for t in tokens]).min(axis=0)
        v = sig[:self.bands * self.rows].reshape(self.bands, self.rows).astype(np.uint64)
        h = np.full(self.bands, _BAND_SEED, dtype=np.uint64)
        mul = np.uint64(_BAND_MUL)
        for j in range(self.rows):
            h ^= v[:, j]
            h *= mul
        return Features(tokens, tuple(h.tolist()))

    def features_many(self, texts: Sequence[str]) -> list[Features | None]:
        """Features of many texts, their signatures computed together."""
        token_sets = [self.shingler.tokens(t) for t in texts]
        todo = [i for i, s in enumerate(token_sets) if s]
        found: list[Features | None] = [None] * len(texts)
        if todo:
            bands = self.band_keys(self.signatures([token_sets[i] for i in todo]))
            for i, b in zip(todo, bands):
                found[i] = Features(token_sets[i], b)
        return found


@lru_cache(maxsize=None)
def scheme_for(shingle: int, stem: bool, bands: int, rows: int,
               num_perm: int = NUM_PERM, seed: int = SEED) -> Scheme:
    """The shared Scheme of these settings (its caches serve every view)."""
    return Scheme(shingler(shingle, stem), bands, rows, num_perm, seed)


# -- the index ---------------------------------------------------------------------------
#
# datasketch's MinHashLSH keeps, per band, a dictionary from a band's hash to
# a set of keys, and per key the list of its band hashes: about 9 KB per
# indexed text with 32 bands. The index below keeps the same contents in
# numpy arrays: each key's bands as one row of a matrix (``BandRows``), and
# per band a sorted array of (hash, row) pairs plus a small dictionary of the
# pairs added since it was last merged in (``BandTable``; about 700 bytes per
# text). An entry whose row no longer holds that hash (the key was removed or
# re-indexed) is stale: it is skipped when read and dropped at the next merge.
# It answers datasketch's MinHashLSH calls (insert, query, remove) from the
# public attributes of a MinHash, and is tested against the stock class; it
# uses none of datasketch's internals.

MERGE_MIN = 2_048         # pairs added to a band before it is merged into its array
MERGE_SHARE = 16          # ... or one sixteenth of the rows, when more


class MinHashLike(Protocol):
    """What the index reads of a datasketch ``MinHash`` / ``LeanMinHash``."""

    hashvalues: np.ndarray
    scheme: str

    def __len__(self) -> int: ...


class BandRows:
    """Each indexed key's band hashes, as a row of a uint64 matrix."""

    def __init__(self, bands: int) -> None:
        self.row_of: dict[Hashable, int] = {}
        self.key_of: list[Hashable] = []
        self.free: list[int] = []
        self.matrix = np.zeros((64, bands), dtype=np.uint64)
        self.alive = np.zeros(64, dtype=bool)
        # the size of each key's token set (0: unknown), to skip at once
        # the sets too small or too large to reach a threshold
        self.sizes = np.zeros(64, dtype=np.uint32)

    def _row(self, key: Hashable) -> int:
        row = self.row_of.get(key)
        if row is None:
            if self.free:
                row = self.free.pop()
                self.key_of[row] = key
            else:
                row = len(self.key_of)
                self.key_of.append(key)
                if row >= len(self.alive):
                    self._grow(row + 1)
            self.row_of[key] = row
        return row

    def _grow(self, need: int) -> None:
        size = max(need, 2 * len(self.alive))
        matrix = np.zeros((size, self.matrix.shape[1]), dtype=np.uint64)
        matrix[:len(self.matrix)] = self.matrix
        alive = np.zeros(size, dtype=bool)
        alive[:len(self.alive)] = self.alive
        sizes = np.zeros(size, dtype=np.uint32)
        sizes[:len(self.sizes)] = self.sizes
        self.matrix, self.alive, self.sizes = matrix, alive, sizes

    def put(self, key: Hashable, bands: Sequence[int], size: int = 0) -> int:
        row = self._row(key)
        self.matrix[row] = bands
        self.alive[row] = True
        self.sizes[row] = size
        return row

    def put_many(self, keys: Sequence[Hashable], bands: np.ndarray,
                 sizes: Sequence[int] | None = None) -> np.ndarray:
        rows = np.fromiter((self._row(k) for k in keys), dtype=np.int64, count=len(keys))
        self.matrix[rows] = bands
        self.alive[rows] = True
        self.sizes[rows] = 0 if sizes is None else sizes
        return rows

    def bands(self, key: Hashable) -> tuple[int, ...]:
        """The band hashes ``key`` is indexed under (KeyError: not indexed)."""
        return tuple(self.matrix[self.row_of[key]].tolist())

    def remove(self, key: Hashable) -> None:
        row = self.row_of.pop(key, None)
        if row is not None:
            self.alive[row] = False
            self.key_of[row] = None
            self.free.append(row)

    def __contains__(self, key: Hashable) -> bool:
        return key in self.row_of

    def __len__(self) -> int:
        return len(self.row_of)


class BandTable:
    """One band: sorted (hash, row) arrays and the pairs added since."""

    def __init__(self, rows: BandRows, band: int) -> None:
        self.rows = rows
        self.band = band
        self.hashes = np.zeros(0, dtype=np.uint64)
        self.row_ids = np.zeros(0, dtype=np.int64)
        self.delta: dict[int, int | set[int]] = {}     # hash -> row, or a set of rows
        self.added = 0

    def add(self, h: int, row: int) -> None:
        d = self.delta
        v = d.get(h)
        if v is None:
            d[h] = row
        elif isinstance(v, set):
            v.add(row)
        elif v != row:
            d[h] = {v, row}
        self.added += 1

    def discard(self, h: int, row: int) -> None:
        d = self.delta
        v = d.get(h)
        if isinstance(v, set):
            v.discard(row)
            if len(v) == 1:
                d[h] = next(iter(v))
        elif v is not None and v == row:
            del d[h]

    def rows_of(self, h: int, sizes: tuple[int, int] | None = None) -> list[int]:
        """The live rows whose band has hash ``h`` (and whose token set
        has a size within ``sizes``, when known)."""
        found, sorted_rows = self._rows(h, sizes)
        if sorted_rows is not None:
            found.extend(sorted_rows.tolist())
        return found

    def rows_array(self, h: int, sizes: tuple[int, int] | None = None) -> np.ndarray:
        """``rows_of`` as an array (no Python object per row)."""
        found, sorted_rows = self._rows(h, sizes)
        extra = np.array(found, dtype=np.int64)
        if sorted_rows is None:
            return extra
        return np.concatenate([extra, sorted_rows]) if found else sorted_rows

    def _rows(self, h: int, sizes: tuple[int, int] | None) -> tuple[list[int], np.ndarray | None]:
        """The rows of ``rows_of``: those added since the last merge (a
        list), and those of the sorted arrays (an array, or None)."""
        found: list[int] = []
        v = self.delta.get(h)
        if v is not None:
            if isinstance(v, set):
                found.extend(v)
            else:
                found.append(v)
            if sizes is not None:
                known, (low, high) = self.rows.sizes, sizes
                found = [r for r in found if not known[r] or low <= known[r] <= high]
        hashes = self.hashes
        if len(hashes):
            key = np.uint64(h)
            lo = hashes.searchsorted(key, "left")
            hi = hashes.searchsorted(key, "right")
            if hi > lo:
                rows = self.row_ids[lo:hi]
                keep = (self.rows.matrix[rows, self.band] == key) & self.rows.alive[rows]
                if sizes is not None:
                    n = self.rows.sizes[rows]
                    keep &= (n == 0) | ((n >= sizes[0]) & (n <= sizes[1]))
                return found, rows[keep]
        return found, None

    def merge(self, extra_hashes: np.ndarray | None = None,
              extra_rows: np.ndarray | None = None) -> None:
        """Fold the added pairs (and ``extra``) into the sorted arrays,
        dropping the stale ones."""
        hs: list[int] = []
        rs: list[int] = []
        for h, v in self.delta.items():
            if isinstance(v, set):
                hs.extend([h] * len(v))
                rs.extend(v)
            else:
                hs.append(h)
                rs.append(v)
        parts_h = [self.hashes, np.array(hs, dtype=np.uint64)]
        parts_r = [self.row_ids, np.array(rs, dtype=np.int64)]
        if extra_hashes is not None and extra_rows is not None:
            parts_h.append(extra_hashes)
            parts_r.append(extra_rows)
        hashes, row_ids = np.concatenate(parts_h), np.concatenate(parts_r)
        live = (self.rows.matrix[row_ids, self.band] == hashes) & self.rows.alive[row_ids]
        hashes, row_ids = hashes[live], row_ids[live]
        order = np.lexsort((row_ids, hashes))
        hashes, row_ids = hashes[order], row_ids[order]
        if len(hashes) > 1:     # a key indexed again under an equal band: once
            first = np.ones(len(hashes), dtype=bool)
            first[1:] = (hashes[1:] != hashes[:-1]) | (row_ids[1:] != row_ids[:-1])
            hashes, row_ids = hashes[first], row_ids[first]
        self.hashes, self.row_ids = hashes, row_ids
        self.delta = {}
        self.added = 0


class SimilarityIndex:
    """A MinHash LSH index with the banding of a Scheme, band hashes as
    64-bit integers, and compact storage (above). The engine uses
    ``insert_bands`` / ``insert_many`` / ``query_bands`` with bands a Scheme
    computed for many objects at once; ``insert(key, minhash)``,
    ``query(minhash)`` and ``remove(key)`` answer as datasketch's
    ``MinHashLSH`` with ``hashfunc=scheme.band_hash`` does."""

    def __init__(self, scheme: Scheme) -> None:
        self.scheme = scheme
        self.keys = BandRows(scheme.bands)
        self.hashtables = [BandTable(self.keys, i) for i in range(scheme.bands)]
        self._merging: list[BandTable] = []

    # -- datasketch's MinHashLSH calls ------------------------------------------------
    def _minhash_bands(self, minhash: MinHashLike) -> tuple[int, ...]:
        scheme = self.scheme
        if len(minhash) != scheme.num_perm:
            raise ValueError("Expecting minhash with length %d, got %d"
                             % (scheme.num_perm, len(minhash)))
        if getattr(minhash, "scheme", SCHEME) != SCHEME:
            raise ValueError(f"the index takes MinHashes of scheme {SCHEME!r}, "
                             f"not {minhash.scheme!r}")
        values = np.asarray(minhash.hashvalues, dtype=np.uint32)[None, :]
        return scheme.band_keys(values)[0]

    def insert(self, key: Hashable, minhash: MinHashLike) -> None:
        """Index ``key`` under the bands of ``minhash`` (ValueError: ``key``
        is indexed already)."""
        if key in self.keys:
            raise ValueError("The given key already exists")
        self.insert_bands(key, self._minhash_bands(minhash))

    def query(self, minhash: MinHashLike) -> list[Hashable]:
        """The keys sharing a band with ``minhash``."""
        return list(self.query_bands(self._minhash_bands(minhash)))

    def remove(self, key: Hashable) -> None:
        """Remove ``key`` (ValueError: it is not indexed)."""
        if key not in self.keys:
            raise ValueError("The given key does not exist")
        self.discard(key)

    def __contains__(self, key: Hashable) -> bool:
        return key in self.keys

    # -- the engine's calls -----------------------------------------------------------
    def insert_bands(self, key: Hashable, bands: Sequence[int], size: int = 0) -> None:
        """Index ``key`` under precomputed bands (replacing what it had);
        ``size``: of its token set, if known."""
        if key in self.keys.row_of:
            self.discard(key)
        row = self.keys.put(key, bands, size)
        for h, table in zip(bands, self.hashtables):
            table.add(h, row)
        self._maybe_merge()

    def insert_many(self, keys: Sequence[Hashable], bands: np.ndarray,
                    sizes: Sequence[int] | None = None) -> None:
        """Index many keys at once (``bands``: a row per key): merged into
        the sorted arrays directly when they are many (a seed), else added
        as single inserts are, and merged in turn (an index built a slice
        at a time would otherwise sort every band again for each slice)."""
        for key in keys:
            if key in self.keys.row_of:
                self.discard(key)
        rows = self.keys.put_many(keys, bands, sizes)
        if len(rows) < max(MERGE_MIN, len(self.keys.row_of) // MERGE_SHARE):
            row_list = rows.tolist()
            for i, table in enumerate(self.hashtables):
                add = table.add
                for h, row in zip(bands[:, i].tolist(), row_list):
                    add(h, row)
            self._maybe_merge()
            return
        for i, table in enumerate(self.hashtables):
            table.merge(bands[:, i].copy(), rows)
        self._merging = []

    def discard(self, key: Hashable) -> None:
        """Remove ``key`` if it is indexed."""
        rows = self.keys
        row = rows.row_of.get(key)
        if row is None:
            return
        for h, table in zip(rows.matrix[row].tolist(), self.hashtables):
            table.discard(h, row)      # a pair in a sorted array goes stale
        rows.remove(key)

    def bands_of(self, key: Hashable) -> tuple[int, ...]:
        """The bands ``key`` is indexed under (KeyError: not indexed)."""
        return self.keys.bands(key)

    def _maybe_merge(self) -> None:
        """Merge a band a time, so that no change waits for all of them."""
        if self._merging:
            self._merging.pop().merge()
            return
        first = self.hashtables[0]
        if first.added >= max(MERGE_MIN, len(self.keys.row_of) // MERGE_SHARE):
            self._merging = list(self.hashtables)
            self._merging.pop().merge()

    def query_bands(self, bands: Sequence[int],
                    sizes: tuple[int, int] | None = None) -> set[Hashable]:
        """Every key sharing a band with ``bands`` (whose token set has a
        size within ``sizes``, when both are known)."""
        rows: set[int] = set()
        for h, table in zip(bands, self.hashtables):
            rows.update(table.rows_of(h, sizes))
        key_of = self.keys.key_of
        return {key_of[r] for r in rows}

    def query_rows(self, bands: Sequence[int],
                   sizes: tuple[int, int] | None = None) -> np.ndarray:
        """The rows (``keys.key_of`` maps them to keys) of ``query_bands``,
        each once, sorted: array work only, whatever their number."""
        parts = [table.rows_array(h, sizes) for h, table in zip(bands, self.hashtables)]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.keys.row_of)
