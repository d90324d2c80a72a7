"""MinHash LSH in numpy: near-duplicates of a small query set (eval captions) in a large,
streamed corpus.

Why this shape: the eval side is small (thousands of captions), the corpus is large
(millions of texts) and read once in batches. So the LSH index is built over the eval
captions only, and each corpus batch is signed and looked up against it; memory is one
batch plus the index, whatever the corpus size. Everything per batch is array code: the
signatures are a segmented minimum (`np.minimum.reduceat`) over the shingle hashes, band
keys are looked up with `searchsorted`. Python loops run over hash functions and bands
(fixed, ~100) and over the verified candidates (few), never over corpus texts or pairs.

Shingles (word n-grams of the normalised text, hashed to 64 bits) come from DuckDB
(`sql/dedup_shingles.sql`), so the corpus never passes through Python one string at a time
for hashing. Hash family: multiply-add-shift, h_k(x) = ((a_k x + b_k) mod 2^64) >> 32 with
a_k odd (Dietzfelbinger et al.), one per (band, row).

Candidates are filtered by the fraction of agreeing signature slots (an unbiased estimate of
the Jaccard) with a margin of `ESTIMATE_MARGIN` below the threshold, then verified by the
exact Jaccard of the two shingle sets: a reported match always has Jaccard >= threshold.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# the signature estimate of J has standard deviation sqrt(J(1-J)/P) <= .045 at P = 128:
# a margin of .2 drops a true match before verification with probability < 1e-5
ESTIMATE_MARGIN = 0.2
_CHUNK = 200_000  # candidate pairs compared per step (bounds memory: chunk x P x 4 bytes)


def ragged(shingles: pa.ListArray | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """A list<uint64> column -> (flat values, start offsets); every list is non-empty."""
    if isinstance(shingles, pa.ChunkedArray):
        shingles = shingles.combine_chunks()
    lengths = pc.list_value_length(shingles).to_numpy(zero_copy_only=False).astype(np.int64)
    if lengths.size and lengths.min() < 1:
        raise ValueError("every text needs at least one shingle")
    values = shingles.flatten().to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
    starts = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return values, starts


@dataclass(frozen=True)
class MinHasher:
    bands: int
    rows: int
    seed: int = 0

    @property
    def num_perm(self) -> int:
        return self.bands * self.rows

    def _params(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        a = rng.integers(0, 2**63, self.num_perm, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        b = rng.integers(0, 2**63, self.num_perm, dtype=np.uint64)
        mix = rng.integers(0, 2**63, self.rows, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        return a, b, mix

    def signatures(self, values: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """(n, num_perm) uint32: per text and hash function, the minimum over its shingles."""
        a, b, _ = self._params()
        out = np.empty((len(starts), self.num_perm), np.uint32)
        if len(starts) == 0:
            return out
        h = np.empty(len(values), np.uint64)
        for k in range(self.num_perm):
            np.multiply(values, a[k], out=h)
            h += b[k]
            h >>= np.uint64(32)
            out[:, k] = np.minimum.reduceat(h, starts)
        return out

    def band_keys(self, sig: np.ndarray) -> np.ndarray:
        """(n, bands) uint64: the `rows` slots of each band mixed into one key."""
        _, _, mix = self._params()
        s = sig.reshape(len(sig), self.bands, self.rows).astype(np.uint64)
        keys = np.zeros((len(sig), self.bands), np.uint64)
        for j in range(self.rows):
            keys ^= s[:, :, j] * mix[j]
            keys = (keys << np.uint64(7)) | (keys >> np.uint64(57))  # rotate: order matters
        return keys


class NearIndex:
    """The LSH index of the query set (eval captions): per band, its keys sorted."""

    def __init__(self, hasher: MinHasher, values: np.ndarray, starts: np.ndarray):
        self.hasher = hasher
        self.sig = hasher.signatures(values, starts)
        ends = np.append(starts[1:], len(values))
        self.sets = [np.sort(values[s:e]) for s, e in zip(starts, ends, strict=True)]
        keys = hasher.band_keys(self.sig)
        self.order = np.argsort(keys, axis=0, kind="stable")
        self.sorted = np.take_along_axis(keys, self.order, axis=0)

    def __len__(self) -> int:
        return len(self.sets)

    def candidates(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(corpus row, query row) pairs sharing at least one band key, each pair once."""
        ci_all, qi_all = [], []
        for band in range(self.hasher.bands):
            col = self.sorted[:, band]
            lo = np.searchsorted(col, keys[:, band], "left")
            cnt = np.searchsorted(col, keys[:, band], "right") - lo
            total = int(cnt.sum())
            if total == 0:
                continue
            ci = np.repeat(np.arange(len(keys)), cnt)
            within = np.arange(total) - np.repeat(np.cumsum(cnt) - cnt, cnt)
            ci_all.append(ci)
            qi_all.append(self.order[np.repeat(lo, cnt) + within, band])
        if not ci_all:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        code = np.unique(np.concatenate(ci_all).astype(np.int64) * len(self) + np.concatenate(qi_all))
        return code // len(self), code % len(self)

    def match(self, values: np.ndarray, starts: np.ndarray, threshold: float) -> Iterator[tuple[int, int, float]]:
        """(corpus row, query row, exact Jaccard) for every pair with Jaccard >= threshold
        that LSH puts in one bucket."""
        sig = self.hasher.signatures(values, starts)
        ci, qi = self.candidates(self.hasher.band_keys(sig))
        keep = []
        for s in range(0, len(ci), _CHUNK):
            c, q = ci[s : s + _CHUNK], qi[s : s + _CHUNK]
            est = (sig[c] == self.sig[q]).mean(axis=1)
            keep.append(np.flatnonzero(est >= threshold - ESTIMATE_MARGIN) + s)
        ends = np.append(starts[1:], len(values))
        for k in np.concatenate(keep) if keep else []:
            c, q = int(ci[k]), int(qi[k])
            a, b = values[starts[c] : ends[c]], self.sets[q]
            inter = np.intersect1d(a, b, assume_unique=True).size
            j = inter / (len(a) + len(b) - inter)
            if j >= threshold:
                yield c, q, j
