"""The one contract every label-DP mechanism of the registry satisfies.

docs/architecture.md, "The mechanism contract". A mechanism is an estimator-shaped
object (parameters in the constructor, fitted state in trailing-underscore attributes)
that can be

- **fitted** to a prior (``fit_to``: a public or already-DP :class:`Prior`, or ``None``
  for prior-free mechanisms) — post-processing, so it costs no ε of its own;
- asked for its **exact expected loss** under a prior (``loss_under``: squared error
  for real-valued mechanisms, RR-on-Bins' own loss, 0-1 loss for categorical ones);
- asked for its **transition law** (``law``: one :class:`~labeldp.mechanisms.law.TransitionLaw`
  covering affine, monotone and matrix laws);
- asked for its **privacy guarantee** (``guarantee``: ε, δ, the adjacency and the
  sensitivity it was calibrated to, as data);
- **privatized** with (``privatize``) and sent as / rebuilt from its **wire spec**
  (``to_spec`` / ``from_spec``).

Its parameters are validated only by its params model (a :class:`Params` subclass,
``params_model`` on the class): the REST API, the CLI and direct construction all go through
it. What else the release pipeline needs (the label types served, the prior needed)
is in the mechanism's registry entry (:mod:`labeldp.mechanisms.registry`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, Self, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict

from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.mechanisms.law import TransitionLaw
from labeldp.specs.base import MechanismSpecBase


class Params(BaseModel):
    """A mechanism's parameters as a caller states them: the only place they are validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def mechanism_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the mechanism's constructor (fields the release recipe
        reads itself, such as a split's ``prior_fraction``, are left out)."""
        return self.model_dump()


@dataclass(frozen=True)
class Prior:
    """A prior over labels — point masses ``probs`` at ``values`` (class indices for
    categorical labels) — that is public or already DP."""

    values: np.ndarray
    probs: np.ndarray

    @classmethod
    def over_classes(cls, probs: np.ndarray) -> Prior:
        """A prior over class indices 0..K−1 (categorical mechanisms), ``probs`` one per class."""
        probs = np.asarray(probs, dtype=np.float64)
        return cls(np.arange(probs.size, dtype=np.int64), probs)


@runtime_checkable
class Mechanism(Protocol):
    """What the release pipeline, the features party and the benchmarks use of a mechanism."""

    name: ClassVar[str]
    params_model: ClassVar[type[Params]]
    epsilon: float

    def fit_to(self, prior: Prior | None = None) -> Self:
        """Fit to a public or DP prior (ignored by prior-free mechanisms)."""
        ...

    def privatize(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One ε-DP draw per label."""
        ...

    def loss_under(self, prior: Prior) -> float:
        """The exact expected loss for labels drawn from ``prior``."""
        ...

    def law(self) -> TransitionLaw:
        """The exact transition law of the fitted mechanism."""
        ...

    @property
    def guarantee(self) -> PrivacyGuarantee:
        """The DP claim this code earns: ε, δ, adjacency, sensitivity."""
        ...

    def to_spec(self) -> MechanismSpecBase:
        """The public description that travels in the message."""
        ...

    @classmethod
    def from_spec(cls, spec: Any) -> Self:
        """The fitted public mechanism a spec describes (checked against it)."""
        ...
