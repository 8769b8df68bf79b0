"""Privatize kernels: snap, draw from the exact table, map back, chunk by chunk.

A chunk of labels goes through short passes rather than one fused loop where a
loop would mix a word-dependent load or a sequential stream with the lattice
arithmetic (clipped additive noise, RPWithPrior): apart, the arithmetic compiles
to SIMD. The words are read in the order of the fused loop, so outputs are the same.

Each kernel is a small pure function over arrays; its plain-numpy twin lives in
``labeldp.mechanisms.reference`` and the unit tests compare the two (identical
outputs where the words are consumed the same way, the same law otherwise).
Words are raw 64-bit outputs of the caller's secure generator
(``sampling.raw_words``); the drivers here hand them to the kernels in chunks.

* ``clipped_additive``: one word per label; bit 0 is the sign, the top 63 bits draw
  the noise magnitude from the folded clipped law (``sampling.TableSampler``, alias).
* ``exponential``: the same with a rejection step (index outside [0, J] → the next
  word). Each attempt is one whole word and a rejected attempt leaves no state, so
  a chunk ending mid-label simply retries that label with fresh words: exact.
* ``rp_with_prior``: one word per label for the keep decision (top 53 bits
  against T), then an exactly uniform integer by Lemire's method on 32-bit halves
  of a second word stream, one half per attempt (rejection; the keep word is kept
  across refills so nothing is conditioned on the number of attempts).
* ``unbiased``: two words per label: the rounding coin (the top 53 bits as a
  double in [0, 1), exactly numpy's ``Generator.random``) and the row draw (top 53 bits).
* ``rows``: one word per label, a table row per label (categorical mechanisms).
"""

from __future__ import annotations

import numba
import numpy as np

from labeldp.mechanisms.lattice import Lattice, index_value, snap_index
from labeldp.mechanisms.sampling import CHUNK, TableSampler, raw_words, table_draw, table_resolve, table_slot

_DOUBLE = 1.0 / 9007199254740992.0  # 2^-53
_LOW32 = np.uint64(0xFFFFFFFF)


def finite_labels(labels: np.ndarray) -> np.ndarray:
    """Labels as a flat contiguous float64 array; ValueError if any is NaN or ±inf."""
    flat = np.ascontiguousarray(labels, dtype=np.float64).reshape(-1)
    if not np.isfinite(flat).all():
        raise ValueError("labels must be finite")
    return flat


# --------------------------------------------------------------------------- additive noise


@numba.njit(cache=True, inline="always")
def signed(m, w):
    """−m if the word's low bit is set, else m (branch-free: the bit is a coin flip)."""
    return m - 2 * np.int64(w & np.uint64(1)) * m


@numba.njit(cache=True, boundscheck=False)
def _clipped_additive_kernel(labels, low, high, step, n_steps, table, g, words, packed, out):
    """Two passes over the chunk, the same arithmetic per label as one fused pass.

    Pass 1 only gathers each word's alias-table entry into ``packed``; pass 2 does
    everything else (``table_resolve``, sign, snap, clip, map back). Split, pass 2
    has no load that depends on a word and compiles to SIMD, and pass 1 is a tight
    loop whose independent loads overlap; fused, neither happens. Same words, same
    outputs. Decided in docs/decisions/0009-two-pass-privatize-kernels.md.
    """
    one = np.uint64(1)
    for i in range(labels.size):
        packed[i] = table[table_slot(g, 63, 0, words[i] >> one)]
    for i in range(labels.size):
        w = words[i]
        t = snap_index(labels[i], low, step, n_steps) + signed(table_resolve(packed[i], g, 63, w >> one), w)
        out[i] = index_value(min(max(t, 0), n_steps), low, high, step, n_steps)


def clipped_additive(labels: np.ndarray, lattice: Lattice, table: TableSampler, rng: np.random.Generator) -> np.ndarray:
    """clip(t + N, 0, J) mapped to the lattice, N = ±(magnitude from ``table``), one word per label."""
    flat = finite_labels(labels)
    out = np.empty(flat.size)
    packed = np.empty(min(CHUNK, flat.size), dtype=np.uint64)
    for start in range(0, flat.size, CHUNK):
        stop = min(start + CHUNK, flat.size)
        _clipped_additive_kernel(
            flat[start:stop], lattice.low, lattice.high, lattice.step, lattice.n_steps,
            table.table, table.g, raw_words(rng, stop - start), packed, out[start:stop],
        )  # fmt: skip
    return out.reshape(np.shape(labels))


@numba.njit(cache=True, boundscheck=False)
def _snap(labels, low, step, n_steps, index):
    """Lattice index of each label (SIMD)."""
    for i in range(labels.size):
        index[i] = snap_index(labels[i], low, step, n_steps)


@numba.njit(cache=True, boundscheck=False)
def _signed_noise(table, g, words, packed, noise):
    """±magnitude of every word, as ``clipped_additive`` draws it: gather, then resolve (SIMD)."""
    one = np.uint64(1)
    for k in range(words.size):
        packed[k] = table[table_slot(g, 63, 0, words[k] >> one)]
    for k in range(words.size):
        w = words[k]
        noise[k] = signed(table_resolve(packed[k], g, 63, w >> one), w)


@numba.njit(cache=True, boundscheck=False)
def _exponential_accept(index, i, n_steps, noise, k):
    """index[i] += the first noise[k], noise[k + 1], … that lands in [0, J]; labels i.. until
    the noise runs out. Returns (first label not done, first noise not used)."""
    while i < index.size:
        while k < noise.size:
            t = index[i] + noise[k]
            k += 1
            if 0 <= t <= n_steps:
                index[i] = t
                break
        else:
            return i, k
        i += 1
    return i, k


@numba.njit(cache=True, boundscheck=False)
def _values(index, low, high, step, n_steps, out):
    """Lattice value of each index (SIMD)."""
    for i in range(index.size):
        out[i] = index_value(index[i], low, high, step, n_steps)


def exponential(labels: np.ndarray, lattice: Lattice, table: TableSampler, rng: np.random.Generator) -> np.ndarray:
    """t + N with N = ±(magnitude from ``table``), redrawn until it lands in [0, J].

    Every word is an attempt whatever label it serves, so a chunk of words is turned
    into signed noise in one SIMD pass; only the accept loop is sequential. Words are
    read in the order of one fused loop (the next CHUNK words whenever they run out).
    """
    flat = finite_labels(labels)
    out = np.empty(flat.size)
    index = np.empty(min(CHUNK, flat.size), dtype=np.int64)
    packed, noise = np.empty(CHUNK, dtype=np.uint64), np.empty(CHUNK, dtype=np.int64)
    k = CHUNK  # no noise yet
    for start in range(0, flat.size, CHUNK):
        n = min(CHUNK, flat.size - start)
        _snap(flat[start : start + n], lattice.low, lattice.step, lattice.n_steps, index[:n])
        i = 0
        while i < n:
            if k == CHUNK:
                _signed_noise(table.table, table.g, raw_words(rng, CHUNK), packed, noise)
                k = 0
            i, k = _exponential_accept(index[:n], i, lattice.n_steps, noise, k)
        _values(index[:n], lattice.low, lattice.high, lattice.step, lattice.n_steps, out[start : start + n])
    return out.reshape(np.shape(labels))


# --------------------------------------------------------------------------- RPWithPrior


@numba.njit(cache=True, inline="always")
def lemire_threshold(s):
    """(2^32 − s) mod s: a 32-bit product's low half below it is rejected (Lemire 2019)."""
    return (np.uint64(4294967296) - s) % s


@numba.njit(cache=True, boundscheck=False)
def _rp_prepare(labels, low, step, n_steps, a1, a2, keep, keep_words, centre, kept):
    """Pass 1 (SIMD): each label's centre clip(t, a1, a2) and keep decision (top 53 bits < T)."""
    drop = np.uint64(11)
    for i in range(labels.size):
        centre[i] = min(max(snap_index(labels[i], low, step, n_steps), a1), a2)
        kept[i] = (keep_words[i] >> drop) < keep


@numba.njit(cache=True, boundscheck=False)
def _rp_uniforms(kept, start, near, far, halves, u):
    """Pass 2: u[i] uniform on [0, near) if kept[i] else [0, far), labels start.. until the halves run out.

    ``halves`` is read as a stream of 32-bit halves (high half first), one half per
    Lemire attempt; returns the first label not done.
    """
    near_t = lemire_threshold(near)
    far_t = lemire_threshold(far)
    h = 0
    n_halves = 2 * halves.size
    half = np.uint64(32)
    i = start
    while i < kept.size:
        if (h & 1) == 0 and i + 1 < kept.size and h + 1 < n_halves:
            # Two labels from one word's two halves: the usual case, tried first
            # without the per-half stream bookkeeping (same halves, same order).
            word = halves[h >> 1]
            p0 = (word >> half) * (near if kept[i] else far)
            p1 = (word & _LOW32) * (near if kept[i + 1] else far)
            t0 = near_t if kept[i] else far_t
            t1 = near_t if kept[i + 1] else far_t
            if (p0 & _LOW32) >= t0 and (p1 & _LOW32) >= t1:
                u[i] = np.int64(p0 >> half)
                u[i + 1] = np.int64(p1 >> half)
                i += 2
                h += 2
                continue
        s = near if kept[i] else far
        threshold = near_t if kept[i] else far_t
        while True:
            if h >= n_halves:
                return i
            word = halves[h >> 1]
            bits32 = (word >> half) if (h & 1) == 0 else (word & _LOW32)
            h += 1
            product = bits32 * s
            if (product & _LOW32) >= threshold:
                break
        u[i] = np.int64(product >> half)
        i += 1
    return i


@numba.njit(cache=True, boundscheck=False)
def _rp_finish(centre, kept, u, a1, z, low, high, step, n_steps, out):
    """Pass 3 (SIMD): near point c − z + u, or far point a1 − z + u past the near block, mapped back."""
    for i in range(centre.size):
        c = centre[i]
        far_index = a1 - z + u[i]
        far_index += (2 * z + 1) * np.int64(far_index >= c - z)  # skip the near block
        out[i] = index_value(c - z + u[i] if kept[i] else far_index, low, high, step, n_steps)


def rp_with_prior(
    labels: np.ndarray, lattice: Lattice, a1: int, a2: int, z: int, keep_numerator: int, rng: np.random.Generator
) -> np.ndarray:
    """Near block (2z + 1 points around clip(t, a1, a2)) w.p. T/2^53, else a uniform far point.

    Three passes per chunk (the lattice arithmetic apart from the sequential Lemire
    stream, so it compiles to SIMD, as in ``clipped_additive``); the words are read
    in the order of one fused pass: the chunk's keep words, then halves as needed.
    """
    flat = finite_labels(labels)
    out = np.empty(flat.size)
    if max(2 * z + 1, a2 - a1) >= 1 << 32:
        raise ValueError("the RPWithPrior kernel needs fewer than 2^32 outputs")
    keep = np.uint64(keep_numerator) if a2 > a1 else np.uint64(1 << 53)  # no far point: always near
    near, far = np.uint64(2 * z + 1), np.uint64(max(a2 - a1, 1))
    size = min(CHUNK, flat.size)
    centre, kept, u = np.empty(size, np.int64), np.empty(size, np.bool_), np.empty(size, np.int64)
    for start in range(0, flat.size, CHUNK):
        n = min(CHUNK, flat.size - start)
        _rp_prepare(
            flat[start : start + n], lattice.low, lattice.step, lattice.n_steps, a1, a2, keep,
            raw_words(rng, n), centre[:n], kept[:n],
        )  # fmt: skip
        done = 0
        while done < n:
            done = _rp_uniforms(kept[:n], done, near, far, raw_words(rng, (n - done) // 2 + 8), u[:n])
        _rp_finish(
            centre[:n], kept[:n], u[:n], a1, z, lattice.low, lattice.high, lattice.step, lattice.n_steps,
            out[start : start + n],
        )  # fmt: skip
    return out.reshape(np.shape(labels))


# --------------------------------------------------------------------------- unbiased randomizer


@numba.njit(cache=True, inline="always")
def _rounding_row(y, grid, inverse_spacing, coin):
    """Row of the rounded label: lower grid index + 1{coin < Pr[up]} (``unbiased.rounding_probabilities``).

    lower = min(searchsorted(grid, y, "right") − 1, K − 2) for y clipped to the grid:
    guessed from the mean spacing, then corrected by comparisons, so it is exact for
    any ascending grid and takes one or two steps on the (equally spaced) default one.
    """
    k = grid.size
    y = min(max(y, grid[0]), grid[k - 1])
    lower = min(max(np.int64((y - grid[0]) * inverse_spacing), 0), k - 2)
    while lower < k - 2 and grid[lower + 1] <= y:
        lower += 1
    while lower > 0 and grid[lower] > y:
        lower -= 1
    p_up = min(max((y - grid[lower]) / (grid[lower + 1] - grid[lower]), 0.0), 1.0)
    return lower + np.int64(coin < p_up)


@numba.njit(cache=True, boundscheck=False)
def _unbiased_kernel(labels, grid, outputs, table, g, words, out):
    drop = np.uint64(11)
    inverse_spacing = (grid.size - 1) / (grid[grid.size - 1] - grid[0])
    for i in range(labels.size):
        coin = np.float64(np.int64(words[2 * i] >> drop)) * _DOUBLE
        row = _rounding_row(labels[i], grid, inverse_spacing, coin)
        out[i] = outputs[table_draw(table, g, 53, row, words[2 * i + 1] >> drop)]


def unbiased(
    labels: np.ndarray, grid: np.ndarray, outputs: np.ndarray, table: TableSampler, rng: np.random.Generator
) -> np.ndarray:
    """Unbiased rounding to ``grid`` then the row's exact output draw (table of 53-bit cells)."""
    if table.bits != 53:
        raise ValueError("the unbiased table holds counts out of 2^53")
    flat = finite_labels(labels)
    out = np.empty(flat.size)
    for start in range(0, flat.size, CHUNK):
        stop = min(start + CHUNK, flat.size)
        _unbiased_kernel(
            flat[start:stop], grid, outputs, table.table, table.g, raw_words(rng, 2 * (stop - start)), out[start:stop],
        )  # fmt: skip
    return out.reshape(np.shape(labels))


# --------------------------------------------------------------------------- one row per label


@numba.njit(cache=True, boundscheck=False)
def _rows_kernel(rows, table, g, bits, words, out):
    drop = np.uint64(64 - bits)
    for i in range(rows.size):
        out[i] = table_draw(table, g, bits, rows[i], words[i] >> drop)


def rows(row_index: np.ndarray, table: TableSampler, rng: np.random.Generator) -> np.ndarray:
    """One draw from row ``row_index[i]`` per label (int64 outputs); rows must be valid indices."""
    flat = np.ascontiguousarray(row_index, dtype=np.int64).reshape(-1)
    out = np.empty(flat.size, dtype=np.int64)
    for start in range(0, flat.size, CHUNK):
        stop = min(start + CHUNK, flat.size)
        _rows_kernel(
            flat[start:stop], table.table, table.g, table.bits, raw_words(rng, stop - start), out[start:stop],
        )  # fmt: skip
    return out.reshape(np.shape(row_index))


@numba.njit(cache=True, boundscheck=False)
def _rows_where_kernel(rows, mask, select, start, table, g, bits, words, out):
    """Rows i >= start with mask[i] == select, one word each, until the words run out; next i."""
    drop = np.uint64(64 - bits)
    k = 0
    i = start
    while i < rows.size and k < words.size:
        if mask[i] == select:
            out[i] = table_draw(table, g, bits, rows[i], words[k] >> drop)
            k += 1
        i += 1
    return i


def rows_where(
    row_index: np.ndarray,
    mask: np.ndarray,
    select: bool,
    table: TableSampler,
    rng: np.random.Generator,
    out: np.ndarray,
) -> None:
    """``out[mask == select] = rows(row_index[mask == select], table, rng)``, in place, same words."""
    flat = np.ascontiguousarray(row_index, dtype=np.int64).reshape(-1)
    where = np.ascontiguousarray(mask, dtype=np.bool_).reshape(-1)
    if where.size != flat.size or out.shape != flat.shape:
        raise ValueError("mask and out must match the labels")
    left = int(np.count_nonzero(where == select))
    i = 0
    while left > 0:
        words = raw_words(rng, min(CHUNK, left))
        i = _rows_where_kernel(flat, where, select, i, table.table, table.g, table.bits, words, out)
        left -= words.size


@numba.njit(cache=True, boundscheck=False)
def _rows_at_kernel(rows, positions, table, g, bits, words, out):
    drop = np.uint64(64 - bits)
    for t in range(positions.size):
        i = positions[t]
        out[i] = table_draw(table, g, bits, rows[i], words[t] >> drop)


def rows_at(
    row_index: np.ndarray, positions: np.ndarray, table: TableSampler, rng: np.random.Generator, out: np.ndarray
) -> None:
    """``out[positions] = rows(row_index[positions], table, rng)``, in place, same words (positions in [0, n))."""
    flat = np.ascontiguousarray(row_index, dtype=np.int64).reshape(-1)
    at = np.ascontiguousarray(positions, dtype=np.int64).reshape(-1)
    if out.shape != flat.shape or (at.size and (at.min() < 0 or at.max() >= flat.size)):
        raise ValueError("positions must index the labels and out must match them")
    for start in range(0, at.size, CHUNK):
        stop = min(start + CHUNK, at.size)
        _rows_at_kernel(flat, at[start:stop], table.table, table.g, table.bits, raw_words(rng, stop - start), out)
