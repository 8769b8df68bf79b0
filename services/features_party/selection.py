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
differences between candidates. Minimizing over λ and over every epoch then
chases it: on California Housing at ε = 0.1, the exact joint minimizer gave
RPWithPrior a test MSE of 5.8 where the plain model had 1.5. So λ is the exact
minimizer discounted by its own standard error (positive-part James–Stein,
:func:`~features_party.debiasing.cautious_shrinkage`), and the epoch is the one
whose discounted predictor has the lowest estimate. The oracle, whose reference
has no privacy noise, takes the exact minimizer. Non-linear laws (clipped additive noise,
the exponential mechanism) use their least-squares line (see
:mod:`features_party.debiasing`): the estimate is then unbiased, up to the same
kind of constant, for the MSE against the linearized mean (m(y) − b)/a.

The ORACLE criterion replaces ỹ with true validation labels; it exists only for
benchmarks, to show how close private selection comes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from features_party.debiasing import (
    Debias,
    LabelLaw,
    best_shrinkage,
    cautious_shrinkage,
    check_shrinkage,
    mean_squared_error,
    prediction_parts,
    shrink,
)

Criterion = Literal["private", "oracle"]


@dataclass
class Selector:
    """Watches a model's validation outputs after every epoch and keeps the best (epoch, λ).

    ``reference``: ỹ (private) or the true labels (oracle) of the validation rows.
    ``shrinkage``: "auto" (per epoch, λ minimizes the estimate over [0, 1], then is
    discounted by its standard error: :func:`~features_party.debiasing.cautious_shrinkage`)
    or a fixed λ. ``select_epoch``: the epoch whose predictor (at its λ) has the
    lowest estimate; otherwise the last one counts.
    Fitted: ``epoch_``, ``shrinkage_``, ``estimate_`` and ``history_`` (one entry
    per epoch: its best λ and estimate).
    """

    law: LabelLaw
    debias: Debias
    reference: np.ndarray
    shrinkage: str | float = "auto"
    select_epoch: bool = True
    criterion: Criterion = "private"
    history_: list[dict[str, Any]] = field(default_factory=list)
    epoch_: int | None = None
    shrinkage_: float | None = None
    estimate_: float | None = None

    def __post_init__(self) -> None:
        self.reference = np.asarray(self.reference, dtype=np.float64)
        if self.reference.size == 0:
            raise ValueError("model selection needs a validation split")
        if self.shrinkage != "auto":
            self.shrinkage = check_shrinkage(self.shrinkage)  # type: ignore[arg-type]

    def score(self, outputs: np.ndarray) -> tuple[float, float]:
        """(λ, estimate) of one candidate's validation outputs (label units)."""
        plain, debiased = prediction_parts(outputs, self.law, self.debias)
        if self.debias == "none":
            return 0.0, mean_squared_error(plain, self.reference)
        if self.shrinkage == "auto" and self.criterion == "oracle":
            return best_shrinkage(plain, debiased, self.reference)  # true labels: take the exact best
        if self.shrinkage == "auto":
            lam = cautious_shrinkage(plain, debiased, self.reference)[0]
        else:
            lam = float(self.shrinkage)
        return lam, mean_squared_error(shrink(plain, debiased, lam), self.reference)

    def observe(self, epoch: int, outputs: np.ndarray) -> bool:
        """Score this epoch; True when it becomes the selected one (the caller keeps its weights)."""
        lam, estimate = self.score(outputs)
        self.history_.append({"epoch": epoch, "shrinkage": lam, "estimate": estimate})
        better = self.estimate_ is None or not self.select_epoch or estimate < self.estimate_
        if better:
            self.epoch_, self.shrinkage_, self.estimate_ = epoch, lam, estimate
        return better

    def summary(self) -> dict[str, Any]:
        """Plain types, for the model file and card."""
        return {
            "criterion": self.criterion,
            "selected_epoch": self.epoch_,
            "shrinkage": self.shrinkage_,
            "estimate": self.estimate_,
            "n_validation": int(self.reference.size),
            "label_law": self.law.name,
            "law_linear": bool(self.law.linear),
            "epochs": list(self.history_),
        }


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
