"""The default mechanism: what a release uses when the caller names none (``"auto"``).

The choice depends only on public facts — the label type, the release's ε and (through
``labeldp.mechanisms.registry.AUTO_ROWS_EXPONENT``, 0 today) its number of rows — so it
leaks nothing. It was chosen on the privacy–utility benchmark (``bench/results/``), with
the features party's default learning (debiased, privately model-selected, never worse
than the release's private mean). Rules that also scale ε by the release's size n did
worse out of set than this rule in leave-one-data-set-out validation over six regression
sets (``research/results/default_rule.md``), so the bands stay on ε:

- Real and integer labels: ``research/studies/default_rule.py`` replays every rule of the
  form "rr_on_bins below t₁, an additive mechanism or rp_with_prior up to t₂, unbiased
  above" on the cells of six regression sets (California Housing, the simulated linear
  and nonlinear sets, the Criteo-like set, ``bounded_wide``, ``counts``). Fitted without
  the set it is then scored on, the rule is, for five of the six held-out sets, the one
  adopted here: ``rr_on_bins`` below ε = 0.4, ``rp_with_prior`` up to 6.4, ``unbiased``
  above; its out-of-set mean log regret against the best mechanism × learner at each ε
  is 0.034 (best or within one SE in 35 of 48 cells), against 0.108 (31) for the former
  rr_on_bins < 0.5 ≤ staircase < 1 ≤ unbiased. On two sets it had never seen (2 000
  training rows of Housing and of the counts) it scores 0.051 and 0.225, better than a rule
  re-fitted on all eight sets does out of set. On the tables at the protocol's 10 trials
  (after the integer grid rule) it scores 0.033 over the eight sets (best or within one SE in
  42 of 64 cells), and a leave-one-out re-fit that may scale ε by n is no better out of set
  (0.034, 43 of 64) (``research/results/default_rule.md``). At
  small ε RR-on-Bins' few bins carry the most signal per unit of noise; in the middle
  RPWithPrior's interval, fitted to the release's DP histogram, does (a reading: its
  noise stays where the labels are); at ε ≥ 6.4 the unbiased randomizer's labels need
  no debiasing. The choice does not spend the prior's ε₁ to choose: the DP prior would
  be bought before anything is chosen. (The bands are data of the
  registry entries, ``labeldp.mechanisms.registry``: ``auto`` picks from the registry.)
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
