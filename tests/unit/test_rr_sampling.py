"""Fast RR sampling: exact cells, no modulo bias, the caller's stream only, fused binning."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from labeldp.mechanisms.rr_sampling import (
    _bin_and_rr_kernel,
    _padded,
    _rr_kernel,
    privatize_bins,
    privatize_values,
    probability_cells,
    randomized_response,
    randomized_response_reference,
    realized_probabilities,
)


def rr_keep(epsilon: float, m: int) -> float:
    """p = e^ε / (e^ε + m − 1), as RROnBins computes it (via e^{−ε})."""
    return 1.0 / (1.0 + (m - 1) * math.exp(-epsilon))


# --------------------------------------------------------------------------- exact cells, 64-bit words


@pytest.mark.parametrize("m", [1, 2, 3, 5, 7, 12, 100, 1000])
@pytest.mark.parametrize("epsilon", [0.05, 1.0, 8.0, 30.0])
def test_64_bit_cells_are_exact_and_never_loosen_the_ratio(m: int, epsilon: float) -> None:
    p = rr_keep(epsilon, m)
    own, other = realized_probabilities(m, p)
    if m == 1:
        assert (own, other) == (1, 0)
        return
    fp = Fraction(p)
    fq = (1 - fp) / (m - 1)
    assert own + (m - 1) * other == 1
    assert fp - Fraction(m - 1, 2**64) < own <= fp  # exact to (m − 1)·2^−64, never above p
    assert fq <= other < fq + Fraction(1, 2**64)
    assert own * fq <= other * fp  # realized ratio own/other <= p/q


def test_cells_edge_probabilities() -> None:
    assert probability_cells(2, 1.0) == (0, 0)  # p = 1: every word keeps
    span, width = probability_cells(4, 0.25, bits=8)  # p = 1/m: uniform over 4 bins
    assert (span, width) == (192, 64)
    for bad in [(0, 0.5), (3, -0.1), (3, 1.5)]:
        with pytest.raises(ValueError):
            probability_cells(*bad)


# --------------------------------------------------------------------------- exact cells by enumeration

BITS = 12  # narrow words: every one of the 2^12 words is pushed through the kernel


def kernel_respond(own: int, words: np.ndarray, m: int, p: float) -> np.ndarray:
    span, width = probability_cells(m, p, BITS)
    out = np.empty(words.size, dtype=np.int64)
    bins = np.full(words.size, own, dtype=np.int64)
    assert _rr_kernel(bins, m, words, np.uint64(span), np.uint64(max(width, 1)), out) == -1
    return out


def fused_respond(own: int, words: np.ndarray, m: int, p: float) -> np.ndarray:
    span, width = probability_cells(m, p, BITS)
    cuts = np.arange(m - 1, dtype=np.float64) + 0.5  # bin b holds the label b
    padded, top = _padded(cuts)
    labels = np.full(words.size, float(own))
    table = np.arange(m, dtype=np.int64)
    out = np.empty(words.size, dtype=np.int64)
    assert (
        _bin_and_rr_kernel(labels, cuts, padded, top, words, np.uint64(span), np.uint64(max(width, 1)), table, out)
        == -1
    )
    return out


def biased_respond(own: int, words: np.ndarray, m: int, p: float) -> np.ndarray:
    """PLANTED: keep below round(p·2^b), else (u − T) mod (m − 1) — the textbook modulo bias."""
    threshold = round(p * 2**BITS)
    j = (words.astype(np.int64) - threshold) % (m - 1)
    j += j >= own
    return np.where(words < threshold, own, j)


def assert_exact_cells(respond, m: int, p: float) -> None:
    """Every word once: the own bin gets exactly T words, each other bin exactly L."""
    span, width = probability_cells(m, p, BITS)
    words = np.arange(2**BITS, dtype=np.uint64)
    for own in range(m):
        counts = np.bincount(respond(own, words, m, p), minlength=m)
        expected = np.full(m, width)
        expected[own] = 2**BITS - span
        np.testing.assert_array_equal(counts, expected, err_msg=f"m={m} p={p} own={own}")


@pytest.mark.parametrize("respond", [kernel_respond, fused_respond])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 6, 7, 12])  # m − 1 = 2, 3, 5, 6, 11: not powers of two
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.0])
def test_every_word_lands_in_an_exact_cell(respond, m: int, epsilon: float) -> None:
    assert_exact_cells(respond, m, rr_keep(epsilon, m))


@pytest.mark.parametrize("m", [4, 6, 7, 12])
def test_planted_modulo_bias_is_caught(m: int) -> None:
    """The enumeration test has power: the (u − T) mod (m − 1) variant fails it."""
    with pytest.raises(AssertionError):
        assert_exact_cells(biased_respond, m, rr_keep(1.0, m))


# --------------------------------------------------------------------------- the real 64-bit stream


def cell_frequencies(sample: np.ndarray, own: np.ndarray, m: int) -> np.ndarray:
    return np.bincount(own * m + sample, minlength=m * m).reshape(m, m)


def assert_matches_law(sample: np.ndarray, own: np.ndarray, m: int, p: float) -> None:
    """Chi-square per own bin against (p, q, ..., q), and 5σ binomial bounds per cell."""
    q = (1 - p) / (m - 1)
    counts = cell_frequencies(sample, own, m)
    for b in range(m):
        n_b = counts[b].sum()
        expected = np.full(m, q)
        expected[b] = p
        assert stats.chisquare(counts[b], n_b * expected).pvalue > 1e-4, (b, counts[b] / n_b, expected)
        sigma = np.sqrt(n_b * expected * (1 - expected))
        assert np.all(np.abs(counts[b] - n_b * expected) <= 5 * sigma + 1)


CASES = [(2, 0.5), (2, 4.0), (3, 1.0), (6, 0.3), (12, 2.0), (40, 3.0)]


@pytest.mark.parametrize("m, epsilon", CASES)
def test_kernel_and_reference_follow_the_law(m: int, epsilon: float) -> None:
    p = rr_keep(epsilon, m)
    own = np.random.default_rng(100 + m).integers(0, m, size=400_000)
    fast = randomized_response(own, m, p, np.random.default_rng(1))
    ref = randomized_response_reference(own, m, p, np.random.default_rng(2))
    assert fast.dtype == ref.dtype == np.int64
    assert_matches_law(fast, own, m, p)
    assert_matches_law(ref, own, m, p)
    # Two-sample: kernel and reference agree cell by cell.
    table = np.stack([cell_frequencies(fast, own, m).ravel(), cell_frequencies(ref, own, m).ravel()])
    table = table[:, table.sum(axis=0) > 0]
    assert stats.chi2_contingency(table).pvalue > 1e-4


def test_law_check_has_power() -> None:
    """A kernel run at a 5% larger keep probability fails the same check."""
    m, p = 6, rr_keep(0.3, 6)
    own = np.random.default_rng(7).integers(0, m, size=400_000)
    planted = randomized_response(own, m, min(1.0, p * 1.05), np.random.default_rng(1))
    with pytest.raises(AssertionError):
        assert_matches_law(planted, own, m, p)


def words_to_bins(own: np.ndarray, words: np.ndarray, m: int, p: float) -> np.ndarray:
    """The kernel's map, one word per label, in plain Python integers."""
    span, width = probability_cells(m, p)
    out = []
    for b, u in zip(own.tolist(), words.tolist()):
        if u >= span:
            out.append(b)
        else:
            j = u // width
            out.append(j + (j >= b))
    return np.asarray(out, dtype=np.int64)


@pytest.mark.parametrize("m", [2, 5, 300])
def test_randomness_is_exactly_the_callers_stream(m: int) -> None:
    """One raw word of the passed generator per label, nothing else (no numba global state)."""
    p = rr_keep(1.5, m)
    rng = np.random.default_rng(2024)
    labels = rng.uniform(-1, m + 1, size=100_003)  # crosses chunk boundaries
    cuts = np.arange(m - 1, dtype=np.float64) + 0.5
    own = np.searchsorted(cuts, labels, side="left")

    mine, twin = np.random.default_rng(99), np.random.default_rng(99)
    out = privatize_bins(labels, cuts, m, p, mine)
    words = twin.bit_generator.random_raw(labels.size)
    np.testing.assert_array_equal(out, words_to_bins(own, words, m, p))
    assert mine.bit_generator.state == twin.bit_generator.state

    mine, twin = np.random.default_rng(5), np.random.default_rng(5)
    out = randomized_response(own, m, p, mine)
    np.testing.assert_array_equal(out, words_to_bins(own, twin.bit_generator.random_raw(own.size), m, p))
    assert mine.bit_generator.state == twin.bit_generator.state


# --------------------------------------------------------------------------- fused binning


@pytest.mark.parametrize("n_cuts", [1, 2, 7, 128, 129, 1000])  # linear count and binary search paths
def test_fused_binning_equals_searchsorted(n_cuts: int) -> None:
    rng = np.random.default_rng(n_cuts)
    cuts = np.sort(np.round(rng.normal(0, 3, size=n_cuts), 1))  # rounding makes duplicates
    labels = np.concatenate(
        [
            rng.normal(0, 4, size=20_000),
            cuts,  # exactly on a cut point: the lower bin
            np.nextafter(cuts, np.inf),
            np.nextafter(cuts, -np.inf),
            [0.0, -0.0, -1e308, 1e308, 5e-324],
        ]
    )
    m = n_cuts + 1
    expected = np.searchsorted(cuts, labels, side="left")
    got = privatize_bins(labels, cuts, m, 1.0, np.random.default_rng(0))  # p = 1: output = Φ(y)
    np.testing.assert_array_equal(got, expected)
    outputs = np.linspace(-5, 5, m)
    np.testing.assert_array_equal(
        privatize_values(labels, cuts, outputs, 1.0, np.random.default_rng(0)), outputs[expected]
    )


def test_privatize_values_is_the_gather_of_privatize_bins() -> None:
    labels = np.random.default_rng(3).uniform(0, 10, size=(70_000, 2))
    cuts = np.array([1.0, 2.5, 7.0])
    outputs = np.array([0.5, 1.7, 4.0, 9.0])
    idx = privatize_bins(labels, cuts, 4, 0.6, np.random.default_rng(11))
    vals = privatize_values(labels, cuts, outputs, 0.6, np.random.default_rng(11))
    assert idx.shape == vals.shape == labels.shape and vals.dtype == np.float64
    np.testing.assert_array_equal(vals, outputs[idx])


def test_single_bin_draws_nothing() -> None:
    rng = np.random.default_rng(1)
    state = rng.bit_generator.state
    assert privatize_bins(np.array([1.0, -3.0]), np.array([]), 1, 1.0, rng).tolist() == [0, 0]
    assert privatize_values(np.array([1.0]), np.array([]), np.array([2.5]), 1.0, rng).tolist() == [2.5]
    assert randomized_response(np.zeros(5, dtype=np.int64), 1, 1.0, rng).tolist() == [0] * 5
    assert rng.bit_generator.state == state


def test_rejects_bad_inputs() -> None:
    rng = np.random.default_rng(0)
    cuts = np.array([0.0, 1.0])
    for bad in [np.nan, np.inf, -np.inf]:
        with pytest.raises(ValueError):
            privatize_bins(np.array([0.5, bad]), cuts, 3, 0.5, rng)
        with pytest.raises(ValueError):
            privatize_bins(np.array([bad]), np.array([]), 1, 1.0, rng)
    with pytest.raises(ValueError):
        privatize_bins(np.zeros(3), cuts, 4, 0.5, rng)  # m − 1 cut points required
    with pytest.raises(ValueError):
        privatize_bins(np.zeros(3), np.array([1.0, 0.0]), 3, 0.5, rng)
    for bins in [np.array([0, 3]), np.array([-1, 0])]:
        with pytest.raises(ValueError):
            randomized_response(bins, 3, 0.5, rng)
        with pytest.raises(ValueError):
            randomized_response_reference(bins, 3, 0.5, rng)
