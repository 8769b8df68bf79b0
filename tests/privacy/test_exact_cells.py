"""Exact check where sampling cannot reach: the categorical cell tables are ε-DP in rationals.

A categorical mechanism samples integer cells out of 2^63. An excess of 10⁻¹⁵ in a
column's ratio is invisible to any audit (10⁶ draws resolve ~10⁻³), so every table is
checked here in exact arithmetic: in every column, largest cell ≤ e^ε × smallest, with
e^ε replaced by a rational *lower* bound (its Taylor polynomial; every term is positive),
independent of the Decimal bound the nudge itself uses.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from labeldp.mechanisms.categorical import (
    CELL_BITS,
    BlockRR,
    RandomizedResponse,
    RRWithPrior,
    SplitPriorRandomizer,
    cell_table,
)
from labeldp.mechanisms.contract import Prior
from labeldp.mechanisms.exact_cells import exp_lower_bound, nudge_to_epsilon

SMALL_K = (2, 3, 4, 5, 7, 8, 13, 31)
SMALL_EPSILON = (0.001, 0.01, 0.05, 0.1, 0.3, 1.0, 2.0)


def exp_taylor_lower(epsilon: float, terms: int = 80) -> Fraction:
    """Σ_{k<terms} x^k/k! for the float ε taken exactly: ≤ e^ε, off by < x^terms/terms!."""
    x = Fraction(epsilon)
    total, term = Fraction(0), Fraction(1)
    for k in range(terms):
        total += term
        term = term * x / (k + 1)
    return total


def exact_excess(cdf_cells: np.ndarray, epsilon: float) -> list[tuple[int, Fraction]]:
    """Columns whose largest cell exceeds e^ε × their smallest, with max/min − e^ε (a lower bound)."""
    cdf = np.asarray(cdf_cells, dtype=np.uint64)
    cells = np.diff(cdf, axis=1, prepend=np.zeros((cdf.shape[0], 1), np.uint64))
    bound = exp_taylor_lower(epsilon)
    bad = []
    for j in range(cells.shape[1]):
        column = [int(c) for c in cells[:, j]]
        if max(column) == 0:
            continue
        assert min(column) > 0, f"column {j} mixes zero and positive cells"
        if max(column) > min(column) * bound:
            bad.append((j, Fraction(max(column), min(column)) - bound))
    return bad


def _priors(k: int) -> list[np.ndarray]:
    rng = np.random.default_rng(k)
    skewed = np.arange(k, 0, -1, dtype=np.float64) ** 2
    return [np.full(k, 1.0 / k), skewed / skewed.sum(), rng.dirichlet(np.full(k, 0.5))]


def _mechanisms(epsilon: float, k: int):
    yield RandomizedResponse(epsilon, k).fit_to()
    for prior in _priors(k):
        yield RRWithPrior(epsilon, k).fit_to(Prior.over_classes(prior))
        yield BlockRR(epsilon, k).fit_to(Prior.over_classes(prior))
        yield BlockRR(epsilon, k, l=None).fit_to(Prior.over_classes(prior))
        yield BlockRR(epsilon, k, sigma=0.3).fit_to(Prior.over_classes(prior))
        yield BlockRR(epsilon, k, outputs="majority").fit_to(Prior.over_classes(prior))


def test_taylor_bound_is_below_e_to_the_epsilon_and_agrees_with_the_decimal_one() -> None:
    for eps in SMALL_EPSILON + (5.0,):
        taylor, decimal_bound = exp_taylor_lower(eps), exp_lower_bound(eps)
        assert taylor <= Fraction(math.exp(eps)) * (1 + Fraction(1, 10**15))
        assert abs(taylor - decimal_bound) < Fraction(1, 10**40)


@pytest.mark.parametrize("k", SMALL_K)
def test_every_categorical_cell_table_is_epsilon_dp_in_exact_arithmetic(k: int) -> None:
    checked = 0
    for eps in SMALL_EPSILON:
        for mech in _mechanisms(eps, k):
            cdf = mech.cells_
            assert np.all(cdf[:, -1] == np.uint64(1 << CELL_BITS)), "a row must hold exactly 2^63 cells"
            assert exact_excess(cdf, eps) == [], f"{type(mech).__name__} K={k} ε={eps}"
            # The nudge moves a few cells out of 2^63: the law is the matrix's to ~1e-17.
            cells = np.diff(cdf, axis=1, prepend=np.zeros((k, 1), np.uint64)).astype(np.float64)
            np.testing.assert_allclose(np.ldexp(cells, -CELL_BITS), mech.matrix_, rtol=0, atol=1e-15)
            assert np.array_equal(cells == 0, mech.matrix_ == 0), "zero entries keep zero cells"
            checked += 1
    assert checked == len(SMALL_EPSILON) * (1 + 5 * len(_priors(k)))


def test_split_prior_release_samples_only_exact_tables() -> None:
    """Both stages of Alg. 2 (first-stage RR, second-stage mechanism) go through the nudge."""
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 31, size=400)
    for cls in (RRWithPrior, BlockRR):
        split = SplitPriorRandomizer(cls, 0.01, 31, prior_fraction=0.3)
        split.privatize(labels, rng)
        assert exact_excess(split.first_stage_.cells_, 0.01) == []
        assert exact_excess(split.mechanism_.cells_, 0.01) == []


def test_the_plain_cell_table_exceeds_epsilon_and_the_nudge_repairs_it() -> None:
    """The check has power: the un-nudged table of the issue's worst case (BlockRR, ε = 0.01,
    K = 31) realizes a loss above ε — by ~1e-15, out of reach of any sampling audit."""
    eps, k = 0.01, 31
    mech = BlockRR(eps, k).fit_to(Prior.over_classes(_priors(k)[2]))  # S₂ non-empty: β and e^ε·β rounded apart
    plain = cell_table(mech.matrix_)
    excess = exact_excess(plain, eps)
    assert excess, "expected the float-rounded table to exceed e^ε somewhere"
    assert max(float(e) for _, e in excess) < 1e-13
    repaired = nudge_to_epsilon(plain, eps)
    assert exact_excess(repaired, eps) == []
    assert np.array_equal(repaired, mech.cells_)
    moved = np.abs(np.diff(repaired.astype(np.int64), axis=1) - np.diff(plain.astype(np.int64), axis=1)).max()
    assert moved < 1 << 12  # a few thousand cells out of 2^63 at most


def test_nudge_leaves_an_exact_table_alone_and_refuses_an_infinite_loss() -> None:
    rr = RandomizedResponse(1.0, 3).fit_to()
    assert np.array_equal(nudge_to_epsilon(rr.cells_, 1.0), rr.cells_)
    mixed = cell_table(np.array([[1.0, 0.0], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="infinite"):
        nudge_to_epsilon(mixed, 1.0)
