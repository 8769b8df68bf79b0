"""What the features party knows about its labels' noise, and the estimators it builds on it.

The release's mechanism spec states the transition law of every privatized label.
The features party only ever post-processes that law and the privatized labels,
so nothing here costs ε. Three things follow from the law's conditional mean
m(y) = E[ŷ | y]:

- **Debiased labels** ỹ = (ŷ − b)/a for a law that is affine in some public map
  t of the label, m(y) = a·t(y) + b. Then E[ỹ | y] = t(y): ỹ is unbiased for
  t(y) (Φ(y), the bin value, for RR-on-Bins; y itself for the unbiased
  randomizer; the label projected onto [A₁, A₂] for RPWithPrior).
- **Debiased predictions**: a model trained on raw ŷ estimates E[ŷ | x] =
  E[m(y) | x]; mapping its prediction through m⁻¹ ((f − b)/a for an affine law,
  the monotone inverse otherwise) estimates the label, and clipping the result to
  the range of t can only move it closer to any value inside that range.
- **Shrinkage** λ·debiased + (1 − λ)·plain, λ ∈ [0, 1]: the debiased estimate is
  unbiased but amplifies the model's estimation error by 1/a; the plain one is
  biased toward the mechanism's centre but stable. λ trades the two; chosen on
  privatized validation rows it is discounted by its own noise
  (:func:`cautious_shrinkage`).
- **The private mean** (:func:`private_mean`): the constant a model learning nothing
  from the features would predict. Pulling predictions toward it, μ + w·(s − μ),
  is the last safeguard of the default learning: when the noise hides what the
  features say, w falls to 0 and the model predicts the mean (issue 12).

Each mechanism states its law (``labeldp.mechanisms.law.TransitionLaw``, derived here
through the registry: docs/architecture.md, "The mechanism contract"). Laws that are
not affine in any public t (clipped additive noise, the exponential mechanism) are
:class:`MonotoneLaw`: m is computed exactly on the mechanism's lattice; predictions
invert it exactly, while debiased labels use its least-squares line over the domain
lattice, m(y) ≈ a·y + b (so ỹ is then unbiased for the linearized mean (m(y) − b)/a, which is close to y wherever m is
close to linear, and the selection estimate of :mod:`labeldp.learning.selection`
is unbiased for the loss against that).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from labeldp.mechanisms.law import TransitionLaw
from labeldp.mechanisms.registry import entry_for_spec
from labeldp.schema import mechanism_spec

Debias = Literal["none", "targets", "predictions"]
DEBIAS_MODES: tuple[str, ...] = ("none", "targets", "predictions")
_MIN_SLOPE = 1e-12

ArrayMap = Callable[[np.ndarray], np.ndarray]


# --------------------------------------------------------------------------- laws


@dataclass(frozen=True)
class LabelLaw:
    """E[ŷ | y] of a release's mechanism, reduced to what the estimators need.

    ``a``, ``b``: the affine law m(y) = a·t(y) + b (exact when ``linear``, a
    least-squares line in y otherwise). ``low``, ``high``: the range of t, where
    every debiased prediction is clipped. ``mean_fn``/``target_fn`` are the exact
    m and t when the law was built from a spec (not kept in model files).
    """

    name: str
    a: float
    b: float
    low: float
    high: float
    mean_fn: ArrayMap | None = None
    target_fn: ArrayMap | None = None

    linear = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.a) and self.a > _MIN_SLOPE and math.isfinite(self.b)):
            raise ValueError("a label law needs a finite slope a > 0 and a finite offset b")
        if not self.low <= self.high:
            raise ValueError("a label law needs low <= high")

    def mean(self, labels: np.ndarray) -> np.ndarray:
        """E[ŷ | y] exactly (needs the law built from its spec)."""
        labels = np.asarray(labels, dtype=np.float64)
        if self.mean_fn is not None:
            return np.asarray(self.mean_fn(labels), dtype=np.float64)
        return self.a * self.target(labels) + self.b

    def target(self, labels: np.ndarray) -> np.ndarray:
        """t(y): what debiased labels and debiased predictions estimate."""
        if self.target_fn is None:
            raise ValueError(f"the {self.name} law was restored without its label map")
        return np.asarray(self.target_fn(np.asarray(labels, dtype=np.float64)), dtype=np.float64)

    def debias_labels(self, privatized: np.ndarray) -> np.ndarray:
        """ỹ = (ŷ − b)/a: E[ỹ | y] = t(y) for a linear law (never clipped: that would bias it)."""
        return (np.asarray(privatized, dtype=np.float64) - self.b) / self.a

    def debias_predictions(self, predictions: np.ndarray) -> np.ndarray:
        """m⁻¹ of a prediction of E[ŷ | x], clipped to the range of t."""
        return np.clip(self.debias_labels(predictions), self.low, self.high)

    def rebias(self, debiased: np.ndarray) -> np.ndarray:
        """a·d + b: the plain-scale estimate equivalent to a debiased one (used with debiased targets)."""
        return self.a * np.asarray(debiased, dtype=np.float64) + self.b

    def to_dict(self) -> dict[str, Any]:
        """Plain types only (a model file is loaded with ``weights_only=True``)."""
        return {"kind": "linear", "name": self.name, "a": self.a, "b": self.b, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class MonotoneLaw(LabelLaw):
    """A non-decreasing m(y), exact on ``values`` (lattice points) with ``means`` = m(values)."""

    values: tuple[float, ...] = ()
    means: tuple[float, ...] = ()

    linear = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.values) < 2 or len(self.values) != len(self.means):
            raise ValueError("a monotone law needs at least two (value, mean) points")

    def _inverse_table(self) -> tuple[np.ndarray, np.ndarray]:
        """(m, y) restricted to where m strictly increases, so np.interp inverts it."""
        means = np.maximum.accumulate(np.asarray(self.means, dtype=np.float64))
        keep = np.concatenate(([True], np.diff(means) > 0))
        return means[keep], np.asarray(self.values, dtype=np.float64)[keep]

    def mean(self, labels: np.ndarray) -> np.ndarray:
        labels = np.asarray(labels, dtype=np.float64)
        if self.mean_fn is not None:
            return np.asarray(self.mean_fn(labels), dtype=np.float64)
        return np.interp(labels, np.asarray(self.values), np.asarray(self.means))

    def target(self, labels: np.ndarray) -> np.ndarray:
        """The linearized mean (m(y) − b)/a: what debiased labels are unbiased for."""
        return self.debias_labels(self.mean(labels))

    def debias_predictions(self, predictions: np.ndarray) -> np.ndarray:
        """The exact inverse of m (piecewise linear between lattice points), clamped to the domain."""
        means, values = self._inverse_table()
        return np.interp(np.asarray(predictions, dtype=np.float64), means, values)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "kind": "monotone", "values": list(self.values), "means": list(self.means)}


IDENTITY = LabelLaw("identity", 1.0, 0.0, -math.inf, math.inf, mean_fn=lambda y: y, target_fn=lambda y: y)


def law_from_dict(data: Mapping[str, Any] | None) -> LabelLaw:
    """The law a model file stored (without its exact label maps); ``None`` is the identity."""
    if data is None:
        return IDENTITY
    name, a, b = str(data["name"]), float(data["a"]), float(data["b"])
    low, high = float(data["low"]), float(data["high"])
    if data["kind"] == "linear":
        if name == "identity":
            return IDENTITY
        return LabelLaw(name, a, b, low, high)
    if data["kind"] == "monotone":
        values = tuple(float(v) for v in data["values"])
        means = tuple(float(m) for m in data["means"])
        return MonotoneLaw(name, a, b, low, high, values=values, means=means)
    raise ValueError("unknown label law kind")


# --------------------------------------------------------------------------- laws of the catalogue


def label_law(spec: Any) -> LabelLaw:
    """The law of E[ŷ | y] for a release's mechanism spec (object or JSON dict; ``None``: identity).

    Derived from the registry: the spec's mechanism is rebuilt (``from_spec`` checks it) and
    states its own :class:`~labeldp.mechanisms.law.TransitionLaw`. ValueError for categorical
    specs (classifiers use the transition matrix) and for a spec inconsistent with itself;
    LookupError for a spec no registry entry declares — never a silent fall-back.
    """
    if spec is None:
        return IDENTITY
    spec = mechanism_spec(spec)
    if getattr(spec, "classes", None) is not None:
        raise ValueError("categorical releases have a transition matrix, not a regression label law")
    return law_of(entry_for_spec(spec).from_spec(spec).law())


def law_of(law: TransitionLaw) -> LabelLaw:
    """The estimators' form of a mechanism's regression law (affine or monotone)."""
    if law.kind == "affine":
        return LabelLaw(law.name, law.a, law.b, law.low, law.high, mean_fn=law.mean, target_fn=law.target)
    if law.kind == "monotone":
        return MonotoneLaw(
            law.name, law.a, law.b, law.low, law.high, mean_fn=law.mean, target_fn=None,
            values=law.values, means=law.means,
        )
    raise ValueError(f"the {law.name} law is a transition matrix, not a regression label law")


# --------------------------------------------------------------------------- estimators


def prediction_parts(outputs: np.ndarray, law: LabelLaw, debias: Debias) -> tuple[np.ndarray, np.ndarray]:
    """(plain, debiased) estimates from a model's outputs in label units.

    ``predictions``: the model learnt E[ŷ | x]; plain is its output, debiased is
    m⁻¹ of it. ``targets``: the model learnt E[ỹ | x]; debiased is its output,
    plain the equivalent a·g + b. Both are clipped to [low, high], the range of
    t(y): every estimate is of something in that interval, so clipping only moves
    it closer, and every λ mixes two points of it. ``none``: both are the output,
    untouched.
    """
    outputs = np.asarray(outputs, dtype=np.float64)
    if debias == "none":
        return outputs, outputs
    if debias == "predictions":
        return np.clip(outputs, law.low, law.high), law.debias_predictions(outputs)
    if debias == "targets":
        return np.clip(law.rebias(outputs), law.low, law.high), np.clip(outputs, law.low, law.high)
    raise ValueError(f"debias must be one of {', '.join(DEBIAS_MODES)}")


def shrink(plain: np.ndarray, debiased: np.ndarray, shrinkage: float) -> np.ndarray:
    """λ·debiased + (1 − λ)·plain; λ = 0 is the plain estimate, λ = 1 the debiased one."""
    lam = check_shrinkage(shrinkage)
    if lam == 0.0:
        return np.asarray(plain, dtype=np.float64)
    if lam == 1.0:
        return np.asarray(debiased, dtype=np.float64)
    return lam * np.asarray(debiased, dtype=np.float64) + (1.0 - lam) * np.asarray(plain, dtype=np.float64)


def check_shrinkage(shrinkage: float) -> float:
    lam = float(shrinkage)
    if not 0.0 <= lam <= 1.0:
        raise ValueError("shrinkage must be in [0, 1]")
    return lam


def best_shrinkage(plain: np.ndarray, debiased: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    """(λ, loss): λ ∈ [0, 1] minimizing mean((λ·d + (1 − λ)·p − r)²), exactly.

    The loss is a convex quadratic in λ, so the minimizer over [0, 1] is the
    unconstrained one ⟨d − p, r − p⟩/‖d − p‖² clipped to [0, 1]: the limit of any
    finer grid, at no cost. Ties (d = p) give λ = 1.
    """
    p = np.asarray(plain, dtype=np.float64)
    d = np.asarray(debiased, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    diff = d - p
    denominator = float(np.dot(diff, diff))
    lam = 1.0 if denominator <= 0.0 else min(1.0, max(0.0, float(np.dot(diff, r - p)) / denominator))
    return lam, mean_squared_error(shrink(p, d, lam), r)


def cautious_shrinkage(plain: np.ndarray, debiased: np.ndarray, reference: np.ndarray) -> tuple[float, float, float]:
    """(λ, λ*, se): the exact minimizer λ* of :func:`best_shrinkage`, discounted by its own noise.

    λ* = ⟨Δ, r − p⟩/‖Δ‖² (Δ = d − p) is a regression coefficient on noisy
    references r (the debiased validation labels, whose variance grows as 1/a²);
    its sandwich standard error is se = √(Σ Δᵢ² eᵢ²)/‖Δ‖², e the residuals at λ*.
    The multiplier c minimizing E[(c·λ* − λ°)²] for the unknown best λ° is
    λ°²/(λ°² + se²); plugging in λ*² − se² for λ°² gives the positive-part
    James–Stein rule λ = λ*·max(0, 1 − se²/λ*²). At large ε, se → 0 and λ = λ*;
    at small ε, where λ* is mostly noise, λ falls back toward the plain estimate.
    """
    p = np.asarray(plain, dtype=np.float64)
    d = np.asarray(debiased, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    lam_star, _ = best_shrinkage(p, d, r)
    diff = d - p
    denominator = float(np.dot(diff, diff))
    if lam_star <= 0.0 or denominator <= 0.0:
        return lam_star if denominator <= 0.0 else 0.0, lam_star, 0.0
    residual = r - shrink(p, d, lam_star)
    se = math.sqrt(float(np.dot(diff * diff, residual * residual))) / denominator
    return lam_star * max(0.0, 1.0 - (se / lam_star) ** 2), lam_star, se


def mean_squared_error(predictions: np.ndarray, reference: np.ndarray) -> float:
    diff = np.asarray(predictions, dtype=np.float64) - np.asarray(reference, dtype=np.float64)
    return float(np.dot(diff, diff) / diff.size) if diff.size else float("nan")


def prior_moments(prior: Any, law: LabelLaw, n_rows: int) -> tuple[float, float] | None:
    """(mean, variance) of the labels under the release's DP histogram prior: the free half of the anchor.

    A release whose ε₁ bought a Laplace histogram of its labels on a public grid
    (``NoisyPrior``, source ``laplace_histogram``: RR-on-Bins, RPWithPrior's default prior)
    already states the labels' distribution; its mean Σ pⱼ·gⱼ estimates the labels' mean
    over the release's ``n_rows`` rows at no further ε (post-processing) — y itself, which a
    constant prediction is scored against, where the debiased labels reach only t(y). Every
    count carries two-sided geometric noise α = e^{−ε₁/2} (variance 2α/(1 − α)²), so the mean
    Σ cⱼ·gⱼ/n has variance 2α/(1 − α)²·Σ (gⱼ − μ)²/n² (the grid is public, n is
    public). The release's Norm-Sub (``labeldp.mechanisms.prior.consistent_probs``) then
    subtracts one δ from every count it keeps (the support S) so they sum to n: the noise's
    average over S cancels, and the mean's variance is 2α/(1 − α)²·Σ_S (gⱼ − ḡ_S)²/n², ḡ_S
    the plain average of the grid over S (the support taken as fixed: its own noise is ignored).

    ``None`` where there is nothing free to use: no prior, a public one (ε₁ = 0: not these
    labels), Alg. 3's step prior of noised labels (``HistogramPriorSpec``: its cells are as wide
    as the noise, so its mean is biased by the binning). ``law`` is unused (kept for callers).
    """
    if prior is None or n_rows < 1:
        return None
    data = prior.model_dump() if hasattr(prior, "model_dump") else dict(prior)
    if data.get("source") != "laplace_histogram" or float(data.get("epsilon", 0.0)) <= 0.0:
        return None
    grid = np.asarray(data["grid"], dtype=np.float64)
    probs = np.asarray(data["probs"], dtype=np.float64)
    values = grid  # the labels themselves: a constant prediction is scored against y, not t(y)
    mass = float(probs.sum())
    if grid.size == 0 or mass <= 0.0 or not np.all(np.isfinite(values)):
        return None
    mean = float(np.dot(probs, values) / mass)
    alpha = math.exp(-float(data["epsilon"]) / 2.0)
    count_var = 2.0 * alpha / (1.0 - alpha) ** 2
    support = values[probs > 0.0]
    spread = float(np.sum((support - support.mean()) ** 2))
    return mean, count_var * spread / float(n_rows) ** 2


def combine(estimates: list[tuple[float, float]]) -> tuple[float, float]:
    """The inverse-variance combination of independent unbiased (mean, variance) estimates.

    A zero variance wins outright; an infinite one weighs nothing.
    """
    exact = [m for m, v in estimates if v <= 0.0]
    if exact:
        return float(exact[0]), 0.0
    precision = sum(1.0 / v for _, v in estimates if math.isfinite(v))
    if precision <= 0.0:
        return float(estimates[0][0]), math.inf
    return sum(m / v for m, v in estimates if math.isfinite(v)) / precision, 1.0 / precision


def constant_prediction(
    target_mean: float,
    target_std: float,
    n: int,
    law: LabelLaw,
    debias: Debias,
    prior: tuple[float, float] | None = None,
) -> float:
    """The release's **private mean**: the best constant its labels afford, from their targets'
    mean and standard deviation over ``n`` rows (post-processing of the release: no ε).

    The same two estimates as any prediction (:func:`prediction_parts` of the mean):
    the plain one, the labels' mean clipped to the range of t(y), biased toward the
    mechanism's centre but stable; and the debiased one, m⁻¹ of it, unbiased but
    with the standard error se = sd(ỹ)/√n of the debiased labels, huge at small ε
    (RPWithPrior's slope a is tiny there, and the debiased mean lands on a domain
    edge). They are mixed like λ, cautiously: plain + c·(debiased − plain) with the
    positive-part James–Stein weight c = max(0, 1 − se²/(debiased − plain)²).

    ``prior``: the (mean, variance) of the labels the release's DP prior states (:func:`prior_moments`).
    It is a second estimate of the same mean, with noise independent of the labels' noise, so
    the debiased estimate becomes their inverse-variance combination (its variance ≤ either's)
    before the same cautious mix with the plain one. The prior's variance is widened by the
    positive-part estimate of its squared bias, (prior − debiased)² − both variances.
    """
    plain, debiased = (float(v[0]) for v in prediction_parts(np.array([float(target_mean)]), law, debias))
    slope = 1.0 if debias != "predictions" else law.a  # predictions: targets are ŷ, and sd(ỹ) = sd(ŷ)/a
    se2 = (float(target_std) / slope) ** 2 / n if n > 1 else math.inf
    if prior is not None:
        # The prior's mean may be biased (Norm-Sub moves mass off sparse cells, the grid snaps labels); with the
        # debiased mean unbiased, E[(prior − debiased)²] = bias² + both variances: the positive-part estimate
        # of bias² joins the prior's variance, so a prior that disagrees beyond its noise weighs less.
        prior_mean, prior_var = prior
        bias2 = 0.0 if not math.isfinite(se2) else max(0.0, (prior_mean - debiased) ** 2 - prior_var - se2)
        # Not clipped to the range of t: the prior's mean is of y, and between the two estimates (both in the
        # domain) the combination stays in the domain (RR-on-Bins' few bins can sit far from the labels' mean).
        debiased, se2 = combine([(debiased, se2), (prior_mean, prior_var + bias2)])
    gap = debiased - plain
    if gap == 0.0 or (not math.isfinite(se2) and prior is None):
        return debiased
    return plain + max(0.0, 1.0 - se2 / gap**2) * gap


def private_mean(privatized: np.ndarray, law: LabelLaw, debias: Debias = "predictions", prior: Any = None) -> float:
    """The private-mean predictor of a release's labels (:func:`constant_prediction` of them),
    with the release's DP ``prior`` (spec or JSON dict) where it has one (:func:`prior_moments`)."""
    labels = np.asarray(privatized, dtype=np.float64)
    targets = law.debias_labels(labels) if debias == "targets" else labels
    moments = prior_moments(prior, law, targets.size)
    return constant_prediction(float(targets.mean()), float(targets.std()), targets.size, law, debias, moments)


def toward(anchor: float, estimate: np.ndarray, weight: float) -> np.ndarray:
    """anchor + w·(estimate − anchor): w = 1 keeps the estimate, w = 0 is the constant ``anchor``."""
    w = check_shrinkage(weight)
    estimate = np.asarray(estimate, dtype=np.float64)
    return estimate if w == 1.0 else anchor + w * (estimate - anchor)


@dataclass(frozen=True)
class PostProcessing:
    """How a trained regressor turns its network's outputs (label units) into predictions.

    ``shrinkage`` λ mixes the plain and the debiased estimate; with an ``anchor`` (the
    release's private mean, :func:`constant_prediction`) the result is then pulled
    toward it, anchor + ``model_weight``·(estimate − anchor), so a model whose
    features explain less than the noise hides falls back to the mean
    (:mod:`labeldp.learning.selection`). Model files written without an anchor keep
    predicting as they did.
    """

    debias: Debias = "none"
    shrinkage: float = 0.0
    law: LabelLaw = IDENTITY
    anchor: float | None = None
    model_weight: float = 1.0

    def parts(self, outputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return prediction_parts(outputs, self.law, self.debias)

    def apply(self, outputs: np.ndarray) -> np.ndarray:
        plain, debiased = self.parts(outputs)
        estimate = shrink(plain, debiased, self.shrinkage)
        return estimate if self.anchor is None else toward(self.anchor, estimate, self.model_weight)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"debias": self.debias, "shrinkage": float(self.shrinkage), "law": self.law.to_dict()}
        if self.anchor is not None:
            data.update(anchor=float(self.anchor), model_weight=float(self.model_weight))
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> PostProcessing:
        if not data:
            return cls()
        debias: Any = str(data["debias"])
        anchor = data.get("anchor")
        return cls(
            debias,
            float(data["shrinkage"]),
            law_from_dict(data.get("law")),
            None if anchor is None else float(anchor),
            float(data.get("model_weight", 1.0)),
        )
