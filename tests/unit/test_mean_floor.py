"""The default learning is never worse than its release's private mean (issue 12, item 1).

The private mean is post-processing of the release (no ε). ``shrinkage='auto'`` weighs the
model against it on the privatized validation split and falls back to it when the model's
gain is within its noise; these tests fail if either step is removed (planted once: with
``Selection.anchor`` forced to ``None`` the noise-feature test lost 2.3–6.1× to the mean).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from labeldp.epsilon import to_micro_floor
from labeldp.learning.config import PLAIN, LearningConfig, TrainingConfig
from labeldp.learning.debiasing import (
    IDENTITY,
    LabelLaw,
    PostProcessing,
    constant_prediction,
    label_law,
    private_mean,
    toward,
)
from labeldp.learning.regression import fit_private_regressor, release_detectability
from labeldp.learning.selection import (
    DETECTABLE_Z,
    MEAN_FALLBACK_Z,
    Selector,
    detectable_z,
    gains_over_anchor,
)
from labeldp.mechanisms import LabelDomain
from labeldp.release.randomizer import randomize

DOMAIN = LabelDomain("real", 0.0, 1.0)
IDENTITY_ON_UNIT = LabelLaw("identity", 1.0, 0.0, 0.0, 1.0)  # labels as given, t in [0, 1]
FAST = dict(batch_size=64, learning_rate=1e-2, weight_decay=0.0, device="cpu", threads=1)


def noise_features(n: int, d: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({f"z{i}": rng.normal(size=n) for i in range(d)})


def test_toward_and_post_processing_round_trip() -> None:
    estimate = np.array([0.0, 1.0, 4.0])
    np.testing.assert_allclose(toward(2.0, estimate, 0.25), [1.5, 1.75, 2.5])
    np.testing.assert_allclose(toward(2.0, estimate, 0.0), [2.0, 2.0, 2.0])
    post = PostProcessing("predictions", 0.5, IDENTITY, anchor=0.3, model_weight=0.4)
    assert PostProcessing.from_dict(post.to_dict()) == post
    np.testing.assert_allclose(post.apply(np.array([1.0])), [0.3 + 0.4 * (1.0 - 0.3)])
    old = {"debias": "predictions", "shrinkage": 0.5, "law": IDENTITY.to_dict()}  # a model file from before
    assert PostProcessing.from_dict(old).apply(np.array([0.7])) == pytest.approx(0.7)


def test_private_mean_is_the_debiased_mean_of_the_release() -> None:
    rng = np.random.default_rng(0)
    y = rng.uniform(0.2, 0.6, size=50_000)
    out = randomize(y, DOMAIN, "unbiased", to_micro_floor(2.0), rng)
    law = label_law(out.mechanism)
    debiased = float(np.clip(law.debias_labels(out.labels).mean(), 0, 1))
    assert private_mean(out.labels, law) == pytest.approx(debiased, abs=1e-4)  # se ≪ the gap: debiased
    assert private_mean(out.labels, law) == pytest.approx(y.mean(), abs=0.01)  # unbiased for the label mean
    stats = float(out.labels.mean()), float(out.labels.std()), out.labels.size
    assert constant_prediction(*stats, law, "predictions") == private_mean(out.labels, law)


def test_private_mean_stays_plain_where_the_debiased_mean_is_noise() -> None:
    """RPWithPrior at ε = 0.05 on 1 500 rows: the debiased mean is far outside the domain; the
    private mean keeps the plain (clipped) mean instead of a domain edge."""
    rng = np.random.default_rng(2)
    y = rng.beta(2, 5, size=1_500)
    out = randomize(y, DOMAIN, "rp_with_prior", to_micro_floor(0.05), rng)
    law = label_law(out.mechanism)
    plain = float(np.clip(out.labels.mean(), law.low, law.high))
    assert private_mean(out.labels, law) == pytest.approx(plain)
    assert abs(private_mean(out.labels, law) - y.mean()) < 0.25


def test_selector_falls_back_to_the_anchor_on_noise_and_keeps_a_clear_signal() -> None:
    rng = np.random.default_rng(1)
    truth = rng.uniform(0, 1, size=400)
    noisy_reference = truth + rng.normal(scale=3.0, size=truth.size)  # ỹ at small ε
    anchor = float(truth.mean())
    useless = anchor + rng.normal(scale=0.2, size=truth.size)  # a model that learnt noise
    selector = Selector(IDENTITY, "predictions", noisy_reference, "auto", True, "private", anchor)
    selector.observe(1, useless)
    assert selector.mean_fallback_ and selector.final_weight_ == 0.0
    clean_reference = truth + rng.normal(scale=0.05, size=truth.size)  # ỹ at large ε
    good = Selector(IDENTITY, "predictions", clean_reference, "auto", True, "private", anchor)
    good.observe(1, truth)
    assert not good.mean_fallback_ and good.final_weight_ > 0.9
    no_anchor = Selector(IDENTITY, "predictions", noisy_reference, "auto", True, "private")
    no_anchor.observe(1, useless)
    assert no_anchor.final_weight_ == 1.0 and not no_anchor.mean_fallback_


@pytest.mark.parametrize("mechanism", ["unbiased", "laplace", "rp_with_prior"])
def test_default_learning_is_not_worse_than_the_private_mean_on_features_without_signal(mechanism: str) -> None:
    """Labels independent of the features at ε = 0.1: the best any learner can do is a constant."""
    n, n_test = 1_500, 1_000
    rng = np.random.default_rng(7)
    y = np.clip(rng.beta(2, 5, size=n + n_test), 0, 1)
    table = noise_features(n, 30, 8)
    test = noise_features(n_test, 30, 9)
    out = randomize(y[:n], DOMAIN, mechanism, to_micro_floor(0.1), rng)
    config = TrainingConfig(epochs=8, validation_fraction=0.2, seed=3, **FAST)
    learned = fit_private_regressor(table, out.labels, out.mechanism, config, LearningConfig())
    mean = private_mean(out.labels, label_law(out.mechanism))
    y_test = y[n:]
    learned_mse = float(np.mean((learned.predict(test) - y_test) ** 2))
    mean_mse = float(np.mean((mean - y_test) ** 2))
    assert learned.selection_["mean_fallback"] is True
    assert learned_mse == pytest.approx(mean_mse, rel=1e-9)  # exactly the release's private mean
    plain = fit_private_regressor(table, out.labels, out.mechanism, config, PLAIN)
    assert float(np.mean((plain.predict(test) - y_test) ** 2)) > mean_mse  # the network alone does worse


def test_a_clear_signal_is_kept() -> None:
    """Labels explained by a feature, at ε = 4: the model beats the mean and is not pulled to it."""
    n = 3_000
    rng = np.random.default_rng(11)
    x = rng.uniform(size=2 * n)
    y = np.clip(0.2 + 0.6 * x + rng.normal(scale=0.05, size=x.size), 0, 1)
    table, test = pa.table({"x": x[:n]}), pa.table({"x": x[n:]})
    out = randomize(y[:n], DOMAIN, "unbiased", to_micro_floor(4.0), rng)
    config = TrainingConfig(epochs=8, validation_fraction=0.2, seed=3, **FAST)
    learned = fit_private_regressor(table, out.labels, out.mechanism, config, LearningConfig())
    assert learned.selection_["mean_fallback"] is False and learned.selection_["model_weight"] > 0.8
    mean = private_mean(out.labels, label_law(out.mechanism))
    assert np.mean((learned.predict(test) - y[n:]) ** 2) < 0.3 * np.mean((mean - y[n:]) ** 2)


def test_detectable_z_bounds_what_any_predictor_could_show() -> None:
    """The bound is √n·S/σ: S the largest |t − μ| in the range of t, σ² ≥ Var(ỹ) − S²."""
    rng = np.random.default_rng(3)
    truth = rng.uniform(0, 1, size=1_600)
    noisy = truth + rng.normal(scale=20.0, size=truth.size)  # the noise dwarfs the labels' range
    z = detectable_z(noisy, 0.5, 0.0, 1.0)
    assert z == pytest.approx(40 * 0.5 / np.sqrt(noisy.var() - 0.25))
    assert z < MEAN_FALLBACK_Z  # not even the true labels could pass the guard here
    perfect = gains_over_anchor(0.5, truth, noisy)  # the best conceivable predictor, scored as the guard does
    assert perfect.mean() / (perfect.std(ddof=1) / np.sqrt(perfect.size)) < z + 3  # within the bound's noise
    clean = truth + rng.normal(scale=0.1, size=truth.size)
    assert detectable_z(clean, 0.5, 0.0, 1.0) > 50
    assert detectable_z(noisy, 0.5, -math.inf, math.inf) == math.inf  # identity law: no range, no bound


def test_a_model_chosen_for_its_noise_falls_back_where_no_gain_is_detectable() -> None:
    """The winner's curse: a candidate that follows the validation noise passes the z test; where the
    rows could not show a real gain (detectable_z < DETECTABLE_Z) the guard still falls back.
    (Planted once: without the check in ``keeps_model`` the selector kept it, weight 0.3.)"""
    rng = np.random.default_rng(5)
    truth = rng.uniform(0, 1, size=1_600)
    reference = truth + rng.normal(scale=6.0, size=truth.size)
    anchor = float(truth.mean())
    lucky = anchor + 0.2 * (reference - anchor)  # what a selection over many noisy epochs can end up with
    selector = Selector(IDENTITY_ON_UNIT, "predictions", reference, "auto", True, "private", anchor)
    selector.observe(1, lucky)
    gain, se = selector.gain_ or (0.0, 1.0)
    assert gain > MEAN_FALLBACK_Z * se  # the z test alone would keep it
    assert selector.detectable_z_ < DETECTABLE_Z
    assert selector.mean_fallback_ and selector.final_weight_ == 0.0
    assert selector.summary()["detectable_z"] == pytest.approx(selector.detectable_z_)
    quiet = truth + rng.normal(scale=0.3, size=truth.size)  # the same rows at a larger ε: a gain is detectable
    good = Selector(IDENTITY_ON_UNIT, "predictions", quiet, "auto", True, "private", anchor)
    good.observe(1, truth)
    assert good.detectable_z_ >= DETECTABLE_Z and not good.mean_fallback_


def test_the_bench_replays_the_training_s_detectability_exactly() -> None:
    """``release_detectability`` (no training) equals what the fitted model's selection reports."""
    n = 1_200
    rng = np.random.default_rng(13)
    y = rng.beta(2, 5, size=n)
    table = noise_features(n, 5, 14)
    out = randomize(y, DOMAIN, "laplace", to_micro_floor(0.5), rng)
    config = TrainingConfig(epochs=2, validation_fraction=0.2, seed=3, **FAST)
    learned = fit_private_regressor(table, out.labels, out.mechanism, config, LearningConfig())
    replayed = release_detectability(n, out.labels, out.mechanism, config, LearningConfig())
    assert learned.selection_["detectable_z"] == pytest.approx(replayed, rel=1e-12)
