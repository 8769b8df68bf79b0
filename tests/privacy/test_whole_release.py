"""Whole-release audit: every mechanism × prior kind through the real ``randomize()``.

For each pair of neighbouring label sets (release_cases.py) the full release — private
prior, what is fitted to it, every privatized label — runs thousands of times per side;
events over the joint output (public parts + the changed row's label, whole_release.py)
give a Clopper–Pearson + Bonferroni lower bound on ε (α = 0.05), which must not exceed
the ε the release charges. Power: the same audit of deliberately broken pipelines (the
prior built from the true labels, the histogram calibrated for sensitivity 1, ε₁ not
taken off the randomizer's ε, split rows randomized twice) must exceed it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from tests.privacy.audit import AuditResult, audit_summary

from labeldp.epsilon import exact_micro
from labeldp.mechanisms import LaplaceHistogramPrior
from labeldp.mechanisms.categorical import BlockRR, PriorSplit, RRWithPrior
from labeldp.mechanisms.checks import check_grid
from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.mechanisms.prior import snap_to_grid
from labeldp.release import priors, randomizer

from .release_cases import CLASS_LABELS, CLASSES, ENDS, UNIT, release_pairs
from .whole_release import ReleasePair, audit_release, released_count_difference

PAIRS = release_pairs()
if len({p.name for p in PAIRS}) != len(PAIRS):  # pragma: no cover - registry hygiene
    raise RuntimeError("release pair names must be unique")


def _param(pair: ReleasePair) -> Any:
    return pytest.param(pair, id=pair.name, marks=[pytest.mark.slow] if pair.slow else [])


@functools.cache
def _audit(name: str) -> AuditResult:
    return audit_release(next(p for p in PAIRS if p.name == name))


# -- the real pipeline ----------------------------------------------------------------


@pytest.mark.parametrize("pair", [_param(p) for p in PAIRS])
def test_whole_release_does_not_refute_the_charged_epsilon(pair: ReleasePair) -> None:
    release = pair.release(pair.labels, np.random.default_rng(0))
    assert release.accounting.total_epsilon_micro == exact_micro(pair.epsilon)  # the claim is the charge
    assert release.accounting.delta == pair.claimed_delta
    result = _audit(pair.name)
    assert result.epsilon_lower_bound <= pair.epsilon, audit_summary(result)
    if pair.sharpness is not None:  # the joint events certify most of the loss they should see
        assert result.epsilon_lower_bound >= pair.sharpness * pair.epsilon, audit_summary(result)


def test_the_released_prior_reads_back_the_noisy_count_differences() -> None:
    """The prior part of the joint key: c_a − c_b recovered exactly wherever both cells are kept."""
    rng = np.random.default_rng(4)
    grid = np.linspace(0.0, 1.0, 16)
    checked = 0
    for _ in range(50):
        labels = rng.random(30)
        prior = LaplaceHistogramPrior(1.0, grid).fit(labels, rng)
        for a, b in ((0, 5), (3, 4), (15, 7)):
            difference = released_count_difference(prior.probs_, 30, a, b)
            if prior.probs_[a] > 0 and prior.probs_[b] > 0:
                assert difference == prior.noisy_counts_[a] - prior.noisy_counts_[b]
                checked += 1
            else:
                assert difference is None
    assert checked > 50


# -- planted pipeline bugs ------------------------------------------------------------


class _TrueCountsPrior(LaplaceHistogramPrior):
    """Broken: the 'private' prior is the histogram of the true labels, no noise."""

    def fit(self, labels: np.ndarray, rng: np.random.Generator) -> LaplaceHistogramPrior:
        grid = check_grid(self.grid)
        counts = np.bincount(snap_to_grid(labels, grid), minlength=grid.size).astype(np.int64)
        self.alpha_ = 0.0
        self.noisy_counts_ = counts
        self.probs_ = counts / float(counts.sum())
        return self


class _SensitivityOnePrior(LaplaceHistogramPrior):
    """Broken: noise α = e^{−ε₁} (sensitivity 1) while one replaced label moves two counts."""

    def fit(self, labels: np.ndarray, rng: np.random.Generator) -> LaplaceHistogramPrior:
        claimed = self.epsilon
        self.epsilon = 2 * claimed  # the real fit takes α = e^{−ε/2}
        try:
            return super().fit(labels, rng)
        finally:
            self.epsilon = claimed


class _SplitRowsTwice(PriorSplit):
    """Broken: the split rows' first-stage outputs only feed the prior, and the rows are
    randomized *again* by the second-stage mechanism for the message — two ε-DP looks at
    one label, charged as one."""

    def complete(self, mechanism: RRWithPrior | BlockRR, rng: np.random.Generator) -> np.ndarray:
        y = self._labels
        out = super().complete(mechanism, rng)
        assert y is not None
        out[self.mask_] = mechanism.privatize(y[self.mask_], rng)
        return out


def _eps1_not_subtracted(monkeypatch: pytest.MonkeyPatch, pair: ReleasePair) -> None:
    """Broken: the randomizer is calibrated to the whole ε while its guarantee states ε₂ = ε − ε₁
    (so the accounting, which checks guarantees against allotments, sees nothing)."""
    real = randomizer._build

    def build(name: str, epsilon: float, *rest: Any) -> Any:
        mech = real(name, pair.epsilon, *rest)
        stated = PrivacyGuarantee(epsilon=epsilon, statement="planted: calibrated to ε, states ε₂")
        misstated = {"guarantee": property(lambda s: stated)}
        mech.__class__ = type(f"Misstated{type(mech).__name__}", (type(mech),), misstated)
        return mech

    monkeypatch.setattr(randomizer, "_build", build)


# ε = 2 with ε₁ = 1.5: every bug of the histogram path adds at least ε₁ or ε to the loss.
HISTOGRAM_BUG_PAIR = ReleasePair(
    "rr_on_bins_broken", "rr_on_bins", 2.0, ENDS, 0, 1.0, domain=UNIT, epsilon_prior=1.5, n_draws=800, n_pilot=250
)
SPLIT_BUG_PAIR = ReleasePair(
    "block_rr_broken", "block_rr", 1.0, CLASS_LABELS, 0, 1.0, classes=CLASSES,
    params={"prior_fraction": 0.05}, n_draws=1500, n_pilot=400,
)

BUGS: dict[str, tuple[ReleasePair, Callable[[pytest.MonkeyPatch, ReleasePair], None]]] = {
    "prior_from_true_labels": (
        HISTOGRAM_BUG_PAIR, lambda mp, pair: mp.setattr(priors, "LaplaceHistogramPrior", _TrueCountsPrior)
    ),
    "histogram_sensitivity_1": (
        HISTOGRAM_BUG_PAIR, lambda mp, pair: mp.setattr(priors, "LaplaceHistogramPrior", _SensitivityOnePrior)
    ),
    "epsilon_prior_not_subtracted": (HISTOGRAM_BUG_PAIR, _eps1_not_subtracted),
    "split_rows_randomized_twice": (
        SPLIT_BUG_PAIR, lambda mp, pair: mp.setattr(priors, "PriorSplit", _SplitRowsTwice)
    ),
}


SLOW_BUGS = {"histogram_sensitivity_1", "epsilon_prior_not_subtracted", "split_rows_randomized_twice"}


@pytest.mark.parametrize(
    "bug", [pytest.param(b, marks=[pytest.mark.slow] if b in SLOW_BUGS else []) for b in BUGS]
)
def test_whole_release_audit_catches_a_broken_pipeline(bug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pair, plant = BUGS[bug]
    plant(monkeypatch, pair)
    release = pair.release(pair.labels, np.random.default_rng(0))
    assert release.accounting.total_epsilon_micro == exact_micro(pair.epsilon)  # the ledger sees nothing wrong
    result = audit_release(pair)
    assert result.epsilon_lower_bound > pair.epsilon, audit_summary(result)


@pytest.mark.parametrize(
    "pair", [pytest.param(HISTOGRAM_BUG_PAIR, id=HISTOGRAM_BUG_PAIR.name),
             pytest.param(SPLIT_BUG_PAIR, id=SPLIT_BUG_PAIR.name, marks=pytest.mark.slow)]
)
def test_the_bug_pairs_pass_on_the_real_pipeline(pair: ReleasePair) -> None:
    """The same pairs and draws on the unbroken pipeline stay within ε: the bugs, not the
    pair or the events, make the audits above fail."""
    result = audit_release(pair)
    assert result.epsilon_lower_bound <= pair.epsilon, audit_summary(result)


def test_batched_sampling_refuses_a_release_whose_public_parts_depend_on_the_labels() -> None:
    """The shortcut (one release of N copies) is only taken where it is valid: a private
    histogram prior makes the sampler stop instead of auditing the wrong release."""
    pair = replace(HISTOGRAM_BUG_PAIR, name="rr_on_bins_wrongly_batched", batched=True, n_draws=100, n_pilot=50)
    with pytest.raises(AssertionError, match="public parts"):
        audit_release(pair)
