"""Discrete Laplace baseline: lattice outputs, exact distribution, DP ratio, exact loss."""

from __future__ import annotations

import math

import numpy as np
import pytest

from labeldp.mechanisms import LabelDomain, Laplace
from labeldp.mechanisms.contract import Prior
from labeldp.specs.laplace import LaplaceSpec

INTEGER = LabelDomain("integer", -3, 12)
REAL = LabelDomain("real", -1.0, 2.0)


def independent_output_pmf(mech: Laplace, label: float, reach: int = 4000) -> np.ndarray:
    """Pr[output index] by pushing the truncated noise pmf through the clip, term by term."""
    J = mech.n_steps_
    j0 = int(np.argmin(np.abs(mech.lattice_ - label)))
    ks = np.arange(-reach, reach + 1)
    weights = np.exp(-mech.epsilon * np.abs(ks) / J)
    noise = weights / weights.sum()
    pmf = np.zeros(J + 1)
    np.add.at(pmf, np.clip(j0 + ks, 0, J), noise)
    return pmf


def test_fit_sets_the_lattice() -> None:
    m = Laplace(1.0, INTEGER, variant="discrete").fit_to()
    assert m.step_ == 1.0 and m.n_steps_ == 15 and m.alpha_ == pytest.approx(math.exp(-1.0 / 15))
    np.testing.assert_array_equal(m.lattice_, np.arange(-3.0, 13.0))
    r = Laplace(1.0, REAL, variant="discrete").fit_to()
    assert r.n_steps_ == 1024 and r.step_ == pytest.approx(3.0 / 1024)
    assert r.lattice_[0] == -1.0 and r.lattice_[-1] == 2.0
    odd = Laplace(1.0, LabelDomain("real", 0.0, 1.0), variant="discrete", step=0.3).fit_to()
    assert odd.n_steps_ == 3 and odd.step_ == pytest.approx(1 / 3)  # the lattice spans the domain


@pytest.mark.parametrize("domain", [INTEGER, REAL])
def test_outputs_are_lattice_points_within_the_domain(domain: LabelDomain) -> None:
    mech = Laplace(0.7, domain, variant="discrete").fit_to()
    rng = np.random.default_rng(0)
    labels = rng.uniform(domain.low - 5, domain.high + 5, 50_000)  # also outside the domain
    out = mech.privatize(labels, rng)
    assert out.shape == labels.shape
    assert np.all((out >= domain.low) & (out <= domain.high))
    assert np.all(np.isin(out, mech.lattice_))
    if domain.kind == "integer":
        assert np.all(out == np.round(out))


@pytest.mark.parametrize("eps", [1e-6, 0.1, 1.0, 5.0, 60.0])
def test_output_probabilities_are_exact_and_sum_to_one(eps: float) -> None:
    mech = Laplace(eps, LabelDomain("integer", 0, 20), variant="discrete").fit_to()
    for label in [0.0, 1.0, 7.4, 19.0, 20.0, -3.0, 40.0]:
        probs = mech.output_probabilities(label)
        assert probs.shape == (21,) and np.all(probs >= 0)
        assert probs.sum() == pytest.approx(1.0, abs=1e-12)
        if 0.1 <= eps <= 5.0:  # where truncating the noise at ±4000 loses < 1e-8
            np.testing.assert_allclose(probs, independent_output_pmf(mech, label), rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("eps", [0.2, 1.0, 3.0])
@pytest.mark.parametrize("domain", [LabelDomain("integer", 0, 9), LabelDomain("real", -1.0, 1.0)])
def test_probability_ratio_is_at_most_e_epsilon(eps: float, domain: LabelDomain) -> None:
    mech = Laplace(eps, domain, variant="discrete").fit_to()
    labels = mech.lattice_ if domain.kind == "integer" else mech.lattice_[::16]
    table = np.array([mech.output_probabilities(y) for y in labels])
    ratio = table.max(axis=0) / table.min(axis=0)
    assert np.all(ratio <= math.exp(eps) * (1 + 1e-9))
    extremes = mech.output_probabilities(domain.low) / mech.output_probabilities(domain.high)
    assert extremes.max() == pytest.approx(math.exp(eps), rel=1e-9)  # tight at the domain ends
    g = mech.guarantee
    assert g.epsilon == eps and g.sensitivity == domain.high - domain.low


def test_empirical_frequencies_match() -> None:
    mech = Laplace(2.0, LabelDomain("integer", 0, 10), variant="discrete").fit_to()
    rng = np.random.default_rng(12345)
    n = 200_000
    for label in [0.0, 3.0, 9.6]:
        out = mech.privatize(np.full(n, label), rng)
        freq = np.array([np.count_nonzero(out == v) for v in mech.lattice_]) / n
        expected = mech.output_probabilities(label)
        bound = 5 * np.sqrt(expected * (1 - expected) / n) + 1 / n
        assert np.all(np.abs(freq - expected) <= bound), (label, freq, expected)


def test_expected_loss_matches_brute_force() -> None:
    mech = Laplace(1.5, LabelDomain("real", 0.0, 4.0), variant="discrete", step=0.25).fit_to()
    grid = np.linspace(0.0, 4.0, 23)
    probs = np.random.default_rng(3).dirichlet(np.ones(23))
    probs[5] = 0.0
    probs /= probs.sum()
    lattice = mech.lattice_
    brute = 0.0
    for y, py in zip(grid, probs):
        pmf = independent_output_pmf(mech, y)
        for value, pv in zip(lattice, pmf):
            brute += py * pv * (value - y) ** 2
    assert mech.loss_under(Prior(grid, probs)) == pytest.approx(brute, rel=1e-9)
    # And a Monte Carlo check of the same number.
    rng = np.random.default_rng(12345)
    labels = rng.choice(grid, p=probs, size=200_000)
    mc = float(np.mean((mech.privatize(labels, rng) - labels) ** 2))
    assert mc == pytest.approx(brute, rel=0.02)


def test_spec() -> None:
    mech = Laplace(0.5, REAL, variant="discrete").fit_to()
    spec = mech.to_spec()
    assert isinstance(spec, LaplaceSpec)
    assert spec.variant == "discrete" and spec.clip and spec.epsilon == 0.5
    assert spec.scale == pytest.approx(3.0 / 0.5) and spec.step == pytest.approx(3.0 / 1024)
    assert spec.domain == REAL.to_spec()
    # scale and step describe the same noise: α = exp(−step / scale)
    assert mech.alpha_ == pytest.approx(math.exp(-spec.step / spec.scale), rel=1e-12)


def test_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError):
        Laplace(0.0, REAL, variant="discrete").fit_to()
    with pytest.raises(ValueError):
        Laplace(1.0, REAL, variant="discrete", step=-1.0).fit_to()
    with pytest.raises(ValueError):
        Laplace(1.0, REAL, variant="discrete").fit_to().privatize(np.array([np.inf]), np.random.default_rng(0))
