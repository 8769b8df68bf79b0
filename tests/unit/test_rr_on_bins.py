"""RR-on-Bins: optimality of the DP, exactness of the stated distribution, DP ratio, debiasing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from labeldp.mechanisms import RROnBins, optimal_bins, optimal_bins_reference
from labeldp.schema import RROnBinsSpec

EPSILONS = [0.05, 0.1, 0.5, 1.0, 2.0, 4.0, 8.0]
EPS_FIT = 4.0  # the fitted fixture's ε: large enough for several bins


# --------------------------------------------------------------------------- independent brute force


def rr_loss(grid: np.ndarray, probs: np.ndarray, epsilon: float, bins: np.ndarray, outputs: np.ndarray) -> float:
    """E[(ŷ − y)²] of ε-RR over ``outputs`` with Φ(grid[g]) = outputs[bins[g]], summed term by term."""
    m = outputs.size
    keep = math.exp(epsilon) / (math.exp(epsilon) + m - 1)
    other = 1.0 / (math.exp(epsilon) + m - 1)
    total = 0.0
    for y, py, b in zip(grid, probs, bins):
        for j, o in enumerate(outputs):
            total += py * (keep if j == b else other) * (o - y) ** 2
    return total


def brute_force(grid: np.ndarray, probs: np.ndarray, epsilon: float) -> float:
    """Min over all 2^(k−1) interval partitions of the exact loss with per-bin optimal outputs.

    For a fixed partition the loss is Σ_y p_y Σ_j π_j(y) (o_j − y)² with π_j(y) = keep if
    y is in bin j else other; it separates over j, and ∂/∂o_j = 0 gives
    o_j = Σ_y p_y π_j(y) y / Σ_y p_y π_j(y).
    """
    k = grid.size
    probs = probs / probs.sum()
    best = math.inf
    for mask in range(2 ** (k - 1)):
        bins = np.zeros(k, dtype=np.int64)
        for g in range(1, k):
            bins[g] = bins[g - 1] + ((mask >> (g - 1)) & 1)
        m = int(bins[-1]) + 1
        keep = math.exp(epsilon) / (math.exp(epsilon) + m - 1)
        other = 1.0 / (math.exp(epsilon) + m - 1)
        pi = np.where(bins[None, :] == np.arange(m)[:, None], keep, other)  # pi[j, y]
        outputs = (pi @ (probs * grid)) / (pi @ probs)
        loss = float(np.sum(probs[None, :] * pi * (outputs[:, None] - grid[None, :]) ** 2))
        best = min(best, loss)
    return best


def random_prior(rng: np.random.Generator, k: int, offset: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    grid = np.sort(rng.uniform(-5.0, 5.0, size=k)) + offset
    while np.any(np.diff(grid) <= 0):
        grid = np.sort(rng.uniform(-5.0, 5.0, size=k)) + offset
    probs = rng.dirichlet(np.full(k, 0.7))
    if k > 1:
        zero = rng.random(k) < 0.3
        zero[rng.integers(k)] = False
        probs[zero] = 0.0
    return grid, probs / probs.sum()


@pytest.mark.parametrize("k", range(1, 11))
def test_optimal_bins_matches_brute_force_over_all_partitions(k: int) -> None:
    rng = np.random.default_rng(1000 + k)
    for trial in range(3):
        grid, probs = random_prior(rng, k, offset=0.0 if trial < 2 else 1000.0)
        for eps in EPSILONS:
            bins, outputs, loss = optimal_bins(grid, probs, eps)
            expected = brute_force(grid, probs, eps)
            tol = 1e-9 * expected + 1e-12 * (1.0 + np.ptp(grid) ** 2)
            assert abs(loss - expected) <= tol, (k, trial, eps, loss, expected)
            # The returned partition and outputs really achieve that loss.
            assert bins.shape == (k,) and bins.dtype == np.int64
            assert set(bins.tolist()) == set(range(outputs.size))
            assert np.all(np.diff(outputs) >= 0)
            assert abs(rr_loss(grid, probs, eps, bins, outputs) - expected) <= tol


def test_optimal_bins_handles_single_point_and_point_mass() -> None:
    bins, outputs, loss = optimal_bins(np.array([3.5]), np.array([1.0]), 1.0)
    assert bins.tolist() == [0] and outputs.tolist() == [3.5] and loss == 0.0

    grid = np.arange(50.0)
    probs = np.zeros(50)
    probs[17] = 1.0
    bins, outputs, loss = optimal_bins(grid, probs, 2.0)
    assert outputs.tolist() == [17.0] and loss == 0.0
    assert np.all(bins == 0)  # zero-mass points are still assigned


@pytest.mark.parametrize("k", [2, 5, 17, 64, 120, 200])
def test_numba_kernel_matches_numpy_reference(k: int) -> None:
    rng = np.random.default_rng(k)
    for eps in [0.1, 1.0, 3.0, 8.0, 30.0]:
        grid, probs = random_prior(rng, k)
        got = optimal_bins(grid, probs, eps)
        ref = optimal_bins_reference(grid, probs, eps)
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-12, atol=1e-12)
        assert got[2] == pytest.approx(ref[2], rel=1e-12, abs=1e-15)


def test_large_epsilon_does_not_overflow() -> None:
    grid = np.linspace(0.0, 1.0, 40)
    probs = np.random.default_rng(3).dirichlet(np.ones(40))
    mech = RROnBins(1000.0).fit(grid, probs)
    assert math.isfinite(mech.expected_loss_) and mech.expected_loss_ < 1e-12
    assert mech.keep_probability_ == 1.0
    assert np.all(np.isfinite(mech.outputs_))


# --------------------------------------------------------------------------- the fitted mechanism


@pytest.fixture(scope="module")
def fitted() -> tuple[RROnBins, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    grid = np.linspace(-2.0, 6.0, 30)
    probs = rng.dirichlet(np.full(30, 0.8))
    probs[[3, 11, 12]] = 0.0
    probs /= probs.sum()
    return RROnBins(EPS_FIT).fit(grid, probs), grid, probs


def test_fit_attributes_are_consistent(fitted) -> None:
    mech, grid, probs = fitted
    m = mech.outputs_.size
    assert m >= 3
    assert np.all(np.diff(mech.outputs_) > 0)
    np.testing.assert_allclose(mech.cut_points_, (mech.outputs_[:-1] + mech.outputs_[1:]) / 2)
    e = math.exp(EPS_FIT)
    assert mech.keep_probability_ == pytest.approx(e / (e + m - 1), rel=1e-14)
    q = 1.0 / (e + m - 1)
    assert mech.debias_a_ == pytest.approx(e / (e + m - 1) - q, rel=1e-14)
    assert mech.debias_b_ == pytest.approx(q * mech.outputs_.sum(), rel=1e-14)
    assert np.array_equal(mech.grid_, grid)
    assert mech.bin_of_grid_.shape == grid.shape and np.all(np.diff(mech.bin_of_grid_) >= 0)


def test_expected_loss_is_exact_and_optimal(fitted) -> None:
    mech, grid, probs = fitted
    brute = sum(
        py * float(np.dot(mech.output_probabilities(y), (mech.outputs_ - y) ** 2)) for y, py in zip(grid, probs)
    )
    assert mech.expected_loss_ == pytest.approx(brute, rel=1e-12)
    assert mech.expected_loss(grid, probs) == pytest.approx(brute, rel=1e-12)
    _, _, dp_loss = optimal_bins(grid, probs, EPS_FIT)
    assert mech.expected_loss_ == pytest.approx(dp_loss, rel=1e-9)


def test_empirical_output_frequencies_match(fitted) -> None:
    mech, grid, _ = fitted
    rng = np.random.default_rng(12345)
    n = 200_000
    for label in [grid[0], 1.37, grid[-1]]:
        draws = mech.privatize(np.full(n, label), rng)
        counts = np.array([np.count_nonzero(draws == o) for o in mech.outputs_])
        assert counts.sum() == n
        expected = mech.output_probabilities(label)
        bound = 5.0 * np.sqrt(expected * (1 - expected) / n) + 1.0 / n
        assert np.all(np.abs(counts / n - expected) <= bound), (label, counts / n, expected)


def test_probability_ratio_is_at_most_e_epsilon(fitted) -> None:
    mech, grid, _ = fitted
    labels = np.concatenate([grid, np.random.default_rng(1).uniform(-5, 9, 200)])
    table = np.array([mech.output_probabilities(y) for y in labels])  # labels × outputs
    np.testing.assert_allclose(table.sum(axis=1), 1.0, rtol=1e-14)
    ratio = table.max(axis=0) / table.min(axis=0)
    assert np.all(ratio <= math.exp(EPS_FIT) * (1 + 1e-12))
    assert ratio.max() == pytest.approx(math.exp(EPS_FIT), rel=1e-12)  # the budget is used, not wasted
    assert mech.guarantee.epsilon == EPS_FIT and mech.guarantee.adjacency == "replace-one-label"


def test_off_grid_labels_bin_to_nearest_output_and_outputs_are_exact(fitted) -> None:
    mech, _, _ = fitted
    rng = np.random.default_rng(2)
    labels = rng.uniform(-10.0, 15.0, 20_000)
    idx = mech.bin_index(labels)
    distance = np.abs(mech.outputs_[idx] - labels)
    nearest = np.min(np.abs(mech.outputs_[None, :] - labels[:, None]), axis=1)
    np.testing.assert_allclose(distance, nearest, rtol=0, atol=1e-12)
    out = mech.privatize(labels, rng)
    assert out.shape == labels.shape
    assert np.all(np.isin(out, mech.outputs_))


def test_privatize_is_unbiased_after_debiasing(fitted) -> None:
    mech, _, _ = fitted
    rng = np.random.default_rng(12345)
    n = 200_000
    for label in [-2.0, 0.4, 3.3, 6.0]:
        phi = mech.outputs_[mech.bin_index(np.array([label]))[0]]
        probs = mech.output_probabilities(label)
        mean = float(np.dot(probs, mech.outputs_))
        sd = math.sqrt(float(np.dot(probs, (mech.outputs_ - mean) ** 2)))
        assert mean == pytest.approx(mech.debias_a_ * phi + mech.debias_b_, rel=1e-12)
        draws = mech.privatize(np.full(n, label), rng)
        assert abs(draws.mean() - (mech.debias_a_ * phi + mech.debias_b_)) <= 5 * sd / math.sqrt(n)


def test_single_bin_and_spec_round_trip() -> None:
    grid = np.array([0.0, 1.0, 2.0])
    mech = RROnBins(1.0).fit(grid, np.array([0.0, 1.0, 0.0]))  # a point mass needs one bin
    assert mech.outputs_.tolist() == [1.0] and mech.keep_probability_ == 1.0
    assert mech.cut_points_.size == 0 and mech.expected_loss_ == 0.0
    assert np.all(mech.privatize(np.array([0.0, 1.0, 7.0]), np.random.default_rng(0)) == 1.0)

    mech = RROnBins(3.0).fit(np.linspace(0, 10, 25), np.random.default_rng(5).dirichlet(np.ones(25)))
    spec = mech.to_spec()
    assert isinstance(spec, RROnBinsSpec) and spec.outputs == mech.outputs_.tolist()
    again = RROnBins.from_spec(RROnBinsSpec.model_validate_json(spec.model_dump_json()))
    np.testing.assert_array_equal(again.cut_points_, mech.cut_points_)
    assert again.keep_probability_ == mech.keep_probability_ and again.debias_b_ == mech.debias_b_


def test_rejects_unsupported_loss_and_bad_input() -> None:
    with pytest.raises(ValueError):
        RROnBins(1.0, loss="absolute")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RROnBins(0.0).fit(np.array([0.0, 1.0]), np.array([0.5, 0.5]))
    with pytest.raises(ValueError):
        RROnBins(1.0).fit(np.array([1.0, 0.0]), np.array([0.5, 0.5]))
    with pytest.raises(ValueError):
        RROnBins(1.0).fit(np.array([0.0, 1.0]), np.array([0.0, 0.0]))
