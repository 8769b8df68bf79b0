"""Label-DP mechanisms: the ε₁ prior, RR-on-Bins and the discrete Laplace baseline.

Each mechanism is an estimator-shaped object (parameters in the constructor,
``fit`` from a public or DP prior, fitted state in trailing-underscore
attributes) exposing ``guarantee``, the DP claim its code earns.
"""

from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.mechanisms.laplace import DiscreteLaplace
from labeldp.mechanisms.prior import (
    LabelDomain,
    LaplaceHistogramPrior,
    default_grid,
    sample_two_sided_geometric,
    snap_to_grid,
)
from labeldp.mechanisms.rr_on_bins import RROnBins
from labeldp.mechanisms.rr_on_bins_kernels import optimal_bins, optimal_bins_reference

__all__ = [
    "DiscreteLaplace",
    "LabelDomain",
    "LaplaceHistogramPrior",
    "PrivacyGuarantee",
    "RROnBins",
    "default_grid",
    "optimal_bins",
    "optimal_bins_reference",
    "sample_two_sided_geometric",
    "snap_to_grid",
]
