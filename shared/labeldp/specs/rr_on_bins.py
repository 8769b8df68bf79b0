"""Wire spec of RR-on-Bins."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from labeldp.specs.base import MechanismSpecBase


class RROnBinsSpec(MechanismSpecBase):
    """RR-on-Bins (Ghazi et al. 2023, Alg. 1–2) fitted to the noisy prior.

    The features party can debias with E[ŷ | y] = debias_a · Φ(y) + debias_b.
    """

    name: Literal["rr_on_bins"] = "rr_on_bins"
    epsilon: float = Field(gt=0, description="ε of the randomizer (ε₂)")
    loss: Literal["squared", "absolute", "poisson"] = "squared"
    outputs: list[float] = Field(description="bin values Ŷ, ascending")
    cut_points: list[float] = Field(description="label thresholds between consecutive bins")
    keep_probability: float = Field(description="Pr[ŷ = Φ(y)] = e^ε / (e^ε + |Ŷ| − 1)")
    debias_a: float
    debias_b: float
