"""The label domain, the public prior grid and the ε₁-DP Laplace histogram prior.

RR-on-Bins is fitted to a prior over a finite support (Ghazi et al. 2023,
Alg. 3). The support must not depend on the labels, so it is a grid derived
from the public domain, the public row count and the release's ε only; the labels are then
counted on that grid and the counts are released with discrete Laplace noise
(Alg. 4, discretized as in App. D).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from labeldp.mechanisms.checks import check_epsilon, check_grid, check_labels
from labeldp.mechanisms.exact_noise import discrete_laplace, rate_from_epsilon
from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.specs.base import LabelDomainSpec, NoisyPrior

MIN_REAL_GRID = 16
MAX_REAL_GRID = 256
# Prior grid points per bin the mechanism is expected to use (see real_grid_size;
# decided in docs/decisions/0003-prior-grid-size.md).
GRID_POINTS_PER_BIN = 4


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


def uniform_grid(domain: LabelDomain, k: int) -> np.ndarray:
    """k evenly spaced points from low to high, both ends included (k >= 2)."""
    if k < 2:
        raise ValueError("a grid needs k >= 2 points")
    return np.linspace(domain.low, domain.high, int(k))


def log_grid(domain: LabelDomain, k: int, ratio: float = 100.0) -> np.ndarray:
    """k points from low to high whose spacing grows geometrically (last/first step → 1 + ``ratio``).

    g_i = low + s·((1 + W/s)^{i/(k−1)} − 1) with s = W/ratio: a log scale shifted
    by s so it is defined at low (labels such as values or counts start at 0).
    Fine near low, coarse near high — for heavy-tailed labels.
    """
    if k < 2:
        raise ValueError("a grid needs k >= 2 points")
    if not (ratio > 0 and math.isfinite(ratio)):
        raise ValueError("ratio must be a finite number > 0")
    s = domain.width / ratio
    grid = domain.low + s * np.expm1(np.linspace(0.0, math.log1p(ratio), int(k)))
    grid[0], grid[-1] = domain.low, domain.high
    return grid


def expected_bins(epsilon: float) -> float:
    """m̂(ε) = max(2, e^{ε/3}): how many bins optimal RR-on-Bins uses at ε for a uniform prior.

    Why e^{ε/3}: with m equal bins over a width W the loss is about
    W²/(12m²) (own bin) + e^{−ε}·m·W²/3 (the others), minimal at m ∝ e^{ε/3}.
    Decided in docs/decisions/0003-prior-grid-size.md.
    """
    epsilon = check_epsilon(epsilon)
    return max(2.0, math.exp(epsilon / 3.0))


def real_grid_size(n_labels: int, epsilon: float | None = None) -> int:
    """Prior grid resolution for a real domain, from the public n (and ε, when given).

    * cap(n) = clip(round(4·n^(1/3)), 16, 256): finer with more data, but the
      histogram's noise mass k/(ε₁·n) and the DP cost stay small. Without ε
      this is the rule.
    * With ε: k = clip(round(4·m̂(ε)), 16, cap(n)) — about four grid points per bin
      the mechanism will use (m̂ = :func:`expected_bins`), at least 16. A finer grid
      only adds noisy cells, a coarser one cannot place the bins.

    Decided in docs/decisions/0003-prior-grid-size.md.
    """
    if n_labels < 0:
        raise ValueError("n_labels must be >= 0")
    cap = int(np.clip(round(4.0 * float(n_labels) ** (1.0 / 3.0)), MIN_REAL_GRID, MAX_REAL_GRID))
    if epsilon is None:
        return cap
    return int(min(max(round(GRID_POINTS_PER_BIN * expected_bins(epsilon)), MIN_REAL_GRID), cap))


def integer_grid(domain: LabelDomain, k: int) -> np.ndarray:
    """At most k integers from low to high, both ends included: every integer of a domain
    that has at most k, otherwise k evenly spaced ones (rounded; the spacing is at least 1,
    so they stay distinct)."""
    if k < 2:
        raise ValueError("a grid needs k >= 2 points")
    count = int(domain.high - domain.low) + 1
    if count <= k:
        return domain.low + np.arange(count, dtype=np.float64)
    return np.round(np.linspace(domain.low, domain.high, int(k)))


def default_grid(
    domain: LabelDomain,
    n_labels: int,
    epsilon: float | None = None,
    kind: Literal["uniform", "log"] = "uniform",
) -> np.ndarray:
    """Label-independent prior support, a function of the public domain, count and ε only.

    Rule (so the support itself leaks nothing about the labels): k =
    :func:`real_grid_size` (n, ε) — with the release's total ε, about four grid points
    per expected bin (at least 16, at most clip(4·n^(1/3), 16, 256)); without ε,
    clip(round(4·n^(1/3)), 16, 256) — and then

    * real domain: k points from low to high (both ends included). ``kind`` "uniform"
      (default) or "log" (:func:`log_grid`; finer near ``low``, for heavy-tailed labels
      such as conversion values);
    * integer domain: :func:`integer_grid`, every integer when the domain has at most
      k, else k evenly spaced integers (``kind`` is ignored): the grid-noise trade-off
      of real domains.

    Decided in docs/decisions/0003-prior-grid-size.md and docs/decisions/0004-integer-prior-grid.md.
    """
    if n_labels < 0:
        raise ValueError("n_labels must be >= 0")
    if kind not in ("uniform", "log"):
        raise ValueError("kind must be 'uniform' or 'log'")
    k = real_grid_size(n_labels, epsilon)
    if domain.kind == "integer":
        return integer_grid(domain, k)
    return uniform_grid(domain, k) if kind == "uniform" else log_grid(domain, k)


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
    """P(k) ∝ α^|k| with α = exp(log_alpha); 1 − α is taken as −expm1 for tiny ε.

    numpy's float geometric: its support is finite (a uniform ≥ 2⁻⁵³), so it is not pure
    ε-DP. No release draws from it; release noise comes from ``exact_noise.discrete_laplace``.
    Kept as the statistical twin the tests compare the exact sampler against.
    """
    if log_alpha == -math.inf:
        return np.zeros(size, dtype=np.int64)
    p = -math.expm1(log_alpha)
    # Difference of two i.i.d. Geometric(1 − α) counts of failures; numpy's
    # geometric counts trials (>= 1), the common offset of 1 cancels.
    first = rng.geometric(p, size=size).astype(np.int64)
    second = rng.geometric(p, size=size).astype(np.int64)
    return first - second


def sample_two_sided_geometric(alpha: float, size, rng: np.random.Generator) -> np.ndarray:
    """Discrete Laplace noise by numpy's float sampler: int64 samples with P(k) ∝ alpha^|k|, 0 <= alpha < 1.

    Not for releases (finite support, see ``_two_sided_geometric``): they use the exact
    ``exact_noise.discrete_laplace``."""
    alpha = float(alpha)
    if not (0.0 <= alpha < 1.0):
        raise ValueError("alpha must lie in [0, 1)")
    return _two_sided_geometric(math.log(alpha) if alpha > 0 else -math.inf, size, rng)


def consistent_probs(noisy_counts: np.ndarray, total: int) -> np.ndarray:
    """The prior of noisy counts whose true total ``total`` is public: Norm-Sub (Wang et al. 2020).

    Clipping negative counts at 0 and normalizing, the plain post-processing, adds about
    half the noise scale of mass to every empty grid point: at small n·ε₁ that spurious
    mass spread over the domain outweighs the labels (a count set of 2 000 rows at ε₁ =
    0.045 moved its prior mean from about 2 to 5). Norm-Sub subtracts one δ from every
    (non-negative) count and clips at 0, with δ chosen so the counts sum to the public
    total: the non-negative counts with that total closest to the given ones (Euclidean
    projection onto the scaled simplex). Post-processing of the ε₁ counts and the public
    n. All zero (or ``total`` 0): uniform.
    """
    counts = np.asarray(noisy_counts, dtype=np.float64)
    if counts.size == 0:
        raise ValueError("a prior needs at least one grid point")
    if total <= 0 or not np.any(counts > 0):
        return np.full(counts.size, 1.0 / counts.size)
    # δ with Σ max(c − δ, 0) = total: over the counts sorted descending, the first j above δ
    ordered = np.sort(counts)[::-1]
    cumulative = np.cumsum(ordered)
    j = np.arange(1, ordered.size + 1)
    deltas = (cumulative - total) / j
    k = int(np.nonzero(ordered - deltas > 0)[0][-1])
    kept = np.maximum(counts - deltas[k], 0.0)
    return kept / kept.sum()


class LaplaceHistogramPrior:
    """ε-DP prior over a public grid (Ghazi et al. Alg. 4, discrete noise).

    Labels are snapped to the grid and counted. Replacing one label moves one
    unit between two counts (L1 sensitivity 2), so each count gets two-sided
    geometric noise with α = exp(−ε/2): the two changed cells each shift the
    output probability by at most α⁻¹ = e^{ε/2}, e^ε together. The prior is the
    counts' Norm-Sub projection with the public total n (:func:`consistent_probs`),
    post-processing; an all-zero result becomes uniform. The noise is drawn by the exact
    integer sampler (``exact_noise.discrete_laplace``, rate ε/2 rounded down): integer
    noise on integer counts, support all of Z, so the release is pure ε, no float artefacts.
    Only the noisy counts are kept; the true counts never leave ``fit``.
    """

    def __init__(self, epsilon: float, grid: np.ndarray) -> None:
        self.epsilon = epsilon
        self.grid = grid

    def fit(self, labels: np.ndarray, rng: np.random.Generator) -> LaplaceHistogramPrior:
        """Release noisy counts of ``labels`` on the grid; sets ``noisy_counts_``, ``probs_``."""
        check_epsilon(self.epsilon)
        grid = check_grid(self.grid)
        return self.fit_counts(np.bincount(snap_to_grid(labels, grid).ravel(), minlength=grid.size), rng)

    def fit_counts(self, counts: np.ndarray, rng: np.random.Generator) -> LaplaceHistogramPrior:
        """The same release from the labels' counts on the grid (their sum is the public n), for callers
        that count once and release many times (benchmarks)."""
        epsilon = check_epsilon(self.epsilon)
        log_alpha = -epsilon / 2.0
        counts = np.asarray(counts, dtype=np.int64)
        if counts.shape != check_grid(self.grid).shape:
            raise ValueError("counts need one entry per grid point")
        noisy = counts + discrete_laplace(*rate_from_epsilon(epsilon, 2), counts.size, rng)
        np.maximum(noisy, 0, out=noisy)
        self.alpha_ = math.exp(log_alpha)
        self.noisy_counts_ = noisy
        self.probs_ = consistent_probs(noisy, int(counts.sum()))
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
