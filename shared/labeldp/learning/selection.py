"""Private model selection: early stopping and shrinkage on a privatized validation split.

The features party has no true labels, only the release's privatized ones. For a
law that is affine in a public map t of the label, E[ŷ | y] = a·t(y) + b, the
debiased validation labels ỹ = (ŷ − b)/a give a loss estimate that ranks every
candidate predictor g as its loss against t(y) would:

    E[(g(x) − ỹ)²] = E[(g(x) − t(y))²] + E[Var(ỹ | y)].

Proof. Write g − ỹ = (g − t) + (t − ỹ) and expand. The mechanism sees only the
label (feature-oblivious), so ŷ is independent of x given y and
E[ỹ | x, y] = (E[ŷ | y] − b)/a = t(y). The candidate g was trained on other rows,
whose noise is independent of this row's, so given (x, y) it is fixed and
E[(g − t)(t − ỹ) | x, y] = (g − t)·(t − E[ỹ | x, y]) = 0: the cross term
vanishes. The last term, E[(t − ỹ)²] = E[Var(ỹ | y)], involves only the
mechanism and the label distribution, not g. ∎

So the validation MSE against ỹ (``estimate``) is an unbiased estimate of the
true-label MSE against t(y) (Φ(y), the bin value, for RR-on-Bins: "the binned
labels"; y for the unbiased randomizer), up to a constant shared by all
candidates: minimizing it over epochs and over λ selects as an oracle holding
t(y) would, up to validation noise.

That noise grows as 1/a² (Var ỹ = Var ŷ / a²) and, at small ε, swamps the
differences between candidates; minimizing over λ and over every epoch then
chases it (docs/decisions/0010-default-learning.md). So λ is the exact
minimizer discounted by its own standard error (positive-part James–Stein,
:func:`~labeldp.learning.debiasing.cautious_shrinkage`), and the epoch is the one
whose discounted predictor has the lowest estimate. The oracle, whose reference
has no privacy noise, takes the exact minimizer. Non-linear laws (clipped additive noise,
the exponential mechanism) use their least-squares line (see
:mod:`labeldp.learning.debiasing`): the estimate is then unbiased, up to the same
kind of constant, for the MSE against the linearized mean (m(y) − b)/a.

**Never worse than the mean.** The same estimate ranks any candidate, a constant
included. With ``anchor`` μ, the release's private mean over the *training* rows
(:func:`~labeldp.learning.debiasing.constant_prediction`: post-processing, no ε),
the candidates are μ + w·(s − μ), w ∈ [0, 1], s the epoch's shrunk predictor; μ
depends on no validation row, so the proof above holds for every w and w = 0 is
the private-mean predictor itself. w is chosen like λ: the exact minimizer,
discounted by its standard error (``cautious_shrinkage`` with μ as the plain
estimate). Where the features explain less than the validation noise can
resolve (small n·ε², or a network that fit the noise) w falls to 0 and the
model predicts the mean; with a clear signal w ≈ 1 and little changes. One
guard remains: the selected epoch is the minimum of many noisy estimates, so
its advantage over the mean is biased upward (the winner's curse). The selected
predictor keeps a share of w that grows smoothly with its estimated gain over the
mean, a paired mean of per-row loss differences on the validation rows, in units
of that difference's standard error: none up to ``MEAN_FALLBACK_Z − GUARD_RAMP``,
all of it from ``MEAN_FALLBACK_Z`` on (:func:`evidence_weight`), and none where the
validation rows could not show a gain at all: where the noise of ỹ dwarfs the
range of t, no predictor's gain could reach ``DETECTABLE_Z`` standard errors
(:func:`detectable_z`), and a pass there is the winner's curse, not signal. With
no share left the model predicts the mean (``mean_fallback_``).

The ORACLE criterion replaces ỹ with true validation labels; it exists only for
benchmarks, to show how close private selection comes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import numpy as np

from labeldp.learning.debiasing import (
    Debias,
    LabelLaw,
    best_shrinkage,
    cautious_shrinkage,
    check_shrinkage,
    mean_squared_error,
    prediction_parts,
    shrink,
    toward,
)

Criterion = Literal["private", "oracle"]
MEAN_FALLBACK_Z = 2.0
"""The selected predictor is kept over the private mean only when its estimated gain exceeds this many
standard errors (see the module docstring, "Never worse than the mean"): below 2 the winner's curse of
epoch selection still kept models worse than the mean. Decided in docs/decisions/0012-mean-fallback-z.md;
alternatives measured and not adopted: docs/decisions/0014-mean-guard-alternatives.md."""


DETECTABLE_Z = 4.0
"""The guard keeps a model only where the validation rows could show a gain: :func:`detectable_z`, the
largest z score any predictor's gain could reach there, must be at least this. At 4 = 2·``MEAN_FALLBACK_Z``
the test would pass the best conceivable predictor with probability Φ(4 − 2) ≈ 97.7 %: below it, a pass is
as likely to be the winner's curse as a gain. Set by that argument, not fitted.
Decided in docs/decisions/0013-detectable-z.md."""


def gains_over_anchor(anchor: float, predicted: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Per validation row, the squared-error improvement of ``predicted`` over the constant ``anchor``."""
    return (anchor - reference) ** 2 - (predicted - reference) ** 2


def mean_and_se(gains: np.ndarray) -> tuple[float, float]:
    """(mean, standard error) of per-row gains: the paired estimate the guard tests."""
    se = float(gains.std(ddof=1) / np.sqrt(gains.size)) if gains.size > 1 else 0.0
    return float(gains.mean()), se


GUARD_RAMP = 2.0
"""The guard is a ramp, not a step: the model keeps the share :func:`evidence_weight` of its weight, 0 up to
a gain of ``MEAN_FALLBACK_Z − GUARD_RAMP`` SEs, all of it from ``MEAN_FALLBACK_Z`` on, smooth between
(0 is the old all-or-nothing guard). Decided in docs/decisions/0018-continuous-guard.md; cross-fitted
evidence measured and not adopted: docs/decisions/0020-crossfit-guard-evidence.md."""


def evidence_weight(gain: float, se: float, detectable: float = math.inf) -> float:
    """The guard: the share of its weight the model keeps over the mean, in [0, 1], from the private evidence.

    Non-decreasing in the gain's z score (``gain``/``se``): 0 up to ``MEAN_FALLBACK_Z − GUARD_RAMP``,
    1 from ``MEAN_FALLBACK_Z`` (the old threshold) on, a smoothstep between, so a model just under the
    old threshold keeps part of its gain instead of none: a wrong call there costs little. 0 wherever
    the validation rows could not show a gain at all (``detectable`` < ``DETECTABLE_Z``): there a high z
    is the winner's curse, not evidence.
    """
    if detectable < DETECTABLE_Z or gain <= 0.0:
        return 0.0
    if se <= 0.0:
        return 1.0
    return smooth_ramp(gain / se, MEAN_FALLBACK_Z - GUARD_RAMP, MEAN_FALLBACK_Z)


def smooth_ramp(z: float, low: float, high: float) -> float:
    """0 below ``low``, 1 from ``high`` on, the smoothstep 3u² − 2u³ between (a step at low = high)."""
    if z >= high:
        return 1.0 if z > low or high > low else 0.0
    if z <= low:
        return 0.0
    u = (z - low) / (high - low)
    return u * u * (3.0 - 2.0 * u)


def keeps_model(gain: float, se: float, detectable: float = math.inf) -> bool:
    """Whether the guard keeps any of the model (:func:`evidence_weight` > 0)."""
    return evidence_weight(gain, se, detectable) > 0.0


def detectable_z(reference: np.ndarray, anchor: float, low: float, high: float) -> float:
    """The largest z score that ANY predictor's gain over ``anchor`` could have on these validation rows.

    With d = g − μ the candidate's deviation from the anchor and ỹ = t + e (E[e | y] = 0), a
    row's gain is 2d(t − μ) − d² + 2d·e. Its mean is at most 2‖d‖S − ‖d‖², S = max |t − μ| over
    the range [low, high] of t, and its variance at least 4‖d‖²σ², σ² = E[Var(ỹ | y)] ≥ Var(ỹ) − S²
    (exact for noise that does not depend on the label, approximate otherwise). So on n rows
    z < √n·S/σ whatever the model: where that is small, a gain that passes the test is noise that
    the selection found, not signal (the winner's curse; see ``DETECTABLE_Z``).
    """
    reference = np.asarray(reference, dtype=np.float64)
    spread = max(high - anchor, anchor - low, 0.0)
    noise_var = float(reference.var()) - spread * spread
    if reference.size < 2 or noise_var <= 0.0:
        return math.inf
    return math.sqrt(reference.size) * spread / math.sqrt(noise_var)


@dataclass
class Selector:
    """Watches a model's validation outputs after every epoch and keeps the best (epoch, λ).

    ``reference``: ỹ (private) or the true labels (oracle) of the validation rows.
    ``shrinkage``: "auto" (per epoch, λ minimizes the estimate over [0, 1], then is
    discounted by its standard error: :func:`~labeldp.learning.debiasing.cautious_shrinkage`)
    or a fixed λ. ``anchor``: the private mean μ to pull the predictor toward (w of
    μ + w·(s − μ) chosen like λ), or ``None`` to keep s. ``select_epoch``: the epoch
    whose predictor (at its λ and w) has the lowest estimate; otherwise the last one
    counts. Fitted: ``epoch_``, ``shrinkage_``, ``model_weight_``, ``estimate_`` and
    ``history_`` (one entry per epoch: its λ, w and estimate).
    """

    law: LabelLaw
    debias: Debias
    reference: np.ndarray
    shrinkage: str | float = "auto"
    select_epoch: bool = True
    criterion: Criterion = "private"
    anchor: float | None = None
    history_: list[dict[str, Any]] = field(default_factory=list)
    epoch_: int | None = None
    shrinkage_: float | None = None
    model_weight_: float = 1.0
    estimate_: float | None = None
    gain_: tuple[float, float] | None = None
    quadratic_: tuple[float, float, float] | None = None

    def __post_init__(self) -> None:
        self.reference = np.asarray(self.reference, dtype=np.float64)
        if self.reference.size == 0:
            raise ValueError("model selection needs a validation split")
        if self.shrinkage != "auto":
            self.shrinkage = check_shrinkage(self.shrinkage)  # type: ignore[arg-type]

    def score(self, outputs: np.ndarray) -> tuple[float, float, float]:
        """(λ, w, estimate) of one candidate's validation outputs (label units)."""
        plain, debiased = prediction_parts(outputs, self.law, self.debias)
        if self.debias == "none":
            lam = 0.0
        elif self.shrinkage == "auto":
            lam = self._weigh(plain, debiased)
        else:
            lam = float(self.shrinkage)
        estimate = shrink(plain, debiased, lam)
        if self.anchor is None:
            return lam, 1.0, mean_squared_error(estimate, self.reference)
        weight = self._weigh(np.full_like(estimate, self.anchor), estimate)
        return lam, weight, mean_squared_error(toward(self.anchor, estimate, weight), self.reference)

    def gains(self, outputs: np.ndarray, lam: float, weight: float) -> np.ndarray:
        """Per validation row, the (λ, w) predictor's squared-error improvement over the anchor."""
        assert self.anchor is not None
        plain, debiased = prediction_parts(outputs, self.law, self.debias)
        predicted = toward(self.anchor, shrink(plain, debiased, lam), weight)
        return gains_over_anchor(self.anchor, predicted, self.reference)

    def gain_over_anchor(self, outputs: np.ndarray, lam: float, weight: float) -> tuple[float, float]:
        """(gain, se): the estimated MSE improvement of the (λ, w) predictor over the anchor,
        a paired mean over the validation rows, and its standard error."""
        return mean_and_se(self.gains(outputs, lam, weight))

    @property
    def guard_weight_(self) -> float:
        """:func:`evidence_weight` of the selected predictor's gain over the private mean (1: no guard;
        the oracle and a selection without anchor have none)."""
        if self.anchor is None or self.gain_ is None or self.criterion == "oracle":
            return 1.0
        return evidence_weight(*self.gain_, self.detectable_z_)

    @property
    def mean_fallback_(self) -> bool:
        """Whether the guard left the model nothing: it predicts the private mean."""
        return self.guard_weight_ == 0.0

    @cached_property
    def detectable_z_(self) -> float:
        """:func:`detectable_z` of the validation rows (∞ without an anchor)."""
        if self.anchor is None:
            return math.inf
        return detectable_z(self.reference, self.anchor, self.law.low, self.law.high)

    @property
    def final_weight_(self) -> float:
        """w as the model applies it: the selected w times the guard's share (0: the mean)."""
        return self.guard_weight_ * self.model_weight_

    def _weigh(self, base: np.ndarray, candidate: np.ndarray) -> float:
        """The weight of ``candidate`` over ``base``: exact for the oracle (true labels), cautious otherwise."""
        if self.criterion == "oracle":
            return best_shrinkage(base, candidate, self.reference)[0]
        return cautious_shrinkage(base, candidate, self.reference)[0]

    def observe(self, epoch: int, outputs: np.ndarray) -> bool:
        """Score this epoch; True when it becomes the selected one (the caller keeps its weights)."""
        lam, weight, estimate = self.score(outputs)
        self.history_.append({"epoch": epoch, "shrinkage": lam, "model_weight": weight, "estimate": estimate})
        better = self.estimate_ is None or not self.select_epoch or estimate < self.estimate_
        if better:
            self.epoch_, self.shrinkage_, self.model_weight_, self.estimate_ = epoch, lam, weight, estimate
            self.gain_ = None if self.anchor is None else self.gain_over_anchor(outputs, lam, weight)
            self.quadratic_ = None if self.anchor is None else self._quadratic(outputs, lam)
        return better

    def _quadratic(self, outputs: np.ndarray, lam: float) -> tuple[float, float, float]:
        """(A, B, C) with estimate(v) = A − 2vB + v²C for the predictor μ + v·(s − μ) of this epoch:
        what the guard's share of w does to the estimate, without keeping the validation outputs."""
        assert self.anchor is not None
        plain, debiased = prediction_parts(outputs, self.law, self.debias)
        step = shrink(plain, debiased, lam) - self.anchor
        gap = self.reference - self.anchor
        n = gap.size
        return float(np.dot(gap, gap) / n), float(np.dot(step, gap) / n), float(np.dot(step, step) / n)

    @property
    def final_estimate_(self) -> float | None:
        """The estimate of the predictor as the model applies it (w times the guard's share)."""
        if self.quadratic_ is None:
            return self.estimate_
        a, b, c = self.quadratic_
        v = self.final_weight_
        return a - 2.0 * v * b + v * v * c

    def summary(self) -> dict[str, Any]:
        """Plain types, for the model file and card."""
        return {
            "criterion": self.criterion,
            "selected_epoch": self.epoch_,
            "shrinkage": self.shrinkage_,
            "private_mean": self.anchor,
            "model_weight": self.final_weight_,
            "guard_weight": self.guard_weight_,
            "selected_model_weight": self.model_weight_,
            "gain_over_mean": None if self.gain_ is None else {"gain": self.gain_[0], "se": self.gain_[1]},
            "detectable_z": _finite_or_none(self.detectable_z_),
            "mean_fallback": self.mean_fallback_,
            "estimate": self.final_estimate_,
            "selected_estimate": self.estimate_,
            "n_validation": int(self.reference.size),
            "label_law": self.law.name,
            "law_linear": bool(self.law.linear),
            "epochs": list(self.history_),
        }


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def private_reference(law: LabelLaw, privatized_validation: np.ndarray) -> np.ndarray:
    """ỹ = (ŷ − b)/a of the validation rows: E[ỹ | y] = t(y) (see the module docstring)."""
    return law.debias_labels(privatized_validation)


def estimate_note(criterion: Criterion, law: LabelLaw) -> str:
    """What a selection estimate measures, for model cards."""
    if criterion == "oracle":
        return "validation MSE against true labels (oracle selection; benchmarks only)"
    if law.name == "identity":
        return "validation MSE against the labels as given"
    what = "t(y)" if law.linear else "the linearized conditional mean (m(y) - b)/a"
    return (
        f"validation MSE against debiased privatized labels (y_priv - b)/a: unbiased for the MSE against {what}, "
        "up to an additive constant that does not depend on the model"
    )
