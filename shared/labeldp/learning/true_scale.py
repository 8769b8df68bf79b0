"""A model's error on the TRUE-label scale, estimated from privatized test labels (issue 26, item 5).

The features party sees only privatized labels ŷ, so "MSE against privatized labels" mixes the
model's error with the mechanism's noise (1.84e10 against labels of variance 1.44e10 made a good
model look worse than a constant). For a law affine in a public map t of the label
(labeldp.learning.debiasing: E[ŷ | y] = a·t(y) + b), the debiased labels ỹ = (ŷ − b)/a satisfy
E[ỹ | x, y] = t(y), and for f fitted on other rows E[(f(x) − ỹ)²] = E[(f(x) − t(y))²] + E[v(y)],
v(y) = Var(ŷ | y) / a² (the proof is labeldp.learning.selection's). v is the mechanism's,
simulated through its own ``privatize`` on public label values (no label read, no ε spent).
Each test row gives d_i = (f(x_i) − ỹ_i)² − v(y_i), whose mean estimates the true-label MSE and
whose spread its standard error. v(y_i) is taken at the row's prediction, v(clip(f(x_i))): exact
when v is constant (additive noise without clipping: Laplace, Gaussian), first-order otherwise.
The same is done for the baseline that predicts the private mean μ, and R² = 1 − MSE(f)/MSE(μ)
(its standard error by the delta method on the paired rows). The sums are merged chunk by chunk
(:class:`TrueScaleSums`), so a staged validation split is read once, a row group at a time
(:func:`staged_true_scale_error`: streamed and torchrun trainings).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from labeldp.learning.debiasing import LabelLaw, label_law
from labeldp.learning.staging import TARGET, StagedRelease
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


class TrueScaleSums:
    """The paired rows (d_i, base_i) of :func:`true_scale_error` summed chunk by chunk: counts, means and
    (co)moments merged as Chan et al. merge them, so a held-out split streamed in row groups holds one
    row group at a time and gives the numbers the whole arrays give (to rounding)."""

    def __init__(self, law: LabelLaw, variance: NoiseVariance, anchor: float) -> None:
        self.law, self.variance, self.anchor = law, variance, float(anchor)
        self.n = 0
        self.mean = np.zeros(2)  # (d, base)
        self.comoment = np.zeros((2, 2))  # sums of centred products
        self.noise = 0.0

    def add(self, predictions: np.ndarray, privatized: np.ndarray) -> None:
        """One chunk: predictions (label units) and the same rows' privatized labels, in order."""
        f = np.asarray(predictions, dtype=np.float64).ravel()
        debiased = self.law.debias_labels(np.asarray(privatized, dtype=np.float64).ravel())
        if debiased.size != f.size:
            raise ValueError("need one prediction per privatized label")
        if f.size == 0:
            return
        v = self.variance(np.clip(f, self.law.low, self.law.high))
        rows = np.stack([(f - debiased) ** 2 - v, (self.anchor - debiased) ** 2 - v])
        m = int(f.size)
        mean = rows.mean(axis=1)
        centred = rows - mean[:, None]
        comoment = centred @ centred.T
        delta, total = mean - self.mean, self.n + m
        self.comoment += comoment + np.outer(delta, delta) * (self.n * m / total)
        self.mean += delta * (m / total)
        self.noise += float(v.sum())
        self.n = total

    def result(self) -> dict[str, Any]:
        """The estimate over every row added (:func:`true_scale_error`'s keys)."""
        n = self.n
        if n < 2:
            raise ValueError("need at least two test rows, one prediction per privatized label")
        mse, baseline = float(self.mean[0]), float(self.mean[1])
        cov = self.comoment / (n - 1)
        r2 = r2_se = None
        if baseline > 0:
            r2 = 1.0 - mse / baseline
            var = (cov[0, 0] / baseline**2 + mse**2 * cov[1, 1] / baseline**4 - 2 * mse * cov[0, 1] / baseline**3) / n
            r2_se = math.sqrt(max(float(var), 0.0))
        return {
            "test_mse": mse,
            "test_mse_se": math.sqrt(max(float(cov[0, 0]), 0.0) / n),
            "test_r2": r2,
            "test_r2_se": r2_se,
            "baseline_mse": baseline,
            "baseline_mse_se": math.sqrt(max(float(cov[1, 1]), 0.0) / n),
            "noise_variance": self.noise / n,
            "n_test": n,
        }


def true_scale_error(
    predictions: np.ndarray, privatized: np.ndarray, law: LabelLaw, variance: NoiseVariance, anchor: float
) -> dict[str, Any]:
    """The debiased test MSE and R² of ``predictions`` (label units), each with its standard error,
    beside the baseline of predicting ``anchor`` (the private mean), from privatized test labels.

    ``test_mse`` can come out negative for a model close to t(y) on few rows (an unbiased
    estimate, not a clipped one); its standard error says how far to trust it.
    """
    f = np.asarray(predictions, dtype=np.float64)
    if f.size < 2 or np.size(privatized) != f.size:
        raise ValueError("need at least two test rows, one prediction per privatized label")
    sums = TrueScaleSums(law, variance, anchor)
    sums.add(f, privatized)
    return sums.result()


def staged_true_scale_error(
    predict: Callable[[pa.Table], np.ndarray], staged: StagedRelease, law: LabelLaw, variance: NoiseVariance,
    anchor: float,
) -> dict[str, Any]:
    """:func:`true_scale_error` over a staged release's validation rows, in one pass over its
    ``validation.parquet`` a row group at a time (their privatized labels are the stage's
    ``val_labels``, in that file's order): what a streamed or torchrun training's card states."""
    source = pq.ParquetFile(staged.validation_path)
    labels = np.asarray(staged.val_labels, dtype=np.float64)
    sums, offset = TrueScaleSums(law, variance, anchor), 0
    for i in range(source.metadata.num_row_groups):
        table = source.read_row_group(i)
        rows = table.num_rows
        if offset + rows > labels.size:
            raise ValueError("the stage's validation rows outnumber its validation labels")
        sums.add(predict(table.drop_columns([TARGET])), labels[offset:offset + rows])
        offset += rows
    if offset != labels.size:
        raise ValueError("the stage's validation labels outnumber its validation rows")
    return sums.result()
