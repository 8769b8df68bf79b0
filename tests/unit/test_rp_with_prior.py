"""RPWithPrior (Liu & Huang Alg. 1–4): optimal interval, exact lattice law, ε-DP, Alg. 3 prior."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from labeldp.mechanisms import LabelDomain
from labeldp.mechanisms import rp_with_prior as rp
from labeldp.mechanisms.contract import Prior
from labeldp.mechanisms.lattice import Lattice
from labeldp.mechanisms.rp_with_prior import (
    NoisyLabelHistogramPrior,
    RPWithPrior,
    StepPrior,
    histogram_from_noised,
    interval_objective,
    optimal_interval,
    optimal_interval_points,
    optimal_interval_reference,
)
from labeldp.specs.rp_with_prior import KEEP_DENOMINATOR, RPWithPriorSpec

REAL = LabelDomain("real", 0.0, 5.0)
SMALL_INT = LabelDomain("integer", 0, 20)
MID_INT = LabelDomain("integer", 0, 60)


def random_step_prior(rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray]:
    nodes = np.cumsum(rng.uniform(0.1, 3.0, k + 1))
    dens = rng.uniform(0.0, 1.0, k) * (rng.random(k) > 0.25)
    if dens.sum() == 0:
        dens[rng.integers(k)] = 1.0
    return nodes, dens


def bimodal_prior() -> StepPrior:
    """A broad low hump plus a narrow tall peak: the best interval shrinks as ε grows."""
    edges = np.arange(0.0, 61.0, 4.0)
    masses = np.full(edges.size - 1, 1.0)
    masses[10] = 6.0
    return StepPrior(edges, masses)


# -- Alg. 1 -------------------------------------------------------------------------


def test_optimal_interval_beats_a_brute_force_grid() -> None:
    rng = np.random.default_rng(1)
    for _ in range(60):
        nodes, dens = random_step_prior(rng, int(rng.integers(1, 8)))
        eps, zeta = float(rng.uniform(0.05, 6.0)), float(rng.uniform(0.01, 3.0))
        A1, A2, value = optimal_interval(nodes, dens, eps, zeta)
        grid = np.concatenate((np.linspace(nodes[0] - 1.0, nodes[-1] + 1.0, 500), nodes))
        brute = interval_objective(grid[:, None], grid[None, :], nodes, dens, eps, zeta).max()
        assert brute <= value + 1e-12
        assert float(interval_objective(A1, A2, nodes, dens, eps, zeta)) == pytest.approx(value, abs=1e-13)
        assert A1 in nodes and A2 in nodes  # the maximum sits on a corner (linear-fractional F)
        assert optimal_interval_reference(nodes, dens, eps, zeta)[2] == pytest.approx(value, abs=1e-12)


def test_stationary_candidates_are_the_critical_points_of_lemma_3_5() -> None:
    """Along the line through e₂ (e₁) F is flat in A₁ (A₂) over the cell, as ∂F = 0 there."""
    rng = np.random.default_rng(2)
    found = 0
    for _ in range(200):
        nodes, dens = random_step_prior(rng, 5)
        eps, zeta = float(rng.uniform(0.05, 4.0)), float(rng.uniform(0.01, 2.0))
        cum = np.concatenate(([0.0], np.cumsum(dens * np.diff(nodes))))
        a1s, a2s, vals, cells_i, cells_j = rp._stationary_candidates(nodes, dens, cum, slice(0, 5), eps, zeta)
        best_corner = optimal_interval(nodes, dens, eps, zeta)[2]
        for A1, A2, v, i, j in zip(a1s, a2s, vals, cells_i, cells_j):
            found += 1
            assert nodes[i] <= A1 <= nodes[i + 1] and nodes[j] <= A2 <= nodes[j + 1] and i < j
            assert v == pytest.approx(float(interval_objective(A1, A2, nodes, dens, eps, zeta)), abs=1e-12)
            assert v <= best_corner + 1e-12
            if A1 not in nodes:  # e₁: F(e₁, ·) constant on cell j
                ys = np.linspace(max(nodes[j], A1), nodes[j + 1], 5)
                np.testing.assert_allclose(interval_objective(A1, ys, nodes, dens, eps, zeta), v, rtol=1e-9, atol=1e-12)
            if A2 not in nodes:  # e₂: F(·, e₂) constant on cell i
                xs = np.linspace(nodes[i], min(nodes[i + 1], A2), 5)
                np.testing.assert_allclose(interval_objective(xs, A2, nodes, dens, eps, zeta), v, rtol=1e-9, atol=1e-12)
    assert found > 20  # the test exercised real stationary points


def test_point_mass_interval_is_the_best_pair() -> None:
    rng = np.random.default_rng(3)
    for _ in range(30):
        pos = np.sort(rng.choice(40, size=8, replace=False)).astype(float)
        masses = rng.uniform(0, 1, 8)
        eps, zeta = float(rng.uniform(0.1, 5)), float(rng.uniform(0.5, 4))
        _a, _b, value = optimal_interval_points(pos, masses / masses.sum(), eps, zeta)
        best = max(
            2 * zeta * masses[p : q + 1].sum() / masses.sum() / (2 * zeta + math.exp(-eps) * (pos[q] - pos[p]))
            for p in range(8) for q in range(p, 8)
        )
        assert value == pytest.approx(best, rel=1e-12)


def test_fit_on_point_masses_is_the_best_lattice_pair() -> None:
    grid = np.array([0.0, 3.0, 4.0, 4.4, 9.0, 15.0, 20.0])
    probs = np.array([0.1, 0.25, 0.2, 0.05, 0.1, 0.1, 0.2])
    for eps in [0.3, 1.0, 4.0]:
        mech = RPWithPrior(eps, SMALL_INT, zeta=1.0).fit_to(Prior(grid, probs))
        snapped = np.rint(grid).astype(int)
        best = max(
            3 * probs[(snapped >= a) & (snapped <= b)].sum() / (3 + math.exp(-eps) * (b - a))
            for a in range(21) for b in range(a, 21)
        )
        assert mech.objective_ == pytest.approx(best, rel=1e-12)
        assert mech.expected_loss_ == pytest.approx(mech.loss_under(Prior(grid, probs)))


def brute_lattice_objective(mech: RPWithPrior, prior: StepPrior, eps: float) -> float:
    """max of F over every lattice pair, with the mechanism's ζ_eff, in lattice units."""
    nodes, masses = prior.truncated(mech.domain.low, mech.domain.high).on_lattice(
        mech.domain.low, mech.step_, mech.n_steps_
    )
    dens = masses / np.diff(nodes)
    t = np.arange(mech.n_steps_ + 1, dtype=float)
    return float(
        interval_objective(t[:, None], t[None, :], nodes.astype(float), dens, eps, mech.zeta_steps_ + 0.5).max()
    )


@pytest.mark.parametrize("eps", [0.2, 1.0, 3.0, 8.0])
def test_fit_chooses_the_lattice_optimum_for_its_own_epsilon(eps: float) -> None:
    prior = bimodal_prior()
    mech = RPWithPrior(eps, MID_INT, zeta=1.0).fit_to(prior)
    assert mech.objective_ == pytest.approx(brute_lattice_objective(mech, prior, eps), abs=1e-12)
    assert mech.objective_ == pytest.approx(
        float(
            interval_objective(
                mech.a1_index_, mech.a2_index_, *_lattice_prior(mech, prior), eps, mech.zeta_steps_ + 0.5
            )
        ),
        abs=1e-12,
    )


def _lattice_prior(mech: RPWithPrior, prior: StepPrior) -> tuple[np.ndarray, np.ndarray]:
    nodes, masses = prior.truncated(mech.domain.low, mech.domain.high).on_lattice(
        mech.domain.low, mech.step_, mech.n_steps_
    )
    return nodes.astype(float), masses / np.diff(nodes)


def test_interval_depends_on_epsilon_so_the_budget_matters() -> None:
    """Precondition of the ε₁/ε₂ tests: the wrong ε gives a strictly worse interval."""
    prior = bimodal_prior()
    narrow = RPWithPrior(0.2, MID_INT, zeta=1.0).fit_to(prior)  # strong noise: only the peak pays
    wide = RPWithPrior(8.0, MID_INT, zeta=1.0).fit_to(prior)  # weak noise: cover all the mass
    assert (wide.a1_index_, wide.a2_index_) == (0, 60) and (narrow.a1_index_, narrow.a2_index_) == (40, 44)


# -- the lattice law and ε-DP --------------------------------------------------------


CONFIGS = [
    (0.1, SMALL_INT, 2.0, None),
    (1.0, SMALL_INT, 0.2, StepPrior(np.array([0.0, 5.0, 7.0, 20.0]), np.array([0.2, 0.7, 0.1]))),  # z = 0
    (3.0, MID_INT, 1.0, bimodal_prior()),
    (0.7, REAL, 0.3, StepPrior(np.array([0.0, 1.0, 2.0, 5.0]), np.array([0.5, 0.3, 0.2]))),
    (12.0, REAL, 0.05, StepPrior(np.array([-1.0, 0.0, 4.9, 9.0]), np.array([0.3, 0.4, 0.3]))),
]


def exact_pmf(mech: RPWithPrior, label: float) -> list[Fraction]:
    """The output law as exact rationals from the spec's integers alone."""
    spec = mech.to_spec()
    z, far = spec.zeta_steps, spec.a2_index - spec.a1_index
    near_p = Fraction(spec.keep_numerator, KEEP_DENOMINATOR * (2 * z + 1))
    far_p = Fraction(KEEP_DENOMINATOR - spec.keep_numerator, KEEP_DENOMINATOR * far) if far else Fraction(0)
    t = int(np.clip(round((label - spec.domain.low) / spec.step), 0, spec.n_steps))
    c = min(max(t, spec.a1_index), spec.a2_index)
    return [near_p if abs(o - c) <= z else far_p for o in range(spec.a1_index - z, spec.a2_index + z + 1)]


@pytest.mark.parametrize("eps, domain, zeta, prior", CONFIGS)
def test_output_law_is_exactly_epsilon_dp(eps: float, domain: LabelDomain, zeta: float, prior) -> None:
    mech = RPWithPrior(eps, domain, zeta=zeta).fit_to(prior)
    inputs = [
        domain.low - 3.0,
        domain.low,
        mech.a1_,
        0.5 * (mech.a1_ + mech.a2_),
        mech.a2_,
        domain.high,
        domain.high + 3.0,
    ]
    inputs += list(mech._lattice.value(np.arange(0, mech.n_steps_ + 1, max(1, mech.n_steps_ // 40))))
    table = [exact_pmf(mech, y) for y in inputs]
    for row in table:
        assert sum(row) == 1
    bound = Fraction(math.exp(eps))
    worst = Fraction(1)
    for o in range(len(table[0])):
        column = [row[o] for row in table]
        assert min(column) > 0  # the same support for every input
        worst = max(worst, max(column) / min(column))
    assert worst <= bound
    if mech.a2_index_ > mech.a1_index_:
        assert float(worst) == pytest.approx(math.exp(eps), rel=1e-9)  # tight: no budget wasted
    for y, row in zip(inputs, table):  # the float law the features party uses agrees
        np.testing.assert_allclose(mech.output_probabilities(y), [float(p) for p in row], rtol=1e-14, atol=0)


def test_keep_probability_is_eq_3_4_rounded_down() -> None:
    mech = RPWithPrior(1.3, MID_INT, zeta=3.0).fit_to(bimodal_prior())
    near, far = 2 * mech.zeta_steps_ + 1, mech.a2_index_ - mech.a1_index_
    kappa = near / (near + math.exp(-1.3) * far)
    assert 0 < kappa * KEEP_DENOMINATOR - mech.keep_numerator_ <= 16
    assert mech.zeta_effective_ == (mech.zeta_steps_ + 0.5) * mech.step_


def test_projection_outside_the_interval() -> None:
    """eq. (3.12): a label outside [A₁, A₂] gets the law of its projection."""
    mech = RPWithPrior(1.0, MID_INT, zeta=1.0).fit_to(bimodal_prior())
    assert mech.a1_index_ > 0 and mech.a2_index_ < 60
    np.testing.assert_array_equal(mech.output_probabilities(0.0), mech.output_probabilities(mech.a1_))
    np.testing.assert_array_equal(mech.output_probabilities(60.0), mech.output_probabilities(mech.a2_))
    inside = mech.output_probabilities(mech.a1_ + 1)
    assert not np.array_equal(inside, mech.output_probabilities(mech.a1_))


@pytest.mark.parametrize("label", [0.0, 9.0, 13.0, 20.0])
def test_empirical_frequencies_match_the_exact_pmf(label: float) -> None:
    prior = StepPrior(np.array([0.0, 8.0, 14.0, 20.0]), np.array([0.2, 0.7, 0.1]))
    mech = RPWithPrior(1.5, SMALL_INT, zeta=2.0).fit_to(prior)
    rng = np.random.default_rng(7)
    out = mech.privatize(np.full(200_000, label), rng)
    assert np.all(np.isin(out, mech.outputs_))
    counts = np.array([(out == o).sum() for o in mech.outputs_])
    assert counts.sum() == out.size
    p = stats.chisquare(counts, mech.output_probabilities(label) * out.size).pvalue
    assert p > 1e-4


def test_outputs_are_lattice_values_only() -> None:
    mech = RPWithPrior(0.8, REAL).fit_to(CONFIGS[3][3])
    rng = np.random.default_rng(8)
    labels = rng.uniform(-1.0, 6.0, 50_000)
    out = mech.privatize(labels, rng)
    t = np.rint((out - REAL.low) / mech.step_).astype(np.int64)
    np.testing.assert_array_equal(out, mech._lattice.value(t))  # exactly the lattice value of an index
    assert t.min() >= mech.a1_index_ - mech.zeta_steps_ and t.max() <= mech.a2_index_ + mech.zeta_steps_


def test_conditional_mean_matches_monte_carlo_and_the_pmf() -> None:
    mech = RPWithPrior(1.0, REAL, zeta=0.4).fit_to(CONFIGS[3][3])
    rng = np.random.default_rng(9)
    for label in [-0.5, 0.3, 1.7, 4.99]:
        exact = float(mech.conditional_mean(np.array([label]))[0])
        assert exact == pytest.approx(
            float(np.dot(mech.output_probabilities(label), mech.outputs_)), rel=1e-12, abs=1e-12
        )
        out = mech.privatize(np.full(200_000, label), rng)
        assert abs(out.mean() - exact) < 5 * out.std() / math.sqrt(out.size)


def test_expected_loss_point_prior_is_exact_and_matches_monte_carlo() -> None:
    mech = RPWithPrior(2.0, REAL, zeta=0.3).fit_to(CONFIGS[3][3])
    grid = np.array([0.1, 0.77, 1.5, 2.0, 4.2, 5.0])
    probs = np.array([0.3, 0.1, 0.2, 0.2, 0.1, 0.1])
    exact = mech.loss_under(Prior(grid, probs))
    direct = sum(p * float(np.dot(mech.output_probabilities(y), (mech.outputs_ - y) ** 2)) for y, p in zip(grid, probs))
    assert exact == pytest.approx(direct, rel=1e-11)
    rng = np.random.default_rng(10)
    labels = rng.choice(grid, size=300_000, p=probs)
    sq = (mech.privatize(labels, rng) - labels) ** 2
    assert abs(sq.mean() - exact) < 5 * sq.std() / math.sqrt(sq.size)


def test_expected_loss_step_prior_matches_quadrature_and_monte_carlo() -> None:
    prior = StepPrior(np.array([-0.2, 0.5, 1.9, 3.3, 5.2]), np.array([0.1, 0.5, 0.3, 0.1]))
    mech = RPWithPrior(1.2, REAL, zeta=0.25).fit_to(prior)
    exact = mech.loss_under(prior)
    assert exact == mech.expected_loss_
    xs = np.linspace(prior.nodes[0], prior.nodes[-1], 400_001)
    mids = 0.5 * (xs[1:] + xs[:-1])
    cell = np.clip(np.searchsorted(prior.nodes, mids, side="right") - 1, 0, 3)
    quad = float(
        np.sum(prior.densities[cell] * mech._loss_given_index(mech.projected_index(mids), mids)) * (xs[1] - xs[0])
    )
    assert exact == pytest.approx(quad, rel=1e-5)
    rng = np.random.default_rng(11)
    cells = rng.choice(4, size=300_000, p=prior.masses)
    labels = rng.uniform(prior.nodes[cells], prior.nodes[cells + 1])
    sq = (mech.privatize(labels, rng) - labels) ** 2
    assert abs(sq.mean() - exact) < 5 * sq.std() / math.sqrt(sq.size)


def test_spec_round_trip_reproduces_the_law() -> None:
    mech = RPWithPrior(0.9, REAL, zeta=0.4).fit_to(CONFIGS[3][3])
    spec = RPWithPriorSpec.model_validate_json(mech.to_spec().model_dump_json())
    again = RPWithPrior.from_spec(spec)
    assert again.to_spec() == spec
    for y in [-1.0, 0.0, 2.2, 5.0]:
        np.testing.assert_array_equal(again.output_probabilities(y), mech.output_probabilities(y))
    labels = np.linspace(-1, 6, 1000)
    np.testing.assert_array_equal(
        again.privatize(labels, np.random.default_rng(3)), mech.privatize(labels, np.random.default_rng(3))
    )
    assert spec.name == RPWithPrior.name == "rp_with_prior" and mech.guarantee.epsilon == 0.9


def test_defaults_and_uniform_fallback() -> None:
    mech = RPWithPrior(1.0, REAL).fit_to()
    assert (mech.a1_, mech.a2_) == (0.0, 5.0)  # uniform prior: the whole domain
    assert mech.zeta_ == pytest.approx(0.2 * 5.0) and mech.n_steps_ == 1024  # clip(0.4/ε, 0.05, 0.2) at ε = 1
    assert abs(mech.zeta_effective_ - mech.zeta_) <= mech.step_ / 2
    outside = RPWithPrior(1.0, REAL).fit_to(StepPrior(np.array([7.0, 9.0]), np.array([1.0])))
    assert (outside.a1_, outside.a2_) == (0.0, 5.0)
    spike = RPWithPrior(1.0, REAL).fit_to(StepPrior(np.array([4.9999, 6.0]), np.array([1.0])))
    assert spike.a2_index_ == 1024 and spike.a1_index_ in (1023, 1024)  # a prior thinner than a step


# -- Alg. 3: the prior sees only noised labels -------------------------------------------


def test_histogram_follows_algorithm_3() -> None:
    noised = np.array([-7, -3, 0, 0, 1, 2, 2, 5, 11], dtype=np.int64)
    nodes, counts, sigma = histogram_from_noised(noised, sigma_steps=4.0)
    mu = noised.mean()  # 1.2222…: k₀ = floor((−7 − μ)/4) = −3, k₁ = ceil((11 − μ)/4) − 1 = 2
    expected = [-7] + [int(np.rint(mu + (i - 3) * 4.0)) for i in range(1, 6)] + [11]
    np.testing.assert_array_equal(nodes, np.unique(expected))  # rint(μ − 8) = −7 = n₀ merges
    assert counts.sum() == noised.size and sigma == 4.0
    ref = [np.sum((noised >= a) & (noised < b)) for a, b in zip(nodes[:-2], nodes[1:-1])]
    ref.append(np.sum(noised >= nodes[-2]))
    np.testing.assert_array_equal(counts, ref)
    _, _, default_sigma = histogram_from_noised(noised)
    assert default_sigma == pytest.approx(noised.std())
    with pytest.raises(TypeError):
        histogram_from_noised(noised.astype(float))  # raw float labels are refused


def test_prior_is_built_from_the_noised_labels_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The histogram receives exactly the Laplace-noised indices, nothing else (chunk by chunk)."""
    seen: dict[str, object] = {}
    real_noise, real_add = rp.laplace_noised_indices, rp.NoisedHistogram.add

    def noise_spy(labels, lattice, epsilon, rng):
        out = real_noise(labels, lattice, epsilon, rng)
        seen["noised"], seen["noise_epsilon"] = out, epsilon
        return out

    def hist_spy(self, *args, **kwargs):
        seen["hist_args"] = args
        seen["hist_kwargs"] = kwargs
        return real_add(self, *args, **kwargs)

    monkeypatch.setattr(rp, "laplace_noised_indices", noise_spy)
    monkeypatch.setattr(rp.NoisedHistogram, "add", hist_spy)
    labels = np.random.default_rng(4).uniform(0, 5, 5000)
    est = NoisyLabelHistogramPrior(0.7, REAL).fit(labels, np.random.default_rng(5))
    assert seen["noise_epsilon"] == 0.7
    data_args = [a for a in seen["hist_args"] if isinstance(a, np.ndarray)]
    assert len(data_args) == 1 and data_args[0] is seen["noised"]
    assert not any(isinstance(v, np.ndarray) for v in seen["hist_kwargs"].values())
    snapped = np.rint(labels / (5.0 / 1024)).astype(np.int64)
    assert np.mean(seen["noised"] != snapped) > 0.99  # really noised
    nodes, counts, _ = rp.histogram_from_noised(seen["noised"], None)
    np.testing.assert_allclose(est.prior_.nodes, REAL.low + est.step_ * nodes)
    np.testing.assert_allclose(est.prior_.masses, counts / counts.sum())


def test_same_noised_labels_give_the_same_prior(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two different label vectors whose noised versions coincide yield identical priors."""
    frozen = real_noised = rp.laplace_noised_indices(
        np.random.default_rng(6).uniform(0, 5, 3000), Lattice.for_domain(REAL, None), 1.0, np.random.default_rng(7)
    )
    monkeypatch.setattr(rp, "laplace_noised_indices", lambda labels, lattice, eps, rng: frozen)
    a = NoisyLabelHistogramPrior(1.0, REAL).fit(np.zeros(3000), np.random.default_rng(0))
    b = NoisyLabelHistogramPrior(1.0, REAL).fit(np.full(3000, 5.0), np.random.default_rng(1))
    np.testing.assert_array_equal(a.prior_.nodes, b.prior_.nodes)
    np.testing.assert_array_equal(a.prior_.masses, b.prior_.masses)
    assert real_noised is frozen


def test_prior_reflects_the_noise_not_the_raw_labels() -> None:
    """At ε₁ = 0.5 the noise scale is 2× the domain: a true-label histogram could not reach beyond it."""
    labels = np.full(20_000, 2.5)
    est = NoisyLabelHistogramPrior(0.5, REAL).fit(labels, np.random.default_rng(12))
    assert est.prior_.nodes[0] < REAL.low - 5.0 and est.prior_.nodes[-1] > REAL.high + 5.0
    assert est.prior_.masses.max() < 0.6  # a true-label histogram would put all mass in one cell
    assert est.guarantee.epsilon == 0.5 and est.guarantee.sensitivity == REAL.width
    assert est.to_spec().epsilon == 0.5 and est.to_spec().source == "noisy_label_histogram"


def test_laplace_noise_is_calibrated_to_epsilon_one() -> None:
    """E|k| = 2α/(1 − α²) for P(k) ∝ α^|k|, α = e^{−ε₁/J}: noise at 1.5·ε₁ would be far off."""
    lattice = Lattice.for_domain(REAL, None)
    eps1 = 1.0
    labels = np.full(200_000, 1.0)
    noise = rp.laplace_noised_indices(labels, lattice, eps1, np.random.default_rng(13)) - lattice.index(labels)
    alpha = math.exp(-eps1 / lattice.n_steps)
    mean_abs = 2 * alpha / (1 - alpha**2)
    assert abs(np.abs(noise).mean() - mean_abs) < 5 * np.abs(noise).std() / math.sqrt(noise.size)


def test_the_noised_label_prior_is_fitted_for_eps2_and_its_bin_width_travels(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[float] = []
    real_opt = rp.optimal_interval

    def opt_spy(nodes, dens, epsilon, zeta):
        calls.append(epsilon)
        return real_opt(nodes, dens, epsilon, zeta)

    monkeypatch.setattr(rp, "optimal_interval", opt_spy)
    rng = np.random.default_rng(14)
    labels = np.concatenate((rng.uniform(0, 60, 20_000), rng.uniform(40, 44, 30_000))).round()
    eps1, eps2 = 40.0, 0.2
    estimator = NoisyLabelHistogramPrior(eps1, MID_INT).fit(labels, rng)
    prior = estimator.prior_
    mech = RPWithPrior(eps2, MID_INT, zeta=1.0, private_prior="noised_labels").fit_to(prior)
    assert calls == [eps2]
    assert estimator.guarantee.epsilon == eps1 and mech.guarantee.epsilon == eps2
    assert mech.objective_ == pytest.approx(brute_lattice_objective(mech, prior, eps2), abs=1e-12)
    wrong = RPWithPrior(eps1, MID_INT, zeta=1.0).fit_to(prior)
    assert (wrong.a1_index_, wrong.a2_index_) != (mech.a1_index_, mech.a2_index_)  # ε₁ would pick another interval
    assert prior.sigma == estimator.sigma_ and mech.to_spec().sigma == pytest.approx(estimator.sigma_)


def test_a_release_buys_the_laplace_histogram_on_its_grid_by_default() -> None:
    """The default private prior: k noisy counts on default_grid(domain, n, ε), ε₁ of them, and the
    interval fitted to them for ε₂."""
    from labeldp.mechanisms.prior import LaplaceHistogramPrior, default_grid
    from labeldp.release.randomizer import randomize

    labels = np.random.default_rng(21).poisson(6.0, 8_000).clip(0, 60).astype(np.float64)
    eps1, eps2 = 0.1, 0.9
    out = randomize(labels, MID_INT, "rp_with_prior", 1_000_000, np.random.default_rng(22), epsilon_prior_micro=100_000)
    assert [(p.name, p.epsilon_micro) for p in out.accounting.parts] == [("prior", 100_000), ("randomizer", 900_000)]
    grid = default_grid(MID_INT, labels.size, eps1 + eps2)
    assert out.prior is not None and out.prior.source == "laplace_histogram" and out.prior.grid == grid.tolist()
    probs = LaplaceHistogramPrior(eps1, grid).fit(labels, np.random.default_rng(22)).probs_
    same = RPWithPrior(eps2, MID_INT).fit_to(Prior(grid, probs))
    assert out.prior.probs == probs.tolist() and out.mechanism.epsilon == eps2
    assert (same.a1_index_, same.a2_index_) == (out.mechanism.a1_index, out.mechanism.a2_index)
    assert out.mechanism.sigma is None and out.mechanism.a2 < 30  # the interval follows the counts, not the domain


@pytest.mark.parametrize(
    "epsilon, fraction", [(0.1, 0.2), (1.0, 0.2), (2.0, 0.2), (4.0, 0.1), (8.0, 0.05), (20.0, 0.05)]
)
def test_default_zeta_narrows_with_epsilon(epsilon: float, fraction: float) -> None:
    """ζ = clip(0.4/ε, 0.05, 0.2)·(high − low): wide for learning at small ε, narrow where the near block is sure."""
    assert rp.default_zeta_fraction(epsilon) == pytest.approx(fraction)
    assert RPWithPrior(epsilon, REAL).fit_to().zeta_ == pytest.approx(fraction * REAL.width)
