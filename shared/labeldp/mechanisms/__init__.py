"""Label-DP mechanisms of the papers, one module per family.

Each mechanism is an estimator-shaped object (parameters in the constructor,
``fit_to`` a public or DP prior, fitted state in trailing-underscore
attributes) that satisfies one contract (``contract.Mechanism``: fit to a prior,
privatize, exact expected loss, transition law, guarantee, wire spec, params
model) and has one entry in ``registry`` (docs/architecture.md, "The mechanism
contract").

- ``prior``: label domain, public grids, the ε₁ Laplace histogram (Ghazi et al. Alg. 4)
- ``rr_on_bins``: RR-on-Bins with exactly optimal bins (Ghazi et al. Alg. 1–2)
- ``rp_with_prior``: RPWithPrior and its noised-label prior (Liu & Huang Alg. 1–4)
- ``additive``: Laplace, staircase, Gaussian, exponential on a lattice (Ghazi et al. App. D, F)
- ``unbiased``: the variance-minimizing unbiased randomizer (Badanidiyuru et al. 2023)
- ``categorical``: randomized response, RRWithPrior, BlockRR (Liu & Ding)
- ``contract``, ``law``, ``registry``: the contract, the transition law, the entries
"""

from labeldp.mechanisms.additive import Exponential, Gaussian, Laplace, Staircase
from labeldp.mechanisms.categorical import BlockRR, RandomizedResponse, RRWithPrior, SplitPriorRandomizer
from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.mechanisms.prior import (
    LabelDomain,
    LaplaceHistogramPrior,
    default_grid,
    sample_two_sided_geometric,
    snap_to_grid,
)
from labeldp.mechanisms.rp_with_prior import NoisyLabelHistogramPrior, RPWithPrior
from labeldp.mechanisms.rr_on_bins import RROnBins
from labeldp.mechanisms.rr_on_bins_kernels import optimal_bins, optimal_bins_reference
from labeldp.mechanisms.unbiased import UnbiasedRandomizer

__all__ = [
    "BlockRR",
    "Exponential",
    "Gaussian",
    "LabelDomain",
    "Laplace",
    "LaplaceHistogramPrior",
    "NoisyLabelHistogramPrior",
    "PrivacyGuarantee",
    "RPWithPrior",
    "RROnBins",
    "RRWithPrior",
    "RandomizedResponse",
    "SplitPriorRandomizer",
    "Staircase",
    "UnbiasedRandomizer",
    "default_grid",
    "optimal_bins",
    "optimal_bins_reference",
    "sample_two_sided_geometric",
    "snap_to_grid",
]
