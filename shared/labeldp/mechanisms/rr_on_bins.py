"""RR-on-Bins (Ghazi et al. 2023, Alg. 1): randomized response over loss-optimal bins.

``fit_to`` learns the bins from a prior (which must itself be DP or public), so the
fitted object is public; ``privatize`` then spends ε once per label. Each label
y is mapped to a bin Φ(y); the mechanism reports that bin's value with
probability p = e^ε / (e^ε + m − 1) and every other bin's value with
q = 1 / (e^ε + m − 1). Whatever the label, every output has probability p or q,
so the ratio between two labels is at most p/q = e^ε.

Losses: squared (ŷ − y)², absolute |ŷ − y| and Poisson ŷ − y·log ŷ (labels >= 0,
outputs > 0). The outputs come from the exactly optimal partition
(``rr_on_bins_kernels.optimal_bins``); Φ is then the loss-minimizing output for
each label, a threshold rule whose cut points are midpoints for squared and
absolute loss and logarithmic means for Poisson loss (``cut_points``).
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal, Self

import numpy as np

from labeldp.mechanisms.checks import check_epsilon, check_labels
from labeldp.mechanisms.contract import Params, Prior
from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.mechanisms.law import TransitionLaw
from labeldp.mechanisms.prior import LabelDomain
from labeldp.mechanisms.rr_on_bins_kernels import cut_points, optimal_bins
from labeldp.mechanisms.rr_sampling import privatize_values, rr_probabilities
from labeldp.specs.rr_on_bins import RROnBinsSpec

Loss = Literal["squared", "absolute", "poisson"]


class RROnBinsParams(Params):
    """``loss``: what the bins minimize (Ghazi et al. 2023 fit squared, absolute and Poisson)."""

    loss: Loss = "squared"


def _sum_of_losses(outputs: np.ndarray, labels: np.ndarray, loss: str) -> np.ndarray:
    """Σ_j ℓ(o_j, y) for every label in O((k + m) log m), without a k × m matrix."""
    m = outputs.size
    if loss == "squared":
        centre = float(outputs.mean())
        return m * (labels - centre) ** 2 + float(np.sum((outputs - centre) ** 2))
    if loss == "poisson":
        return float(outputs.sum()) - labels * float(np.log(outputs).sum())
    below = np.searchsorted(outputs, labels, side="right")  # outputs <= y
    prefix = np.concatenate([[0.0], np.cumsum(outputs)])
    return (below * labels - prefix[below]) + ((prefix[m] - prefix[below]) - (m - below) * labels)


class RROnBins:
    """ε-DP randomized response on the loss-optimal bins of a prior.

    Parameters: ``epsilon``; ``domain`` (optional public label domain: checked
    against the loss, Poisson needs low >= 0); ``loss`` in {"squared", "absolute",
    "poisson"}. Fitted attributes: ``grid_``, ``bin_of_grid_``, ``outputs_`` (m,
    ascending), ``cut_points_`` (m − 1 thresholds, see ``cut_points``),
    ``keep_probability_`` (p), ``other_probability_`` (q), ``expected_loss_``,
    ``debias_a_``, ``debias_b_`` (E[ŷ | y] = a·Φ(y) + b).
    """

    name: ClassVar[str] = "rr_on_bins"
    params_model: ClassVar[type[Params]] = RROnBinsParams

    def __init__(self, epsilon: float, domain: LabelDomain | None = None, loss: Loss = "squared") -> None:
        RROnBinsParams(loss=loss)
        if loss == "poisson" and domain is not None and domain.low < 0:
            raise ValueError("Poisson loss needs a label domain with low >= 0")
        self.epsilon = epsilon
        self.domain = domain
        self.loss = loss

    def fit_to(self, prior: Prior | None = None) -> Self:
        """Choose bins and outputs minimizing E[ℓ(ŷ, y)] under ``prior`` (its bins are optimal for it)."""
        if prior is None:
            raise ValueError("RR-on-Bins is fitted to a prior: pass one")
        epsilon = check_epsilon(self.epsilon)
        grid = np.ascontiguousarray(prior.values, dtype=np.float64)
        _, outputs, _ = optimal_bins(grid, prior.probs, epsilon, self.loss)  # distinct, ascending
        self._set_outputs(epsilon, outputs)
        self.grid_ = grid
        # For fixed outputs the loss of a label is q·Σ_o ℓ(o, y) + (p − q)·ℓ(Φ(y), y),
        # smallest at the loss-nearest output; so Φ is that rule, for grid and off-grid
        # labels alike (the optimal partition agrees on every point with positive mass,
        # and zero-mass points do not change the loss).
        self.bin_of_grid_ = self.bin_index(grid)
        self.expected_loss_ = self.loss_under(Prior(grid, prior.probs))
        return self

    def _set_outputs(self, epsilon: float, outputs: np.ndarray) -> None:
        outputs = np.asarray(outputs, dtype=np.float64)
        m = outputs.size
        p, q = rr_probabilities(epsilon, m)
        self.outputs_ = outputs
        self.cut_points_ = cut_points(outputs, self.loss)
        self.keep_probability_ = p
        self.other_probability_ = q
        self.debias_a_ = p - q
        self.debias_b_ = q * float(outputs.sum())

    @classmethod
    def from_spec(cls, spec: RROnBinsSpec) -> RROnBins:
        """Rebuild the public mechanism from its wire form (no grid: ``grid_`` stays unset).

        The spec's ``debias_a``/``debias_b`` are informational copies: they must agree with
        the law its ε and outputs imply, or the spec is refused.
        """
        mech = cls(spec.epsilon, loss=spec.loss)
        mech._set_outputs(check_epsilon(spec.epsilon), np.asarray(spec.outputs, dtype=np.float64))
        pairs = ((spec.debias_a, mech.debias_a_), (spec.debias_b, mech.debias_b_))
        if not all(math.isclose(u, v, rel_tol=1e-9, abs_tol=1e-12) for u, v in pairs):
            raise ValueError("the spec's debias_a/debias_b disagree with its epsilon and outputs")
        return mech

    def law(self) -> TransitionLaw:
        """E[ŷ | y] = a·Φ(y) + b with a = p − q, b = q·Σ outputs; t = Φ, the bin value."""
        a, b, outputs = float(self.debias_a_), float(self.debias_b_), self.outputs_

        def phi(labels: np.ndarray) -> np.ndarray:
            return outputs[self.bin_index(labels)]

        def mean(labels: np.ndarray) -> np.ndarray:
            return a * phi(labels) + b

        return TransitionLaw.affine(self.name, a, b, float(outputs[0]), float(outputs[-1]), mean, phi)

    def bin_index(self, labels: np.ndarray) -> np.ndarray:
        """Φ as a bin index (int64): the loss-nearest output, found by the cut points.

        A label exactly on a cut goes to the lower bin (both lose equally there).
        """
        labels = check_labels(labels)
        return np.searchsorted(self.cut_points_, labels, side="left").astype(np.int64)

    def privatize(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One ε-RR draw per label; every returned value is an element of ``outputs_``.

        Runs the fused numba kernel (binning + randomized response, one raw 64-bit
        word of ``rng``'s stream per label, exact integer cells, no modulo bias).
        The keep probability is nudged down by 1e-12 relative so that float
        rounding of p can never push the realized ratio above e^ε.
        """
        shape = np.shape(labels)
        flat = np.ascontiguousarray(labels, dtype=np.float64).reshape(-1)
        keep = self.keep_probability_ * (1.0 - 1e-12)
        out = privatize_values(flat, self.cut_points_, self.outputs_, keep, rng)
        return out.reshape(shape)

    def output_probabilities(self, label: float) -> np.ndarray:
        """Exact Pr[ŷ = outputs_[j] | y = label] for every j."""
        probs = np.full(self.outputs_.size, self.other_probability_)
        probs[int(self.bin_index(np.asarray([label]))[0])] = self.keep_probability_
        return probs

    def loss_under(self, prior: Prior) -> float:
        """Exact E[ℓ(ŷ, y)] for y ~ prior under the fitted Φ and outputs.

        Per label: q·Σ_j ℓ(o_j, y) + (p − q)·ℓ(Φ(y), y), summed in closed form.
        """
        grid = check_labels(prior.values)
        probs = np.asarray(prior.probs, dtype=np.float64)
        probs = probs / probs.sum()
        if self.loss == "poisson" and np.any(grid < 0):
            raise ValueError("Poisson loss needs labels >= 0")
        own = self.outputs_[self.bin_index(grid)]
        if self.loss == "squared":
            own_loss = (own - grid) ** 2
        elif self.loss == "absolute":
            own_loss = np.abs(own - grid)
        else:
            own_loss = own - grid * np.log(own)
        per_label = self.other_probability_ * _sum_of_losses(self.outputs_, grid, self.loss)
        per_label += self.debias_a_ * own_loss
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
