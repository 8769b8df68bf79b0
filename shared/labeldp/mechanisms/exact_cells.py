"""Integer cell tables whose realized privacy loss is ≤ ε in exact arithmetic.

A categorical mechanism samples row y of its transition matrix from integer cells
out of 2^63 (``categorical.cell_table``). The float matrix it starts from is ε-DP
only up to float rounding: BlockRR's β and e^ε·β, say, are each rounded once, so a
column's largest cell may exceed e^ε times its smallest by a few parts in 10¹⁵ (at
ε = 0.01, K = 31 the realized loss was ε + 2.5·10⁻¹⁵). Sampling can never see that,
so it is fixed here, where it is made: every column gets the cap

    cap_j = ⌊min_y cells[y, j] · e^ε⌋   (e^ε bounded from below in exact rationals),

every cell above its cap is lowered to it, and the cells a row loses go to entries
of the same row that are below their caps. Lowering a cell to its cap keeps the
column's minimum; raising one up to its cap keeps the maximum ≤ cap. So every
column ends with max ≤ cap_j ≤ min · e^ε exactly, and every row still sums to 2^bits.
The moves are a few cells out of 2^63: the law changes by ~10⁻¹⁸.
"""

from __future__ import annotations

import decimal
import functools
from fractions import Fraction

import numpy as np

# Digits for e^ε: the bound below is exact to ~10⁻⁶⁰, far below one cell in 2^63 (10⁻¹⁹).
_DIGITS = 80
# No cell exceeds its row's total (at most 2^63), so a cap above this never binds.
_MAX_CELL = (1 << 64) - 1


@functools.lru_cache(maxsize=256)  # a release fits a few tables at one ε: compute the bound once
def exp_lower_bound(epsilon: float) -> Fraction:
    """A rational r with r ≤ e^ε (within 10⁻⁷⁰ relative), from the float ε taken exactly.

    ``Decimal.exp`` is correctly rounded (half-even) at the context's precision, so
    the result is within half a unit in the last digit of e^ε; one unit less is below it.
    """
    context = decimal.Context(prec=_DIGITS)
    value = context.exp(decimal.Decimal(float(epsilon)))  # Decimal(float) is exact
    unit = decimal.Decimal(1).scaleb(value.adjusted() - _DIGITS + 1)
    return Fraction(value) - Fraction(unit)  # in rationals: Decimal arithmetic would round again


def column_caps(cells: np.ndarray, epsilon: float) -> list[int | None]:
    """⌊min_y cells[y, j] · e^ε⌋ per column (exact, at most 2^64 − 1); None for an all-zero column."""
    bound = exp_lower_bound(float(epsilon))
    num, den = bound.numerator, bound.denominator
    caps: list[int | None] = []
    for j in range(cells.shape[1]):
        low = int(cells[:, j].min())
        if int(cells[:, j].max()) == 0:
            caps.append(None)
        elif low == 0:
            raise ValueError("a column mixes zero and positive cells: infinite privacy loss")
        else:
            caps.append(min(low * num // den, _MAX_CELL))
    return caps


def realized_loss_within(cdf_cells: np.ndarray, epsilon: float) -> bool:
    """True iff every column's largest cell ≤ e^ε × its smallest, in exact arithmetic."""
    cells = _cells(cdf_cells)
    caps = column_caps(cells, epsilon)
    return all(cap is None or int(cells[:, j].max()) <= cap for j, cap in enumerate(caps))


def nudge_to_epsilon(cdf_cells: np.ndarray, epsilon: float) -> np.ndarray:
    """The cumulative cell table (uint64, K×K) moved so its realized loss is ≤ ε exactly.

    A table already under every cap comes back unchanged (the usual case); only rows
    with a cell above its cap are moved, see the module docstring for why the moves
    cannot raise any column's ratio.
    """
    cdf = np.asarray(cdf_cells, dtype=np.uint64)
    cells = _cells(cdf)
    caps = column_caps(cells, epsilon)
    used = np.array([cap is not None for cap in caps])
    cap_array = np.array([0 if cap is None else cap for cap in caps], dtype=np.uint64)
    over = (cells > cap_array[None, :]) & used[None, :]
    if not over.any():
        return cdf
    out = cells.copy()
    for y in np.flatnonzero(over.any(axis=1)):
        row = [int(c) for c in cells[y]]
        excess = 0
        for j, cap in enumerate(caps):
            if cap is not None and row[j] > cap:
                excess += row[j] - cap
                row[j] = cap
        # Give the cells back to the entries with the most room below their caps.
        rooms = sorted(
            ((cap - row[j], j) for j, cap in enumerate(caps) if cap is not None and cap > row[j]),
            reverse=True,
        )
        for room, j in rooms:
            step = min(room, excess)
            row[j] += step
            excess -= step
            if not excess:
                break
        if excess:
            raise ValueError("no room below the caps: the matrix is not ε-DP")
        out[y] = np.array(row, dtype=np.uint64)
    return np.cumsum(out, axis=1, dtype=np.uint64)


def _cells(cdf_cells: np.ndarray) -> np.ndarray:
    cdf = np.asarray(cdf_cells, dtype=np.uint64)
    return np.diff(cdf, axis=1, prepend=np.zeros((cdf.shape[0], 1), dtype=np.uint64))


# -- the folded table of a clipped additive mechanism ---------------------------------
#
# ``kernels.clipped_additive`` draws one word per label: its top 63 bits pick a magnitude m
# from cells c_0..c_J out of 2^63, its low bit the sign, and the output is clip(j ± m, 0, J).
# In units of 2^-64 the output law is, for every input j in 0..J,
#
#   interior 0 < i < J:  P(i | j) = c'_{|i − j|}, with c'_0 = 2·c_0 (both signs) and c'_d = c_d;
#   the end 0:           P(0 | j) = T(j) = Σ_{m ≥ j} c_m for j ≥ 1, and T(0) = 2^63 + c_0;
#   the end J:           P(J | j) = T(J − j) (the mirror image).
#
# Every two inputs are neighbours (sensitivity J steps). An interior output i sees every
# distance 0..max(i, J − i) ≤ J − 1, and i = 1 sees all of them; so the interior outputs are
# ε-DP iff max_{d<J} c'_d ≤ e^ε · min_{d<J} c'_d. T falls from T(0) = 2^63 + c_0 (above
# T(1) = 2^63 − c_0) to T(J) = c_J, so the two ends are ε-DP iff 2^63 + c_0 ≤ e^ε · c_J.


def folded_caps(cells: list[int], epsilon: float) -> tuple[int, int]:
    """(⌊min_{d<J} c'_d · e^ε⌋, the least c_J with 2^63 + c_0 ≤ e^ε·c_J): the two bounds above."""
    bound = exp_lower_bound(float(epsilon))
    num, den = bound.numerator, bound.denominator
    interior = _interior(cells)
    cap = min(interior) * num // den
    total = sum(cells)
    need = -(-(total + cells[0]) * den // num)  # ⌈(2^bits + c_0)/e^ε⌉
    return cap, need


def folded_within(cdf_cells: np.ndarray, epsilon: float) -> bool:
    """True iff the clipped additive output law of these folded cells is ε-DP, in exact integers."""
    cells = [int(c) for c in _cells(np.atleast_2d(cdf_cells))[0]]
    if len(cells) < 2 or min(cells) == 0:
        return False
    cap, need = folded_caps(cells, epsilon)
    return max(_interior(cells)) <= cap and cells[-1] >= need


def nudge_folded_to_epsilon(cdf_cells: np.ndarray, epsilon: float) -> np.ndarray:
    """The folded cumulative cells (one row, uint64) moved so the clipped output law is ε-DP exactly.

    Two moves, each of a few cells out of 2^63, both into the tail cell c_J (which no interior
    output sees and which only raises the ends' minimum T(J)):

    1. every c'_d (d < J) above ⌊min c' · e^ε⌋ is lowered to it (c_0 to half of it): the
       minimum stays, the maximum drops under the cap;
    2. while 2^63 + c_0 > e^ε · c_J, cells move from the largest interior cell to c_J — the
       left side falls or stays, the right side grows, the interior maximum only drops and no
       interior cell goes below ⌈max/e^ε⌉, so the interior bound still holds.

    A table already within both bounds comes back unchanged. Raises ValueError when no
    interior cell has room above that floor (the law itself is not ε-DP).
    """
    cdf = np.asarray(cdf_cells, dtype=np.uint64)
    if cdf.ndim != 1 or cdf.size < 2:
        raise ValueError("a folded table is one row of at least two cells")
    cells = [int(c) for c in _cells(cdf[None, :])[0]]
    if min(cells) == 0:
        raise ValueError("a zero cell in a folded table: infinite privacy loss")
    if folded_within(cdf, epsilon):
        return cdf
    cap, _ = folded_caps(cells, epsilon)
    last = len(cells) - 1
    for d in range(last):
        ceiling = cap // 2 if d == 0 else cap
        if cells[d] > ceiling:
            cells[-1] += cells[d] - ceiling
            cells[d] = ceiling
    bound = exp_lower_bound(float(epsilon))
    _, need = folded_caps(cells, epsilon)
    while cells[-1] < need:
        interior = _interior(cells)
        d = max(range(last), key=lambda k: interior[k])
        # No interior cell may fall below ⌈max/e^ε⌉ (J = 1: one interior cell, no ratio inside).
        floor = -(-interior[d] * bound.denominator // bound.numerator) if last > 1 else 2
        # Each cell moved lowers 2^63 + c_0 by one (d = 0) or not at all, and raises e^ε·c_J by e^ε.
        step = min(need - cells[-1], (interior[d] - floor) // (2 if d == 0 else 1))
        if step <= 0:
            raise ValueError("no room below the caps: the folded law is not ε-DP")
        cells[d] -= step
        cells[-1] += step
        _, need = folded_caps(cells, epsilon)
    out = np.cumsum(np.array(cells, dtype=np.uint64), dtype=np.uint64)
    if not folded_within(out, epsilon):  # pragma: no cover - the moves above cannot fail this
        raise AssertionError("the nudged folded table is not ε-DP")
    return out


def _interior(cells: list[int]) -> list[int]:
    """c'_d for d < J: the interior outputs' cells (c'_0 = 2·c_0, both signs land on j)."""
    return [2 * cells[0], *cells[1:-1]] if len(cells) > 1 else [2 * cells[0]]
