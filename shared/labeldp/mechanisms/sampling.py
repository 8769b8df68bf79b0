"""The one exact table sampler, and the secure words every sampler draws.

Words. Every sampler reads raw 64-bit outputs of the caller's generator
(``rng.bit_generator.random_raw``; labeldp.randomness.secure_generator gives
the ChaCha20 keystream under a fresh os.urandom key), uniform on [0, 2^64). Numba's
own generator is never used. The top ``bits`` bits of a word, ``w >> (64 − bits)``,
are uniform on [0, 2^bits) exactly.

Laws as cells. A law over outputs 0..L−1 is a row of integer cells c_j out of
2^bits (bits ≤ 63): output j must own exactly c_j of the 2^bits values of x.
Several rows (one law per input) share a table; the row is chosen per draw.

Alias table, in integers (Walker 1977; Vose 1991). The 2^bits values of x are cut
into 2^g equal buckets of B = 2^(bits − g) values (2^g ≥ L, so B is an integer
and no bucket is favoured: no modulo bias). Bucket b belongs to output b for its
first τ_b values and to an alias a_b for the rest; Vose's pairing (a bucket short
of B is topped up by one with a surplus, which then carries the difference) runs
in exact integer arithmetic, so output j owns τ_j + Σ_{a_b = j} (B − τ_b) = c_j
values exactly — ``TableSampler.cells`` recounts them and the tests compare. A
draw is one load: x → bucket x >> (bits − g), keep it iff the low bits are < τ,
else its alias. (τ, a) are packed in one uint64, τ << g | a: τ ≤ 2^(bits − g)
needs bits − g + 1 bits and a needs g, together bits + 1 ≤ 64.

``cumulative_cells`` turns float probabilities into cells by the rule of
categorical tables: every entry but the row's largest is rounded up (so small
probabilities, the ones ratio bounds are sensitive to, never shrink and zero
stays zero), the largest takes the remainder.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

WORD_BITS = 64
CHUNK = 1 << 15
"""Labels per kernel call: the words of one chunk (8 B each) stay in L2 cache."""
MAX_TABLE_BITS = 63
MAX_TABLE_SIZE = 1 << 21
"""Largest row (outputs) a table is built for; bigger laws use the numpy sampler."""


def raw_words(rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` raw 64-bit outputs of the caller's bit generator (uniform on [0, 2^64))."""
    return rng.bit_generator.random_raw(size)


def cumulative_cells(probs: np.ndarray, bits: int = MAX_TABLE_BITS) -> np.ndarray:
    """Cumulative integer cells (uint64) out of 2^bits per row of ``probs`` (1-D or 2-D).

    Every entry except the row's largest (first on ties) gets ⌈p·2^bits⌉ cells —
    exact in float, scaling by a power of two is exact — and the largest the rest,
    so each row ends at exactly 2^bits and zero entries get no cells.
    """
    p = np.asarray(probs, dtype=np.float64)
    rows = np.atleast_2d(p)
    if not (1 <= bits <= MAX_TABLE_BITS):
        raise ValueError(f"bits must lie in [1, {MAX_TABLE_BITS}]")
    if not np.all(np.isfinite(rows)) or np.any(rows < 0):
        raise ValueError("probabilities must be finite and >= 0")
    if np.any(np.abs(rows.sum(axis=1) - 1.0) > 1e-9):
        raise ValueError("probabilities must sum to 1")
    total = np.uint64(1 << bits)
    cells = np.ceil(np.ldexp(rows, bits)).astype(np.uint64)
    sink = np.argmax(rows, axis=1)
    index = np.arange(rows.shape[0])
    cells[index, sink] = 0
    rest = cells.sum(axis=1, dtype=np.uint64)
    if np.any(rest > total):
        raise ValueError("probabilities must sum to 1")
    cells[index, sink] = total - rest
    out = np.cumsum(cells, axis=1, dtype=np.uint64)
    return out if p.ndim == 2 else out[0]


@numba.njit(cache=True)
def _alias_row(cells, g, bits, out):
    """Vose's alias table for one row of integer cells (sum 2^bits), packed τ << g | a, into ``out``."""
    n_buckets = out.size
    capacity = np.uint64(1) << np.uint64(bits - g)
    left = np.zeros(n_buckets, np.uint64)
    left[: cells.size] = cells
    threshold = np.zeros(n_buckets, np.uint64)
    alias = np.arange(n_buckets).astype(np.uint64)
    small = np.empty(n_buckets, np.int64)
    large = np.empty(n_buckets, np.int64)
    n_small = 0
    n_large = 0
    for b in range(n_buckets):
        if left[b] < capacity:
            small[n_small] = b
            n_small += 1
        else:
            large[n_large] = b
            n_large += 1
    while n_small > 0 and n_large > 0:
        n_small -= 1
        s = small[n_small]
        big = large[n_large - 1]
        threshold[s] = left[s]
        alias[s] = big
        left[big] -= capacity - left[s]
        if left[big] < capacity:
            n_large -= 1
            small[n_small] = big
            n_small += 1
    # Exact arithmetic leaves every remaining bucket with exactly one capacity.
    for k in range(n_large):
        threshold[large[k]] = capacity
    for k in range(n_small):
        threshold[small[k]] = capacity
    out[:] = (threshold << np.uint64(g)) | alias


@dataclass(frozen=True)
class TableSampler:
    """Rows of integer cells out of 2^bits as packed alias tables, ready for the kernels.

    ``table`` (rows·2^g, uint64, row-major): bucket b of row r holds τ << g | a.
    """

    table: np.ndarray
    n_rows: int
    n_outputs: int
    bits: int
    g: int

    @property
    def shift(self) -> int:
        """Bucket of x = x >> shift."""
        return self.bits - self.g

    @property
    def n_buckets(self) -> int:
        return 1 << self.g

    @classmethod
    def from_cumulative(cls, cdf_cells: np.ndarray, bits: int) -> TableSampler:
        """From cumulative cells (rows × L, each row ending at exactly 2^bits)."""
        cdf = np.ascontiguousarray(np.atleast_2d(cdf_cells), dtype=np.uint64)
        n_rows, n_outputs = cdf.shape
        if not (1 <= bits <= MAX_TABLE_BITS):
            raise ValueError(f"bits must lie in [1, {MAX_TABLE_BITS}]")
        if n_outputs == 0 or np.any(cdf[:, -1] != np.uint64(1 << bits)):
            raise ValueError("every row must end at 2^bits")
        if np.any(cdf[:, 1:] < cdf[:, :-1]):
            raise ValueError("cumulative cells must be non-decreasing")
        g = min(int(n_outputs - 1).bit_length(), bits)
        cells = np.diff(cdf, axis=1, prepend=np.zeros((n_rows, 1), dtype=np.uint64))
        table = np.empty((n_rows, 1 << g), dtype=np.uint64)
        for r in range(n_rows):
            _alias_row(np.ascontiguousarray(cells[r]), g, bits, table[r])
        return cls(table.ravel(), int(n_rows), int(n_outputs), int(bits), int(g))

    @classmethod
    def from_probabilities(cls, probs: np.ndarray, bits: int = MAX_TABLE_BITS) -> TableSampler:
        return cls.from_cumulative(cumulative_cells(probs, bits), bits)

    def cells(self) -> np.ndarray:
        """Values of x each output owns, recounted from the alias table (rows × L, exact integers)."""
        packed = self.table.reshape(self.n_rows, self.n_buckets)
        threshold = packed >> np.uint64(self.g)
        alias = (packed & np.uint64(self.n_buckets - 1)).astype(np.int64)
        capacity = np.uint64(1 << self.shift)
        out = np.zeros((self.n_rows, self.n_buckets), dtype=np.uint64)
        for r in range(self.n_rows):
            out[r] += threshold[r]
            np.add.at(out[r], alias[r], capacity - threshold[r])
        if np.any(out[:, self.n_outputs :] != 0):
            raise AssertionError("a padding bucket owns values")  # cannot happen: padding has zero cells
        return out[:, : self.n_outputs]

    def draw(self, rows: np.ndarray, words: np.ndarray) -> np.ndarray:
        """Output per (row, raw 64-bit word) by the alias kernel (int64)."""
        rows = np.ascontiguousarray(rows, dtype=np.int64).ravel()
        words = np.ascontiguousarray(words, dtype=np.uint64).ravel()
        if rows.size != words.size:
            raise ValueError("one word per row index")
        if rows.size and (rows.min() < 0 or rows.max() >= self.n_rows):
            raise ValueError("row index out of range")
        out = np.empty(rows.size, dtype=np.int64)
        _draw_kernel(self.table, self.g, self.bits, rows, words, out)
        return out

    def draw_reference(self, rows: np.ndarray, words: np.ndarray) -> np.ndarray:
        """The numpy twin of :meth:`draw` (the same lookup, vectorized: identical outputs)."""
        rows = np.asarray(rows, dtype=np.int64).ravel()
        x = np.asarray(words, dtype=np.uint64).ravel() >> np.uint64(WORD_BITS - self.bits)
        bucket = x >> np.uint64(self.shift)
        packed = self.table[rows * self.n_buckets + bucket.astype(np.int64)]
        low = x & np.uint64((1 << self.shift) - 1)
        keep = low < (packed >> np.uint64(self.g))
        return np.where(keep, bucket, packed & np.uint64(self.n_buckets - 1)).astype(np.int64)


@numba.njit(cache=True, inline="always")
def table_slot(g, bits, row, x):
    """Position in ``table`` of x's bucket in ``row`` (x uniform on [0, 2^bits))."""
    return (row << g) + np.int64(x >> np.uint64(bits - g))


@numba.njit(cache=True, inline="always")
def table_resolve(packed, g, bits, x):
    """Output for x given its bucket's packed entry: the bucket, or its alias past the threshold.

    Branch-free (the keep test is a coin flip for the branch predictor). Apart from
    the lookup so a kernel can gather the entries in one loop and resolve them in a
    load-free one that compiles to SIMD (``kernels.clipped_additive``).
    """
    shift = np.uint64(bits - g)
    bucket = np.int64(x >> shift)
    keep = np.int64((x & ((np.uint64(1) << shift) - np.uint64(1))) < (packed >> np.uint64(g)))
    alias = np.int64(packed & ((np.uint64(1) << np.uint64(g)) - np.uint64(1)))
    return alias + keep * (bucket - alias)


@numba.njit(cache=True, inline="always")
def table_draw(table, g, bits, row, x):
    """Output of ``row`` for x uniform on [0, 2^bits): one lookup, then ``table_resolve``."""
    return table_resolve(table[table_slot(g, bits, row, x)], g, bits, x)


@numba.njit(cache=True, boundscheck=False)
def _draw_kernel(table, g, bits, rows, words, out):
    drop = np.uint64(WORD_BITS - bits)
    for i in range(rows.size):
        out[i] = table_draw(table, g, bits, rows[i], words[i] >> drop)
