"""The continuous guard and the prior's anchor (issue 27).

The guard's share of the model's weight grows smoothly with the private evidence for it; the
anchor adds the release's DP prior mean at no ε. Planted once each: ``evidence_weight`` returning
the old step (the share test went red), ignoring ``detectable`` (the useless-model test went red),
and ``combine`` keeping only its first estimate (the prior-anchor variance test went red).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from labeldp.epsilon import to_micro_floor
from labeldp.learning import selection as sel
from labeldp.learning.config import LearningConfig, TrainingConfig
from labeldp.learning.debiasing import (
    IDENTITY,
    LabelLaw,
    combine,
    constant_prediction,
    label_law,
    mean_squared_error,
    prior_moments,
    private_mean,
    toward,
)
from labeldp.learning.regression import fit_private_regressor
from labeldp.learning.selection import DETECTABLE_Z, MEAN_FALLBACK_Z, Selector, evidence_weight
from labeldp.mechanisms import LabelDomain
from labeldp.release.randomizer import randomize

DOMAIN = LabelDomain("real", 0.0, 1.0)
UNIT = LabelLaw("identity", 1.0, 0.0, 0.0, 1.0)
FAST = dict(batch_size=64, learning_rate=1e-2, weight_decay=0.0, device="cpu", threads=1)


def test_the_guard_s_share_is_monotone_in_the_evidence() -> None:
    zs = np.linspace(-3, 8, 221)
    shares = [evidence_weight(z, 1.0) for z in zs]
    assert all(b >= a for a, b in zip(shares, shares[1:], strict=False))
    low, high = MEAN_FALLBACK_Z - sel.GUARD_RAMP, MEAN_FALLBACK_Z
    assert high > low  # a ramp, not the old step
    assert evidence_weight(low, 1.0) == 0.0 and evidence_weight(high, 1.0) == 1.0  # past the old threshold: all
    middle = (low + high) / 2  # under the old threshold: a share, not nothing
    assert 0.0 < evidence_weight(middle, 1.0) < 1.0 and evidence_weight(middle, 1.0) == pytest.approx(0.5)
    assert evidence_weight(10.0, 1.0, detectable=DETECTABLE_Z - 1e-9) == 0.0  # nothing detectable: no evidence
    assert evidence_weight(-1.0, 0.0) == 0.0 and evidence_weight(1.0, 0.0) == 1.0


def _selector(reference: np.ndarray, anchor: float) -> Selector:
    return Selector(UNIT, "predictions", reference, "auto", True, "private", anchor)


def test_a_strong_model_keeps_all_its_weight_and_a_useless_one_goes_to_the_anchor() -> None:
    rng = np.random.default_rng(1)
    truth = rng.uniform(0, 1, size=1_600)
    anchor = float(truth.mean())
    strong = _selector(truth + rng.normal(scale=0.1, size=truth.size), anchor)
    strong.observe(1, truth)
    assert strong.guard_weight_ == 1.0 and strong.final_weight_ > 0.95
    useless = _selector(truth + rng.normal(scale=0.5, size=truth.size), anchor)
    useless.observe(1, anchor + rng.normal(scale=0.2, size=truth.size))
    assert useless.guard_weight_ == 0.0 and useless.final_weight_ == 0.0 and useless.mean_fallback_


def test_partial_evidence_keeps_a_share_and_the_estimate_describes_it() -> None:
    """A model with a weak real gain (z near the old threshold) keeps part of its weight; the summary's
    estimate is the validation MSE of what the model then predicts."""
    rng = np.random.default_rng(4)
    truth = rng.uniform(0, 1, size=1_600)
    anchor = float(truth.mean())
    shares = []
    for noise in (4.8, 4.4, 4.0, 3.6, 3.2, 1.0):  # ε growing: the same real gain, ever clearer
        reference = truth + rng.normal(scale=noise, size=truth.size)
        selector = _selector(reference, anchor)
        selector.observe(1, truth)
        shares.append(selector.guard_weight_)
        applied = toward(anchor, truth, selector.final_weight_)
        assert selector.summary()["estimate"] == pytest.approx(mean_squared_error(applied, reference), rel=1e-9)
    assert any(0.0 < s < 1.0 for s in shares), shares  # somewhere between the two ends, a share
    assert shares[-1] == 1.0


def test_prior_moments_state_the_histogram_s_mean_and_its_noise() -> None:
    rng = np.random.default_rng(2)
    y = rng.beta(2, 5, size=2_000)
    means, variances = [], []
    for _ in range(30):
        out = randomize(y, DOMAIN, "rp_with_prior", to_micro_floor(0.5), rng)
        law = label_law(out.mechanism)
        moments = prior_moments(out.prior, law, y.size)
        assert moments is not None
        means.append(moments[0] - float(y.mean()))
        variances.append(moments[1])
    assert abs(float(np.mean(means))) < 3 * math.sqrt(float(np.mean(variances)))  # centred on the labels' mean
    assert 0.3 < float(np.var(means)) / float(np.mean(variances)) < 3.0  # its stated noise is the right size
    assert prior_moments(None, IDENTITY, 10) is None
    public = {"source": "public", "grid": [0.0, 1.0], "probs": [0.5, 0.5], "epsilon": 0.0}
    assert prior_moments(public, IDENTITY, 10) is None  # not these labels: nothing to add


def test_the_anchor_with_the_prior_is_no_noisier_than_without() -> None:
    """RPWithPrior at ε = 0.5: its debiased mean is noisy (tiny slope); the prior's ε₁ already bought a
    better one. Over repeated releases of the same labels the anchor's error shrinks with the prior."""
    rng = np.random.default_rng(3)
    y = rng.beta(2, 5, size=2_000)
    with_prior, without = [], []
    for _ in range(30):
        out = randomize(y, DOMAIN, "rp_with_prior", to_micro_floor(0.5), rng)
        law = label_law(out.mechanism)
        target = float(y.mean())  # what a constant prediction is scored against
        with_prior.append((private_mean(out.labels, law, prior=out.prior) - target) ** 2)
        without.append((private_mean(out.labels, law) - target) ** 2)
    assert np.mean(with_prior) <= np.mean(without)
    assert np.mean(with_prior) < 0.8 * np.mean(without)  # here, clearly less (0.71 measured)
    # the combination's variance is at most either's, and an exact estimate wins outright
    mean, var = combine([(0.2, 4e-4), (0.3, 1e-4)])
    assert var <= 1e-4 and 0.2 < mean < 0.3 and mean == pytest.approx(0.28)
    assert combine([(0.2, 0.0), (0.3, 1e-4)]) == (0.2, 0.0)
    assert constant_prediction(0.3, 0.1, 100, UNIT, "predictions", (0.3, 1e-6)) == pytest.approx(0.3)


@pytest.mark.parametrize("mechanism", ["rr_on_bins", "rp_with_prior"])
def test_the_floor_holds_with_the_prior_s_anchor(mechanism: str) -> None:
    """Features without signal at ε = 0.1, the release's prior passed to training: the model predicts
    exactly the private mean with the prior, and that constant is no worse on test rows than without it
    by more than its own noise."""
    n, n_test = 1_500, 1_000
    rng = np.random.default_rng(7)
    y = np.clip(rng.beta(2, 5, size=n + n_test), 0, 1)
    table = pa.table({f"z{i}": rng.normal(size=n) for i in range(20)})
    test = pa.table({f"z{i}": rng.normal(size=n_test) for i in range(20)})
    out = randomize(y[:n], DOMAIN, mechanism, to_micro_floor(0.1), rng)
    assert out.prior is not None
    config = TrainingConfig(epochs=4, validation_fraction=0.2, seed=3, **FAST)
    learned = fit_private_regressor(table, out.labels, out.mechanism, config, LearningConfig(), prior=out.prior)
    law = label_law(out.mechanism)
    anchored = private_mean(out.labels, law, prior=out.prior)
    assert learned.selection_ is not None and learned.selection_["mean_fallback"] is True
    np.testing.assert_allclose(learned.predict(test), anchored, rtol=1e-12)
    y_test = y[n:]
    with_prior = float(np.mean((anchored - y_test) ** 2))
    without = float(np.mean((private_mean(out.labels, law) - y_test) ** 2))
    assert with_prior <= without * 1.02
