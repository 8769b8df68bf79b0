"""The learning a regression training gets when its request names none.

Everything here is post-processing of the one message, and the choice reads only
public facts — the release's mechanism and total ε — so it costs no ε and leaks
nothing. Two configurations compete:

- ``selected``: hold out 10 % of the rows, debias, shrink and stop early on the
  privatized validation split (:mod:`features_party.selection`). It pays off where
  the release is noisy: choosing the epoch and λ privately beats the last epoch.
- ``all_rows``: train on every row and keep the last epoch. Where the release is
  already unbiased and its noise is small, selection has little to win and the
  held-out 10 % of the rows cost more than it gains.

The switch points come from ``bench/bench_default_rule.py``, which replays the
privacy–utility benchmark's cells (every data set, 10 trials) under candidate rules;
its table is ``bench/results/default_rule.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

from features_party.training import PLAIN, LearningConfig


@dataclass(frozen=True)
class LearningDefault:
    """A learning configuration and the validation split it needs."""

    name: str  # "selected" or "all_rows": the benchmark's `private` and `plain` learners
    learning: LearningConfig
    validation_fraction: float


SELECTED = LearningDefault("selected", LearningConfig(), 0.1)
ALL_ROWS = LearningDefault("all_rows", PLAIN, 0.0)

ALL_ROWS_FROM_EPSILON: dict[str, float] = {"unbiased": 1.5}
"""Per mechanism, the total ε from which a training uses every row and the last epoch."""


def default_learning(mechanism: str, epsilon: float) -> LearningDefault:
    """The learning a regression training on a ``mechanism`` release of total ``epsilon`` gets by default."""
    threshold = ALL_ROWS_FROM_EPSILON.get(mechanism)
    return ALL_ROWS if threshold is not None and epsilon >= threshold else SELECTED
