"""Optimal unbiased randomizer: exact DP of the sampled table, unbiasedness, LP optimality, wire form."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np
import pytest

from labeldp.mechanisms.contract import Prior
from labeldp.mechanisms.prior import LabelDomain
from labeldp.mechanisms.unbiased import (
    ONE,
    UnbiasedRandomizer,
    default_output_grid,
    input_grid,
    lp_epsilon,
    max_log_ratio,
    output_range,
    prior_weights,
    quantize_transition,
    rounding_probabilities,
    satisfies_dp,
    solve_unbiased_lp,
    solve_unbiased_lp_reference,
    transition_sampler,
)
from labeldp.specs.unbiased import UnbiasedSpec

REAL = LabelDomain("real", -1.0, 3.0)
UNIT = LabelDomain("real", 0.0, 1.0)
SMALL_INT = LabelDomain("integer", 0, 10)
EPSILONS = [0.05, 0.5, 1.0, 3.0, 8.0, 20.0]


def ratio_within_exactly(counts: np.ndarray, epsilon: float) -> bool:
    """max_i N_ij ≤ e^ε · min_i N_ij for every column, in 60-digit decimal arithmetic (no float rounding)."""
    with localcontext() as ctx:
        ctx.prec = 60
        bound = Decimal(epsilon).exp()  # Decimal(float) is exact; exp correctly rounded to 60 digits
        return all(Decimal(int(h)) <= Decimal(int(l)) * bound for h, l in zip(counts.max(axis=0), counts.min(axis=0)))


def debiased_rr_variance(grid: np.ndarray, epsilon: float) -> np.ndarray:
    """Per-point variance of K-ary RR on the grid, debiased: outputs f(g_j), mean g_i (a feasible baseline)."""
    k, e = grid.size, math.exp(epsilon)
    f = ((e + k - 1) * grid - grid.sum()) / (e - 1)
    p, q = e / (e + k - 1), 1 / (e + k - 1)
    second = q * np.sum(f**2) + (p - q) * f**2
    return second - grid**2


@pytest.fixture(scope="module")
def fitted() -> dict[float, UnbiasedRandomizer]:
    return {eps: UnbiasedRandomizer(eps, REAL).fit_to() for eps in EPSILONS}


# -- grids ---------------------------------------------------------------------


def test_grids_follow_the_documented_rules() -> None:
    g = input_grid(REAL)
    assert g.size == 33 and g[0] == -1.0 and g[-1] == 3.0
    np.testing.assert_allclose(np.diff(g), 4.0 / 32)
    np.testing.assert_array_equal(input_grid(SMALL_INT), np.arange(11.0))  # every integer
    assert input_grid(LabelDomain("integer", 0, 1000)).size == 33
    with pytest.raises(ValueError):
        input_grid(REAL, 1)

    eps = 0.7
    k, e, s = g.size, math.exp(eps), g.sum()
    low, high = output_range(g, eps)  # App. J: ((e^ε + K − 1)·min − Σ)/(e^ε − 1), same with max
    assert low == pytest.approx(((e + k - 1) * g.min() - s) / (e - 1), rel=1e-12)
    assert high == pytest.approx(((e + k - 1) * g.max() - s) / (e - 1), rel=1e-12)
    out = default_output_grid(g, eps)
    assert out.size == 2 * (k - 1) + 1 and out[0] == low and out[-1] == high
    # Debiased RR's outputs f(g_i) are every other output point: the LP is always feasible.
    f = ((e + k - 1) * g - s) / (e - 1)
    np.testing.assert_allclose(out[::2], f, rtol=0, atol=1e-12 * (high - low))


def test_rounding_is_unbiased_and_local() -> None:
    grid = input_grid(REAL, 9)
    y = np.array([-5.0, -1.0, -0.75, 0.1, 0.5, 2.99, 3.0, 7.0])
    lower, p_up = rounding_probabilities(y, grid)
    assert np.all((lower >= 0) & (lower <= grid.size - 2))
    assert np.all((p_up >= 0) & (p_up <= 1))
    mean = (1 - p_up) * grid[lower] + p_up * grid[lower + 1]
    np.testing.assert_allclose(mean, np.clip(y, -1.0, 3.0), rtol=0, atol=1e-15)
    assert np.all((grid[lower] <= np.clip(y, -1, 3)) & (np.clip(y, -1, 3) <= grid[lower + 1]))
    on_grid = rounding_probabilities(grid, grid)
    np.testing.assert_array_equal((1 - on_grid[1]) * grid[on_grid[0]] + on_grid[1] * grid[on_grid[0] + 1], grid)


# -- the linear program ----------------------------------------------------------


@pytest.mark.parametrize("eps", [0.3, 2.0, 6.0])
def test_banded_lp_equals_the_literal_pairwise_lp(eps: float) -> None:
    grid = np.linspace(0.0, 1.0, 6)
    outputs = default_output_grid(grid, eps, 15)
    rng = np.random.default_rng(1)
    for w in (np.full(6, 1 / 6), rng.dirichlet(np.ones(6))):
        fast = solve_unbiased_lp(grid, outputs, eps, w)
        slow = solve_unbiased_lp_reference(grid, outputs, eps, w)
        assert fast.objective == pytest.approx(slow.objective, rel=1e-7)


@pytest.mark.parametrize("eps", [0.1, 1.0, 4.0, 10.0])
def test_two_point_grid_gives_the_known_optimum(eps: float) -> None:
    """Binary labels: the optimal unbiased ε-DP randomizer is debiased RR, variance e^ε/(e^ε − 1)²."""
    mech = UnbiasedRandomizer(eps, UNIT, grid_size=2).fit_to()
    e = math.exp(mech.lp_epsilon_)
    np.testing.assert_allclose(mech.row_variances_, e / (e - 1) ** 2, rtol=1e-9)


@pytest.mark.parametrize("eps", EPSILONS)
def test_variance_is_no_worse_than_simple_unbiased_baselines(fitted, eps: float) -> None:
    mech = fitted[eps]
    width = REAL.width
    # Debiased K-ary RR on the same grid is feasible for the LP: the optimum is at most its variance.
    rr = debiased_rr_variance(mech.grid_, mech.lp_epsilon_)
    assert mech.variance_ <= float(np.mean(rr)) * (1 + 1e-9)
    # Unbiased (unclipped) Laplace with scale Δ/ε, Δ = width, has variance 2(Δ/ε)² for every label;
    # ours, rounding included, must not be worse on a fine uniform prior.
    fine = np.linspace(REAL.low, REAL.high, 801)
    loss = mech.loss_under(Prior(fine, np.ones(fine.size)))
    assert loss <= 2 * (width / eps) ** 2
    # and the weighted LP variance is what was optimized
    assert mech.variance_ == pytest.approx(mech.lp_objective_, rel=1e-9, abs=1e-15)


def test_prior_weights_push_the_prior_through_the_rounding() -> None:
    grid = input_grid(UNIT, 5)  # 0, .25, .5, .75, 1
    w = prior_weights(grid, np.array([0.0, 0.1, 0.5, 1.0]), np.array([1.0, 1.0, 1.0, 1.0]))
    np.testing.assert_allclose(w, [0.25 + 0.15, 0.1, 0.25, 0.0, 0.25], atol=1e-15)


def test_prior_weights_lower_the_expected_loss_under_that_prior() -> None:
    values = np.linspace(REAL.low, REAL.high, 201)
    probs = np.exp(-3.0 * (values - REAL.low))  # mass near the low end
    uniform = UnbiasedRandomizer(1.0, REAL).fit_to(Prior(values, probs))  # weights='uniform' ignores the prior
    tuned = UnbiasedRandomizer(1.0, REAL, weights="prior").fit_to(Prior(values, probs))
    assert not uniform.uses_prior and tuned.uses_prior
    assert tuned.loss_under(Prior(values, probs)) < uniform.loss_under(Prior(values, probs))
    np.testing.assert_allclose(tuned.conditional_mean(values), values, rtol=0, atol=1e-12)
    with pytest.raises(ValueError):
        UnbiasedRandomizer(1.0, REAL, weights="prior").fit_to()


# -- privacy -------------------------------------------------------------------


@pytest.mark.parametrize("eps", EPSILONS)
def test_transition_table_is_exactly_epsilon_dp(fitted, eps: float) -> None:
    mech = fitted[eps]
    counts = mech.transition_counts_
    assert counts.dtype == np.int64 and np.all(counts >= 0)
    assert np.all(counts.sum(axis=1) == ONE)
    np.testing.assert_array_equal(mech.transition_ * ONE, counts.astype(np.float64))  # exact
    hi, lo = counts.max(axis=0), counts.min(axis=0)
    assert np.all((lo > 0) | (hi == 0))  # no column mixes zero and positive
    assert ratio_within_exactly(counts, eps)
    assert satisfies_dp(counts, eps)
    assert max_log_ratio(counts) <= eps


@pytest.mark.parametrize("eps", [0.05, 1.0, 8.0])
def test_composed_law_of_any_two_labels_is_within_e_epsilon(fitted, eps: float) -> None:
    """Rounding then the table: Pr[ŷ = o_j | y] is a convex combination of rows, ratio ≤ e^ε."""
    mech = fitted[eps]
    rng = np.random.default_rng(7)
    labels = np.concatenate([mech.grid_, rng.uniform(-2.0, 4.0, 300), [REAL.low, REAL.high]])
    table = np.array([mech.output_probabilities(y) for y in labels])
    np.testing.assert_allclose(table.sum(axis=1), 1.0, atol=1e-14)
    used = table.max(axis=0) > 0
    assert np.all(table[:, used].min(axis=0) > 0)
    ratio = table[:, used].max(axis=0) / table[:, used].min(axis=0)
    assert np.all(ratio <= math.exp(eps) * (1 + 1e-9))


def test_a_table_solved_at_one_and_a_half_epsilon_is_caught() -> None:
    """Power of the check: the same pipeline at 1.5ε yields a table the ε check rejects."""
    eps = 1.0
    grid = input_grid(REAL)
    outputs = default_output_grid(grid, 1.5 * eps)
    sol = solve_unbiased_lp(grid, outputs, 1.5 * eps, np.full(grid.size, 1 / grid.size))
    counts = quantize_transition(sol.matrix, grid, outputs, 1.5 * eps, 1.5 * eps)
    assert satisfies_dp(counts, 1.5 * eps) and ratio_within_exactly(counts, 1.5 * eps)
    assert not satisfies_dp(counts, eps) and not ratio_within_exactly(counts, eps)
    assert max_log_ratio(counts) > 1.4 * eps


def test_repair_enforces_the_bound_on_a_corrupted_solution() -> None:
    """Solver noise (negatives, a zero beside positives, a band violation) is repaired into an exact table."""
    eps = 2.0
    grid = input_grid(UNIT, 9)
    outputs = default_output_grid(grid, lp_epsilon(eps))
    sol = solve_unbiased_lp(grid, outputs, lp_epsilon(eps), np.full(9, 1 / 9))
    m = sol.matrix.copy()
    m[0, 0] -= 3e-10
    m[1, 1] = 0.0 if m[1, 1] < 1e-6 else m[1, 1] * (1 + 1e-7)
    m[2, 2] += 1e-9
    counts = quantize_transition(m, grid, outputs, eps, lp_epsilon(eps))
    assert satisfies_dp(counts, eps) and np.all(counts.sum(axis=1) == ONE)
    means = (counts / ONE) @ outputs
    np.testing.assert_allclose(means, grid, rtol=0, atol=1e-12)


@pytest.mark.parametrize("eps", [0.5, 3.0, 9.0])
def test_integer_bands_hold_even_without_the_lp_margin(eps: float) -> None:
    """Solve at ε itself (no margin): float repair lands on the band's edge, the integer caps keep it exact."""
    grid = input_grid(REAL, 17)
    outputs = default_output_grid(grid, eps)
    sol = solve_unbiased_lp(grid, outputs, eps, np.full(17, 1 / 17))
    counts = quantize_transition(sol.matrix, grid, outputs, eps, eps)
    assert satisfies_dp(counts, eps) and np.all(counts.sum(axis=1) == ONE)
    assert ratio_within_exactly(counts, eps)
    assert max_log_ratio(counts) > eps * (1 - 1e-6)  # tight: the band's edge is used
    np.testing.assert_allclose((counts / ONE) @ outputs, grid, rtol=0, atol=1e-9)


def test_sampler_realizes_exactly_the_integer_table() -> None:
    rng = np.random.default_rng(3)
    counts = np.zeros((3, 5), dtype=np.int64)
    counts[0] = [ONE // 2, 0, ONE // 4, ONE // 4, 0]
    counts[1] = [1, 2, 3, ONE - 6, 0]
    counts[2] = [0, 0, 0, 0, ONE]
    table = transition_sampler(counts)
    # Each output owns exactly its count of the 2^53 values the kernel reads.
    np.testing.assert_array_equal(table.cells(), counts.astype(np.uint64))
    # Words at every bucket's start, end and threshold, then random words: kernel == twin.
    capacity = np.uint64(1 << table.shift)
    thresholds = table.table.reshape(3, table.n_buckets) >> np.uint64(table.g)
    starts = np.broadcast_to(np.arange(table.n_buckets, dtype=np.uint64) * capacity, thresholds.shape)
    last = capacity - np.uint64(1)
    x = np.concatenate([starts, starts + last, starts + np.minimum(thresholds, last),
                        starts + np.maximum(thresholds, np.uint64(1)) - np.uint64(1)], axis=1)
    r = np.concatenate([np.repeat(np.arange(3), x.shape[1]), rng.integers(0, 3, 2000)])
    w = np.concatenate([x.ravel() << np.uint64(11), rng.integers(0, 2**63, 2000, dtype=np.uint64)])
    fast = table.draw(r, w)
    np.testing.assert_array_equal(fast, table.draw_reference(r, w))
    assert np.all(counts[r, fast] > 0)  # zero-probability outputs are never drawn


# -- unbiasedness and the sampled law -----------------------------------------------


@pytest.mark.parametrize("eps", EPSILONS)
def test_conditional_mean_is_the_label(fitted, eps: float) -> None:
    mech = fitted[eps]
    scale = float(np.max(np.abs(mech.outputs_)))
    np.testing.assert_allclose(mech.row_means_, mech.grid_, rtol=0, atol=1e-13 * scale)
    labels = np.concatenate([mech.grid_, np.random.default_rng(0).uniform(REAL.low, REAL.high, 500)])
    np.testing.assert_allclose(mech.conditional_mean(labels), labels, rtol=0, atol=1e-13 * scale)
    for y in (-1.0, 0.123, 2.5, 3.0):
        assert float(mech.output_probabilities(y) @ mech.outputs_) == pytest.approx(y, abs=1e-13 * scale)
    np.testing.assert_allclose(mech.conditional_mean(np.array([-9.0, 9.0])), [REAL.low, REAL.high], atol=1e-12)


def test_integer_domain_is_unbiased_without_rounding() -> None:
    mech = UnbiasedRandomizer(1.0, SMALL_INT).fit_to()
    np.testing.assert_array_equal(mech.grid_, np.arange(11.0))
    _lower, p_up = rounding_probabilities(np.arange(11.0), mech.grid_)
    assert np.all((p_up == 0) | (p_up == 1))
    np.testing.assert_allclose(mech.conditional_mean(np.arange(11.0)), np.arange(11.0), atol=1e-12)


def test_monte_carlo_mean_and_frequencies_match_the_exact_law() -> None:
    mech = UnbiasedRandomizer(2.0, REAL).fit_to()
    rng = np.random.default_rng(2024)
    n = 200_000
    for y in (-1.0, 0.37, 1.0, 2.9):
        out = mech.privatize(np.full(n, y), rng)
        assert np.all(np.isin(out, mech.outputs_))
        se = math.sqrt(float(mech.conditional_variance(np.array([y]))[0]) / n)
        assert abs(out.mean() - y) < 5 * se
        exact = mech.output_probabilities(y)
        freq = np.bincount(np.searchsorted(mech.outputs_, out), minlength=mech.outputs_.size) / n
        sd = np.sqrt(exact * (1 - exact) / n)
        assert np.all(np.abs(freq - exact) <= 5 * sd + 1e-12)
        assert np.all(freq[exact == 0] == 0)


def test_privatize_shapes_and_out_of_domain_labels() -> None:
    mech = UnbiasedRandomizer(1.0, REAL).fit_to()
    rng = np.random.default_rng(5)
    labels = rng.uniform(-10, 10, (40, 25))
    out = mech.privatize(labels, rng)
    assert out.shape == labels.shape and np.all(np.isin(out, mech.outputs_))
    with pytest.raises(ValueError):
        mech.privatize(np.array([np.nan]), rng)


def test_expected_loss_is_exact() -> None:
    mech = UnbiasedRandomizer(1.5, REAL, grid_size=9).fit_to()
    values = np.array([-1.0, -0.3, 0.0, 1.11, 3.0])
    probs = np.array([0.1, 0.2, 0.3, 0.15, 0.25])
    brute = sum(p * float(mech.output_probabilities(y) @ (mech.outputs_ - y) ** 2) for y, p in zip(values, probs))
    assert mech.loss_under(Prior(values, probs)) == pytest.approx(brute, rel=1e-12)
    # unbiased: the loss is the conditional variance
    variance = float(probs @ mech.conditional_variance(values))
    assert mech.loss_under(Prior(values, probs)) == pytest.approx(variance, rel=1e-9)


# -- wire form ---------------------------------------------------------------------


def test_spec_round_trip_is_exact() -> None:
    mech = UnbiasedRandomizer(1.3, REAL, weights="prior").fit_to(Prior(np.linspace(-1, 3, 50), np.ones(50)))
    spec = mech.to_spec()
    assert spec.name == "unbiased" and spec.weights == "prior" and spec.lp_epsilon < spec.epsilon
    again = UnbiasedSpec.model_validate_json(spec.model_dump_json())
    rebuilt = UnbiasedRandomizer.from_spec(again)
    np.testing.assert_array_equal(rebuilt.transition_counts_, mech.transition_counts_)
    np.testing.assert_array_equal(rebuilt.outputs_, mech.outputs_)
    np.testing.assert_array_equal(rebuilt.grid_, mech.grid_)
    labels = np.random.default_rng(0).uniform(-1, 3, 1000)
    np.testing.assert_array_equal(
        rebuilt.privatize(labels, np.random.default_rng(9)), mech.privatize(labels, np.random.default_rng(9))
    )
    assert rebuilt.guarantee.epsilon == 1.3


def test_from_spec_rejects_tampered_tables() -> None:
    spec = UnbiasedRandomizer(1.0, REAL, grid_size=5).fit_to().to_spec()
    rows = [list(r) for r in spec.transition]
    j = int(np.argmax(rows[0]))
    k = int(np.argmin([x if x > 0 else 2.0 for x in rows[0]]))
    moved = rows[0][k] * 0.5  # halve a small entry, give its mass to the largest: ratio breaks
    rows[0][k] -= moved
    rows[0][j] += moved
    with pytest.raises(ValueError, match="ratio bound"):
        UnbiasedRandomizer.from_spec(spec.model_copy(update={"transition": rows}))
    off_lattice = [list(r) for r in spec.transition]
    off_lattice[0][k] = float(np.nextafter(off_lattice[0][k], 1.0))  # a small entry: its ulp is < 2^-53
    with pytest.raises(ValueError, match="multiples of 2"):
        UnbiasedRandomizer.from_spec(spec.model_copy(update={"transition": off_lattice}))
    with pytest.raises(ValueError, match="ratio bound"):
        UnbiasedRandomizer.from_spec(spec.model_copy(update={"epsilon": 0.5}))
    assert UnbiasedRandomizer.from_spec(spec).max_bias_ < 1e-12
