"""Discrete Laplace baseline (Ghazi et al. App. D), clipped to the label domain.

Additive noise on a continuous label in floating point leaks through the
low-order bits (Mironov 2012). So the label is first snapped to the public
lattice low + step·j, j = 0..J, and integer two-sided geometric noise is added
to j; every output is a lattice point and no float arithmetic touches the noise.
Snapped indices of two labels differ by at most J, so noise with
P(k) ∝ exp(−ε|k|/J) is ε-DP (sensitivity J lattice units = high − low label
units); clipping the noisy index to [0, J] is post-processing.
"""

from __future__ import annotations

import math

import numpy as np

from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.mechanisms.checks import check_epsilon, check_labels
from labeldp.mechanisms.prior import LabelDomain, _two_sided_geometric
from labeldp.specs.laplace import LaplaceSpec

REAL_DOMAIN_STEPS = 1024


class DiscreteLaplace:
    """ε-DP discrete Laplace on the domain lattice; data independent.

    ``step`` defaults to 1 for integer domains and (high − low)/1024 for real
    ones. J = round((high − low)/step) and the lattice spans the domain exactly,
    so the step actually used, ``step_`` = (high − low)/J, can differ slightly from
    a ``step`` that does not divide the domain. Fitted: ``step_``, ``n_steps_`` (J),
    ``alpha_`` = exp(−ε/J).
    """

    def __init__(self, epsilon: float, domain: LabelDomain, step: float | None = None) -> None:
        self.epsilon = epsilon
        self.domain = domain
        self.step = step

    def fit(self, grid: np.ndarray | None = None, probs: np.ndarray | None = None) -> DiscreteLaplace:
        """Set the lattice and the noise; ``grid``/``probs`` are accepted and ignored."""
        epsilon = check_epsilon(self.epsilon)
        width = self.domain.width
        if self.step is None:
            step = 1.0 if self.domain.kind == "integer" else width / REAL_DOMAIN_STEPS
        else:
            step = float(self.step)
            if not (math.isfinite(step) and step > 0):
                raise ValueError("step must be a finite number > 0")
        n_steps = max(1, int(round(width / step)))
        self.n_steps_ = n_steps
        self.step_ = width / n_steps
        self._log_alpha = -epsilon / n_steps
        self.alpha_ = math.exp(self._log_alpha)
        return self

    # -- lattice --------------------------------------------------------------

    def lattice_index(self, labels: np.ndarray) -> np.ndarray:
        """Index j of the nearest lattice point (labels outside the domain clip to the ends)."""
        labels = check_labels(labels)
        j = np.rint((labels - self.domain.low) / self.step_)
        return np.clip(j, 0, self.n_steps_).astype(np.int64)

    def lattice_value(self, index: np.ndarray) -> np.ndarray:
        """low + step·j, with j = J mapped to exactly ``high``."""
        index = np.asarray(index, dtype=np.int64)
        values = self.domain.low + self.step_ * index.astype(np.float64)
        values = np.where(index == self.n_steps_, self.domain.high, values)
        return np.clip(values, self.domain.low, self.domain.high)

    @property
    def lattice_(self) -> np.ndarray:
        return self.lattice_value(np.arange(self.n_steps_ + 1))

    # -- mechanism ------------------------------------------------------------

    def privatize(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Snap, add two-sided geometric noise to the index, clip, map back."""
        j = self.lattice_index(labels)
        noisy = j + _two_sided_geometric(self._log_alpha, j.shape, rng)
        return self.lattice_value(np.clip(noisy, 0, self.n_steps_))

    def output_probabilities(self, label: float) -> np.ndarray:
        """Exact Pr[output = lattice_[i]] for every i, ends carrying the clipped tails."""
        j0 = int(self.lattice_index(np.asarray([label]))[0])
        J, alpha = self.n_steps_, self.alpha_
        one_minus = -math.expm1(self._log_alpha)
        distance = np.abs(np.arange(J + 1) - j0)
        probs = (one_minus / (1.0 + alpha)) * np.exp(self._log_alpha * distance)
        # Tails: Pr[j0 + noise <= 0] = α^{j0}/(1+α), Pr[j0 + noise >= J] = α^{J−j0}/(1+α).
        probs[0] = math.exp(self._log_alpha * j0) / (1.0 + alpha)
        probs[J] = math.exp(self._log_alpha * (J - j0)) / (1.0 + alpha)
        return probs

    def expected_loss(self, grid: np.ndarray, probs: np.ndarray) -> float:
        """Exact E[(ŷ − y)²] for y ~ (grid, probs)."""
        grid = check_labels(grid)
        probs = np.asarray(probs, dtype=np.float64)
        probs = probs / probs.sum()
        lattice = self.lattice_
        total = 0.0
        for y, py in zip(grid, probs):
            if py > 0:
                total += py * float(np.dot(self.output_probabilities(y), (lattice - y) ** 2))
        return total

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon=float(self.epsilon),
            sensitivity=self.domain.width,
            statement=(
                "Discrete Laplace on the domain lattice: snapped labels differ by at most J steps "
                "(high − low), noise P(k) ∝ e^{-ε|k|/J} bounds every output's ratio by e^ε; "
                "clipping to the domain is post-processing"
            ),
        )

    def to_spec(self) -> LaplaceSpec:
        return LaplaceSpec(
            epsilon=float(self.epsilon),
            variant="discrete",
            domain=self.domain.to_spec(),
            step=float(self.step_),
            scale=self.domain.width / float(self.epsilon),
            clipped=True,
        )
