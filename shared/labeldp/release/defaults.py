"""The default mechanism: what a release uses when the caller names none (``"auto"``).

The choice depends only on public facts — the label type, the release's ε and (through
``labeldp.mechanisms.registry.AUTO_ROWS_EXPONENT``) its number of rows — so it
leaks nothing, and it does not spend the prior's ε₁ to choose. The bands are data of the
registry entries (``labeldp.mechanisms.registry``): ``auto`` picks from the registry.

- Real and integer labels: ``rr_on_bins`` below ``BINS_BELOW`` (few bins carry the most signal
  per unit of noise), ``rp_with_prior`` up to ``UNBIASED_FROM`` (its interval, fitted to the release's DP
  histogram, keeps the noise where the labels are), ``unbiased`` above (its labels need no
  debiasing). Decided in docs/decisions/0001-auto-regression-bands.md.
- Categorical labels: plain randomized response at every ε (the prior-based mechanisms'
  private prior is too noisy to pay for itself at small ε).
  Decided in docs/decisions/0002-auto-categorical.md.
"""

from __future__ import annotations

from labeldp.mechanisms.registry import BINS_BELOW, UNBIASED_FROM, auto_pick

AUTO = "auto"
__all__ = ["AUTO", "BINS_BELOW", "UNBIASED_FROM", "default_mechanism"]


def default_mechanism(label_type: str, epsilon: float, n: int | None = None) -> str:
    """The catalogue mechanism ``auto`` stands for, from the label type, ε and the release's rows n.

    Read off the registry: each entry declares the band of the scaled ε in which ``auto``
    picks it (``Entry.auto_band``; the bands' ends are ``BINS_BELOW`` and ``UNBIASED_FROM``,
    the scaling ``labeldp.mechanisms.registry.auto_scaled_epsilon``). n is public: the
    features party receives n rows.
    """
    return auto_pick("real" if label_type != "categorical" else "categorical", epsilon, n)
