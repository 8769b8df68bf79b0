"""The label domain, the public prior grid and the ε₁-DP Laplace histogram prior.

RR-on-Bins is fitted to a prior over a finite support (Ghazi et al. 2023,
Alg. 3). The support must not depend on the labels, so it is a grid derived
from the public domain and the public row count only; the labels are then
counted on that grid and the counts are released with discrete Laplace noise
(Alg. 4, discretized as in App. D).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from labeldp.mechanisms.checks import check_epsilon, check_grid, check_labels
from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.specs.base import LabelDomainSpec, NoisyPrior

MAX_INTEGER_GRID = 2048
MIN_REAL_GRID = 16
MAX_REAL_GRID = 256


@dataclass(frozen=True)
class LabelDomain:
    """The public range [low, high] of the labels; ``integer`` labels are whole numbers."""

    kind: Literal["real", "integer"]
    low: float
    high: float

    def __post_init__(self) -> None:
        if self.kind not in ("real", "integer"):
            raise ValueError("kind must be 'real' or 'integer'")
        low, high = float(self.low), float(self.high)
        if not (math.isfinite(low) and math.isfinite(high)):
            raise ValueError("domain bounds must be finite")
        if not low < high:
            raise ValueError("domain low must be smaller than high")
        if self.kind == "integer" and not (low.is_integer() and high.is_integer()):
            raise ValueError("an integer domain needs integral low and high")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    @property
    def width(self) -> float:
        return self.high - self.low

    def to_spec(self) -> LabelDomainSpec:
        return LabelDomainSpec(kind=self.kind, low=self.low, high=self.high)

    @classmethod
    def from_spec(cls, spec: LabelDomainSpec) -> LabelDomain:
        return cls(spec.kind, spec.low, spec.high)


def real_grid_size(n_labels: int) -> int:
    """k = clip(round(4·n^(1/3)), 16, 256): finer with more data, bounded DP cost."""
    if n_labels < 0:
        raise ValueError("n_labels must be >= 0")
    return int(np.clip(round(4.0 * float(n_labels) ** (1.0 / 3.0)), MIN_REAL_GRID, MAX_REAL_GRID))


def default_grid(domain: LabelDomain, n_labels: int) -> np.ndarray:
    """Label-independent prior support, a function of the public domain and count only.

    Rule (so the support itself leaks nothing about the labels):

    * integer domain with at most 2048 integers in [low, high]: every integer;
    * integer domain with more: 2048 evenly spaced points from low to high;
    * real domain: k evenly spaced points from low to high (both ends included),
      k = clip(round(4·n^(1/3)), 16, 256) — the histogram's sampling error
      √(k/n) and the RR-on-Bins DP cost O(k³) both stay small.
    """
    if n_labels < 0:
        raise ValueError("n_labels must be >= 0")
    if domain.kind == "integer":
        count = int(domain.high - domain.low) + 1
        if count <= MAX_INTEGER_GRID:
            return domain.low + np.arange(count, dtype=np.float64)
        return np.linspace(domain.low, domain.high, MAX_INTEGER_GRID)
    return np.linspace(domain.low, domain.high, real_grid_size(n_labels))


def snap_to_grid(labels: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Index (int64) of the nearest grid point for each label; ties go to the lower point.

    ``grid`` must be sorted ascending; labels outside it snap to the end points.
    """
    labels = check_labels(labels)
    grid = np.asarray(grid, dtype=np.float64)
    if grid.size == 1:
        return np.zeros(labels.shape, dtype=np.int64)
    upper = np.clip(np.searchsorted(grid, labels, side="left"), 1, grid.size - 1)
    lower = upper - 1
    take_upper = (grid[upper] - labels) < (labels - grid[lower])
    return np.where(take_upper, upper, lower).astype(np.int64)


def _two_sided_geometric(log_alpha: float, size, rng: np.random.Generator) -> np.ndarray:
    """P(k) ∝ α^|k| with α = exp(log_alpha); 1 − α is taken as −expm1 for tiny ε."""
    if log_alpha == -math.inf:
        return np.zeros(size, dtype=np.int64)
    p = -math.expm1(log_alpha)
    # Difference of two i.i.d. Geometric(1 − α) counts of failures; numpy's
    # geometric counts trials (>= 1), the common offset of 1 cancels.
    first = rng.geometric(p, size=size).astype(np.int64)
    second = rng.geometric(p, size=size).astype(np.int64)
    return first - second


def sample_two_sided_geometric(alpha: float, size, rng: np.random.Generator) -> np.ndarray:
    """Discrete Laplace noise: int64 samples with P(k) ∝ alpha^|k|, 0 <= alpha < 1."""
    alpha = float(alpha)
    if not (0.0 <= alpha < 1.0):
        raise ValueError("alpha must lie in [0, 1)")
    return _two_sided_geometric(math.log(alpha) if alpha > 0 else -math.inf, size, rng)


class LaplaceHistogramPrior:
    """ε-DP prior over a public grid (Ghazi et al. Alg. 4, discrete noise).

    Labels are snapped to the grid and counted. Replacing one label moves one
    unit between two counts (L1 sensitivity 2), so each count gets two-sided
    geometric noise with α = exp(−ε/2): the two changed cells each shift the
    output probability by at most α⁻¹ = e^{ε/2}, e^ε together. Clipping at 0 and
    normalizing are post-processing; an all-zero result becomes uniform. Noise is
    integer on integer counts, so the release has no floating-point artefacts.
    Only the noisy counts are kept; the true counts never leave ``fit``.
    """

    def __init__(self, epsilon: float, grid: np.ndarray) -> None:
        self.epsilon = epsilon
        self.grid = grid

    def fit(self, labels: np.ndarray, rng: np.random.Generator) -> LaplaceHistogramPrior:
        """Release noisy counts of ``labels`` on the grid; sets ``noisy_counts_``, ``probs_``."""
        epsilon = check_epsilon(self.epsilon)
        grid = check_grid(self.grid)
        log_alpha = -epsilon / 2.0
        noisy = np.bincount(snap_to_grid(labels, grid).ravel(), minlength=grid.size).astype(np.int64)
        noisy += _two_sided_geometric(log_alpha, grid.size, rng)
        np.maximum(noisy, 0, out=noisy)
        total = int(noisy.sum())
        if total > 0:
            probs = noisy / float(total)
        else:
            probs = np.full(grid.size, 1.0 / grid.size)
        self.alpha_ = math.exp(log_alpha)
        self.noisy_counts_ = noisy
        self.probs_ = probs
        return self

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon=float(self.epsilon),
            sensitivity=2.0,
            statement=(
                "Histogram on a public grid with two-sided geometric noise α = e^{-ε/2} per count: "
                "one replaced label changes two counts by 1, ratio ≤ (α⁻¹)² = e^ε; "
                "clipping and normalizing are post-processing"
            ),
        )

    def to_spec(self) -> NoisyPrior:
        grid = check_grid(self.grid)
        return NoisyPrior(
            source="laplace_histogram",
            grid=grid.tolist(),
            probs=self.probs_.tolist(),
            epsilon=float(self.epsilon),
        )
