"""Wire specs of the staircase, Gaussian and exponential baselines (Laplace: specs/laplace.py).

Every additive baseline lives on the public lattice low + step·j, j = 0..J with
J = round((high − low)/step); ``step`` is the step actually used (it divides the
domain exactly), so the features party rebuilds the same lattice and law.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from labeldp.specs.base import LabelDomainSpec, MechanismSpecBase


class StaircaseSpec(MechanismSpecBase):
    """Staircase noise (Geng & Viswanath 2014; Ghazi et al. Def. 24/25) on the lattice.

    The noise index N has P(N = i) ∝ e^{−ε·⌊(|i| + J − r)/J⌋}: each period of J steps
    (the sensitivity, the domain width) starts with r steps at the higher level.
    """

    name: Literal["staircase"] = "staircase"
    epsilon: float = Field(gt=0)
    variant: Literal["discrete", "continuous"] = "continuous"
    domain: LabelDomainSpec
    step: float = Field(gt=0, description="lattice step in label units")
    r: int = Field(ge=1, description="steps at the higher level of each period (1 ≤ r ≤ J)")
    gamma: float = Field(gt=0, le=1, description="r / J, the continuous staircase's γ")
    clip: bool = Field(True, description="outputs clipped to the domain (post-processing)")


class GaussianSpec(MechanismSpecBase):
    """(ε, δ)-DP Gaussian noise rounded to the lattice: N = round(σ_steps · Z), Z ~ N(0, 1).

    ``sigma`` (label units) is the analytic calibration of Balle & Wang (2018) for
    sensitivity high − low; rounding is post-processing of the continuous Gaussian.
    """

    name: Literal["gaussian"] = "gaussian"
    epsilon: float = Field(gt=0)
    delta: float = Field(gt=0, lt=1)
    variant: Literal["discrete", "continuous"] = "continuous"
    domain: LabelDomainSpec
    step: float = Field(gt=0, description="lattice step in label units")
    sigma: float = Field(gt=0, description="σ of the Gaussian before rounding, label units")
    clip: bool = Field(True, description="outputs clipped to the domain (post-processing)")


class ExponentialSpec(MechanismSpecBase):
    """Exponential mechanism = Laplace restricted to the domain lattice (Ghazi et al. App. F).

    P(ŷ | y) ∝ exp(−|ŷ − y| / scale) over the lattice points of the domain, with
    scale = 2·(high − low)/ε; outputs never leave the domain.
    """

    name: Literal["exponential"] = "exponential"
    epsilon: float = Field(gt=0)
    variant: Literal["discrete", "continuous"] = "continuous"
    domain: LabelDomainSpec
    step: float = Field(gt=0, description="lattice step in label units")
    scale: float = Field(gt=0, description="2Δ/ε in label units")
