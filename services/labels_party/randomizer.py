"""The labels party's randomizer (Ghazi et al. Alg. 3): private prior, fit, privatize.

Everything returned here is ε-DP in the labels and may leave the labels party:
the prior is a Laplace histogram (ε₁), the mechanism is fitted to that noisy
prior only, and each label is randomized once with ε₂ (parallel composition
across examples, basic composition of the two parts).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labeldp.epsilon import InvalidEpsilon, from_micro, split_budget
from labeldp.mechanisms import (
    DiscreteLaplace,
    LabelDomain,
    LaplaceHistogramPrior,
    RROnBins,
    default_grid,
)
from labeldp.schema import EpsilonPart, MechanismSpec, NoisyPrior, PrivacyAccounting

MECHANISMS = ("rr_on_bins", "laplace")


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
    prior: NoisyPrior | None
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


def randomize(
    labels: np.ndarray,
    domain: LabelDomain,
    mechanism: str,
    epsilon_micro: int,
    rng: np.random.Generator,
    *,
    epsilon_prior_micro: int | None = None,
    public_prior: PublicPrior | None = None,
) -> Randomized:
    """Privatize ``labels`` (in the caller's canonical id order) with ``mechanism``."""
    if mechanism not in MECHANISMS:
        raise RandomizerError("unknown_mechanism", f"mechanism must be one of {', '.join(MECHANISMS)}")
    if epsilon_micro <= 0:
        raise RandomizerError("invalid_epsilon", "epsilon must be greater than 0")
    labels = np.asarray(labels, dtype=np.float64)
    n = labels.size

    if mechanism == "laplace":
        if public_prior is not None or epsilon_prior_micro:
            raise RandomizerError("invalid_request", "the laplace mechanism uses no prior")
        mech = DiscreteLaplace(from_micro(epsilon_micro), domain).fit()
        accounting = PrivacyAccounting(
            parts=[EpsilonPart(name="randomizer", epsilon_micro=epsilon_micro)],
            total_epsilon_micro=epsilon_micro,
        )
        return Randomized(mech.to_spec(), None, accounting, mech.privatize(labels, rng))

    # rr_on_bins
    if public_prior is not None:
        if epsilon_prior_micro:
            raise RandomizerError("invalid_request", "a public prior costs no epsilon: omit epsilon_prior")
        eps1_micro, eps2_micro = 0, epsilon_micro
        grid, probs = public_prior.values, public_prior.probs
        prior_spec = NoisyPrior(source="public", grid=grid.tolist(), probs=probs.tolist(), epsilon=0.0)
    else:
        grid = default_grid(domain, n)
        try:
            eps1_micro, eps2_micro = split_budget(epsilon_micro, grid.size, n, epsilon_prior_micro)
        except InvalidEpsilon as exc:
            raise RandomizerError("invalid_epsilon", str(exc)) from exc
        if eps1_micro == 0:
            raise RandomizerError("invalid_epsilon", "a private prior needs epsilon_prior > 0")
        prior = LaplaceHistogramPrior(from_micro(eps1_micro), grid).fit(labels, rng)
        probs = prior.probs_
        prior_spec = prior.to_spec()
    mech = RROnBins(from_micro(eps2_micro)).fit(grid, probs)
    accounting = PrivacyAccounting(
        parts=[
            EpsilonPart(name="prior", epsilon_micro=eps1_micro),
            EpsilonPart(name="randomizer", epsilon_micro=eps2_micro),
        ],
        total_epsilon_micro=eps1_micro + eps2_micro,
    )
    return Randomized(mech.to_spec(), prior_spec, accounting, mech.privatize(labels, rng))
