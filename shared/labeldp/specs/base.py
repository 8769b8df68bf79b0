"""Base classes of the mechanism specs that travel in the message.

Specs are plain pydantic data (no numpy, no mechanism code), so both parties can
import them and ``labeldp.schema`` can collect them into one discriminated union.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field


class SpecModel(BaseModel):
    """Frozen, strict: a message field cannot be mutated or carry unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class MechanismSpecBase(SpecModel):
    """Base of every mechanism's wire spec: a ``name`` (the discriminator of the union that
    ``labeldp.schema`` derives from the registry) and the ``epsilon`` of the randomizer."""

    if TYPE_CHECKING:  # each spec declares both as its own fields (their order in the JSON is the spec's)
        name: str
        epsilon: float


class LabelDomainSpec(SpecModel):
    """The public range of the labels, declared by the labels party."""

    kind: Literal["real", "integer"] = "real"
    low: float
    high: float


class NoisyPrior(SpecModel):
    """The prior used to fit the mechanism: a Laplace histogram (ε₁ > 0) or public (ε₁ = 0)."""

    source: Literal["laplace_histogram", "public"] = "laplace_histogram"
    grid: list[float]
    probs: list[float]
    epsilon: float = Field(ge=0)
