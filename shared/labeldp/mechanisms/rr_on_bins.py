"""RR-on-Bins (Ghazi et al. 2023, Alg. 1): randomized response over loss-optimal bins.

``fit`` learns the bins from a prior (which must itself be DP or public), so the
fitted object is public; ``privatize`` then spends ε once per label. Each label
y is mapped to a bin Φ(y); the mechanism reports that bin's value with
probability p = e^ε / (e^ε + m − 1) and every other bin's value with
q = 1 / (e^ε + m − 1). Whatever the label, every output has probability p or q,
so the ratio between two labels is at most p/q = e^ε.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.mechanisms.checks import check_epsilon, check_labels
from labeldp.mechanisms.rr_on_bins_kernels import optimal_bins
from labeldp.specs.rr_on_bins import RROnBinsSpec


def _rr_probabilities(epsilon: float, m: int) -> tuple[float, float]:
    """(p, q) of ε-RR over m outputs, via t = e^{−ε} so large ε cannot overflow."""
    t = math.exp(-epsilon)
    denominator = 1.0 + (m - 1) * t
    return 1.0 / denominator, t / denominator


class RROnBins:
    """ε-DP randomized response on the loss-optimal bins of a prior (squared loss).

    Fitted attributes: ``grid_``, ``bin_of_grid_``, ``outputs_`` (m, ascending),
    ``cut_points_`` (m − 1 midpoints of consecutive outputs), ``keep_probability_`` (p),
    ``other_probability_`` (q), ``expected_loss_``, ``debias_a_``, ``debias_b_``
    (E[ŷ | y] = a·Φ(y) + b).
    """

    def __init__(self, epsilon: float, loss: Literal["squared"] = "squared") -> None:
        if loss != "squared":
            raise ValueError(f"loss {loss!r} is not supported; only 'squared'")
        self.epsilon = epsilon
        self.loss = loss

    def fit(self, grid: np.ndarray, probs: np.ndarray) -> RROnBins:
        """Choose bins and outputs minimizing E[(ŷ − y)²] under the prior (grid, probs)."""
        epsilon = check_epsilon(self.epsilon)
        grid = np.ascontiguousarray(grid, dtype=np.float64)
        _, outputs, _ = optimal_bins(grid, probs, epsilon)
        self._set_outputs(epsilon, outputs)
        self.grid_ = grid
        # For fixed outputs the loss of a label is q·Σ_o (o − y)² + (p − q)(Φ(y) − y)²,
        # smallest at the nearest output; so Φ = nearest output, for grid and
        # off-grid labels alike (the DP's own partition agrees on every point
        # with positive mass, and zero-mass points do not change the loss).
        self.bin_of_grid_ = self.bin_index(grid)
        self.expected_loss_ = self.expected_loss(grid, probs)
        return self

    def _set_outputs(self, epsilon: float, outputs: np.ndarray) -> None:
        outputs = np.asarray(outputs, dtype=np.float64)
        m = outputs.size
        p, q = _rr_probabilities(epsilon, m)
        self.outputs_ = outputs
        self.cut_points_ = 0.5 * (outputs[:-1] + outputs[1:])
        self.keep_probability_ = p
        self.other_probability_ = q
        self.debias_a_ = p - q
        self.debias_b_ = q * float(outputs.sum())

    @classmethod
    def from_spec(cls, spec: RROnBinsSpec) -> RROnBins:
        """Rebuild the public mechanism from its wire form (no grid: ``grid_`` stays unset)."""
        mech = cls(spec.epsilon, spec.loss)  # type: ignore[arg-type]
        mech._set_outputs(check_epsilon(spec.epsilon), np.asarray(spec.outputs, dtype=np.float64))
        return mech

    def bin_index(self, labels: np.ndarray) -> np.ndarray:
        """Φ as a bin index (int64): the nearest output, found by the cut points."""
        labels = check_labels(labels)
        return np.searchsorted(self.cut_points_, labels, side="left").astype(np.int64)

    def privatize(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One ε-RR draw per label; every returned value is an element of ``outputs_``."""
        idx = self.bin_index(labels)
        m = self.outputs_.size
        if m == 1:
            return np.full(idx.shape, self.outputs_[0])
        keep = rng.random(idx.shape) < self.keep_probability_
        other = rng.integers(0, m - 1, size=idx.shape)
        other += other >= idx  # uniform over the m − 1 bins that are not Φ(y)
        return self.outputs_[np.where(keep, idx, other)]

    def output_probabilities(self, label: float) -> np.ndarray:
        """Exact Pr[ŷ = outputs_[j] | y = label] for every j."""
        probs = np.full(self.outputs_.size, self.other_probability_)
        probs[int(self.bin_index(np.asarray([label]))[0])] = self.keep_probability_
        return probs

    def expected_loss(self, grid: np.ndarray, probs: np.ndarray) -> float:
        """Exact E[(ŷ − y)²] for y ~ (grid, probs) under the fitted Φ and outputs."""
        grid = check_labels(grid)
        probs = np.asarray(probs, dtype=np.float64)
        probs = probs / probs.sum()
        sq = (self.outputs_[None, :] - grid[:, None]) ** 2
        own = sq[np.arange(grid.size), self.bin_index(grid)]
        per_label = self.other_probability_ * sq.sum(axis=1) + self.debias_a_ * own
        return float(np.dot(probs, per_label))

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon=float(self.epsilon),
            statement=(
                "Randomized response over |Ŷ| bins: every output's probability ratio "
                "between two labels is at most e^ε"
            ),
        )

    def to_spec(self) -> RROnBinsSpec:
        return RROnBinsSpec(
            epsilon=float(self.epsilon),
            loss=self.loss,
            outputs=self.outputs_.tolist(),
            cut_points=self.cut_points_.tolist(),
            keep_probability=float(self.keep_probability_),
            debias_a=float(self.debias_a_),
            debias_b=float(self.debias_b_),
        )
