"""The default mechanism: what a release uses when the caller names none (``"auto"``).

The band depends only on public facts — the label type, the release's ε and (through
``labeldp.mechanisms.registry.AUTO_ROWS_EXPONENT``) its number of rows — so it
leaks nothing, and it does not spend the prior's ε₁ to choose. The bands are data of the
registry entries (``labeldp.mechanisms.registry``): ``auto`` picks from the registry.

- Real and integer labels: ``rr_on_bins`` below ``BINS_BELOW`` (few bins carry the most signal
  per unit of noise), ``rp_with_prior`` up to ``UNBIASED_FROM`` (its interval, fitted to the release's DP
  histogram, keeps the noise where the labels are), ``unbiased`` above (its labels need no
  debiasing). Decided in docs/decisions/0001-auto-regression-bands.md.
- Where ``auto`` picked ``rp_with_prior``, the release's own DP histogram prior decides once more
  (:func:`tail_pick`): a heavy tail past the interval fitted to it gives ``rr_on_bins``, fitted to
  the same prior (same grid, same ε₁: post-processing of DP outputs, no ε), on releases of fewer
  than ``TAIL_ROWS_BELOW`` rows. Decided in docs/decisions/0025-auto-tail-rule.md and
  docs/decisions/0032-tail-rule-rows.md.
- Categorical labels: plain randomized response at every ε (the prior-based mechanisms'
  private prior is too noisy to pay for itself at small ε).
  Decided in docs/decisions/0002-auto-categorical.md.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from labeldp.mechanisms.registry import BINS_BELOW, UNBIASED_FROM, auto_pick

AUTO = "auto"
__all__ = [
    "AUTO", "BINS_BELOW", "TAIL_CLIP_ABOVE", "TAIL_ROWS_BELOW", "UNBIASED_FROM", "default_mechanism", "prior_tail",
    "tail_pick",
]

TAIL_CLIP_ABOVE = 0.12
"""``auto`` leaves ``rp_with_prior`` for ``rr_on_bins`` where its interval clips more than this many of the
DP prior's standard deviations off the prior's mean (:func:`prior_tail`)."""

TAIL_ROWS_BELOW = 12_000
"""The tail rule applies to releases of fewer rows than this (n is public). At 16 000 rows and more the
default learning keeps its model, and RPWithPrior's finer noise beats RR-on-Bins' few bins wherever the
rule fired (Housing, the nonlinear set, the Criteo-like set). Decided in docs/decisions/0032-tail-rule-rows.md."""


def default_mechanism(label_type: str, epsilon: float, n: int | None = None) -> str:
    """The catalogue mechanism ``auto`` stands for, from the label type, ε and the release's rows n.

    Read off the registry: each entry declares the band of the scaled ε in which ``auto``
    picks it (``Entry.auto_band``; the bands' ends are ``BINS_BELOW`` and ``UNBIASED_FROM``,
    the scaling ``labeldp.mechanisms.registry.auto_scaled_epsilon``). n is public: the
    features party receives n rows.
    """
    return auto_pick("real" if label_type != "categorical" else "categorical", epsilon, n)


def prior_tail(prior: Any, interval: tuple[float, float]) -> float:
    """(E_p y − E_p t(y)) / sd_p(y), in absolute value: how much of the prior's mean the interval
    [A₁, A₂] clips off (t clips to it), in the prior's standard deviations. ``prior``: a released
    prior spec (``grid``, ``probs``) — a DP output or a public input, never the labels."""
    grid = np.asarray(prior.grid, dtype=np.float64)
    probs = np.clip(np.asarray(prior.probs, dtype=np.float64), 0.0, None)
    total = float(probs.sum())
    if grid.size == 0 or total <= 0.0:
        return 0.0
    probs = probs / total
    mean = float(probs @ grid)
    sd = math.sqrt(float(probs @ (grid - mean) ** 2))
    if sd <= 0.0:
        return 0.0
    clipped = float(probs @ np.clip(grid, interval[0], interval[1]))
    return abs(mean - clipped) / sd


def tail_pick(prior: Any, rp_spec: Any, n_rows: int | None = None) -> str:
    """What ``auto``'s ``rp_with_prior`` becomes once its prior is drawn: ``rr_on_bins`` where the interval
    ``rp_spec`` (RPWithPrior fitted to ``prior``) clips the prior's tail past ``TAIL_CLIP_ABOVE`` and the
    release has fewer than ``TAIL_ROWS_BELOW`` rows ``n_rows`` (None: not known, the rule applies), else
    ``rp_with_prior``. A function of the prior and public facts alone."""
    if n_rows is not None and n_rows >= TAIL_ROWS_BELOW:
        return "rp_with_prior"
    tail = prior_tail(prior, (float(rp_spec.a1), float(rp_spec.a2)))
    return "rr_on_bins" if tail > TAIL_CLIP_ABOVE else "rp_with_prior"
