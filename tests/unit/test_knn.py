"""Laplace + k-NN reference learner (theoretical-limits paper, Thm 6 and Thm 10)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial import cKDTree

from labeldp.mechanisms import LabelDomain, Laplace
from labeldp_research import knn
from labeldp_research.knn import (
    LaplaceKNNRegressor,
    knn_average,
    knn_average_reference,
    theorem6_k,
    theorem6_rate,
    theorem10_k,
    theorem10_threshold,
)

UNIT = LabelDomain("real", -1.0, 1.0)


def smooth(X: np.ndarray) -> np.ndarray:
    return 0.5 * np.sin(2 * np.pi * X[:, 0]) * np.cos(np.pi * X[:, 1])


# --------------------------------------------------------------------------- #
# The k rule and the threshold are the theorems' formulas                      #
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("n", "eps", "d", "beta", "cap", "expected"),
    [
        (10_000, 0.5, 2, 1.0, 1.0, 200),  # √N / ε
        (10_000, 2.0, 2, 1.0, 1.0, 100),  # ε ∧ 1: no further shrinking
        (10_000, 2.0, 2, 1.0, None, 50),  # uncapped
        (1_000, 0.125, 1, 1.0, 1.0, 400),  # N^{2/3} ε^{−2/3}
        (4_096, 1.0, 4, 1.0, 1.0, 16),  # N^{1/3}
        (10, 0.01, 2, 1.0, 1.0, 10),  # clipped to N
    ],
)
def test_theorem6_k_matches_the_formula(n, eps, d, beta, cap, expected):
    assert theorem6_k(n, eps, d, beta, epsilon_cap=cap) == expected
    e = eps if cap is None else min(eps, cap)
    raw = n ** (2 * beta / (d + 2 * beta)) * e ** (-2 * d / (d + 2 * beta))
    assert expected == min(n, max(1, round(raw)))


@pytest.mark.parametrize("beta", [0.5, 1.0])
def test_theorem6_k_general_smoothness_and_scale(beta):
    n, eps, d = 50_000, 0.3, 3
    raw = 2.5 * n ** (2 * beta / (d + 2 * beta)) * eps ** (-2 * d / (d + 2 * beta))
    assert theorem6_k(n, eps, d, beta, scale=2.5) == round(raw)
    assert theorem6_rate(n, eps, d, beta) == pytest.approx((n * eps**2) ** (-2 * beta / (d + 2 * beta)))


def test_estimator_uses_the_theorem6_rule():
    rng = np.random.default_rng(1)
    X = rng.random((5_000, 2))
    model = LaplaceKNNRegressor(0.5, UNIT).fit(X, smooth(X), rng)
    assert model.k_ == theorem6_k(5_000, 0.5, 2) == round(math.sqrt(5_000) / 0.5)
    assert model.rule_ == "theorem6" and model.clip_ == 1.0
    assert LaplaceKNNRegressor(0.5, UNIT, k=7).fit(X, smooth(X), rng).k_ == 7


def test_theorem10_k_and_threshold_match_the_formulas():
    n, eps, d, p = 10_000, 1.0, 2, 2.0
    private = (n * eps**2) ** (2 * p / (2 * p + d * (p - 1)))  # (Nε²)^{2pβ/(2pβ+d(p−1))}
    public = n ** (2 / (2 + d))
    assert theorem10_k(n, eps, d, p) == round(max(private, public)) == 464
    # Small ε: the non-private term N^{2β/(2β+d)} wins the ∨.
    assert theorem10_k(n, 0.01, d, p) == round(n**0.5)
    k, m = 464, 3.0
    t = theorem10_threshold(k, eps, p, moment_bound=m)
    assert t == pytest.approx((m * m * k * eps**2 / (8 * (p - 1))) ** (1 / (2 * p)))
    assert theorem10_threshold(16 * k, eps, p, m) == pytest.approx(t * 16 ** (1 / (2 * p)))  # T ∼ (kε²)^{1/(2p)}


def test_theorem10_threshold_minimizes_clipping_bias_plus_laplace_variance():
    # Eq. (180): (M_p/(p−1))² T^{2(1−p)} + 8T²/(kε²); the threshold is its minimizer.
    k, eps, p, m = 300, 0.7, 3.0, 2.0
    bound = lambda t: (m / (p - 1)) ** 2 * t ** (2 * (1 - p)) + 8 * t * t / (k * eps * eps)  # noqa: E731
    t = theorem10_threshold(k, eps, p, m)
    grid = np.linspace(0.2 * t, 5 * t, 20_001)
    assert abs(grid[np.argmin(bound(grid))] - t) < 1e-3 * t


def test_rules_reject_bad_parameters():
    with pytest.raises(ValueError):
        theorem6_k(100, 1.0, 2, smoothness=1.5)
    with pytest.raises(ValueError):
        theorem10_k(100, 1.0, 2, tail_exponent=1.5)
    with pytest.raises(ValueError):
        theorem6_k(100, 0.0, 2)
    X = np.zeros((10, 2))
    with pytest.raises(ValueError, match="exactly one"):
        LaplaceKNNRegressor(1.0).fit(X, np.zeros(10), np.random.default_rng(0))
    with pytest.raises(ValueError, match="exactly one"):
        LaplaceKNNRegressor(1.0, UNIT, clip_threshold=1.0).fit(X, np.zeros(10), np.random.default_rng(0))


# --------------------------------------------------------------------------- #
# The k-NN average                                                             #
# --------------------------------------------------------------------------- #


def test_knn_average_matches_brute_force(monkeypatch):
    rng = np.random.default_rng(2)
    train, query, values = rng.random((300, 3)), rng.random((57, 3)), rng.normal(size=300)
    tree = cKDTree(train)
    monkeypatch.setattr(knn, "QUERY_CHUNK", 40)  # several chunks, one of them partial
    for k in (1, 5, 17):
        np.testing.assert_allclose(
            knn_average(tree, values, query, k), knn_average_reference(train, values, query, k), rtol=1e-12
        )


def test_consistent_when_noise_is_small():
    # ε large, labels noiseless: the excess risk shrinks with N and is small.
    risks = []
    for n in (2_000, 32_000):
        rng = np.random.default_rng(n)
        X, X_test = rng.random((n, 2)), rng.random((2_000, 2))
        model = LaplaceKNNRegressor(50.0, UNIT).fit(X, smooth(X), rng)
        risks.append(float(np.mean((model.predict(X_test) - smooth(X_test)) ** 2)))
    assert risks[1] < 0.5 * risks[0]
    assert risks[1] < 2e-3


def test_risk_follows_the_rate_at_moderate_epsilon():
    # ε = 1, d = 2: risk ∼ (Nε²)^{−1/2}, so 16× the data should cut it by about 4 (not 2, not 16),
    # and at N = 64 000 it is below Var f (the trivial predictor's risk).
    risks = []
    for n in (4_000, 64_000):
        rng = np.random.default_rng(n)
        X, X_test = rng.random((n, 2)), rng.random((2_000, 2))
        y = smooth(X) + rng.uniform(-0.3, 0.3, n)
        model = LaplaceKNNRegressor(1.0, UNIT).fit(X, y, rng)
        risks.append(float(np.mean((model.predict(X_test) - smooth(X_test)) ** 2)))
    assert 2.5 < risks[0] / risks[1] < 6.5
    assert risks[1] < 0.6 * float(np.var(smooth(X_test)))


def test_large_epsilon_approaches_plain_knn():
    rng = np.random.default_rng(4)
    X, X_test = rng.random((3_000, 2)), rng.random((500, 2))
    y = smooth(X) + rng.uniform(-0.3, 0.3, 3_000)
    plain = knn_average_reference(X, y, X_test, 9)
    model = LaplaceKNNRegressor(1e6, UNIT, k=9).fit(X, y, rng)
    # Left: lattice snapping (≤ step/2 = 1.5e-5) plus noise of scale 2e-6.
    np.testing.assert_allclose(model.predict(X_test), plain, atol=1e-4)
    noisy = LaplaceKNNRegressor(1.0, UNIT, k=9).fit(X, y, rng)
    assert np.max(np.abs(noisy.predict(X_test) - plain)) > 0.1


# --------------------------------------------------------------------------- #
# Privacy: labels enter only through the Laplace mechanism                     #
# --------------------------------------------------------------------------- #


def test_fit_is_privatize_then_post_processing():
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    X = np.random.default_rng(6).random((2_000, 2))
    y = smooth(X)
    model = LaplaceKNNRegressor(0.8, UNIT).fit(X, y, rng_a)
    release = Laplace(0.8, UNIT, clip=False).fit_to().privatize(y, rng_b)
    twin = LaplaceKNNRegressor(0.8, UNIT).fit_privatized(X, release)
    np.testing.assert_array_equal(model.privatized_labels_, release)
    np.testing.assert_array_equal(model.predict(X[:100]), twin.predict(X[:100]))


def test_privatize_is_the_only_path_from_labels_to_the_model(monkeypatch):
    calls = []
    release = np.random.default_rng(7).normal(size=1_000)

    def fake_privatize(self, labels, rng):
        calls.append(np.array(labels, copy=True))
        return release

    monkeypatch.setattr(Laplace, "privatize", fake_privatize)
    X = np.random.default_rng(8).random((1_000, 2))
    query = np.random.default_rng(9).random((200, 2))
    y1 = smooth(X)
    y2 = np.random.default_rng(10).uniform(-1, 1, 1_000)
    m1 = LaplaceKNNRegressor(0.5, UNIT).fit(X, y1, np.random.default_rng(0))
    m2 = LaplaceKNNRegressor(0.5, UNIT).fit(X, y2, np.random.default_rng(1))
    assert len(calls) == 2
    np.testing.assert_array_equal(calls[0], y1)
    # Different labels, same release ⇒ the same model: y reaches it through privatize only.
    np.testing.assert_array_equal(m1.predict(query), m2.predict(query))
    for value in vars(m1).values():
        if isinstance(value, np.ndarray) and value.shape == y1.shape:
            assert not np.array_equal(value, y1)


def test_noise_is_the_papers_laplace_and_unclipped():
    # Z = Y + Lap(2T/ε): guarantee, scale, exact worst-case ratio and the empirical noise law.
    eps = 0.5
    X = np.zeros((4, 1))
    model = LaplaceKNNRegressor(eps, UNIT).fit_privatized(X, np.zeros(4))
    mech = model.mechanism_
    assert model.guarantee.epsilon == eps and model.guarantee.sensitivity == 2.0
    assert mech.scale_ == pytest.approx(2.0 / eps)
    assert mech.clip is False
    # Exact output law: extreme labels, a window of outputs well beyond the domain.
    idx = np.arange(-3 * mech.n_steps_, 4 * mech.n_steps_, 997)
    ratio = np.log(mech.output_probabilities(-1.0, idx)) - np.log(mech.output_probabilities(1.0, idx))
    assert np.max(np.abs(ratio)) <= eps + 1e-9
    assert np.max(np.abs(ratio)) >= eps - 1e-6  # tight: not over-noised either
    # Empirical: labels at the domain ends keep their mean (no output clipping) and the noise
    # variance is 2·(2T/ε)².
    rng = np.random.default_rng(11)
    y = np.repeat([-1.0, 1.0], 100_000)
    model = LaplaceKNNRegressor(eps, UNIT).fit(np.zeros((y.size, 1)), y, rng)
    z = model.privatized_labels_
    scale = 2.0 / eps
    for end in (-1.0, 1.0):
        sel = z[y == end]
        assert abs(sel.mean() - end) < 5 * math.sqrt(2) * scale / math.sqrt(sel.size)
    assert np.var(z - y) == pytest.approx(2 * scale**2, rel=0.03)


def test_heavy_tailed_labels_are_clipped_at_the_theorem10_threshold():
    p, m, eps, n = 3.0, 2.0, 1.0, 20_000
    X = np.random.default_rng(12).random((n, 2))
    model = LaplaceKNNRegressor(eps, tail_exponent=p, moment_bound=m)
    model.fit_privatized(X, np.zeros(n))
    assert model.rule_ == "theorem10"
    assert model.k_ == theorem10_k(n, eps, 2, p)
    t = theorem10_threshold(model.k_, eps, p, m)
    assert model.clip_ == pytest.approx(t)
    assert (model.domain_.low, model.domain_.high) == pytest.approx((-t, t))
    assert model.mechanism_.scale_ == pytest.approx(2 * t / eps)  # Lap(2T/ε)
    # Labels beyond T are indistinguishable from T itself: the same rng gives the same release.
    far = np.full(n, 50.0 * t)
    at = np.full(n, t)
    z_far = LaplaceKNNRegressor(eps, tail_exponent=p, moment_bound=m).fit(X, far, np.random.default_rng(0))
    z_at = LaplaceKNNRegressor(eps, tail_exponent=p, moment_bound=m).fit(X, at, np.random.default_rng(0))
    np.testing.assert_array_equal(z_far.privatized_labels_, z_at.privatized_labels_)
    assert abs(z_far.privatized_labels_.mean() - t) < 0.1 * t


def test_fixed_clip_threshold_and_center():
    rng = np.random.default_rng(13)
    X = rng.random((1_000, 2))
    model = LaplaceKNNRegressor(1.0, clip_threshold=2.0, center=5.0).fit(X, rng.normal(5, 10, 1_000), rng)
    assert (model.domain_.low, model.domain_.high) == (3.0, 7.0)
    assert model.clip_ == 2.0 and model.k_ == theorem6_k(1_000, 1.0, 2)
    assert model.mechanism_.scale_ == pytest.approx(4.0)
    with pytest.raises(ValueError, match="features"):
        model.predict(np.zeros((3, 3)))
