"""The labels party's randomizer (Ghazi et al. Alg. 3, generalized): prior, fit, privatize.

Everything returned here is ε-DP in the labels and may leave the labels party.
Each mechanism of the catalogue has one :class:`Recipe` saying which labels it
takes, which parameters it accepts, and how its prior is obtained:

- ``histogram``: the ε₁ Laplace histogram over the public grid (Alg. 4), or a
  public prior at ε₁ = 0; the mechanism is fitted for ε₂ (RR-on-Bins, unbiased
  with prior weights);
- ``noised_labels``: Liu & Huang Alg. 3 — every label Laplace-noised with ε₁,
  the histogram built from the noised values only; the interval fitted for ε₂;
- ``split``: Liu & Ding Alg. 2 — a label-independent split of the rows is released
  with ε-RR and its debiased output is the prior of the rest (no separate ε₁);
- ``none``: prior-free; the whole ε goes to the randomizer.

Each label is randomized once per release (parallel composition across rows),
and ε₁ + ε₂ add up by basic composition to the charge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from labeldp.accounting import compose
from labeldp.epsilon import InvalidEpsilon, from_micro, split_budget
from labeldp.mechanisms import LabelDomain, LaplaceHistogramPrior, default_grid
from labeldp.mechanisms.additive import Exponential, Gaussian, Laplace, Staircase
from labeldp.mechanisms.categorical import (
    BlockRR,
    RandomizedResponse,
    RRWithPrior,
    SplitPriorRandomizer,
)
from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.mechanisms.rp_with_prior import RPWithPrior
from labeldp.mechanisms.rr_on_bins import RROnBins
from labeldp.mechanisms.unbiased import UnbiasedRandomizer
from labeldp.schema import MechanismSpec, NoisyPrior, PrivacyAccounting
from labeldp.specs.rp_with_prior import HistogramPriorSpec

MAX_DELTA = 1e-3
PUBLIC_PRIOR = PrivacyGuarantee(0.0, statement="a public prior reads no label of this release")


class RandomizerError(ValueError):
    """A request the randomizer cannot serve; ``code`` is the API error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------- parameters


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RROnBinsParams(_Params):
    loss: Literal["squared", "absolute", "poisson"] = "squared"


class AdditiveParams(_Params):
    variant: Literal["continuous", "discrete"] | None = None
    clip: bool = True


class StaircaseParams(AdditiveParams):
    gamma: float | None = Field(None, gt=0, lt=1)


class GaussianParams(AdditiveParams):
    delta: float = Field(1e-6, gt=0, le=MAX_DELTA)


class ExponentialParams(_Params):
    variant: Literal["continuous", "discrete"] | None = None


class RPWithPriorParams(_Params):
    zeta: float | None = Field(None, gt=0)
    sigma: float | None = Field(None, gt=0)


class UnbiasedParams(_Params):
    grid_size: int | None = Field(None, ge=2, le=129)
    weights: Literal["uniform", "prior"] = "uniform"


class RRWithPriorParams(_Params):
    prior_fraction: float = Field(0.1, gt=0, lt=1)


class BlockRRParams(RRWithPriorParams):
    sigma: float = Field(1.0, gt=0)
    l: int | Literal["auto"] | None = Field("auto", description="|Δ|; auto = most accurate under the prior")


PriorKind = Literal["none", "histogram", "noised_labels", "split"]


@dataclass(frozen=True)
class Recipe:
    """How the service builds one mechanism of the catalogue."""

    name: str
    label_types: frozenset[str]
    params: type[_Params]
    prior: Callable[[_Params], PriorKind]
    summary: str


REAL = frozenset({"real", "integer"})
CATEGORICAL = frozenset({"categorical"})

RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in [
        Recipe("rr_on_bins", REAL, RROnBinsParams, lambda p: "histogram",
               "RR-on-Bins, exactly optimal bins for the loss (Ghazi et al. 2023)"),
        Recipe("rp_with_prior", REAL, RPWithPriorParams, lambda p: "noised_labels",
               "RPWithPrior, optimal interval for a noised-label histogram prior (Liu & Huang)"),
        Recipe("laplace", REAL, AdditiveParams, lambda p: "none", "Laplace noise on a lattice, clipped"),
        Recipe("staircase", REAL, StaircaseParams, lambda p: "none", "staircase noise on a lattice, clipped"),
        Recipe("gaussian", REAL, GaussianParams, lambda p: "none",
               "Gaussian noise, analytic (ε, δ) calibration (Balle & Wang 2018)"),
        Recipe("exponential", REAL, ExponentialParams, lambda p: "none",
               "exponential mechanism: range-restricted Laplace with scale 2Δ/ε"),
        Recipe("unbiased", REAL, UnbiasedParams,
               lambda p: "histogram" if p.weights == "prior" else "none",  # type: ignore[attr-defined]
               "variance-minimizing unbiased randomizer, LP over a grid (Badanidiyuru et al. 2023)"),
        Recipe("randomized_response", CATEGORICAL, _Params, lambda p: "none", "randomized response (Warner)"),
        Recipe("rr_with_prior", CATEGORICAL, RRWithPriorParams, lambda p: "split",
               "RRWithPrior: RR over the prior's optimal top-k classes (Liu & Ding Def. 2.4)"),
        Recipe("block_rr", CATEGORICAL, BlockRRParams, lambda p: "split",
               "BlockRR (Liu & Ding Alg. 1-2)"),
    ]
}
MECHANISMS = tuple(RECIPES)


@dataclass(frozen=True)
class PublicPrior:
    """A prior the caller already knows publicly: costs no ε."""

    values: np.ndarray
    probs: np.ndarray


@dataclass(frozen=True)
class Randomized:
    mechanism: MechanismSpec
    prior: NoisyPrior | HistogramPriorSpec | None
    accounting: PrivacyAccounting
    labels: np.ndarray


def validate_public_prior(values: list[float], probs: list[float], domain: LabelDomain) -> PublicPrior:
    v = np.asarray(values, dtype=np.float64)
    p = np.asarray(probs, dtype=np.float64)
    if v.ndim != 1 or v.shape != p.shape or v.size == 0:
        raise RandomizerError("invalid_prior", "prior values and probs must be equal-length, non-empty lists")
    if not (np.all(np.isfinite(v)) and np.all(np.isfinite(p))):
        raise RandomizerError("invalid_prior", "prior values and probs must be finite")
    if np.any(np.diff(v) <= 0):
        raise RandomizerError("invalid_prior", "prior values must be strictly increasing")
    if v[0] < domain.low or v[-1] > domain.high:
        raise RandomizerError("invalid_prior", "prior values must lie inside the label domain")
    if np.any(p < 0) or p.sum() <= 0:
        raise RandomizerError("invalid_prior", "prior probs must be >= 0 with a positive sum")
    return PublicPrior(v, p / p.sum())


def recipe_for(mechanism: str, label_type: str) -> Recipe:
    recipe = RECIPES.get(mechanism)
    if recipe is None:
        raise RandomizerError("unknown_mechanism", f"mechanism must be one of {', '.join(MECHANISMS)}")
    if label_type not in recipe.label_types:
        raise RandomizerError(
            "mechanism_not_applicable", f"{mechanism} does not take {label_type} labels"
        )
    return recipe


def parse_params(recipe: Recipe, params: dict[str, Any] | None) -> _Params:
    try:
        return recipe.params(**(params or {}))
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) or "params" for e in exc.errors())
        raise RandomizerError("invalid_parameters", f"invalid parameters for {recipe.name}: {fields}") from exc


def _need_domain(domain: LabelDomain | None) -> LabelDomain:
    """The label domain a real-valued mechanism needs (a categorical set has none)."""
    if domain is None:
        raise RandomizerError("invalid_request", "this mechanism needs a real or integer label domain")
    return domain


def _need_classes(classes: list[str] | None) -> list[str]:
    """The class list a categorical mechanism needs (a real-valued set has none)."""
    if classes is None:
        raise RandomizerError("invalid_request", "this mechanism needs categorical labels")
    return classes


def _build(name: str, epsilon: float, domain: LabelDomain | None, classes: list[str] | None, p: _Params):
    """The mechanism object for ``name`` at ``epsilon`` (unfitted)."""
    d = p.model_dump()
    if name == "rr_on_bins":
        return RROnBins(epsilon, **d)
    if name == "laplace":
        return Laplace(epsilon, _need_domain(domain), **d)
    if name == "staircase":
        return Staircase(epsilon, _need_domain(domain), **d)
    if name == "gaussian":
        return Gaussian(epsilon, _need_domain(domain), **d)
    if name == "exponential":
        return Exponential(epsilon, _need_domain(domain), **d)
    if name == "rp_with_prior":
        return RPWithPrior(epsilon, _need_domain(domain), **d)
    if name == "unbiased":
        return UnbiasedRandomizer(epsilon, _need_domain(domain), **d)
    if name == "randomized_response":
        return RandomizedResponse(epsilon, _need_classes(classes))
    if name in ("rr_with_prior", "block_rr"):
        d.pop("prior_fraction")
        cls = RRWithPrior if name == "rr_with_prior" else BlockRR
        return cls(epsilon, _need_classes(classes), **d)
    raise RandomizerError("unknown_mechanism", name)


def randomize(
    labels: np.ndarray,
    domain: LabelDomain | None,
    mechanism: str,
    epsilon_micro: int,
    rng: np.random.Generator,
    **kwargs: Any,
) -> Randomized:
    """Privatize ``labels`` (canonical id order); see :func:`_randomize` for the arguments.

    Mechanism-side ``ValueError``s (a parameter the mechanism refuses, e.g. a loss
    it does not support) become ``invalid_parameters``; their messages are written
    by our code and never contain label values.
    """
    try:
        return _randomize(labels, domain, mechanism, epsilon_micro, rng, **kwargs)
    except RandomizerError:
        raise
    except ValueError as exc:
        raise RandomizerError("invalid_parameters", f"{mechanism}: {exc}") from exc


def _randomize(
    labels: np.ndarray,
    domain: LabelDomain | None,
    mechanism: str,
    epsilon_micro: int,
    rng: np.random.Generator,
    *,
    classes: list[str] | None = None,
    params: dict[str, Any] | None = None,
    epsilon_prior_micro: int | None = None,
    public_prior: PublicPrior | None = None,
) -> Randomized:
    """Privatize ``labels`` (in the caller's canonical id order) with ``mechanism``.

    ``domain`` for real/integer labels, ``classes`` (labels = class indices) for
    categorical ones.
    """
    label_type = "categorical" if classes is not None else (domain.kind if domain else "real")
    recipe = recipe_for(mechanism, label_type)
    p = parse_params(recipe, params)
    if epsilon_micro <= 0:
        raise RandomizerError("invalid_epsilon", "epsilon must be greater than 0")
    labels = np.asarray(labels, dtype=np.float64)
    n = labels.size
    prior_kind = recipe.prior(p)

    if prior_kind in ("none", "split"):
        if public_prior is not None and prior_kind == "none":
            raise RandomizerError("invalid_request", f"{mechanism} uses no prior")
        if epsilon_prior_micro:
            raise RandomizerError("invalid_request", f"{mechanism} spends no separate epsilon_prior")
        eps = from_micro(epsilon_micro)
        if prior_kind == "split":
            if public_prior is not None:
                mech = _build(mechanism, eps, domain, classes, p).fit(public_prior.probs, grid=public_prior.values)
                out, spec, guarantee = mech.privatize(labels, rng), mech.to_spec(), mech.guarantee
            else:
                split = SplitPriorRandomizer(
                    type(_build(mechanism, eps, domain, classes, p)),
                    eps,
                    _need_classes(classes),
                    prior_fraction=p.prior_fraction,  # type: ignore[attr-defined]
                    **{k: v for k, v in p.model_dump().items() if k != "prior_fraction"},
                )
                out = split.privatize(labels, rng)
                spec, guarantee = split.to_spec(), split.guarantee
        else:
            mech = _build(mechanism, eps, domain, classes, p).fit()
            out, spec, guarantee = mech.privatize(labels, rng), mech.to_spec(), mech.guarantee
        accounting = compose([("randomizer", epsilon_micro, guarantee)])
        prior_spec: NoisyPrior | HistogramPriorSpec | None = (
            None
            if public_prior is None
            else NoisyPrior(
                source="public", grid=public_prior.values.tolist(), probs=public_prior.probs.tolist(), epsilon=0.0
            )
        )
        return Randomized(spec, prior_spec, accounting, np.asarray(out, dtype=np.float64))

    # Mechanisms fitted to a prior that costs ε₁ (or nothing, when public).
    assert domain is not None
    grid = default_grid(domain, n, from_micro(epsilon_micro))  # k from public n and ε only
    if public_prior is not None:
        if epsilon_prior_micro:
            raise RandomizerError("invalid_request", "a public prior costs no epsilon: omit epsilon_prior")
        eps1_micro, eps2_micro = 0, epsilon_micro
    else:
        try:
            eps1_micro, eps2_micro = split_budget(epsilon_micro, grid.size, n, epsilon_prior_micro)
        except InvalidEpsilon as exc:
            raise RandomizerError("invalid_epsilon", str(exc)) from exc
        if eps1_micro == 0:
            raise RandomizerError("invalid_epsilon", "a private prior needs epsilon_prior > 0")
    eps1, eps2 = from_micro(eps1_micro), from_micro(eps2_micro)
    mech = _build(mechanism, eps2, domain, classes, p)
    if public_prior is not None:
        mech.fit(public_prior.values, public_prior.probs)
        prior_spec = NoisyPrior(
            source="public", grid=public_prior.values.tolist(), probs=public_prior.probs.tolist(), epsilon=0.0
        )
        prior_guarantee = PUBLIC_PRIOR
    elif prior_kind == "noised_labels":
        mech.fit_private(labels, eps1, rng)
        prior_spec = mech.prior_estimator_.to_spec()
        prior_guarantee = mech.prior_estimator_.guarantee
    else:
        prior = LaplaceHistogramPrior(eps1, grid).fit(labels, rng)
        mech.fit(grid, prior.probs_)
        prior_spec = prior.to_spec()
        prior_guarantee = prior.guarantee
    accounting = compose([("prior", eps1_micro, prior_guarantee), ("randomizer", eps2_micro, mech.guarantee)])
    return Randomized(mech.to_spec(), prior_spec, accounting, np.asarray(mech.privatize(labels, rng), dtype=np.float64))


def fit_to_public_prior(
    mechanism: str,
    epsilon: float,
    values: np.ndarray,
    probs: np.ndarray,
    *,
    domain: LabelDomain | None = None,
    classes: list[str] | None = None,
    params: dict[str, Any] | None = None,
):
    """The mechanism fitted for ``epsilon`` to a public prior (``labeldp optimize``).

    Prior-free mechanisms are built and fitted without it; the prior then only
    serves to evaluate their expected loss.
    """
    label_type = "categorical" if classes is not None else (domain.kind if domain else "real")
    recipe = recipe_for(mechanism, label_type)
    p = parse_params(recipe, params)
    try:
        mech = _build(mechanism, epsilon, domain, classes, p)
        kind = recipe.prior(p)
        if kind == "none":
            return mech.fit()
        if kind == "split":
            return mech.fit(probs, grid=values)
        return mech.fit(values, probs)
    except ValueError as exc:
        raise RandomizerError("invalid_parameters", f"{mechanism}: {exc}") from exc
