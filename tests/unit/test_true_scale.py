"""The model card's true-label error (issue 26, item 5): unbiased over seeds, by simulation."""

from __future__ import annotations

import numpy as np
import pytest

from labeldp.learning.debiasing import label_law
from labeldp.learning.true_scale import TrueScaleSums, noise_variance, true_scale_error
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


def test_sums_merged_chunk_by_chunk_equal_the_whole_arrays() -> None:
    """What a staged validation split read a row group at a time states: the one-shot numbers, to rounding
    (planted once: the merge's cross term dropped; the SEs went red)."""
    law = label_law(Laplace(2.0, DOMAIN, variant="discrete", step=0.05, clip=False).fit_to().to_spec())
    rng = np.random.default_rng(1)
    f = rng.uniform(0, 5, 1_001) * 1e3  # label units far from 0: the merge must not cancel digits away
    privatized = f + rng.normal(0, 300, f.size) + 40

    def variance(y: np.ndarray) -> np.ndarray:
        return 50.0 + 0.01 * np.asarray(y)

    whole = true_scale_error(f, privatized, law, variance, anchor=2_400.0)
    sums = TrueScaleSums(law, variance, 2_400.0)
    for lo, hi in [(0, 1), (1, 1), (1, 300), (300, 301), (301, 1_001)]:
        sums.add(f[lo:hi], privatized[lo:hi])
    chunked = sums.result()
    assert chunked.keys() == whole.keys()
    for key, value in whole.items():
        assert chunked[key] == pytest.approx(value, rel=1e-10), key
    with pytest.raises(ValueError):
        sums.add(f[:2], privatized[:3])
