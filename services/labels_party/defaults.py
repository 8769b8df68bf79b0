"""The default mechanism: what a release uses when the caller names none (``"auto"``).

The choice depends only on public facts — the label type and the release's ε — so it
leaks nothing. The rule comes from the privacy–utility benchmark on California Housing
(bench/results/utility_california_housing.md, the ``default`` column, learner
``private``): at small ε RR-on-Bins' few bins carry the most signal per unit of noise;
above ``REAL_SWITCH_EPSILON`` the unbiased randomizer, debiased and privately model-
selected on the features side, has the lowest test MSE. For categorical labels BlockRR
with the accuracy-maximizing |Δ| is at least as accurate as randomized response under
its (private) prior, which it reduces to when that is best.
"""

from __future__ import annotations

AUTO = "auto"
REAL_SWITCH_EPSILON = 0.3
"""ε from which real and integer labels use ``unbiased`` instead of ``rr_on_bins``."""


def default_mechanism(label_type: str, epsilon: float) -> str:
    """The catalogue mechanism ``auto`` stands for, from the label type and ε alone."""
    if label_type == "categorical":
        return "block_rr"
    return "rr_on_bins" if epsilon < REAL_SWITCH_EPSILON else "unbiased"
