"""Wire spec of the additive Laplace baseline."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from labeldp.specs.base import LabelDomainSpec, MechanismSpecBase


class LaplaceSpec(MechanismSpecBase):
    """Additive Laplace baseline (Ghazi et al. App. D), clipped to the domain.

    ``variant='discrete'`` adds two-sided geometric noise on the lattice
    low + step·j, so every output is a lattice point (Mironov 2012).
    """

    name: Literal["laplace"] = "laplace"
    epsilon: float = Field(gt=0)
    variant: Literal["discrete", "continuous"] = "discrete"
    domain: LabelDomainSpec
    step: float = Field(gt=0, description="lattice step in label units")
    scale: float = Field(gt=0, description="noise scale b in label units (Δ/ε)")
    clip: bool = Field(True, description="outputs clipped to the domain (post-processing)")
