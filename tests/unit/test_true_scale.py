"""The model card's true-label error (issue 26, item 5): unbiased over seeds, by simulation."""

from __future__ import annotations

import numpy as np
import pytest

from labeldp.learning.debiasing import label_law
from labeldp.learning.true_scale import noise_variance, true_scale_error
from labeldp.mechanisms import LabelDomain
from labeldp.mechanisms.additive import Laplace

DOMAIN = LabelDomain("real", 0.0, 5.0)


def test_the_debiased_test_mse_is_unbiased_for_the_true_mse_within_its_standard_error() -> None:
    """Laplace noise at ε = 4 has variance ≈ 3 on a [0, 5] range, ten times the model's
    true MSE (≈ 0.3): the estimate still centres on the true MSE, each seed within a few of its
    own standard errors, and R² on the true scale comes out near the truth."""
    mech = Laplace(4.0, DOMAIN, variant="discrete", step=5.0 / 200, clip=False).fit_to()
    spec = mech.to_spec()
    law = label_law(spec)
    variance = noise_variance(spec, law)
    assert variance(np.array([0.0]))[0] == pytest.approx(variance(np.array([5.0]))[0])  # additive: constant
    errors, ses, r2_gaps = [], [], []
    for seed in range(40):
        rng = np.random.default_rng(seed)
        x = rng.uniform(0, 1, 2_000)
        y = np.clip(5 * x + rng.normal(0, 0.5, x.size), 0, 5)
        f = np.clip(5 * x + 0.3, 0, 5)  # a fixed predictor, biased a little
        privatized = mech.privatize(y, rng)
        out = true_scale_error(f, privatized, law, variance, anchor=2.5)
        true_mse = float(np.mean((f - y) ** 2))
        errors.append(out["test_mse"] - true_mse)
        ses.append(out["test_mse_se"])
        assert abs(out["test_mse"] - true_mse) < 4 * out["test_mse_se"], (seed, out, true_mse)
        true_r2 = 1 - true_mse / float(np.mean((2.5 - y) ** 2))
        r2_gaps.append((out["test_r2"] - true_r2) / out["test_r2_se"])
    # over seeds the mean error is zero within its own standard error (the noise term removed)
    assert abs(np.mean(errors)) < 3 * np.std(errors) / np.sqrt(len(errors)), (np.mean(errors), np.std(errors))
    assert np.mean(ses) == pytest.approx(np.std(errors), rel=0.35)  # the SE says how far to trust it
    assert np.mean(np.abs(r2_gaps) < 3) > 0.9


def test_true_scale_error_refuses_a_mismatch() -> None:
    law = label_law(None)
    with pytest.raises(ValueError):
        true_scale_error(np.zeros(3), np.zeros(2), law, lambda y: np.zeros_like(y), 0.0)
