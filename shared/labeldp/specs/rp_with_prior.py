"""Wire spec of RPWithPrior (Liu & Huang, Alg. 1–4) and of its histogram prior (Alg. 3).

The features party can rebuild the exact output law from these integers alone:
outputs are the lattice points ``low + step·t`` for t in [a1_index − zeta_steps,
a2_index + zeta_steps]; a label snapped to index m is projected to
c = clip(m, a1_index, a2_index) (eq. (3.12)); the 2·zeta_steps + 1 points around c
together have probability keep_numerator / 2**53, the remaining a2_index − a1_index
points share the rest uniformly.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from labeldp.specs.base import LabelDomainSpec, MechanismSpecBase, SpecModel

KEEP_DENOMINATOR = 2**53


class RPWithPriorSpec(MechanismSpecBase):
    """RPWithPrior fitted to a (DP or public) step-function prior, sampled on a lattice."""

    name: Literal["rp_with_prior"] = "rp_with_prior"
    epsilon: float = Field(gt=0, description="ε of the randomizer (ε₂); the prior's ε₁ is accounted separately")
    domain: LabelDomainSpec
    step: float = Field(gt=0, description="lattice step h in label units; the lattice is low + h·t")
    n_steps: int = Field(ge=1, description="J: labels snap to t in [0, J], J·h = high − low")
    a1: float = Field(description="interval start A₁ = low + h·a1_index")
    a2: float = Field(description="interval end A₂ = low + h·a2_index")
    a1_index: int
    a2_index: int
    zeta: float = Field(gt=0, description="requested ζ in label units")
    zeta_steps: int = Field(ge=0, description="z: the neighbourhood N_y is the 2z + 1 lattice points around y")
    zeta_effective: float = Field(gt=0, description="(z + 1/2)·h, the ζ of the paper's formulas for this lattice")
    keep_numerator: int = Field(ge=0, le=KEEP_DENOMINATOR, description="Pr[ŷ ∈ N_P(y)] = keep_numerator / 2**53")
    keep_probability: float = Field(ge=0, le=1)
    sigma: float | None = Field(default=None, description="histogram bin width of Alg. 3 (label units), when used")

    @model_validator(mode="after")
    def _consistent(self) -> RPWithPriorSpec:
        if self.a1_index > self.a2_index:
            raise ValueError("a1_index must not exceed a2_index")
        if not (0 <= self.a1_index and self.a2_index <= self.n_steps):
            raise ValueError("the interval must lie on the domain lattice [0, n_steps]")
        if self.a1_index == self.a2_index and self.keep_numerator != KEEP_DENOMINATOR:
            raise ValueError("a one-point interval keeps with probability 1")
        return self


class HistogramPriorSpec(SpecModel):
    """The step-function prior of Alg. 3: cell edges, cell masses, and the ε₁ it cost.

    Built only from discrete-Laplace-noised labels, so it is ε₁-DP and may travel
    in the message next to the mechanism spec.
    """

    source: Literal["noisy_label_histogram", "public"] = "noisy_label_histogram"
    nodes: list[float] = Field(description="k + 1 increasing cell edges n₀ < … < n_k")
    masses: list[float] = Field(description="k cell probabilities, summing to 1")
    epsilon: float = Field(ge=0)
    sigma: float | None = Field(default=None, gt=0, description="bin width used (label units)")

    @model_validator(mode="after")
    def _shapes(self) -> HistogramPriorSpec:
        if len(self.nodes) != len(self.masses) + 1 or not self.masses:
            raise ValueError("need k + 1 nodes for k >= 1 masses")
        return self
