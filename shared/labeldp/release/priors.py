"""How a release obtains the prior its mechanism is fitted to: one function per prior kind.

The registry entry alone decides which (``Entry.prior``, a function of the parameters,
gives a ``PriorKind``); :data:`PRIORS` maps each kind to the one function that obtains it,
and the randomizer only looks it up (docs/architecture.md, "The mechanism contract"):

- ``none``: prior-free, the whole ε goes to the randomizer;
- ``histogram``: the ε₁ Laplace histogram over the public grid (Ghazi et al. Alg. 4);
- ``noised_labels``: Liu & Huang Alg. 3, every label Laplace-noised with ε₁, the histogram
  built from the noised values only;
- ``split``: Liu & Ding Alg. 2, a label-independent split of the rows released with ε-RR,
  its debiased output the prior of the other rows (no separate ε₁).

A public prior, where the kind takes one, costs no ε and replaces the private one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from labeldp.epsilon import InvalidEpsilon, from_micro, split_budget
from labeldp.errors import RandomizerError
from labeldp.mechanisms.categorical import BlockRR, PriorSplit, RRWithPrior, RRWithPriorParams
from labeldp.mechanisms.contract import Mechanism, Params, Prior
from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.mechanisms.prior import LabelDomain, LaplaceHistogramPrior, default_grid, snap_to_grid
from labeldp.mechanisms.registry import PriorKind
from labeldp.mechanisms.rp_with_prior import NoisyLabelHistogramPrior, RPWithPrior, RPWithPriorParams, StepPrior
from labeldp.specs.base import MechanismSpecBase, NoisyPrior
from labeldp.specs.rp_with_prior import HistogramPriorSpec

PUBLIC_PRIOR = PrivacyGuarantee(0.0, statement="a public prior reads no label of this release")

Part = tuple[str, int, PrivacyGuarantee]
"""One part of a release's accounting: (name, allotted µε, guarantee)."""


@dataclass(frozen=True)
class PublicPrior:
    """A prior the caller already knows publicly: costs no ε."""

    values: np.ndarray
    probs: np.ndarray


@dataclass(frozen=True)
class PriorRequest:
    """What a release asks of its prior: its row count n (public), their domain or classes, the
    validated parameters, the release's ε (µε), the caller's ε₁ if any, and a public prior if any."""

    mechanism: str
    n_rows: int
    domain: LabelDomain | None
    classes: list[str] | None
    params: Params
    epsilon_micro: int
    epsilon_prior_micro: int | None = None
    public: PublicPrior | None = None


@dataclass(frozen=True)
class ObtainedPrior:
    """The prior a release fits its mechanism to, what it cost and what it already released.

    ``prior``: what ``fit_to`` gets (None: prior-free); ``spec``: the prior as the message
    states it; ``epsilon_micro``: the ε left to the randomizer; ``parts``: the accounting
    parts the prior spent; ``split``: Alg. 2's first stage, whose rows are already released.
    """

    prior: Prior | StepPrior | None
    spec: NoisyPrior | HistogramPriorSpec | None
    epsilon_micro: int
    parts: tuple[Part, ...] = ()
    split: PriorSplit | None = None

    def fit(self, mechanism: Mechanism) -> Mechanism:
        """``mechanism.fit_to`` this prior (a step prior reaches only RPWithPrior, the one
        mechanism the registry pairs with noised labels)."""
        if isinstance(self.prior, StepPrior):
            if not isinstance(mechanism, RPWithPrior):  # pragma: no cover - the registry pairs the two
                raise TypeError(f"{mechanism.name} is not fitted to a step prior")
            return mechanism.fit_to(self.prior)
        return mechanism.fit_to(self.prior)

    def privatize(self, mechanism: Mechanism, labels: np.ndarray, start: int, rng: np.random.Generator) -> np.ndarray:
        """The chunk of rows ``start``… through the fitted ``mechanism``, but the rows the prior has
        already released (the split's, as it released them). Chunks come in row order; a split
        released whole (one chunk) is completed whole (``PriorSplit.complete``, the same draws)."""
        if self.split is None:
            return mechanism.privatize(labels, rng)
        if self.split.released_whole:
            return self.split.complete(_prior_based(mechanism), rng)
        return self.split.complete_rows(_prior_based(mechanism), labels, start, rng)

    def mechanism_spec(self, mechanism: Mechanism) -> MechanismSpecBase:
        """The fitted mechanism's spec, with the split that gave its prior."""
        if self.split is None:
            return mechanism.to_spec()
        return _prior_based(mechanism).to_spec(prior_split=self.split.to_spec())


class PriorPass(ABC):
    """Obtaining a prior over a release's labels given a chunk at a time, in row order: ``add``
    each chunk (the pass over all labels), then ``obtain`` once. Everything a request could be
    refused for is checked when the pass is made, before any label is read or any draw made.
    Given every row as one chunk, a pass calls its estimator's whole-array entry point (``fit``,
    ``release``), which the estimator defines as its chunked steps over one chunk."""

    def add(self, labels: np.ndarray, start: int, rng: np.random.Generator) -> None:
        """Rows ``start``… (float64 labels): what the prior needs of them (nothing, by default)."""
        del labels, start, rng  # a prior that reads no label

    @abstractmethod
    def obtain(self, rng: np.random.Generator) -> ObtainedPrior:
        """The prior, once every row was added."""


@dataclass
class _Obtained(PriorPass):
    """A prior that reads no label (none, or a public one)."""

    obtained: ObtainedPrior

    def obtain(self, rng: np.random.Generator) -> ObtainedPrior:
        return self.obtained


def no_prior(ask: PriorRequest) -> PriorPass:
    """Prior-free: no prior, no ε₁."""
    if ask.public is not None:
        raise RandomizerError("invalid_request", f"{ask.mechanism} uses no prior")
    _no_epsilon_prior(ask)
    return _Obtained(ObtainedPrior(None, None, ask.epsilon_micro))


class _SplitPass(PriorPass):
    def __init__(self, split: PriorSplit, n_rows: int, epsilon_micro: int) -> None:
        self.split, self.n_rows, self.epsilon_micro = split, n_rows, epsilon_micro
        split.begin(n_rows)

    def add(self, labels: np.ndarray, start: int, rng: np.random.Generator) -> None:
        if start == 0 and labels.size == self.n_rows:
            self.split.release(labels, rng)  # whole: completed whole in ObtainedPrior.privatize
        else:
            self.split.release_rows(labels, start, rng)

    def obtain(self, rng: np.random.Generator) -> ObtainedPrior:
        prior = self.split.finish()
        return ObtainedPrior(Prior.over_classes(prior), None, self.epsilon_micro, split=self.split)


def label_independent_split(ask: PriorRequest) -> PriorPass:
    """Alg. 2: ε-RR on a split chosen from n alone; its debiased output is the prior (no ε₁)."""
    _no_epsilon_prior(ask)
    if ask.public is not None:
        return _Obtained(ObtainedPrior(_as_prior(ask.public), _public_spec(ask.public), ask.epsilon_micro))
    if not isinstance(ask.params, RRWithPriorParams):  # pragma: no cover - the registry pairs the two
        raise TypeError(f"{ask.mechanism} has no prior split")
    split = PriorSplit(from_micro(ask.epsilon_micro), need_classes(ask.classes), ask.params.prior_fraction)
    return _SplitPass(split, ask.n_rows, ask.epsilon_micro)


class _HistogramPass(PriorPass):
    """Ghazi et al. Alg. 4: the labels' counts on the public grid (they add over chunks), then ε₁ noise once."""

    def __init__(self, eps1_micro: int, eps2_micro: int, grid: np.ndarray, n_rows: int) -> None:
        self.eps1_micro, self.eps2_micro, self.grid, self.n_rows = eps1_micro, eps2_micro, grid, n_rows
        self.counts = np.zeros(grid.size, np.int64)
        self._whole: np.ndarray | None = None

    def add(self, labels: np.ndarray, start: int, rng: np.random.Generator) -> None:
        if start == 0 and labels.size == self.n_rows:
            self._whole = labels  # every row at once: fit() counts them (the same counts)
            return
        self.counts += np.bincount(snap_to_grid(labels, self.grid).ravel(), minlength=self.grid.size)

    def obtain(self, rng: np.random.Generator) -> ObtainedPrior:
        estimator = LaplaceHistogramPrior(from_micro(self.eps1_micro), self.grid)
        if self._whole is not None:
            estimator.fit(self._whole, rng)
            self._whole = None
        else:
            estimator.fit_counts(self.counts, rng)
        part = ("prior", self.eps1_micro, estimator.guarantee)
        return ObtainedPrior(Prior(self.grid, estimator.probs_), estimator.to_spec(), self.eps2_micro, (part,))


def laplace_histogram(ask: PriorRequest) -> PriorPass:
    """Ghazi et al. Alg. 4: ε₁ Laplace noise on the counts over the public grid."""
    return _spending_epsilon_prior(ask, lambda eps1, eps2, grid: _HistogramPass(eps1, eps2, grid, ask.n_rows))


class _NoisedPass(PriorPass):
    """Liu & Huang Alg. 3: every label noised with ε₁ as its chunk comes, the histogram of the noised values."""

    def __init__(self, eps1_micro: int, eps2_micro: int, domain: LabelDomain, sigma: float | None) -> None:
        self.eps1_micro, self.eps2_micro = eps1_micro, eps2_micro
        self.estimator = NoisyLabelHistogramPrior(from_micro(eps1_micro), domain, sigma=sigma).begin()

    def add(self, labels: np.ndarray, start: int, rng: np.random.Generator) -> None:
        self.estimator.add(labels, rng)

    def obtain(self, rng: np.random.Generator) -> ObtainedPrior:
        estimator = self.estimator.finish()
        part = ("prior", self.eps1_micro, estimator.guarantee)
        return ObtainedPrior(estimator.prior_, estimator.to_spec(), self.eps2_micro, (part,))


def noised_labels(ask: PriorRequest) -> PriorPass:
    """Liu & Huang Alg. 3: every label noised with ε₁, the histogram of the noised values."""
    if not isinstance(ask.params, RPWithPriorParams):  # pragma: no cover - the registry pairs the two
        raise TypeError(f"{ask.mechanism} has no noised-label prior")
    sigma = ask.params.sigma
    domain = need_domain(ask.domain)
    return _spending_epsilon_prior(ask, lambda eps1, eps2, grid: _NoisedPass(eps1, eps2, domain, sigma))


PRIORS: dict[PriorKind, Callable[[PriorRequest], PriorPass]] = {
    "none": no_prior,
    "histogram": laplace_histogram,
    "noised_labels": noised_labels,
    "split": label_independent_split,
}
"""The one table from a registry entry's prior kind to how a release obtains that prior."""


def prior_pass(kind: PriorKind, ask: PriorRequest) -> PriorPass:
    """The pass that obtains the prior of ``kind`` for the release ``ask`` describes (checked, nothing drawn)."""
    return PRIORS[kind](ask)


def obtain_prior(kind: PriorKind, ask: PriorRequest, labels: np.ndarray, rng: np.random.Generator) -> ObtainedPrior:
    """The prior of ``kind`` for the release ``ask`` describes, from all its ``labels`` at once."""
    labels = np.asarray(labels, dtype=np.float64)
    if labels.size != ask.n_rows:
        raise ValueError("the request's n_rows is not the number of labels")
    p = prior_pass(kind, ask)
    p.add(labels, 0, rng)
    return p.obtain(rng)


# -- shared steps ---------------------------------------------------------------------


def _spending_epsilon_prior(ask: PriorRequest, make: Callable[[int, int, np.ndarray], PriorPass]) -> PriorPass:
    """The kinds that buy a prior with ε₁ out of the release's ε (or take a public one at ε₁ = 0)."""
    domain = need_domain(ask.domain)
    grid = default_grid(domain, ask.n_rows, from_micro(ask.epsilon_micro))  # k from public n and ε only
    if ask.public is not None:
        if ask.epsilon_prior_micro:
            raise RandomizerError("invalid_request", "a public prior costs no epsilon: omit epsilon_prior")
        parts: tuple[Part, ...] = (("prior", 0, PUBLIC_PRIOR),)
        return _Obtained(ObtainedPrior(_as_prior(ask.public), _public_spec(ask.public), ask.epsilon_micro, parts))
    try:
        eps1_micro, eps2_micro = split_budget(ask.epsilon_micro, grid.size, ask.n_rows, ask.epsilon_prior_micro)
    except InvalidEpsilon as exc:
        raise RandomizerError("invalid_epsilon", str(exc)) from exc
    if eps1_micro == 0:
        raise RandomizerError("invalid_epsilon", "a private prior needs epsilon_prior > 0")
    return make(eps1_micro, eps2_micro, grid)


def _no_epsilon_prior(ask: PriorRequest) -> None:
    if ask.epsilon_prior_micro:
        raise RandomizerError("invalid_request", f"{ask.mechanism} spends no separate epsilon_prior")


def _as_prior(public: PublicPrior) -> Prior:
    return Prior(public.values, public.probs)


def _public_spec(public: PublicPrior) -> NoisyPrior:
    return NoisyPrior(source="public", grid=public.values.tolist(), probs=public.probs.tolist(), epsilon=0.0)


def need_domain(domain: LabelDomain | None) -> LabelDomain:
    """The label domain a real-valued mechanism needs (a categorical set has none)."""
    if domain is None:
        raise RandomizerError("invalid_request", "this mechanism needs a real or integer label domain")
    return domain


def need_classes(classes: list[str] | None) -> list[str]:
    """The class list a categorical mechanism needs (a real-valued set has none)."""
    if classes is None:
        raise RandomizerError("invalid_request", "this mechanism needs categorical labels")
    return classes


def _prior_based(mechanism: Mechanism) -> RRWithPrior | BlockRR:
    if not isinstance(mechanism, (RRWithPrior, BlockRR)):  # pragma: no cover - the registry pairs the two
        raise TypeError(f"{mechanism.name} takes no prior split")
    return mechanism
