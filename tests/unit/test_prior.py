"""Label domain, public grid, snapping, discrete Laplace noise and the ε₁ histogram prior."""

from __future__ import annotations

import math

import numpy as np
import pytest

from labeldp.mechanisms import (
    LabelDomain,
    LaplaceHistogramPrior,
    default_grid,
    optimal_bins,
    sample_two_sided_geometric,
    snap_to_grid,
)
from labeldp.mechanisms.prior import (
    consistent_probs,
    expected_bins,
    integer_grid,
    log_grid,
    real_grid_size,
    uniform_grid,
)
from labeldp.schema import NoisyPrior
from labeldp.specs.base import LabelDomainSpec


def clipped_count_pmf(count: int, alpha: float, values: np.ndarray) -> np.ndarray:
    """Exact pmf of max(count + Z, 0) with P(Z = z) ∝ α^|z|, at ``values`` >= 0."""
    c = (1 - alpha) / (1 + alpha)
    pmf = c * alpha ** np.abs(values - count)
    # Pr[count + Z <= 0] = Σ_{z <= −count} c α^|z| = α^count / (1 + α)
    return np.where(values == 0, alpha**count / (1 + alpha), pmf)


# --------------------------------------------------------------------------- domain and grid


def test_label_domain_validates_and_round_trips() -> None:
    d = LabelDomain("integer", 0, 10)
    assert d.to_spec() == LabelDomainSpec(kind="integer", low=0.0, high=10.0)
    assert LabelDomain.from_spec(d.to_spec()) == d
    for bad in [("real", 1.0, 1.0), ("real", 2.0, 1.0), ("real", 0.0, math.inf), ("integer", 0.5, 3.0), ("x", 0, 1)]:
        with pytest.raises(ValueError):
            LabelDomain(*bad)  # type: ignore[arg-type]


def test_default_grid_rules() -> None:
    # Integer domains: the real rule's k, on integers; every integer when there are at most k.
    small = default_grid(LabelDomain("integer", -3, 7), 10**6)
    np.testing.assert_array_equal(small, np.arange(-3.0, 8.0))
    edge = default_grid(LabelDomain("integer", 0, 15), 5)  # 16 integers, k = 16
    np.testing.assert_array_equal(edge, np.arange(16.0))
    for n, k in [(5, 16), (1000, 40), (10**9, 256)]:
        big = default_grid(LabelDomain("integer", 0, 2048), n)
        assert big.size == k and big[0] == 0 and big[-1] == 2048
        np.testing.assert_array_equal(big, np.round(big))  # integers
        assert np.all(np.diff(big) >= 1)

    real = LabelDomain("real", -1.0, 3.0)
    for n, k in [(0, 16), (1, 16), (1000, 40), (125_000, 200), (10**9, 256)]:
        g = default_grid(real, n)
        assert g.size == k and g[0] == -1.0 and g[-1] == 3.0
        np.testing.assert_allclose(np.diff(g), 4.0 / (k - 1))
    # Only the public count matters: the same n gives the same grid.
    np.testing.assert_array_equal(default_grid(real, 777), default_grid(real, 777))


def test_grid_resolution_follows_n_and_epsilon() -> None:
    """k = clip(round(4·m̂(ε)), 16, cap(n)) with cap(n) = clip(round(4·n^(1/3)), 16, 256)."""
    assert [real_grid_size(n) for n in (0, 1000, 125_000, 10**9)] == [16, 40, 200, 256]
    cases = [(1000, 0.05, 16), (1000, 4.0, 16), (1000, 8.0, 40), (10**5, 6.0, 30), (10**5, 8.0, 58),
             (10**5, 12.0, 186), (10**9, 20.0, 256), (0, 8.0, 16)]
    for n, eps, k in cases:
        assert real_grid_size(n, eps) == k, (n, eps)
    real = LabelDomain("real", 0.0, 5.0)
    for n, eps, k in cases:
        grid = default_grid(real, n, eps)
        np.testing.assert_array_equal(grid, np.linspace(0.0, 5.0, k))
    # Without ε the n-only rule is unchanged. Integer domains take the same k, on integers: 2 000
    # counts in [0, 30] get 16 of the 31 integers up to ε = 4 and all 31 at ε = 8 (k = 50).
    np.testing.assert_array_equal(default_grid(real, 1000), np.linspace(0.0, 5.0, 40))
    np.testing.assert_array_equal(default_grid(LabelDomain("integer", 0, 9), 10, 8.0), np.arange(10.0))
    counts = LabelDomain("integer", 0, 30)
    for eps in (0.05, 1.0, 4.0):
        np.testing.assert_array_equal(default_grid(counts, 2000, eps), np.round(np.linspace(0.0, 30.0, 16)))
    np.testing.assert_array_equal(default_grid(counts, 2000, 8.0), np.arange(31.0))
    with pytest.raises(ValueError):
        integer_grid(counts, 1)
    with pytest.raises(ValueError):
        real_grid_size(-1, 1.0)
    with pytest.raises(ValueError):
        real_grid_size(10, 0.0)
    with pytest.raises(ValueError):
        default_grid(real, 10, 1.0, kind="quantile")  # type: ignore[arg-type]


@pytest.mark.parametrize("eps", [0.5, 2.0, 4.0, 6.0, 8.0, 10.0])
def test_expected_bins_matches_the_dp_on_a_uniform_prior(eps: float) -> None:
    """m̂(ε) = max(2, e^{ε/3}) is within 10% of the optimal bin count for a uniform prior."""
    grid = np.linspace(0.0, 1.0, 512)
    _, outputs, _ = optimal_bins(grid, np.ones(grid.size), eps)
    assert abs(math.log(outputs.size / expected_bins(eps))) < 0.1, (outputs.size, expected_bins(eps))


def test_uniform_and_log_grids() -> None:
    domain = LabelDomain("real", 0.0, 31.63)
    np.testing.assert_array_equal(uniform_grid(domain, 5), np.linspace(0.0, 31.63, 5))
    for k in (2, 16, 1024):
        g = log_grid(domain, k)
        assert g.size == k and g[0] == 0.0 and g[-1] == 31.63
        steps = np.diff(g)
        assert np.all(steps > 0) and np.all(np.diff(steps) > -1e-12)  # spacing grows
        if k > 2:
            assert steps[-1] / steps[0] == pytest.approx(101.0 ** ((k - 2) / (k - 1)))  # → 1 + ratio
    np.testing.assert_array_equal(default_grid(domain, 10**5, 8.0, kind="log"), log_grid(domain, 58))
    shifted = log_grid(LabelDomain("real", -2.0, 3.0), 9, ratio=10.0)
    assert shifted[0] == -2.0 and shifted[-1] == 3.0 and np.all(np.diff(shifted) > 0)
    for bad in [lambda: uniform_grid(domain, 1), lambda: log_grid(domain, 1), lambda: log_grid(domain, 8, ratio=0.0)]:
        with pytest.raises(ValueError):
            bad()


def test_snap_to_grid_picks_the_nearest_point() -> None:
    rng = np.random.default_rng(0)
    grid = np.sort(rng.uniform(-5, 5, 37))
    labels = rng.uniform(-8, 8, 5000)
    idx = snap_to_grid(labels, grid)
    assert idx.dtype == np.int64
    brute = np.abs(grid[None, :] - labels[:, None])
    np.testing.assert_array_equal(brute[np.arange(labels.size), idx], brute.min(axis=1))
    assert snap_to_grid(np.array([-100.0, 100.0]), grid).tolist() == [0, 36]
    assert snap_to_grid(np.array([0.5, 1.5, 2.0]), np.array([0.0, 1.0, 2.0])).tolist() == [0, 1, 2]
    assert snap_to_grid(np.array([4.0, -4.0]), np.array([1.0])).tolist() == [0, 0]


# --------------------------------------------------------------------------- noise


@pytest.mark.parametrize("alpha", [0.3, 0.8])
def test_two_sided_geometric_pmf(alpha: float) -> None:
    n = 400_000
    draws = sample_two_sided_geometric(alpha, n, np.random.default_rng(12345))
    assert draws.dtype == np.int64 and draws.shape == (n,)
    ks = np.arange(-12, 13)
    expected = (1 - alpha) / (1 + alpha) * alpha ** np.abs(ks)
    freq = np.array([np.count_nonzero(draws == k) for k in ks]) / n
    bound = 5 * np.sqrt(expected * (1 - expected) / n) + 1 / n
    assert np.all(np.abs(freq - expected) <= bound)
    assert abs(draws.mean()) <= 5 * math.sqrt(2 * alpha / (1 - alpha) ** 2 / n)


def test_two_sided_geometric_edges() -> None:
    assert np.all(sample_two_sided_geometric(0.0, 100, np.random.default_rng(0)) == 0)
    for bad in [-0.1, 1.0, 1.5]:
        with pytest.raises(ValueError):
            sample_two_sided_geometric(bad, 3, np.random.default_rng(0))


# --------------------------------------------------------------------------- the histogram prior


def test_counts_never_negative_and_probs_sum_to_one() -> None:
    rng = np.random.default_rng(1)
    grid = np.linspace(0, 1, 64)
    for seed in range(20):
        labels = rng.beta(2, 5, size=30)  # few labels, much noise: clipping is exercised
        prior = LaplaceHistogramPrior(0.3, grid).fit(labels, np.random.default_rng(seed))
        assert prior.noisy_counts_.dtype == np.int64 and np.all(prior.noisy_counts_ >= 0)
        assert prior.probs_.dtype == np.float64 and np.all(prior.probs_ >= 0)
        assert prior.probs_.sum() == pytest.approx(1.0, abs=1e-12)
        np.testing.assert_allclose(prior.probs_, consistent_probs(prior.noisy_counts_, labels.size))


def test_consistent_probs_is_the_projection_that_keeps_the_public_total() -> None:
    """Norm-Sub: max(c − δ, 0) with Σ = n, against a bisection on δ; and the bias it removes."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        counts = np.maximum(rng.integers(-20, 60, size=rng.integers(1, 40)), 0)
        total = int(rng.integers(1, 400))
        if not np.any(counts > 0):
            np.testing.assert_array_equal(consistent_probs(counts, total), np.full(counts.size, 1 / counts.size))
            continue
        low, high = -float(total), float(counts.max())  # Σ max(c − δ, 0) falls from ≥ total to 0 on [low, high]
        for _ in range(200):
            mid = (low + high) / 2
            low, high = (mid, high) if np.maximum(counts - mid, 0).sum() > total else (low, mid)
        kept = np.maximum(counts - low, 0)
        np.testing.assert_allclose(consistent_probs(counts, total), kept / kept.sum(), atol=1e-9)
    np.testing.assert_allclose(consistent_probs(np.array([10, 0, 5, 0, 2]), 12), np.array([25, 0, 10, 0, 1]) / 36)
    # 2 000 small counts on 0..30 at ε₁ = 0.045 (issue 12's small count set): clipping alone lets the
    # noise on the empty upper grid move the prior's mean far up; Norm-Sub removes most of that
    grid = np.arange(31.0)
    labels = np.minimum(rng.poisson(1.9, size=2_000), 30).astype(float)
    clipped, projected = [], []
    for seed in range(40):
        prior = LaplaceHistogramPrior(0.045, grid).fit(labels, np.random.default_rng(seed))
        clipped.append(abs(grid @ (prior.noisy_counts_ / prior.noisy_counts_.sum()) - labels.mean()))
        projected.append(abs(grid @ prior.probs_ - labels.mean()))
    assert np.mean(projected) < 0.6 * np.mean(clipped)


class _NegativeNoise:
    """A generator stub whose raw words make every exact discrete Laplace draw at ε = 1 equal −6:
    U = 0 (accepted at once), three Bernoulli(e^{-1}) successes and a failure, sign −."""

    class bit_generator:  # the attribute numpy's Generator has
        PATTERN = np.array([0, 0] + [0, 1 << 62] * 3 + [1 << 63, 1 << 63], dtype=np.uint64)

        @classmethod
        def random_raw(cls, size: int) -> np.ndarray:
            return np.resize(cls.PATTERN, size)


def test_all_zero_counts_give_uniform() -> None:
    grid = np.arange(10.0)
    prior = LaplaceHistogramPrior(1.0, grid).fit(np.array([2.0, 3.0, 3.0]), _NegativeNoise())
    assert prior.noisy_counts_.tolist() == [0] * 10
    np.testing.assert_array_equal(prior.probs_, np.full(10, 0.1))
    empty = LaplaceHistogramPrior(80.0, grid).fit(np.array([]), np.random.default_rng(0))
    np.testing.assert_array_equal(empty.probs_, np.full(10, 0.1))


def test_prior_keeps_no_raw_counts_or_labels() -> None:
    grid = np.arange(16.0)
    labels = np.repeat(grid, np.arange(16) * 3)  # true histogram 0, 3, 6, ..., 45
    true_counts = np.bincount(snap_to_grid(labels, grid), minlength=16)
    prior = LaplaceHistogramPrior(0.2, grid).fit(labels, np.random.default_rng(4))
    assert set(vars(prior)) <= {"epsilon", "grid", "alpha_", "noisy_counts_", "probs_"}
    for value in vars(prior).values():
        if isinstance(value, np.ndarray) and value is not prior.grid:
            assert value.shape == (16,)
            assert not np.array_equal(value, true_counts)
            assert not np.allclose(value, true_counts / true_counts.sum())
    assert not np.array_equal(prior.noisy_counts_, true_counts)


def test_noisy_counts_follow_the_stated_distribution() -> None:
    """End to end: each noisy count is max(h + Z, 0) with the α the prior reports."""
    eps, h, cells = 1.0, 3, 40_000
    grid = np.arange(float(cells))
    prior = LaplaceHistogramPrior(eps, grid).fit(np.repeat(grid, h), np.random.default_rng(12345))
    assert prior.alpha_ == pytest.approx(math.exp(-eps / 2), rel=1e-15)
    values = np.arange(0, 15)
    expected = clipped_count_pmf(h, prior.alpha_, values)
    freq = np.array([np.count_nonzero(prior.noisy_counts_ == v) for v in values]) / cells
    bound = 5 * np.sqrt(expected * (1 - expected) / cells) + 1 / cells
    assert np.all(np.abs(freq - expected) <= bound), (freq, expected)


@pytest.mark.parametrize("eps", [0.1, 1.0, 4.0])
def test_replacing_one_label_changes_probabilities_by_at_most_e_eps(eps: float) -> None:
    """One label moves from cell a to cell b: (h_a, h_b) → (h_a − 1, h_b + 1).

    Each cell's pmf changes by at most α⁻¹ = e^{ε/2}; the two together by e^ε, and
    the other cells not at all (the release is a product over cells).
    """
    prior = LaplaceHistogramPrior(eps, np.arange(4.0)).fit(np.array([0.0, 1.0]), np.random.default_rng(0))
    alpha = prior.alpha_
    values = np.arange(0, 80)
    worst = 0.0
    for h_a in [1, 2, 7]:
        for h_b in [0, 3]:
            before = np.outer(clipped_count_pmf(h_a, alpha, values), clipped_count_pmf(h_b, alpha, values))
            after = np.outer(clipped_count_pmf(h_a - 1, alpha, values), clipped_count_pmf(h_b + 1, alpha, values))
            ratio = np.maximum(before / after, after / before)
            worst = max(worst, float(ratio.max()))
    assert worst <= math.exp(eps) * (1 + 1e-12)
    assert worst == pytest.approx(math.exp(eps), rel=1e-9)  # calibrated to ε, not looser
    g = prior.guarantee
    assert g.epsilon == eps and g.sensitivity == 2.0 and g.adjacency == "replace-one-label"


def test_prior_spec() -> None:
    grid = np.linspace(0, 1, 16)
    prior = LaplaceHistogramPrior(0.5, grid).fit(np.random.default_rng(0).random(500), np.random.default_rng(1))
    spec = prior.to_spec()
    assert isinstance(spec, NoisyPrior)
    assert spec.source == "laplace_histogram" and spec.epsilon == 0.5
    assert spec.grid == grid.tolist() and spec.probs == prior.probs_.tolist()


def test_prior_rejects_bad_parameters() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError):
        LaplaceHistogramPrior(0.0, np.arange(3.0)).fit(np.zeros(2), rng)
    with pytest.raises(ValueError):
        LaplaceHistogramPrior(1.0, np.array([0.0, 0.0, 1.0])).fit(np.zeros(2), rng)
    with pytest.raises(ValueError):
        LaplaceHistogramPrior(1.0, np.arange(3.0)).fit(np.array([np.nan]), rng)
