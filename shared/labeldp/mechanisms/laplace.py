"""Discrete Laplace baseline (Ghazi et al. App. D), clipped to the label domain.

Additive noise on a continuous label in floating point leaks through the
low-order bits (Mironov 2012). So the label is first snapped to the public
lattice low + step·j, j = 0..J, and integer two-sided geometric noise is added
to j; every output is a lattice point and no float arithmetic touches the noise.
Snapped indices of two labels differ by at most J, so noise with
P(k) ∝ exp(−ε|k|/J) is ε-DP (sensitivity J lattice units = high − low label
units); clipping the noisy index to [0, J] is post-processing.

``DiscreteLaplace`` is the historical name of ``additive.Laplace`` with
``variant='discrete'`` and clipping on; the general class (continuous variant,
optional clipping) lives in ``labeldp.mechanisms.additive``.
"""

from __future__ import annotations

from labeldp.mechanisms.additive import DISCRETE_REAL_STEPS, Laplace
from labeldp.mechanisms.prior import LabelDomain
from labeldp.specs.laplace import LaplaceSpec

REAL_DOMAIN_STEPS = DISCRETE_REAL_STEPS


class DiscreteLaplace(Laplace):
    """ε-DP discrete Laplace on the domain lattice, clipped; data independent.

    ``step`` defaults to 1 for integer domains and (high − low)/1024 for real
    ones. J = round((high − low)/step) and the lattice spans the domain exactly,
    so the step actually used, ``step_`` = (high − low)/J, can differ slightly from
    a ``step`` that does not divide the domain. Fitted: ``step_``, ``n_steps_`` (J),
    ``alpha_`` = exp(−ε/J).
    """

    def __init__(self, epsilon: float, domain: LabelDomain, step: float | None = None) -> None:
        super().__init__(epsilon, domain, variant="discrete", step=step, clip=True)

    @classmethod
    def from_spec(cls, spec: LaplaceSpec) -> Laplace:
        """A spec of any variant rebuilds the general ``Laplace`` it describes."""
        return Laplace.from_spec(spec)
