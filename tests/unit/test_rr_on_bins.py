"""RR-on-Bins: optimality of the DP, exactness of the stated distribution, DP ratio, debiasing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from labeldp.mechanisms import LabelDomain, RROnBins, optimal_bins, optimal_bins_reference
from labeldp.mechanisms.contract import Prior
from labeldp.mechanisms.rr_on_bins_kernels import _clamped_table_numba, _prepare, cut_points, interval_cost_table
from labeldp.schema import RROnBinsSpec

EPSILONS = [0.05, 0.1, 0.5, 1.0, 2.0, 4.0, 8.0]
EPS_FIT = 4.0  # the fitted fixture's ε: large enough for several bins


# --------------------------------------------------------------------------- independent brute force

LOSSES = ["squared", "absolute", "poisson"]


def loss_fn(o, y, loss: str):
    """ℓ(ŷ, y), written out independently of the package."""
    if loss == "squared":
        return (o - y) ** 2
    if loss == "absolute":
        return np.abs(o - y)
    return o - y * np.log(o)


def rr_loss(
    grid: np.ndarray, probs: np.ndarray, epsilon: float, bins: np.ndarray, outputs: np.ndarray, loss: str = "squared"
) -> float:
    """E[ℓ(ŷ, y)] of ε-RR over ``outputs`` with Φ(grid[g]) = outputs[bins[g]], summed term by term."""
    m = outputs.size
    keep = math.exp(epsilon) / (math.exp(epsilon) + m - 1)
    other = 1.0 / (math.exp(epsilon) + m - 1)
    total = 0.0
    for y, py, b in zip(grid, probs, bins):
        for j, o in enumerate(outputs):
            total += py * (keep if j == b else other) * float(loss_fn(o, y, loss))
    return total


def best_output(grid: np.ndarray, weights: np.ndarray, loss: str) -> float:
    """argmin_o Σ_y weights_y ℓ(o, y): the weighted mean (squared, Poisson) or a weighted median (absolute)."""
    if loss == "absolute":  # the piecewise-linear objective is minimized at a label
        costs = [float(np.dot(weights, np.abs(o - grid))) for o in grid]
        return float(grid[int(np.argmin(costs))])
    return float(np.dot(weights, grid) / weights.sum())


def brute_force(grid: np.ndarray, probs: np.ndarray, epsilon: float, loss: str = "squared") -> float:
    """Min over all 2^(k−1) interval partitions of the exact loss with per-bin optimal outputs.

    For a fixed partition the loss is Σ_y p_y Σ_j π_j(y) ℓ(o_j, y) with π_j(y) = keep if
    y is in bin j else other; it separates over j, so each o_j minimizes Σ_y p_y π_j(y) ℓ(o, y).
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
        outputs = np.array([best_output(grid, probs * pi[j], loss) for j in range(m)])
        loss_value = float(np.sum(probs[None, :] * pi * loss_fn(outputs[:, None], grid[None, :], loss)))
        best = min(best, loss_value)
    return best


def random_prior(
    rng: np.random.Generator, k: int, offset: float = 0.0, low: float = -5.0
) -> tuple[np.ndarray, np.ndarray]:
    grid = np.sort(rng.uniform(low, 5.0, size=k)) + offset
    while np.any(np.diff(grid) <= 0):
        grid = np.sort(rng.uniform(low, 5.0, size=k)) + offset
    probs = rng.dirichlet(np.full(k, 0.7))
    if k > 1:
        zero = rng.random(k) < 0.3
        zero[rng.integers(k)] = False
        probs[zero] = 0.0
    return grid, probs / probs.sum()


def prior_for(loss: str, rng: np.random.Generator, k: int, offset: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Poisson labels are counts-like (>= 0); the others live anywhere."""
    return random_prior(rng, k, offset=offset, low=0.0 if loss == "poisson" else -5.0)


def loss_tolerance(expected: float, grid: np.ndarray, loss: str) -> float:
    width = 1.0 + float(np.ptp(grid)) + float(np.max(np.abs(grid)))
    return 1e-9 * abs(expected) + 1e-12 * width**2


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("k", range(1, 10))
def test_optimal_bins_matches_brute_force_over_all_partitions(k: int, loss: str) -> None:
    rng = np.random.default_rng(1000 + k)
    for trial in range(3):
        grid, probs = prior_for(loss, rng, k, offset=0.0 if trial < 2 else 1000.0)
        for eps in EPSILONS:
            bins, outputs, value = optimal_bins(grid, probs, eps, loss)
            expected = brute_force(grid, probs, eps, loss)
            tol = loss_tolerance(expected, grid, loss)
            assert abs(value - expected) <= tol, (k, trial, eps, value, expected)
            # The returned partition and outputs really achieve that loss.
            assert bins.shape == (k,) and bins.dtype == np.int64
            assert np.all(np.diff(outputs) > 0)
            assert np.all(np.diff(bins) >= 0) and bins.max() < outputs.size
            assert abs(rr_loss(grid, probs, eps, bins, outputs, loss) - expected) <= tol


def test_optimal_bins_handles_single_point_and_point_mass() -> None:
    for loss in LOSSES:
        bins, outputs, value = optimal_bins(np.array([3.5]), np.array([1.0]), 1.0, loss)
        assert bins.tolist() == [0] and outputs.tolist() == [3.5]
        assert value == pytest.approx(float(loss_fn(3.5, 3.5, loss)), abs=1e-12)

        grid = np.arange(50.0)
        probs = np.zeros(50)
        probs[17] = 1.0
        bins, outputs, value = optimal_bins(grid, probs, 2.0, loss)
        assert outputs.tolist() == [17.0]
        assert value == pytest.approx(float(loss_fn(17.0, 17.0, loss)), abs=1e-12)
        assert np.all(bins == 0)  # zero-mass points are still assigned


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("k", [2, 5, 17, 64, 120, 200])
def test_fast_optimizer_matches_cubic_reference(k: int, loss: str) -> None:
    rng = np.random.default_rng(k)
    for eps in [0.1, 1.0, 3.0, 8.0, 30.0]:
        grid, probs = prior_for(loss, rng, k)
        got = optimal_bins(grid, probs, eps, loss)
        ref = optimal_bins_reference(grid, probs, eps, loss)
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-10, atol=1e-12)
        assert got[2] == pytest.approx(ref[2], rel=1e-11, abs=1e-13)


@pytest.mark.parametrize("loss", LOSSES)
def test_fast_optimizer_matches_reference_on_smooth_priors(loss: str) -> None:
    """Dense grids with many bins (ε = 8), where a wrong split point would show."""
    k = 150
    grid = np.linspace(0.0, 40.0, k)
    lognormal = np.exp(-((np.log(grid + 0.5) - np.log(6.0)) ** 2) / 2.0) / (grid + 0.5)
    for probs in (np.full(k, 1.0 / k), lognormal / lognormal.sum()):
        for eps in [0.05, 2.0, 8.0]:
            got = optimal_bins(grid, probs, eps, loss)
            ref = optimal_bins_reference(grid, probs, eps, loss)
            np.testing.assert_array_equal(got[0], ref[0])
            np.testing.assert_allclose(got[1], ref[1], rtol=1e-10, atol=1e-12)
            assert got[2] == pytest.approx(ref[2], rel=1e-11)


def skewed_prior(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Light labels on the left and a heavy one far right: the whole prior pulls every bin's
    output away from its labels, where the unclamped cost breaks the quadrangle inequality."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(6, 40))
    if seed % 3 == 0:
        left = np.sort(rng.choice(np.arange(0, 10, 0.1), size=k - 1, replace=False))
        grid = np.concatenate([left, [rng.uniform(30, 200)]])
        probs = np.concatenate([rng.dirichlet(np.full(k - 1, 0.5)) * rng.uniform(0.02, 0.5), [0.0]])
        probs[-1] = 1.0 - probs.sum()
        return grid, probs
    grid = np.sort(rng.choice(np.arange(0, 60, 0.2), size=k, replace=False))
    return grid, rng.dirichlet(np.full(k, 0.2))


@pytest.mark.parametrize("loss", LOSSES)
def test_fast_optimizer_matches_reference_on_skewed_priors(loss: str) -> None:
    """Found by search: here the monotone-queue DP without the clamp returns a worse partition."""
    for seed, eps in [(109, 5.0), (2422, 5.0), (205, 8.0), (483, 8.0), (907, 5.0)]:
        grid, probs = skewed_prior(seed)
        got = optimal_bins(grid, probs, eps, loss)
        ref = optimal_bins_reference(grid, probs, eps, loss)
        assert got[2] == pytest.approx(ref[2], rel=1e-11, abs=1e-12), (seed, eps)
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-10, atol=1e-12)


def quadrangle_violations(table: np.ndarray) -> float:
    """max over a <= b < c <= d of c(a,c) + c(b,d) − c(a,d) − c(b,c) (relative), table[i−1, r] = c(r, i)."""
    k = table.shape[0]
    worst = -math.inf
    for a in range(k):
        for b in range(a, k):
            for c in range(b + 1, k + 1):
                d = np.arange(c, k + 1)
                lhs = table[c - 1, a] + table[d - 1, b]
                rhs = table[d - 1, a] + table[c - 1, b]
                worst = max(worst, float(np.max((lhs - rhs) / (np.abs(rhs) + 1e-300))))
    return worst


@pytest.mark.parametrize("loss", LOSSES)
def test_clamped_interval_cost_satisfies_quadrangle_inequality(loss: str) -> None:
    """The property the fast DP relies on (proof in rr_on_bins_kernels); plain L violates it."""
    rng = np.random.default_rng(5)
    plain_violates = False
    for trial in range(12):
        grid, probs = prior_for(loss, rng, 12)
        for eps in [0.05, 1.0, 4.0]:
            code, y, p, t, s = _prepare(grid, probs, eps, loss)[:5]
            clamped, _ = interval_cost_table(code, y, p, t, s, clamp=True)
            assert quadrangle_violations(clamped) <= 1e-12, (trial, eps)
            np.testing.assert_allclose(_clamped_table_numba(code, y, p, t, s), clamped, rtol=1e-12, atol=1e-15)
            plain, _ = interval_cost_table(code, y, p, t, s, clamp=False)
            assert np.all(clamped >= plain - 1e-15)
            plain_violates |= quadrangle_violations(plain) > 1e-9
    assert plain_violates  # so the clamp is what makes the monotone-queue DP exact


def test_large_epsilon_does_not_overflow() -> None:
    grid = np.linspace(0.0, 1.0, 40)
    probs = np.random.default_rng(3).dirichlet(np.ones(40))
    mech = RROnBins(1000.0).fit_to(Prior(grid, probs))
    assert math.isfinite(mech.expected_loss_) and mech.expected_loss_ < 1e-12
    assert mech.keep_probability_ == 1.0
    assert np.all(np.isfinite(mech.outputs_))


# --------------------------------------------------------------------------- the fitted mechanism


@pytest.fixture(scope="module", params=LOSSES)
def fitted(request) -> tuple[RROnBins, np.ndarray, np.ndarray]:
    loss = request.param
    rng = np.random.default_rng(7)
    grid = np.linspace(-2.0, 6.0, 30) + (2.0 if loss == "poisson" else 0.0)
    probs = rng.dirichlet(np.full(30, 0.8))
    probs[[3, 11, 12]] = 0.0
    probs /= probs.sum()
    return RROnBins(EPS_FIT, loss=loss).fit_to(Prior(grid, probs)), grid, probs


def test_fit_attributes_are_consistent(fitted) -> None:
    mech, grid, _probs = fitted
    m = mech.outputs_.size
    assert m >= 3
    assert np.all(np.diff(mech.outputs_) > 0)
    # Each cut is where the two neighbouring outputs lose equally.
    cuts = mech.cut_points_
    assert cuts.size == m - 1 and np.all(mech.outputs_[:-1] < cuts) and np.all(cuts < mech.outputs_[1:])
    np.testing.assert_allclose(
        loss_fn(mech.outputs_[:-1], cuts, mech.loss), loss_fn(mech.outputs_[1:], cuts, mech.loss), rtol=1e-12
    )
    e = math.exp(EPS_FIT)
    assert mech.keep_probability_ == pytest.approx(e / (e + m - 1), rel=1e-14)
    q = 1.0 / (e + m - 1)
    assert mech.debias_a_ == pytest.approx(e / (e + m - 1) - q, rel=1e-14)
    assert mech.debias_b_ == pytest.approx(q * mech.outputs_.sum(), rel=1e-14)
    assert np.array_equal(mech.grid_, grid)
    assert mech.bin_of_grid_.shape == grid.shape and np.all(np.diff(mech.bin_of_grid_) >= 0)


def test_cut_points_per_loss() -> None:
    outputs = np.array([1.0, 4.0, 9.0])
    np.testing.assert_allclose(cut_points(outputs, "squared"), [2.5, 6.5])
    np.testing.assert_allclose(cut_points(outputs, "absolute"), [2.5, 6.5])
    log_mean = cut_points(outputs, "poisson")  # (b − a)/(log b − log a), below the midpoint
    np.testing.assert_allclose(log_mean, [3.0 / math.log(4.0), 5.0 / math.log(9.0 / 4.0)], rtol=1e-14)
    assert np.all(log_mean < cut_points(outputs, "squared"))


def test_expected_loss_is_exact_and_optimal(fitted) -> None:
    mech, grid, probs = fitted
    brute = sum(
        py * float(np.dot(mech.output_probabilities(y), loss_fn(mech.outputs_, y, mech.loss)))
        for y, py in zip(grid, probs)
    )
    assert mech.expected_loss_ == pytest.approx(brute, rel=1e-12)
    assert mech.loss_under(Prior(grid, probs)) == pytest.approx(brute, rel=1e-12)
    off_grid = np.random.default_rng(3).uniform(grid[0], grid[-1], 50)
    weights = np.random.default_rng(4).dirichlet(np.ones(50))
    brute_off = sum(
        py * float(np.dot(mech.output_probabilities(y), loss_fn(mech.outputs_, y, mech.loss)))
        for y, py in zip(off_grid, weights)
    )
    assert mech.loss_under(Prior(off_grid, weights)) == pytest.approx(brute_off, rel=1e-12)
    _, _, dp_loss = optimal_bins(grid, probs, EPS_FIT, mech.loss)
    assert mech.expected_loss_ == pytest.approx(dp_loss, rel=1e-9)


def test_empirical_output_frequencies_match(fitted) -> None:
    mech, grid, _ = fitted
    rng = np.random.default_rng(12345)
    n = 200_000
    for label in [grid[0], grid[0] + 3.37, grid[-1]]:
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


def test_off_grid_labels_bin_to_loss_nearest_output_and_outputs_are_exact(fitted) -> None:
    mech, _, _ = fitted
    rng = np.random.default_rng(2)
    low = 0.0 if mech.loss == "poisson" else -10.0
    labels = rng.uniform(low, 15.0, 20_000)
    idx = mech.bin_index(labels)
    table = loss_fn(mech.outputs_[None, :], labels[:, None], mech.loss)  # labels × outputs
    own = table[np.arange(labels.size), idx]
    np.testing.assert_allclose(own, table.min(axis=1), rtol=1e-12, atol=1e-12)
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


def test_single_bin() -> None:
    grid = np.array([0.0, 1.0, 2.0])
    mech = RROnBins(1.0).fit_to(Prior(grid, np.array([0.0, 1.0, 0.0])))  # a point mass needs one bin
    assert mech.outputs_.tolist() == [1.0] and mech.keep_probability_ == 1.0
    assert mech.cut_points_.size == 0 and mech.expected_loss_ == 0.0
    assert np.all(mech.privatize(np.array([0.0, 1.0, 7.0]), np.random.default_rng(0)) == 1.0)


@pytest.mark.parametrize("loss", LOSSES)
def test_spec_round_trip(loss: str) -> None:
    prior = Prior(np.linspace(0, 10, 25), np.random.default_rng(5).dirichlet(np.ones(25)))
    mech = RROnBins(3.0, loss=loss).fit_to(prior)
    spec = mech.to_spec()
    assert isinstance(spec, RROnBinsSpec) and spec.outputs == mech.outputs_.tolist() and spec.loss == loss
    again = RROnBins.from_spec(RROnBinsSpec.model_validate_json(spec.model_dump_json()))
    assert again.loss == loss
    np.testing.assert_array_equal(again.cut_points_, mech.cut_points_)
    assert again.keep_probability_ == mech.keep_probability_ and again.debias_b_ == mech.debias_b_
    labels = np.random.default_rng(6).uniform(0, 10, 1000)
    np.testing.assert_array_equal(again.bin_index(labels), mech.bin_index(labels))


def test_rejects_unsupported_loss_and_bad_input() -> None:
    with pytest.raises(ValueError):
        RROnBins(1.0, loss="hinge")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RROnBins(0.0).fit_to(Prior(np.array([0.0, 1.0]), np.array([0.5, 0.5])))
    with pytest.raises(ValueError):
        RROnBins(1.0).fit_to(Prior(np.array([1.0, 0.0]), np.array([0.5, 0.5])))
    with pytest.raises(ValueError):
        RROnBins(1.0).fit_to(Prior(np.array([0.0, 1.0]), np.array([0.0, 0.0])))
    with pytest.raises(ValueError):
        RROnBins(1.0).fit_to()
    with pytest.raises(ValueError):  # Poisson needs labels >= 0 and a positive mean
        RROnBins(1.0, loss="poisson").fit_to(Prior(np.array([-1.0, 1.0]), np.array([0.5, 0.5])))
    with pytest.raises(ValueError):
        RROnBins(1.0, loss="poisson").fit_to(Prior(np.array([0.0, 1.0]), np.array([1.0, 0.0])))
    with pytest.raises(ValueError):
        RROnBins(1.0, LabelDomain("real", -1.0, 1.0), loss="poisson")
    mech = RROnBins(1.0, LabelDomain("integer", 0, 20), loss="poisson")  # the common constructor shape
    assert mech.domain.high == 20.0 and mech.loss == "poisson"
