"""Fast, exact sampling of m-ary randomized response over bin indices.

RR over m bins reports the label's own bin with probability p and each other
bin with q = (1 − p)/(m − 1). Privatizing millions of labels is a hot path, so
the numba kernel here does binning and randomization in one pass over the data,
one 64-bit word of randomness per label.

Exactness (why one word is enough). The 2^64 values of a uniform word u are
split into exact cells: each of the m − 1 "other" slots owns L consecutive
values and the own bin owns the remaining T = 2^64 − (m − 1)·L, where

    L = ⌈2^64 · (1 − p) / (m − 1)⌉        (computed in exact rational arithmetic
                                             from the float p).

So Pr[own] = T / 2^64 and Pr[other slot j] = L / 2^64 *exactly*: no modulo
bias (every slot owns the same number of words, u // L picks it) and no
rejection. Rounding L up makes Pr[own] ≤ p and each Pr[other] ≥ q, so the
realized ratio T / L never exceeds p / q (= e^ε up to the caller's float
rounding of p); Pr[own] lies in (p − (m − 1)·2^−64, p] and each Pr[other] in
[q, q + 2^−64). ``probability_cells`` exposes the cells and accepts a narrower
word width (``bits``) so a test can push every possible word through the
kernel and count the cells exactly.

Randomness. Words come from ``rng.bit_generator.random_raw`` — the caller's
numpy Generator (labeldp.randomness.secure_generator: the ChaCha20 keystream
under a fresh os.urandom key) — in chunks; numba's own global generator is never
used. ``randomized_response_reference`` is the plain numpy version (rng.random
< p, exact to 2^−53, and rng.integers, Lemire's method) kept for tests and the
speed benchmark.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numba
import numpy as np

from labeldp.mechanisms.sampling import CHUNK, WORD_BITS, raw_words


def rr_probabilities(epsilon: float, m: int) -> tuple[float, float]:
    """(p, q) of ε-RR over m outputs: p = e^ε/(e^ε + m − 1), q = 1/(e^ε + m − 1).

    The one RR law (RR-on-Bins, randomized response, RRWithPrior's top-k block),
    computed via t = e^{−ε} so a large ε cannot overflow: p = 1/(1 + (m − 1)t), q = t·p.
    """
    t = math.exp(-epsilon)
    denominator = 1.0 + (m - 1) * t
    return 1.0 / denominator, t / denominator


def probability_cells(m: int, keep_probability: float, bits: int = WORD_BITS) -> tuple[int, int]:
    """(other_span, L): words u < other_span = (m − 1)·L go to the other bins, slot u // L.

    The own bin gets the remaining T = 2^bits − other_span words. Exact integer
    arithmetic on the float ``keep_probability``; see the module docstring.
    """
    m = int(m)
    if m < 1:
        raise ValueError("m must be >= 1")
    p = float(keep_probability)
    if not (0.0 <= p <= 1.0):
        raise ValueError("keep_probability must lie in [0, 1]")
    if m == 1:
        return 0, 0
    if not (1 <= bits <= WORD_BITS):
        raise ValueError("bits must lie in [1, 64]")
    if m - 1 >= 2**bits:
        raise ValueError("too many bins for the word width")
    width = 1 << bits
    exact = (1 - Fraction(p)) * width / (m - 1)
    other_width = -((-exact.numerator) // exact.denominator)  # ceil
    # Only for p < 1/m (no ε >= 0 gives that) can the ceiling pass ⌊2^bits/(m−1)⌋: clamp
    # so the cells never claim more than all the words.
    other_width = min(other_width, width // (m - 1))
    return (m - 1) * other_width, other_width


def realized_probabilities(m: int, keep_probability: float, bits: int = WORD_BITS) -> tuple[Fraction, Fraction]:
    """The kernel's exact (Pr[own bin], Pr[each other bin]) as fractions."""
    span, other_width = probability_cells(m, keep_probability, bits)
    width = 1 << bits
    if m == 1:
        return Fraction(1), Fraction(0)
    return Fraction(width - span, width), Fraction(other_width, width)


# --------------------------------------------------------------------------- numba kernels

# Cut-point counts up to this use a branch-free linear count (SIMD-friendly);
# more use a fixed-step binary search over a padded copy.
_LINEAR_MAX = 128
# Labels searched together: the binary search advances a whole batch one level
# at a time, so the dependent loads of different labels overlap.
_BATCH = 256


@numba.njit(cache=True, inline="always")
def _respond(own, u, span, other_width):
    """Own bin if u >= span, else other slot j = u // L, skipping the own bin (branch-free)."""
    j = np.int64(u // other_width)
    j += np.int64(j >= own)
    keep = np.int64(u >= span)
    return keep * own + (1 - keep) * j


@numba.njit(cache=True, boundscheck=False)
def _rr_kernel(bins, m, words, span, other_width, out):
    """RR on given bin indices; returns the first invalid position or −1."""
    for i in range(bins.size):
        b = bins[i]
        if b < 0 or b >= m:
            return i
        out[i] = _respond(b, words[i], span, other_width)
    return -1


@numba.njit(cache=True, boundscheck=False)
def _bin_and_rr_kernel(labels, cuts, padded, top, words, span, other_width, table, out):
    """out = table[RR(Φ(y))] with Φ(y) = #{cut < y} (np.searchsorted side='left'); one word per label.

    ``table`` maps a bin index to what is written: arange(m) for indices, the
    bin values for a fused privatize (saves a gather pass over the output).

    ``padded`` is ``cuts`` followed by +inf up to length 2·top − 1, so the
    fixed-step search needs no bounds logic. Returns the first non-finite
    label's position or −1.
    """
    n = labels.size
    n_cuts = cuts.size
    if n_cuts <= _LINEAR_MAX:
        for i in range(n):
            y = labels[i]
            if not (y - y == 0.0):  # noqa: SIM201 -- NaN or ±inf
                return i
            below = np.int64(0)
            for c in range(n_cuts):
                below += np.int64(cuts[c] < y)
            out[i] = table[_respond(below, words[i], span, other_width)]
        return -1
    base = np.zeros(_BATCH, np.int64)
    for start in range(0, n, _BATCH):
        count = min(_BATCH, n - start)
        for t in range(count):
            y = labels[start + t]
            if not (y - y == 0.0):  # noqa: SIM201 -- NaN or ±inf
                return start + t
            base[t] = 0
        step = top
        while step > 0:
            for t in range(count):
                b = base[t]
                base[t] = b + step * np.int64(padded[b + step - 1] < labels[start + t])
            step >>= 1
        for t in range(count):
            out[start + t] = table[_respond(base[t], words[start + t], span, other_width)]
    return -1


# --------------------------------------------------------------------------- public API


def _cells(m: int, keep_probability: float) -> tuple[np.uint64, np.uint64]:
    span, other_width = probability_cells(m, keep_probability)
    return np.uint64(span), np.uint64(max(other_width, 1))


def _padded(cuts: np.ndarray) -> tuple[np.ndarray, int]:
    """``cuts`` padded with +inf to length 2^d − 1, and the first search step 2^(d−1)."""
    depth = max(int(cuts.size).bit_length(), 1)
    padded = np.full((1 << depth) - 1, np.inf)
    padded[: cuts.size] = cuts
    return padded, 1 << (depth - 1)


def randomized_response(
    bin_index: np.ndarray, m: int, keep_probability: float, rng: np.random.Generator
) -> np.ndarray:
    """ε-RR on bin indices in [0, m): own bin w.p. T/2^64 ≈ p, each other w.p. L/2^64 ≈ q.

    Exact cells (module docstring); one raw 64-bit word of ``rng`` per label, none if m = 1.
    """
    bins = np.ascontiguousarray(bin_index, dtype=np.int64)
    span, other_width = _cells(m, keep_probability)
    if m == 1:  # one bin: nothing to randomize, no randomness drawn
        if np.any(bins != 0):
            raise ValueError("bin_index must lie in [0, m)")
        return np.zeros(bins.shape, dtype=np.int64)
    flat = bins.ravel()
    out = np.empty(flat.size, dtype=np.int64)
    for start in range(0, flat.size, CHUNK):
        stop = min(start + CHUNK, flat.size)
        bad = _rr_kernel(flat[start:stop], int(m), raw_words(rng, stop - start), span, other_width, out[start:stop])
        if bad >= 0:
            raise ValueError("bin_index must lie in [0, m)")
    return out.reshape(bins.shape)


def _bin_and_respond(labels, cut_points, table: np.ndarray, keep_probability: float, rng) -> np.ndarray:
    m = table.size
    values = np.ascontiguousarray(labels, dtype=np.float64)
    cuts = np.ascontiguousarray(cut_points, dtype=np.float64)
    if cuts.ndim != 1 or cuts.size != m - 1:
        raise ValueError("cut_points must be a 1-D array of m − 1 values")
    if not np.all(np.isfinite(cuts)) or np.any(np.diff(cuts) < 0):
        raise ValueError("cut_points must be finite and ascending")
    span, other_width = _cells(m, keep_probability)
    if m == 1:  # one bin: nothing to randomize, no randomness drawn
        if not np.all(np.isfinite(values)):
            raise ValueError("labels must be finite")
        return np.full(values.shape, table[0])
    padded, top = _padded(cuts)
    flat = values.ravel()
    out = np.empty(flat.size, dtype=table.dtype)
    for start in range(0, flat.size, CHUNK):
        stop = min(start + CHUNK, flat.size)
        words = raw_words(rng, stop - start)
        bad = _bin_and_rr_kernel(flat[start:stop], cuts, padded, top, words, span, other_width, table, out[start:stop])
        if bad >= 0:
            raise ValueError("labels must be finite")
    return out.reshape(values.shape)


def privatize_bins(
    labels: np.ndarray, cut_points: np.ndarray, m: int, keep_probability: float, rng: np.random.Generator
) -> np.ndarray:
    """Fused Φ + RR: bin each label by ``cut_points`` and randomize, in one pass; int64 bin indices.

    ``cut_points`` are the m − 1 ascending bin boundaries; a label equal to a cut
    point goes to the lower bin, as np.searchsorted(cut_points, y, 'left').
    Labels must be finite. One raw 64-bit word of ``rng`` per label (none if m = 1).
    """
    m = int(m)
    if m < 1:
        raise ValueError("m must be >= 1")
    return _bin_and_respond(labels, cut_points, np.arange(m, dtype=np.int64), keep_probability, rng)


def privatize_values(
    labels: np.ndarray, cut_points: np.ndarray, outputs: np.ndarray, keep_probability: float, rng: np.random.Generator
) -> np.ndarray:
    """``outputs[privatize_bins(labels, cut_points, outputs.size, p, rng)]`` without the extra gather pass.

    Same random stream use and same distribution as :func:`privatize_bins`; float64.
    """
    table = np.ascontiguousarray(outputs, dtype=np.float64)
    if table.ndim != 1 or table.size == 0:
        raise ValueError("outputs must be a non-empty 1-D array")
    return _bin_and_respond(labels, cut_points, table, keep_probability, rng)


def randomized_response_reference(
    bin_index: np.ndarray, m: int, keep_probability: float, rng: np.random.Generator
) -> np.ndarray:
    """Plain numpy ε-RR: keep if rng.random() < p (exact to 2^−53), else a uniform other bin.

    rng.integers draws the other bin without modulo bias (numpy uses Lemire's
    method); shifting values >= own by one makes it uniform over the m − 1 others.
    """
    bins = np.asarray(bin_index, dtype=np.int64)
    if bins.size and (bins.min() < 0 or bins.max() >= m):
        raise ValueError("bin_index must lie in [0, m)")
    if m == 1:
        return bins.copy()
    keep = rng.random(bins.shape) < keep_probability
    other = rng.integers(0, m - 1, size=bins.shape, dtype=np.int64)
    other += other >= bins
    return np.where(keep, bins, other)
