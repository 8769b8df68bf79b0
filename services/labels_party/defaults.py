"""The default mechanism: what a release uses when the caller names none (``"auto"``).

The choice depends only on public facts — the label type, the release's ε and (through
``labeldp.mechanisms.registry.AUTO_ROWS_EXPONENT``, 0 today) its number of rows — so it
leaks nothing. It was chosen on the privacy–utility benchmark (``bench/results/``), with
the features party's default learning (debiased, privately model-selected, never worse
than the release's private mean). Rules that also scale ε by the release's size n did
worse out of set than this rule in leave-one-data-set-out validation over six regression
sets (``bench/results/default_rule.md``), so the bands stay on ε:

- Real and integer labels: ``bench/bench_default_rule.py`` replays every rule of the
  form "rr_on_bins below t₁, an additive mechanism up to t₂, unbiased above" on the
  cells of California Housing, the simulated linear and nonlinear sets and the
  Criteo-like set; this is the rule with the lowest mean log regret against the best
  mechanism × learner at each ε among those that keep the default learning
  (``bench/results/default_rule.md``; training the unbiased randomizer's release on
  every row from ε = 6 on would gain 0.2 % more, not worth a second learning rule). At small ε
  RR-on-Bins' few bins carry the most signal per unit of noise; in the middle the
  staircase mechanism, debiased and early-stopped, does; from ``UNBIASED_FROM`` on the
  unbiased randomizer, whose outputs need no debiasing, is best. (The bands are data of
  the registry entries, ``labeldp.mechanisms.registry``: ``auto`` picks from the registry.)
- Categorical labels: plain randomized response. On the two imbalanced 10-class sets
  (``utility_cifar10_1.md``, ``utility_cifar10_2.md``) it has the best or a
  within-one-standard-error test accuracy and mean per-class accuracy at every ε; the
  prior-based BlockRR and RRWithPrior lose up to 10 points of mean per-class accuracy
  at ε ≤ 2, where their private prior is too noisy to pay for itself.
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
