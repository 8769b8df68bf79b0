"""Additive baselines: lattice outputs, exact laws, exact DP ratios / δ, exact losses, specs, power."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from labeldp.mechanisms.additive import (
    CONTINUOUS_STEPS,
    Exponential,
    Gaussian,
    Laplace,
    Staircase,
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
    staircase_gamma,
)
from labeldp.mechanisms.contract import Prior
from labeldp.mechanisms.prior import LabelDomain
from labeldp.specs.additive import ExponentialSpec, GaussianSpec, StaircaseSpec
from labeldp.specs.laplace import LaplaceSpec

INTEGER = LabelDomain("integer", -3, 12)
REAL = LabelDomain("real", -1.0, 2.0)
SMALL_REAL = LabelDomain("real", 0.0, 4.0)  # with step 0.125: J = 32
DELTA = 1e-5

PURE = ("laplace", "staircase", "exponential")


def make(name: str, eps: float, domain: LabelDomain, **kw):
    if name == "laplace":
        return Laplace(eps, domain, **kw).fit_to()
    if name == "staircase":
        return Staircase(eps, domain, **kw).fit_to()
    if name == "gaussian":
        return Gaussian(eps, domain, kw.pop("delta", DELTA), **kw).fit_to()
    kw.pop("clip", None)
    return Exponential(eps, domain, **kw).fit_to()


# -- independent reference laws (straight from the definitions) -------------


def reference_noise(mech, ks: np.ndarray) -> np.ndarray:
    """Unnormalized noise weights from the papers' formulas, not from the class's closed forms."""
    J, eps = mech.n_steps_, mech.epsilon
    if isinstance(mech, Staircase):  # Def. 24 with Δ = J, by its recursive definition
        b, r = math.exp(-eps), mech.r_
        m = np.abs(ks)
        first = np.where(m % J < r, 1.0, b)  # p_r(i) for 0 ≤ i < Δ
        return first * b ** (m // J)
    if isinstance(mech, Gaussian):
        s = mech.sigma_
        return special.ndtr((ks + 0.5) / s) - special.ndtr((ks - 0.5) / s)
    return np.exp(-eps * np.abs(ks) / J)


def reach_of(mech) -> int:
    """Noise support to sum over: beyond it the mass is < e^{-40}."""
    if isinstance(mech, Gaussian):
        return int(12 * mech.sigma_) + 10
    return int(40 * mech.n_steps_ / mech.epsilon) + mech.n_steps_


def reference_output_pmf(mech, label: float, indices: np.ndarray) -> np.ndarray:
    """Pr[output index ∈ indices], pushing the truncated noise through the clip term by term."""
    J, reach = mech.n_steps_, reach_of(mech)
    j0 = int(np.argmin(np.abs(mech.lattice_ - np.clip(label, mech.domain.low, mech.domain.high))))
    if isinstance(mech, Exponential):
        w = np.exp(-mech.epsilon * np.abs(np.arange(J + 1) - j0) / (2 * J))
        full = w / w.sum()
        return np.where((indices >= 0) & (indices <= J), full[np.clip(indices, 0, J)], 0.0)
    ks = np.arange(-reach, reach + 1)
    noise = reference_noise(mech, ks)
    noise = noise / noise.sum()
    outs = j0 + ks
    if mech.clip:
        outs = np.clip(outs, 0, J)
    lo = min(int(outs.min()), int(indices.min()))
    pmf = np.zeros(max(int(outs.max()), int(indices.max())) - lo + 1)
    np.add.at(pmf, outs - lo, noise)
    return pmf[indices - lo]


def table(mech, labels: np.ndarray, indices: np.ndarray | None = None) -> np.ndarray:
    return np.array([mech.output_probabilities(y, indices) for y in labels])


def max_ratio(rows: np.ndarray) -> float:
    """max over outputs o and inputs a, b of P(o | a)/P(o | b)."""
    return float(np.max(rows.max(axis=0) / rows.min(axis=0)))


def hockey_stick(p: np.ndarray, q: np.ndarray, eps: float) -> float:
    """δ of the pair: Σ_o max(0, P(o) − e^ε Q(o))."""
    return float(np.sum(np.maximum(0.0, p - math.exp(eps) * q)))


# -- lattice ------------------------------------------------------------------


def test_lattice_of_each_variant() -> None:
    c = Laplace(1.0, REAL).fit_to()
    assert c.variant_ == "continuous" and c.n_steps_ == CONTINUOUS_STEPS
    assert c.step_ == pytest.approx(3.0 / 2**16) and c.lattice_[0] == -1.0 and c.lattice_[-1] == 2.0
    d = Laplace(1.0, INTEGER).fit_to()
    assert d.variant_ == "discrete" and d.step_ == 1.0 and d.n_steps_ == 15
    np.testing.assert_array_equal(d.lattice_, np.arange(-3.0, 13.0))
    assert Laplace(1.0, INTEGER, variant="continuous").fit_to().n_steps_ == 2**16
    assert Laplace(1.0, REAL, variant="discrete").fit_to().n_steps_ == 1024
    assert Staircase(1.0, SMALL_REAL, step=0.125).fit_to().n_steps_ == 32


@pytest.mark.parametrize("name", ["laplace", "staircase", "gaussian", "exponential"])
@pytest.mark.parametrize("domain", [INTEGER, REAL])
@pytest.mark.parametrize("variant", ["continuous", "discrete"])
def test_outputs_on_the_lattice_and_inside_the_domain(name: str, domain: LabelDomain, variant: str) -> None:
    mech = make(name, 0.3, domain, variant=variant)
    rng = np.random.default_rng(0)
    labels = rng.uniform(domain.low - 5, domain.high + 5, 20_000)
    out = mech.privatize(labels, rng)
    assert out.shape == labels.shape and out.dtype == np.float64
    assert np.all((out >= domain.low) & (out <= domain.high))
    index = np.rint((out - domain.low) / mech.step_).astype(np.int64)
    np.testing.assert_array_equal(out, mech.lattice_value(index))  # bit-exact lattice values
    if variant == "discrete" and domain.kind == "integer":
        assert np.all(out == np.round(out))
    # 2-D input keeps its shape.
    assert mech.privatize(labels.reshape(100, 200), rng).shape == (100, 200)


@pytest.mark.parametrize("name", ["laplace", "staircase", "gaussian"])
def test_unclipped_outputs_stay_on_the_lattice(name: str) -> None:
    mech = make(name, 0.2, REAL, clip=False)
    rng = np.random.default_rng(1)
    out = mech.privatize(np.full(20_000, 0.5), rng)
    assert np.mean((out < REAL.low) | (out > REAL.high)) > 0.3  # ε = 0.2: mostly outside
    index = np.rint((out - REAL.low) / mech.step_).astype(np.int64)
    np.testing.assert_array_equal(out, mech.lattice_value(index))


# -- exact laws ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["laplace", "staircase", "gaussian", "exponential"])
@pytest.mark.parametrize("eps", [0.1, 1.0, 4.0])
@pytest.mark.parametrize("clip", [True, False])
def test_output_probabilities_match_the_definitions(name: str, eps: float, clip: bool) -> None:
    mech = make(name, eps, SMALL_REAL, step=0.125, clip=clip)
    J = mech.n_steps_
    wide = np.arange(-6 * J, 7 * J + 1)
    for label in [0.0, 0.06, 1.3, 4.0, 9.0]:
        default = mech.output_probabilities(label)
        assert default.shape == (J + 1,) and np.all(default >= 0)
        probs = mech.output_probabilities(label, wide)
        np.testing.assert_allclose(probs, reference_output_pmf(mech, label, wide), rtol=1e-9, atol=1e-15)
        if clip or name == "exponential":
            assert default.sum() == pytest.approx(1.0, abs=1e-12)
            assert probs.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("name", ["laplace", "staircase", "gaussian"])
@pytest.mark.parametrize("eps", [1e-3, 0.5, 8.0])
def test_noise_law_is_normalized_with_exact_moments(name: str, eps: float) -> None:
    mech = make(name, eps, LabelDomain("integer", 0, 7))
    reach = int(60 * max(mech.n_steps_ / eps, getattr(mech, "sigma_", 0))) + 50
    ks = np.arange(-reach, reach + 1)
    pmf = mech.noise_pmf(ks)
    assert pmf.sum() == pytest.approx(1.0, rel=1e-9)
    assert mech.noise_second_moment() == pytest.approx(float(np.dot(ks.astype(float) ** 2, pmf)), rel=1e-8)
    t = np.arange(0, 3 * mech.n_steps_)
    tail = np.array([pmf[ks > s].sum() for s in t])
    np.testing.assert_allclose(mech.noise_survival(t), tail, rtol=1e-8, atol=1e-300)


@pytest.mark.parametrize("sigma", [0.2, 0.7, 1.5, 3.0, 7.5])
def test_rounded_gaussian_second_moment(sigma: float) -> None:
    mech = Gaussian(1.0, LabelDomain("integer", 0, 1), DELTA).fit_to()
    mech.sigma_ = sigma
    ks = np.arange(-int(60 * sigma) - 5, int(60 * sigma) + 6).astype(float)
    direct = float(np.dot(ks**2, special.ndtr((ks + 0.5) / sigma) - special.ndtr((ks - 0.5) / sigma)))
    assert mech.noise_second_moment() == pytest.approx(direct, rel=1e-12)
    if sigma >= 3.0:
        assert mech.noise_second_moment() == sigma**2 + 1 / 12  # Sheppard, exact here


# -- privacy: exact ratios, δ profile -----------------------------------------


@pytest.mark.parametrize("name", PURE)
@pytest.mark.parametrize("eps", [0.05, 0.5, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("clip", [True, False])
def test_every_pair_ratio_is_at_most_e_epsilon_small_lattices(name: str, eps: float, clip: bool) -> None:
    for domain, step in [(LabelDomain("integer", 0, 9), None), (LabelDomain("integer", 0, 1), None),
                         (SMALL_REAL, 0.125), (LabelDomain("real", -1.0, 1.0), 2 / 101)]:
        mech = make(name, eps, domain, step=step, clip=clip)
        J = mech.n_steps_
        indices = np.arange(J + 1) if (clip or name == "exponential") else np.arange(-3 * J, 4 * J + 1)
        rows = table(mech, mech.lattice_, indices)
        assert max_ratio(rows) <= math.exp(eps) * (1 + 1e-9), (domain, step)
        if name == "exponential":  # observed: the exact loss is ε/2, the factor 2 of Def. 26 is slack here
            assert max_ratio(rows) == pytest.approx(math.exp(eps / 2), rel=1e-9)


@pytest.mark.parametrize("name", ["laplace", "staircase"])
@pytest.mark.parametrize("eps", [0.1, 1.0, 5.0])
def test_fine_lattice_ratio_and_tightness(name: str, eps: float) -> None:
    mech = make(name, eps, REAL)  # continuous: J = 65 536
    low, high = mech.output_probabilities(REAL.low), mech.output_probabilities(REAL.high)
    assert max_ratio(np.vstack([low, high])) == pytest.approx(math.exp(eps), rel=1e-9)  # tight at the ends
    labels = np.concatenate(([REAL.low, REAL.high], np.random.default_rng(2).uniform(-1, 2, 30)))
    assert max_ratio(table(mech, labels)) <= math.exp(eps) * (1 + 1e-9)
    assert mech.guarantee.epsilon == eps and mech.guarantee.delta == 0.0
    assert mech.guarantee.sensitivity == REAL.width


@pytest.mark.parametrize("eps", [0.1, 1.0, 5.0])
def test_exponential_fine_lattice_ratio(eps: float) -> None:
    mech = make("exponential", eps, REAL)
    labels = np.concatenate(([REAL.low, REAL.high, 0.5], np.random.default_rng(3).uniform(-1, 2, 20)))
    assert max_ratio(table(mech, labels)) <= math.exp(eps) * (1 + 1e-9)


@pytest.mark.parametrize("eps", [0.05, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6])
def test_gaussian_privacy_profile(eps: float, delta: float) -> None:
    # Clipped, fine lattice: the extreme pair and random pairs, both orders.
    mech = make("gaussian", eps, REAL, delta=delta)
    labels = np.concatenate(([REAL.low, REAL.high], np.random.default_rng(4).uniform(-1, 2, 6)))
    rows = table(mech, labels)
    worst = max(hockey_stick(p, q, eps) for p in rows for q in rows)
    assert worst <= delta * (1 + 1e-9)
    # Unclipped, J = 1024: shift J is the worst case and is nearly tight (rounding is post-processing).
    mech = make("gaussian", eps, REAL, delta=delta, variant="discrete", clip=False)
    J = mech.n_steps_
    reach = int(14 * mech.sigma_) + J
    idx = np.arange(-reach, reach + J + 1)
    p, q = mech.output_probabilities(REAL.low, idx), mech.output_probabilities(REAL.high, idx)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    profile = max(hockey_stick(p, q, eps), hockey_stick(q, p, eps))
    assert 0.98 * delta <= profile <= delta * (1 + 1e-9)
    assert mech.guarantee.delta == delta and mech.guarantee.epsilon == eps


@pytest.mark.parametrize("eps", [0.01, 0.1, 0.5, 1.0, 2.0, 8.0])
@pytest.mark.parametrize("delta", [1e-2, 1e-5, 1e-10])
def test_analytic_gaussian_calibration(eps: float, delta: float) -> None:
    sigma = analytic_gaussian_sigma(eps, delta, 2.5)
    a, b = 2.5 / (2 * sigma), eps * sigma / 2.5
    direct = special.ndtr(a - b) - math.exp(eps) * special.ndtr(-a - b)  # Balle & Wang, Thm. 8
    assert direct <= delta * (1 + 1e-9)
    assert analytic_gaussian_delta(sigma * (1 - 1e-9), eps, 2.5) > delta  # the smallest such σ
    assert analytic_gaussian_sigma(eps, delta, 1.0) * 2.5 == pytest.approx(sigma, rel=1e-10)
    if eps <= 1.0:
        assert sigma < classical_gaussian_sigma(eps, delta, 2.5)
    mech = Gaussian(eps, REAL, delta).fit_to()
    assert mech.sigma_label_ == pytest.approx(analytic_gaussian_sigma(eps, delta, REAL.width), rel=1e-10)
    assert mech.sigma_ == pytest.approx(mech.sigma_label_ / mech.step_, rel=1e-10)


def test_exponential_scale_is_two_delta_over_epsilon() -> None:
    for eps in [0.05, 1.0, 6.0]:
        mech = make("exponential", eps, REAL)
        assert mech.scale_ == pytest.approx(2 * REAL.width / eps)
        assert mech.alpha_ == pytest.approx(math.exp(-mech.step_ / mech.scale_), rel=1e-12)
        p0 = mech.output_probabilities(REAL.low)
        pj = mech.output_probabilities(REAL.high)
        # P(low | low)/P(low | high) = e^{ε/2} exactly: the score half of the budget.
        assert p0[0] / pj[0] == pytest.approx(math.exp(eps / 2), rel=1e-9)
        out = mech.privatize(np.full(50_000, 2.0), np.random.default_rng(5))
        assert out.min() >= REAL.low and out.max() <= REAL.high


# -- empirical frequencies ----------------------------------------------------


@pytest.mark.parametrize("name", ["laplace", "staircase", "gaussian", "exponential"])
@pytest.mark.parametrize("clip", [True, False])
def test_empirical_frequencies_match_the_pmf(name: str, clip: bool) -> None:
    mech = make(name, 1.5, LabelDomain("integer", 0, 10), clip=clip)
    rng = np.random.default_rng(12345)
    n = 200_000
    for label in [0.0, 3.0, 9.6]:
        out = mech.privatize(np.full(n, label), rng)
        idx = np.arange(-10, 21)
        values = mech.lattice_value(idx)
        freq = np.array([np.count_nonzero(out == v) for v in values]) / n
        expected = mech.output_probabilities(label, idx)
        bound = 5 * np.sqrt(expected * (1 - expected) / n) + 1 / n
        assert np.all(np.abs(freq - expected) <= bound), (label, freq, expected)
        assert np.mean((out < values[0]) | (out > values[-1])) <= 1 - expected.sum() + 5 / np.sqrt(n)


@pytest.mark.parametrize("name", ["laplace", "staircase", "gaussian", "exponential"])
def test_fine_lattice_binned_frequencies(name: str) -> None:
    mech = make(name, 2.0, REAL)  # J = 65 536, 16 bins of 4096 lattice points
    rng = np.random.default_rng(7)
    n = 200_000
    out = mech.privatize(np.full(n, 0.3), rng)
    index = np.rint((out - REAL.low) / mech.step_).astype(np.int64)
    pmf = mech.output_probabilities(0.3)
    edges = np.arange(0, mech.n_steps_ + 1, 4096)
    expected = np.add.reduceat(pmf, edges)
    freq = np.bincount(np.searchsorted(edges, index, side="right") - 1, minlength=edges.size) / n
    bound = 5 * np.sqrt(expected * (1 - expected) / n) + 1 / n
    assert np.all(np.abs(freq - expected) <= bound)


# -- exact expected loss and conditional mean ---------------------------------


@pytest.mark.parametrize("name", ["laplace", "staircase", "gaussian", "exponential"])
@pytest.mark.parametrize("clip", [True, False])
def test_expected_loss_and_conditional_mean_are_exact(name: str, clip: bool) -> None:
    mech = make(name, 1.5, SMALL_REAL, step=0.25, clip=clip)
    J = mech.n_steps_
    grid = np.linspace(-0.5, 4.5, 23)  # includes labels off the lattice and outside the domain
    probs = np.random.default_rng(3).dirichlet(np.ones(23))
    probs[5] = 0.0
    probs /= probs.sum()
    idx = np.arange(-40 * J, 41 * J + 1)
    values = mech.lattice_value(idx)
    brute_loss, brute_mean = 0.0, []
    for y, py in zip(grid, probs):
        pmf = reference_output_pmf(mech, y, idx)
        brute_loss += py * float(np.dot(pmf, (values - y) ** 2))
        brute_mean.append(float(np.dot(pmf, values)))
    assert mech.loss_under(Prior(grid, probs)) == pytest.approx(brute_loss, rel=1e-9)
    np.testing.assert_allclose(mech.conditional_mean(grid), brute_mean, rtol=1e-9, atol=1e-12)
    # Monte Carlo of the same numbers.
    rng = np.random.default_rng(12345)
    labels = rng.choice(grid, p=probs, size=200_000)
    noisy = mech.privatize(labels, rng)
    assert float(np.mean((noisy - labels) ** 2)) == pytest.approx(brute_loss, rel=0.03)
    for y, m in zip(grid[::5], brute_mean[::5]):
        sample = mech.privatize(np.full(100_000, y), rng)
        assert abs(sample.mean() - m) <= 5 * sample.std() / math.sqrt(sample.size)


@pytest.mark.parametrize("name", ["laplace", "staircase", "gaussian", "exponential"])
def test_fine_lattice_loss_matches_the_pmf(name: str) -> None:
    mech = make(name, 0.7, REAL)
    lattice = mech.lattice_
    grid = np.array([-1.0, -0.2, 0.9, 2.0])
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    brute = sum(p * float(np.dot(mech.output_probabilities(y), (lattice - y) ** 2)) for y, p in zip(grid, probs))
    assert mech.loss_under(Prior(grid, probs)) == pytest.approx(brute, rel=1e-9)
    means = [float(np.dot(mech.output_probabilities(y), lattice)) for y in grid]
    np.testing.assert_allclose(mech.conditional_mean(grid), means, rtol=1e-9)


def test_clipping_helps_and_changes_the_mean() -> None:
    grid, probs = np.linspace(0, 4, 9), np.full(9, 1 / 9)
    for cls in (Laplace, Staircase):
        clipped = cls(0.5, SMALL_REAL).fit_to()
        raw = cls(0.5, SMALL_REAL, clip=False).fit_to()
        assert clipped.loss_under(Prior(grid, probs)) < 0.5 * raw.loss_under(Prior(grid, probs))
        assert clipped.conditional_mean(np.array([0.0]))[0] > 0.3  # pulled towards the middle
        assert raw.conditional_mean(np.array([0.0]))[0] == 0.0


# -- staircase parameters -----------------------------------------------------


def test_staircase_r() -> None:
    for eps in [0.2, 1.0, 3.0]:
        cont = Staircase(eps, REAL).fit_to()
        assert cont.r_ == round(staircase_gamma(eps) * 2**16) and cont.gamma_ == cont.r_ / 2**16
        disc = Staircase(eps, LabelDomain("integer", 0, 12)).fit_to()
        ks = np.arange(-4000, 4001)

        def mean_abs(r: int, eps: float = eps, ks: np.ndarray = ks) -> float:
            m = Staircase(eps, LabelDomain("integer", 0, 12), gamma=r / 12).fit_to()
            assert m.r_ == r
            return float(np.dot(np.abs(ks), m.noise_pmf(ks)))

        costs = [mean_abs(r) for r in range(1, 13)]
        assert disc.r_ == 1 + int(np.argmin(costs))
        big = Staircase(eps, LabelDomain("integer", 0, 4000)).fit_to()
        assert big.gamma_ == pytest.approx(staircase_gamma(eps), abs=2e-3)  # discrete → γ*
    assert Staircase(1.0, LabelDomain("integer", 0, 1)).fit_to().r_ == 1  # Δ = 1: discrete Laplace


# -- specs --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["laplace", "staircase", "gaussian", "exponential"])
@pytest.mark.parametrize("domain,variant", [(REAL, "continuous"), (INTEGER, "discrete"), (REAL, "discrete")])
def test_spec_round_trip(name: str, domain: LabelDomain, variant: str) -> None:
    mech = make(name, 0.8, domain, variant=variant)
    spec = mech.to_spec()
    assert spec.name == name == type(mech).name and spec.epsilon == 0.8 and spec.variant == variant
    assert spec.domain == domain.to_spec()
    again = type(spec).model_validate_json(spec.model_dump_json())
    rebuilt = type(mech).from_spec(again)
    assert rebuilt.n_steps_ == mech.n_steps_ and rebuilt.step_ == mech.step_
    np.testing.assert_array_equal(rebuilt.output_probabilities(0.4), mech.output_probabilities(0.4))


def test_spec_contents() -> None:
    lap = Laplace(0.5, REAL).fit_to().to_spec()
    assert isinstance(lap, LaplaceSpec) and lap.variant == "continuous" and lap.clip
    assert lap.scale == pytest.approx(3.0 / 0.5) and lap.step == pytest.approx(3.0 / 2**16)
    st = Staircase(0.5, INTEGER, clip=False).fit_to().to_spec()
    assert isinstance(st, StaircaseSpec) and not st.clip and st.gamma == st.r / 15
    ga = Gaussian(0.5, REAL, 1e-6).fit_to().to_spec()
    assert isinstance(ga, GaussianSpec) and ga.delta == 1e-6
    assert ga.sigma == pytest.approx(analytic_gaussian_sigma(0.5, 1e-6, 3.0))
    ex = Exponential(0.5, REAL).fit_to().to_spec()
    assert isinstance(ex, ExponentialSpec) and ex.scale == pytest.approx(2 * 3.0 / 0.5)
    with pytest.raises(ValueError):
        Laplace.from_spec(lap.model_copy(update={"scale": 7.0}))


def test_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError):
        Laplace(0.0, REAL).fit_to()
    with pytest.raises(ValueError):
        Staircase(1.0, REAL, step=-1.0).fit_to()
    with pytest.raises(ValueError):
        Staircase(1.0, REAL, gamma=1.5).fit_to()
    with pytest.raises(ValueError):
        Laplace(1.0, REAL, variant="fine").fit_to()  # type: ignore[arg-type]
    for delta in [0.0, 1.0, -1e-3]:
        with pytest.raises(ValueError):
            Gaussian(1.0, REAL, delta).fit_to()
    with pytest.raises(ValueError):
        Exponential(1.0, REAL).fit_to().privatize(np.array([np.nan]), np.random.default_rng(0))


# -- power: the checks above fail on a mechanism calibrated to 1.5 ε ----------


class LaplaceAt15(Laplace):
    def _fit_noise(self, epsilon: float) -> None:
        super()._fit_noise(1.5 * epsilon)


class StaircaseAt15(Staircase):
    def _fit_noise(self, epsilon: float) -> None:
        super()._fit_noise(1.5 * epsilon)


class GaussianAt15(Gaussian):
    def _fit_noise(self, epsilon: float) -> None:
        super()._fit_noise(1.5 * epsilon)


class ExponentialAt15(Exponential):
    def _fit_noise(self, epsilon: float) -> None:
        super()._fit_noise(1.5 * epsilon)


@pytest.mark.parametrize("broken", [LaplaceAt15, StaircaseAt15])
@pytest.mark.parametrize("domain,step", [(LabelDomain("integer", 0, 9), None), (REAL, None)])
def test_ratio_check_catches_a_planted_bug(broken, domain: LabelDomain, step) -> None:
    eps = 1.0
    mech = broken(eps, domain, step=step).fit_to()
    rows = np.vstack([mech.output_probabilities(domain.low), mech.output_probabilities(domain.high)])
    assert max_ratio(rows) > math.exp(eps) * 1.4  # ≈ e^{1.5ε}


def test_delta_check_catches_a_planted_bug() -> None:
    eps, delta = 1.0, 1e-5
    mech = GaussianAt15(eps, REAL, delta, variant="discrete", clip=False).fit_to()
    J = mech.n_steps_
    idx = np.arange(-int(14 * mech.sigma_) - J, int(14 * mech.sigma_) + 2 * J)
    p, q = mech.output_probabilities(REAL.low, idx), mech.output_probabilities(REAL.high, idx)
    assert hockey_stick(p, q, eps) > 10 * delta


def test_exponential_scale_check_catches_a_planted_bug() -> None:
    eps = 1.0
    mech = ExponentialAt15(eps, REAL).fit_to()
    ratio = mech.output_probabilities(REAL.low)[0] / mech.output_probabilities(REAL.high)[0]
    assert ratio > math.exp(eps / 2) * 1.2  # e^{0.75ε}: the scale is no longer 2Δ/ε
