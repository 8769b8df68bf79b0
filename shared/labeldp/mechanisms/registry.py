"""The registry: one entry per mechanism, the one list every other list is derived from.

docs/architecture.md, "The mechanism contract". An :class:`Entry` names the mechanism
class (which satisfies :class:`~labeldp.mechanisms.contract.Mechanism`), its wire spec
and params model, the label types it serves, the prior its release needs and the ε
band in which ``"auto"`` picks it. Derived from it: the wire schema's spec union
(``labeldp.schema.MechanismSpec``), the labels party's randomizer and its default
(``labeldp.release.randomizer``, ``labeldp.release.defaults``), the features party's label
laws (``labeldp.learning.debiasing``) and forward correction, and the benchmark's
mechanism lists. Adding a mechanism is a class, a spec and one entry here;
``tests/unit/test_mechanism_contract.py`` then checks it end to end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from labeldp.mechanisms.additive import Exponential, Gaussian, Laplace, Staircase
from labeldp.mechanisms.categorical import BlockRR, RandomizedResponse, RRWithPrior
from labeldp.mechanisms.contract import Mechanism, Params
from labeldp.mechanisms.prior import LabelDomain
from labeldp.mechanisms.rp_with_prior import RPWithPrior
from labeldp.mechanisms.rr_on_bins import RROnBins
from labeldp.mechanisms.unbiased import UnbiasedRandomizer
from labeldp.specs.additive import ExponentialSpec, GaussianSpec, StaircaseSpec
from labeldp.specs.base import MechanismSpecBase
from labeldp.specs.categorical import BlockRRSpec, RandomizedResponseSpec, RRWithPriorSpec
from labeldp.specs.laplace import LaplaceSpec
from labeldp.specs.rp_with_prior import RPWithPriorSpec
from labeldp.specs.rr_on_bins import RROnBinsSpec
from labeldp.specs.unbiased import UnbiasedSpec

PriorKind = Literal["none", "histogram", "noised_labels", "split"]
"""How a release obtains the prior a mechanism is fitted to (each kind by the one function
``labeldp.release.priors.PRIORS`` maps it to):

- ``none``: prior-free; the whole ε goes to the randomizer;
- ``histogram``: the ε₁ Laplace histogram over the public grid (Ghazi et al. Alg. 4), or
  a public prior at ε₁ = 0;
- ``noised_labels``: Liu & Huang Alg. 3 — every label Laplace-noised with ε₁, the
  histogram built from the noised values only;
- ``split``: Liu & Ding Alg. 2 — a label-independent split of the rows is released with
  ε-RR and its debiased output is the prior of the rest (no separate ε₁).
"""

REAL = frozenset({"real", "integer"})
CATEGORICAL = frozenset({"categorical"})
LABEL_TYPES = ("real", "integer", "categorical")

BINS_BELOW = 0.4
"""``auto`` on real and integer labels: ``rr_on_bins`` below this scaled ε.
Decided in docs/decisions/0001-auto-regression-bands.md."""
UNBIASED_FROM = 6.4
"""``auto`` on real and integer labels: ``unbiased`` from this scaled ε on, ``rp_with_prior`` in between."""
AUTO_REFERENCE_ROWS = 16_000
AUTO_ROWS_EXPONENT = 0.0
"""``auto`` compares the bands with ε·(n / AUTO_REFERENCE_ROWS)^AUTO_ROWS_EXPONENT, n the release's rows."""


def auto_scaled_epsilon(epsilon: float, n: int | None) -> float:
    """The ε ``auto`` compares with the bands: ε itself, or scaled by the release's size n (public)."""
    if n is None or n <= 0 or AUTO_ROWS_EXPONENT == 0:
        return float(epsilon)
    return float(epsilon) * (n / AUTO_REFERENCE_ROWS) ** AUTO_ROWS_EXPONENT


@dataclass(frozen=True)
class Entry:
    """One mechanism of the catalogue: everything the release pipeline and the features party need."""

    mechanism: type[Mechanism]
    spec: type[MechanismSpecBase]
    label_types: frozenset[str]
    summary: str
    prior: Callable[[Any], PriorKind] = lambda params: "none"
    auto_band: tuple[float, float] | None = None
    """[low, high) of ε where ``"auto"`` picks this entry for its label types; None: never."""

    @property
    def name(self) -> str:
        return self.mechanism.name

    @property
    def params(self) -> type[Params]:
        return self.mechanism.params_model

    @property
    def categorical(self) -> bool:
        return self.label_types == CATEGORICAL

    def parse_params(self, params: Mapping[str, Any] | None) -> Params:
        """The caller's parameters through the params model (pydantic ValidationError when invalid)."""
        return self.params.model_validate(dict(params or {}))

    def prior_kind(self, params: Params) -> PriorKind:
        return self.prior(params)

    def build(
        self, epsilon: float, params: Params, *, domain: LabelDomain | None = None, classes: list[str] | None = None
    ) -> Mechanism:
        """The unfitted mechanism at ``epsilon``: over ``classes`` (categorical) or ``domain``."""
        kwargs = params.mechanism_kwargs()
        if self.categorical:
            if classes is None:
                raise ValueError(f"{self.name} needs categorical labels")
            return self.mechanism(epsilon, classes, **kwargs)  # type: ignore[call-arg]
        if domain is None:
            raise ValueError(f"{self.name} needs a real or integer label domain")
        return self.mechanism(epsilon, domain, **kwargs)  # type: ignore[call-arg]

    def from_spec(self, spec: MechanismSpecBase) -> Mechanism:
        """The fitted public mechanism ``spec`` describes."""
        return self.mechanism.from_spec(spec)


def _unbiased_prior(params: Any) -> PriorKind:
    return "histogram" if params.weights == "prior" else "none"


ENTRIES: tuple[Entry, ...] = (
    Entry(RROnBins, RROnBinsSpec, REAL, "RR-on-Bins, exactly optimal bins for the loss (Ghazi et al. 2023)",
          prior=lambda p: "histogram", auto_band=(0.0, BINS_BELOW)),
    Entry(RPWithPrior, RPWithPriorSpec, REAL,
          "RPWithPrior, optimal interval for a DP histogram prior (Liu & Huang)",
          prior=lambda p: p.private_prior, auto_band=(BINS_BELOW, UNBIASED_FROM)),
    Entry(Laplace, LaplaceSpec, REAL, "Laplace noise on a lattice, clipped"),
    Entry(Staircase, StaircaseSpec, REAL, "staircase noise on a lattice, clipped"),
    Entry(Gaussian, GaussianSpec, REAL, "Gaussian noise, analytic (ε, δ) calibration (Balle & Wang 2018)"),
    Entry(Exponential, ExponentialSpec, REAL, "exponential mechanism: range-restricted Laplace with scale 2Δ/ε"),
    Entry(UnbiasedRandomizer, UnbiasedSpec, REAL,
          "variance-minimizing unbiased randomizer, LP over a grid (Badanidiyuru et al. 2023)",
          prior=_unbiased_prior, auto_band=(UNBIASED_FROM, math.inf)),
    Entry(RandomizedResponse, RandomizedResponseSpec, CATEGORICAL, "randomized response (Warner)",
          auto_band=(0.0, math.inf)),
    Entry(RRWithPrior, RRWithPriorSpec, CATEGORICAL,
          "RRWithPrior: RR over the prior's optimal top-k classes (Liu & Ding Def. 2.4)", prior=lambda p: "split"),
    Entry(BlockRR, BlockRRSpec, CATEGORICAL, "BlockRR (Liu & Ding Alg. 1-2)", prior=lambda p: "split"),
)

REGISTRY: dict[str, Entry] = {entry.name: entry for entry in ENTRIES}
NAMES: tuple[str, ...] = tuple(REGISTRY)

if len(REGISTRY) != len(ENTRIES):  # pragma: no cover - registry hygiene
    raise RuntimeError("two registry entries share a name")


def serving(label_type: str) -> tuple[str, ...]:
    """The mechanisms that take ``label_type`` labels, in registry order."""
    return tuple(e.name for e in ENTRIES if label_type in e.label_types)


def entry_for_spec(spec: MechanismSpecBase) -> Entry:
    """The entry of a spec object (LookupError for a spec no entry declares)."""
    name = getattr(spec, "name", None)
    entry = REGISTRY.get(str(name))
    if entry is None or not isinstance(spec, entry.spec):
        raise LookupError(f"no registered mechanism has the spec {type(spec).__name__} ({name!r})")
    return entry


def auto_pick(label_type: str, epsilon: float, n: int | None = None) -> str:
    """The entry ``"auto"`` stands for: the one whose band holds the scaled ε (:func:`auto_scaled_epsilon`
    of ε and the release's n rows) among those serving ``label_type``."""
    epsilon = auto_scaled_epsilon(epsilon, n)
    picks = [
        e.name for e in ENTRIES
        if e.auto_band is not None and label_type in e.label_types and e.auto_band[0] <= epsilon < e.auto_band[1]
    ]
    if len(picks) != 1:
        raise LookupError(f"auto has {len(picks)} mechanisms for {label_type} labels at ε = {epsilon}")
    return picks[0]
