"""Wire spec of the optimal unbiased randomizer (Badanidiyuru et al. 2023).

The features party rebuilds the exact output law from this spec alone: a label y
(clipped to the domain) is rounded to the neighbouring input grid points with
the probabilities that keep its mean (unbiased randomized rounding), and input
point ``grid[i]`` reports ``outputs[j]`` with probability ``transition[i][j]``.
Every transition entry is a multiple of 2**-53 (exactly representable, so the
JSON round trip is lossless) and every row sums to exactly 1. Because each row's
mean equals its grid point, E[ŷ | y] = y for every y in the domain: the labels
need no debiasing.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from labeldp.specs.base import LabelDomainSpec, MechanismSpecBase

TRANSITION_DENOMINATOR = 2**53


class UnbiasedSpec(MechanismSpecBase):
    """Unbiased randomized rounding to ``grid``, then the LP-optimal ε-DP ``transition``."""

    name: Literal["unbiased"] = "unbiased"
    epsilon: float = Field(gt=0, description="ε of the randomizer (ε₂); a prior's ε₁ is accounted separately")
    domain: LabelDomainSpec
    grid: list[float] = Field(description="K public input points, ascending, spanning the domain")
    outputs: list[float] = Field(description="L public output values, ascending (may extend beyond the domain)")
    transition: list[list[float]] = Field(
        description="K×L matrix, Pr[ŷ = outputs[j] | rounded label = grid[i]]; entries are multiples of 2**-53"
    )
    lp_epsilon: float = Field(gt=0, description="the ε the linear program was solved at (≤ epsilon)")
    weights: Literal["uniform", "prior", "custom"] = Field(
        default="uniform", description="how the LP weighted the grid points' variances"
    )

    @model_validator(mode="after")
    def _shapes(self) -> UnbiasedSpec:
        k, m = len(self.grid), len(self.outputs)
        if k < 2 or m < 2:
            raise ValueError("need at least 2 grid points and 2 outputs")
        if len(self.transition) != k or any(len(row) != m for row in self.transition):
            raise ValueError("transition must be len(grid) rows of len(outputs) entries")
        if self.lp_epsilon > self.epsilon:
            raise ValueError("lp_epsilon must not exceed epsilon")
        return self
