"""The neighbouring label sets audited as whole releases (see whole_release.py, test_whole_release.py).

One pair per mechanism and prior kind it supports: none, Laplace histogram, noised labels,
label-independent split, public. Label sets are small (tens of rows) so a release takes
about a millisecond. Where the prior is data-dependent the changed row is put where the
data-dependent parts move most: for RR-on-Bins the two adjacent grid cells whose swap moves
the bins fitted to the noise-free histogram the most (``most_moving_cells``), for the split
prior a row inside the split whose class decides the partition.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from labeldp.epsilon import exact_micro, from_micro, split_budget
from labeldp.mechanisms import LabelDomain, default_grid
from labeldp.mechanisms.prior import snap_to_grid
from labeldp.release.randomizer import PublicPrior, fit_to_public_prior

from .whole_release import ReleasePair

UNIT = LabelDomain("real", 0.0, 1.0)
COUNTS = LabelDomain("integer", 0, 15)
SMALL_COUNTS = LabelDomain("integer", 0, 4)
CLASSES = ("a", "b", "c", "d")

# A skewed real label set (conversion-value-like), rounded so it is readable in a failure.
REAL_LABELS = np.round(np.random.default_rng(3).beta(2.0, 5.0, 24), 3)
COUNT_LABELS = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 4, 4, 5, 6, 7, 9, 12, 15], dtype=np.float64)
SMALL_COUNT_LABELS = np.array([0, 0, 1, 1, 1, 2, 2, 3, 4, 4], dtype=np.float64)

# Split prior: with prior_fraction 0.25 of 20 rows, rows 0, 4, 8, 12, 16 form the split
# (evenly spaced, from n alone). Row 0 is changed between classes 0 and 1, and the other
# split rows are tied between those two classes, so its first-stage output decides which
# of them leads the prior and so the partition (Y_k, S₁, Δ).
SPLIT_FRACTION = 0.25
CLASS_LABELS = np.array([0, 2, 3, 1, 0, 2, 0, 3, 1, 1, 2, 0, 0, 3, 2, 1, 1, 0, 2, 3], dtype=np.float64)


def _eps2(epsilon: float, epsilon_prior: float | None, grid: np.ndarray, n: int) -> float:
    prior = None if epsilon_prior is None else exact_micro(epsilon_prior)
    _, eps2 = split_budget(exact_micro(epsilon), grid.size, n, prior)
    return from_micro(eps2)


def most_moving_cells(
    mechanism: str, epsilon: float, labels: np.ndarray, changed: int, domain: LabelDomain,
    *, params: dict | None = None, epsilon_prior: float | None = None,
) -> tuple[float, float]:
    """(x_a, x_b): adjacent prior-grid points for row ``changed`` whose swap moves the fit most.

    The fit is the real one (``fit_to_public_prior`` at the release's ε₂) on each label set's
    noise-free histogram; movement = change in the number of outputs (weighted heavily), then
    Σ|Δ outputs|. Only pairs the fit puts in different bins count (else the row's output
    carries no loss). Computed from the label sets alone, before any audit sample.
    """
    n = labels.size
    grid = default_grid(domain, n, epsilon)
    eps2 = _eps2(epsilon, epsilon_prior, grid, n)

    def fit(x: float):
        moved = labels.copy()
        moved[changed] = x
        probs = np.bincount(snap_to_grid(moved, grid), minlength=grid.size).astype(np.float64)
        return fit_to_public_prior(mechanism, eps2, grid, probs / probs.sum(), domain=domain, params=params)

    best, best_score = (float(grid[0]), float(grid[-1])), -1.0
    for x_a, x_b in itertools.pairwise(grid):
        fit_a, fit_b = fit(float(x_a)), fit(float(x_b))
        if fit_a.bin_index(np.array([x_a]))[0] == fit_a.bin_index(np.array([x_b]))[0]:
            continue
        out_a, out_b = fit_a.outputs_, fit_b.outputs_
        score = 1e3 * abs(out_a.size - out_b.size)
        if out_a.size == out_b.size:
            score += float(np.abs(out_a - out_b).sum()) / domain.width
        if score > best_score:
            best, best_score = (float(x_a), float(x_b)), score
    return best


def _moved(labels: np.ndarray, changed: int, x: float) -> np.ndarray:
    out = labels.copy()
    out[changed] = x
    return out


def _histogram_pair(name: str, mechanism: str, labels: np.ndarray, domain: LabelDomain, **kw) -> ReleasePair:
    """RR-on-Bins pair on the most moving adjacent cells (row 0)."""
    x_a, x_b = most_moving_cells(
        mechanism, 2.0, labels, 0, domain, params=kw.get("params"), epsilon_prior=kw.get("epsilon_prior")
    )
    return ReleasePair(name, mechanism, 2.0, _moved(labels, 0, x_a), 0, x_b, domain=domain, **kw)


PUBLIC_REAL = PublicPrior(np.linspace(0.0, 1.0, 11), np.array([1, 3, 6, 8, 7, 5, 3, 2, 1, 1, 1], dtype=np.float64) / 38)
PUBLIC_COUNTS = PublicPrior(np.arange(5, dtype=np.float64), np.array([0.3, 0.3, 0.2, 0.1, 0.1]))
PUBLIC_CLASSES = PublicPrior(np.arange(4, dtype=np.float64), np.array([0.5, 0.3, 0.15, 0.05]))

BATCH: dict[str, Any] = {"batched": True, "n_draws": 200_000, "n_pilot": 50_000, "sharpness": 0.9}
ENDS = _moved(REAL_LABELS, 0, 0.0)  # row 0 at the low end; label set b puts it at the high end


def release_pairs() -> list[ReleasePair]:
    """Every mechanism × prior kind it supports (built on import of the test module)."""
    return [
        # -- Laplace histogram prior (ε₁ + ε₂): the row moves between the most moving cells.
        _histogram_pair(
            "rr_on_bins_squared_histogram", "rr_on_bins", REAL_LABELS, UNIT, epsilon_prior=1.0, sharpness=0.3,
            n_draws=2000, n_pilot=500,  # 1200/300 certified 0.589 < 0.6 on the ChaCha20-era draws: too thin a margin
        ),
        _histogram_pair(
            "rr_on_bins_absolute_histogram", "rr_on_bins", REAL_LABELS, UNIT, epsilon_prior=1.0,
            params={"loss": "absolute"}, sharpness=0.2, slow=True,
        ),
        _histogram_pair(
            "rr_on_bins_poisson_histogram", "rr_on_bins", COUNT_LABELS, COUNTS, epsilon_prior=1.0,
            params={"loss": "poisson"}, sharpness=0.3, slow=True,
        ),
        ReleasePair(  # weights = prior: the LP is solved once per release, so a 5-point domain
            "unbiased_prior_weights_histogram", "unbiased", 2.0, SMALL_COUNT_LABELS, 0, 4.0,
            domain=SMALL_COUNTS, params={"weights": "prior"}, epsilon_prior=1.0, n_draws=500, n_pilot=150,
            sharpness=0.3, slow=True,
        ),
        ReleasePair(  # RPWithPrior's default private prior: the row moves between the end cells
            "rp_with_prior_histogram", "rp_with_prior", 2.0, ENDS, 0, 1.0, domain=UNIT, epsilon_prior=1.0,
            n_draws=800, n_pilot=200, sharpness=0.15, slow=True,
        ),
        # -- noised-label prior (RPWithPrior, Liu & Huang Alg. 3), default ε₁
        ReleasePair(
            "rp_with_prior_noised_labels", "rp_with_prior", 2.0, _moved(REAL_LABELS, 0, 0.0), 0, 1.0,
            domain=UNIT, params={"private_prior": "noised_labels"}, n_draws=800, n_pilot=200, sharpness=0.15,
            slow=True,
        ),
        # -- label-independent split (Alg. 2): changed row inside the split, and outside it
        ReleasePair(
            "rr_with_prior_split_row_in_split", "rr_with_prior", 1.0, CLASS_LABELS, 0, 1.0,
            classes=CLASSES, params={"prior_fraction": SPLIT_FRACTION}, sharpness=0.4,
        ),
        ReleasePair(
            "block_rr_split_row_in_split", "block_rr", 1.0, CLASS_LABELS, 0, 1.0,
            classes=CLASSES, params={"prior_fraction": SPLIT_FRACTION}, sharpness=0.4, slow=True,
        ),
        ReleasePair(
            "block_rr_split_row_outside_split", "block_rr", 1.0, CLASS_LABELS, 1, 0.0,
            classes=CLASSES, params={"prior_fraction": SPLIT_FRACTION}, sharpness=0.4, slow=True,
        ),
        # -- public prior: costs no ε, the public parts may not depend on the labels
        ReleasePair("rr_on_bins_public", "rr_on_bins", 2.0, ENDS, 0, 1.0, domain=UNIT,
                    public_prior=PUBLIC_REAL, **BATCH),
        ReleasePair("rp_with_prior_public", "rp_with_prior", 2.0, ENDS, 0, 1.0, domain=UNIT,
                    public_prior=PUBLIC_REAL, **BATCH),
        ReleasePair("unbiased_prior_weights_public", "unbiased", 1.0, SMALL_COUNT_LABELS, 0, 4.0,
                    domain=SMALL_COUNTS, params={"weights": "prior"}, public_prior=PUBLIC_COUNTS, **BATCH),
        ReleasePair("rr_with_prior_public", "rr_with_prior", 1.0, CLASS_LABELS, 0, 1.0, classes=CLASSES,
                    public_prior=PUBLIC_CLASSES, **BATCH),
        ReleasePair("block_rr_public", "block_rr", 1.0, CLASS_LABELS, 0, 3.0, classes=CLASSES,
                    public_prior=PUBLIC_CLASSES, **BATCH),
        # -- no prior: the whole ε goes to the randomizer
        ReleasePair("laplace_none", "laplace", 1.0, ENDS, 0, 1.0, domain=UNIT, **BATCH),
        ReleasePair("staircase_none", "staircase", 1.0, ENDS, 0, 1.0, domain=UNIT, **BATCH),
        ReleasePair(  # a realistic δ: the bound is taken from P_a(E) ≤ e^ε P_b(E) + δ
            "gaussian_none_delta_1e-6", "gaussian", 1.0, ENDS, 0, 1.0, domain=UNIT,
            params={"delta": 1e-6}, claimed_delta=1e-6, **{**BATCH, "sharpness": 0.1},
        ),
        ReleasePair(  # range-restricted Laplace at scale 2Δ/ε: its loss between the ends is about ε/2
            "exponential_none", "exponential", 1.0, ENDS, 0, 1.0, domain=UNIT, **{**BATCH, "sharpness": 0.3}
        ),
        ReleasePair("unbiased_none", "unbiased", 1.0, SMALL_COUNT_LABELS, 0, 4.0, domain=SMALL_COUNTS, **BATCH),
        ReleasePair("randomized_response_none", "randomized_response", 1.0, CLASS_LABELS, 0, 1.0,
                    classes=CLASSES, **BATCH),
    ]
