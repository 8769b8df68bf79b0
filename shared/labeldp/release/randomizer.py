"""The labels party's randomizer (Ghazi et al. Alg. 3, generalized): prior, fit, privatize.

Everything returned here is ε-DP in the labels and may leave the labels party.
Every mechanism comes from the registry (``labeldp.mechanisms.registry``; docs/architecture.md,
"The mechanism contract"): its entry says which labels it takes, validates its parameters
with the mechanism's params model, builds it, and says how its prior is obtained
(``PriorKind``): none, the ε₁ Laplace histogram over the public grid (Alg. 4) or a public
prior at ε₁ = 0, Liu & Huang's noised-label histogram (Alg. 3), or Liu & Ding's
label-independent split (Alg. 2, no separate ε₁).

Each label is randomized once per release (parallel composition across rows), and the
accounting is the basic composition of the parts' guarantees (``labeldp.accounting``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import ValidationError

from labeldp.accounting import compose
from labeldp.epsilon import InvalidEpsilon, from_micro, split_budget
from labeldp.mechanisms import LabelDomain, LaplaceHistogramPrior, default_grid
from labeldp.mechanisms.categorical import SplitPriorRandomizer
from labeldp.mechanisms.contract import Mechanism, Params, Prior
from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.mechanisms.registry import NAMES, REGISTRY, Entry
from labeldp.mechanisms.rp_with_prior import NoisyLabelHistogramPrior, RPWithPrior
from labeldp.schema import MechanismSpec, NoisyPrior, PrivacyAccounting
from labeldp.specs.rp_with_prior import HistogramPriorSpec

MAX_DELTA = 1e-3
"""The largest δ a release may carry, whatever its mechanism's parameters allow."""
PUBLIC_PRIOR = PrivacyGuarantee(0.0, statement="a public prior reads no label of this release")
MECHANISMS = NAMES


class RandomizerError(ValueError):
    """A request the randomizer cannot serve; ``code`` is the API error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


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


def entry_for(mechanism: str, label_type: str) -> Entry:
    """The registry entry of ``mechanism``, refused unless it takes ``label_type`` labels."""
    entry = REGISTRY.get(mechanism)
    if entry is None:
        raise RandomizerError("unknown_mechanism", f"mechanism must be one of {', '.join(MECHANISMS)}")
    if label_type not in entry.label_types:
        raise RandomizerError("mechanism_not_applicable", f"{mechanism} does not take {label_type} labels")
    return entry


def parse_params(entry: Entry, params: dict[str, Any] | None) -> Params:
    """The caller's parameters through the mechanism's params model (their one validation)."""
    try:
        return entry.parse_params(params)
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) or f"params ({e['msg']})" for e in exc.errors())
        raise RandomizerError("invalid_parameters", f"invalid parameters for {entry.name}: {fields}") from exc


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


def _build(name: str, epsilon: float, domain: LabelDomain | None, classes: list[str] | None, p: Params) -> Mechanism:
    """The registry's mechanism ``name`` at ``epsilon`` (unfitted), its δ within ``MAX_DELTA``."""
    entry = REGISTRY[name]
    if entry.categorical:
        mech = entry.build(epsilon, p, classes=_need_classes(classes))
    else:
        mech = entry.build(epsilon, p, domain=_need_domain(domain))
    if mech.guarantee.delta > MAX_DELTA:
        raise RandomizerError("invalid_parameters", f"{name}: a release's delta must be at most {MAX_DELTA}")
    return mech


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
    entry = entry_for(mechanism, label_type)
    p = parse_params(entry, params)
    if epsilon_micro <= 0:
        raise RandomizerError("invalid_epsilon", "epsilon must be greater than 0")
    labels = np.asarray(labels, dtype=np.float64)
    n = labels.size
    prior_kind = entry.prior_kind(p)
    public = None if public_prior is None else Prior(public_prior.values, public_prior.probs)

    if prior_kind in ("none", "split"):
        if public_prior is not None and prior_kind == "none":
            raise RandomizerError("invalid_request", f"{mechanism} uses no prior")
        if epsilon_prior_micro:
            raise RandomizerError("invalid_request", f"{mechanism} spends no separate epsilon_prior")
        eps = from_micro(epsilon_micro)
        if prior_kind == "split":
            if public is not None:
                mech = _build(mechanism, eps, domain, classes, p).fit_to(public)
                out, spec, guarantee = mech.privatize(labels, rng), mech.to_spec(), mech.guarantee
            else:
                split = SplitPriorRandomizer(
                    type(_build(mechanism, eps, domain, classes, p)),  # type: ignore[arg-type]
                    eps,
                    _need_classes(classes),
                    prior_fraction=p.prior_fraction,  # type: ignore[attr-defined]
                    **p.mechanism_kwargs(),
                )
                out = split.privatize(labels, rng)
                spec, guarantee = split.to_spec(), split.guarantee
        else:
            mech = _build(mechanism, eps, domain, classes, p).fit_to(None)
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
    domain = _need_domain(domain)
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
    if public is not None:
        mech.fit_to(public)
        prior_spec = NoisyPrior(source="public", grid=public.values.tolist(), probs=public.probs.tolist(), epsilon=0.0)
        prior_guarantee = PUBLIC_PRIOR
    elif prior_kind == "noised_labels":
        if not isinstance(mech, RPWithPrior):  # pragma: no cover - the registry pairs the two
            raise TypeError(f"{mechanism} has no noised-label prior")
        noised = NoisyLabelHistogramPrior(eps1, domain, sigma=mech.sigma).fit(labels, rng)
        mech.fit_to(noised.prior_)
        prior_spec = noised.to_spec()
        prior_guarantee = noised.guarantee
    else:
        prior = LaplaceHistogramPrior(eps1, grid).fit(labels, rng)
        mech.fit_to(Prior(grid, prior.probs_))
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
) -> Mechanism:
    """The mechanism fitted for ``epsilon`` to a public prior (``labeldp optimize``).

    Prior-free mechanisms are built and fitted without it; the prior then only
    serves to evaluate their expected loss.
    """
    label_type = "categorical" if classes is not None else (domain.kind if domain else "real")
    entry = entry_for(mechanism, label_type)
    p = parse_params(entry, params)
    try:
        mech = _build(mechanism, epsilon, domain, classes, p)
        return mech.fit_to(None if entry.prior_kind(p) == "none" else Prior(values, probs))
    except RandomizerError:
        raise
    except ValueError as exc:
        raise RandomizerError("invalid_parameters", f"{mechanism}: {exc}") from exc
