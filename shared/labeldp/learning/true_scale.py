"""A model's error on the TRUE-label scale, estimated from privatized test labels (issue 26, item 5).

The features party sees only privatized labels ŷ, so "MSE against privatized labels" mixes the
model's error with the mechanism's noise: 1.84e10 against labels whose variance is 1.44e10 made
a good model look worse than a constant. For a law affine in a public map t of the label
(labeldp.learning.debiasing: E[ŷ | y] = a·t(y) + b), the debiased labels ỹ = (ŷ − b)/a satisfy
E[ỹ | x, y] = t(y), and for a predictor f fitted on other rows

    E[(f(x) − ỹ)²] = E[(f(x) − t(y))²] + E[v(y)],   v(y) = Var(ŷ | y) / a²

(the proof is labeldp.learning.selection's). v is the mechanism's, simulated through its own
``privatize`` on public label values (no label is read, no ε is spent). So each test row gives

    d_i = (f(x_i) − ỹ_i)² − v(y_i),

whose mean estimates the true-label MSE E[(f − t(y))²] and whose spread gives its standard error.
v(y_i) needs the label: it is taken at the row's prediction, v(clip(f(x_i))). That is exact
when v is constant in y (additive noise without clipping: Laplace, Gaussian) and first-order
otherwise. The same is done for the baseline that predicts the private mean μ, and
R² = 1 − MSE(f) / MSE(μ) (its standard error by the delta method on the paired rows).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from labeldp.learning.debiasing import LabelLaw, label_law
from labeldp.mechanisms.registry import entry_for_spec
from labeldp.schema import mechanism_spec

NoiseVariance = Callable[[np.ndarray], np.ndarray]

GRID_POINTS = 17
DRAWS_PER_POINT = 20_000


def noise_variance(spec: Any, law: LabelLaw | None = None, *, seed: int = 0,
                   points: int = GRID_POINTS, draws: int = DRAWS_PER_POINT) -> NoiseVariance:
    """v(y) = Var(ỹ | y) of the release's mechanism, in debiased units, as a function of y.

    Simulated through the mechanism's ``privatize`` at ``points`` label values across the law's
    range (public values, fixed seed) and interpolated linearly; a constant when the simulated
    values agree within their own sampling error (additive noise).
    """
    spec = mechanism_spec(spec)
    law = law or label_law(spec)
    mech = entry_for_spec(spec).from_spec(spec)
    rng = np.random.default_rng(seed)
    grid = np.linspace(law.low, law.high, points)
    variances = np.array([
        float(np.var(law.debias_labels(np.asarray(mech.privatize(np.full(draws, y), rng), dtype=np.float64)),
                     ddof=1))
        for y in grid
    ])
    # a sample variance's relative SE is about sqrt(2/(draws-1)) (heavier tails: a little more)
    if np.ptp(variances) <= 6 * math.sqrt(2.0 / (draws - 1)) * float(np.mean(variances)):
        constant = float(np.mean(variances))
        return lambda y: np.full(np.shape(y), constant)
    return lambda y: np.interp(np.asarray(y, dtype=np.float64), grid, variances)


def true_scale_error(
    predictions: np.ndarray, privatized: np.ndarray, law: LabelLaw, variance: NoiseVariance, anchor: float
) -> dict[str, Any]:
    """The debiased test MSE and R² of ``predictions`` (label units), each with its standard error,
    beside the baseline of predicting ``anchor`` (the private mean), from privatized test labels.

    ``test_mse`` can come out negative for a model close to t(y) on few rows (an unbiased
    estimate, not a clipped one); its standard error says how far to trust it.
    """
    f = np.asarray(predictions, dtype=np.float64)
    debiased = law.debias_labels(np.asarray(privatized, dtype=np.float64))
    n = int(f.size)
    if n < 2 or debiased.size != n:
        raise ValueError("need at least two test rows, one prediction per privatized label")
    v = variance(np.clip(f, law.low, law.high))
    d = (f - debiased) ** 2 - v
    base = (anchor - debiased) ** 2 - v
    mse, baseline = float(d.mean()), float(base.mean())
    mse_se = float(d.std(ddof=1) / math.sqrt(n))
    baseline_se = float(base.std(ddof=1) / math.sqrt(n))
    r2 = r2_se = None
    if baseline > 0:
        r2 = 1.0 - mse / baseline
        cov = np.cov(d, base, ddof=1)
        var = (cov[0, 0] / baseline**2 + mse**2 * cov[1, 1] / baseline**4 - 2 * mse * cov[0, 1] / baseline**3) / n
        r2_se = math.sqrt(max(float(var), 0.0))
    return {
        "test_mse": mse,
        "test_mse_se": mse_se,
        "test_r2": r2,
        "test_r2_se": r2_se,
        "baseline_mse": baseline,
        "baseline_mse_se": baseline_se,
        "noise_variance": float(np.mean(v)),
        "n_test": n,
    }
