"""Optimal RR-on-Bins partition for squared loss (Ghazi et al. 2023, Alg. 2 + App. B).

Both implementations solve the same dynamic program

    A[i][j] = min_{r < i} A[r][j-1] + L[r+1][i],   answer  min_d A[k][d] / (d − 1 + e^ε),

where L[r][i] = min_o Σ_y p_y e^{ε·1[y ∈ [y^r, y^i]]} (o − y)² over *all* grid points
y. For squared loss the minimizer is the weighted mean and L is an O(1)
expression of prefix sums: Σw y² − (Σw y)² / Σw.

Numerical form. Everything is multiplied by e^{−ε} = t, so weights are t outside
the interval and 1 inside (no overflow for any ε), and the answer becomes
A'[k][d] / (1 + (d − 1)·t). Labels are centred on the prior mean and scaled to
[−1, 1] before the prefix sums, which keeps Σw y² − (Σw y)²/Σw from cancelling
catastrophically on domains far from 0; the loss is scaled back at the end.

``optimal_bins`` runs the DP in a numba kernel, layer by layer (d = number of
bins), and stops once a lower bound shows no larger d can win. Since every L is at least
t·Var(P), A'[k][d] >= d·t·Var(P), so loss_d >= d·t·Var / (1 + (d − 1)t), increasing in d.
``optimal_bins_reference`` is the plain numpy table over all d, for tests.
"""

from __future__ import annotations

import math

import numba
import numpy as np

# A pruned layer's lower bound must beat the incumbent by more than rounding.
_PRUNE_MARGIN = 1e-9


def _prepare(grid: np.ndarray, probs: np.ndarray, epsilon: float):
    """Validate, normalize probs, centre/scale the grid; returns (y, p, t, 1−t, centre, scale)."""
    grid = np.ascontiguousarray(grid, dtype=np.float64)
    probs = np.ascontiguousarray(probs, dtype=np.float64)
    if grid.ndim != 1 or grid.size == 0 or probs.shape != grid.shape:
        raise ValueError("grid and probs must be non-empty 1-D arrays of equal length")
    if not (np.all(np.isfinite(grid)) and np.all(np.isfinite(probs))):
        raise ValueError("grid and probs must be finite")
    if np.any(np.diff(grid) <= 0):
        raise ValueError("grid must be strictly increasing")
    if np.any(probs < 0) or not probs.sum() > 0:
        raise ValueError("probs must be >= 0 with a positive sum")
    epsilon = float(epsilon)
    if not (epsilon >= 0 and math.isfinite(epsilon)):
        raise ValueError("epsilon must be a finite number >= 0")
    p = probs / probs.sum()
    centre = float(np.dot(p, grid))
    scale = float(np.max(np.abs(grid - centre)))
    if not (scale > 0 and math.isfinite(scale)):
        scale = 1.0
    y = (grid - centre) / scale
    return y, p, math.exp(-epsilon), -math.expm1(-epsilon), centre, scale


def _finish(bin_of_grid: np.ndarray, outputs: np.ndarray, loss: float, centre: float, scale: float):
    """Undo the scaling and number the bins by ascending output value."""
    order = np.argsort(outputs, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    outputs = centre + scale * outputs[order]
    return rank[bin_of_grid].astype(np.int64), outputs.astype(np.float64), float(loss * scale * scale)


# --------------------------------------------------------------------------- numba


@numba.njit(cache=True)
def _prefix_sums(y, p):
    k = y.size
    c0 = np.zeros(k + 1)
    c1 = np.zeros(k + 1)
    c2 = np.zeros(k + 1)
    for i in range(k):
        c0[i + 1] = c0[i] + p[i]
        c1[i + 1] = c1[i] + p[i] * y[i]
        c2[i + 1] = c2[i] + p[i] * y[i] * y[i]
    return c0, c1, c2


@numba.njit(cache=True)
def _interval_output(c0, c1, y, r, i, t, omt):
    """Weighted mean of all y with weight 1 on [r, i], t elsewhere (midpoint if weightless)."""
    k = y.size
    w = t * c0[k] + omt * (c0[i + 1] - c0[r])
    m1 = t * c1[k] + omt * (c1[i + 1] - c1[r])
    if w > 0.0:
        return m1 / w
    return 0.5 * (y[r] + y[i])


@numba.njit(cache=True)
def _interval_costs(c0, c1, c2, t, omt):
    """LT[i, r] = L'(interval [r, i]) for r <= i (row i contiguous over r)."""
    k = c0.size - 1
    lt = np.full((k, k), np.inf)
    for i in range(k):
        for r in range(i + 1):
            w = t * c0[k] + omt * (c0[i + 1] - c0[r])
            m1 = t * c1[k] + omt * (c1[i + 1] - c1[r])
            m2 = t * c2[k] + omt * (c2[i + 1] - c2[r])
            v = m2 - m1 * m1 / w if w > 0.0 else 0.0
            lt[i, r] = v if v > 0.0 else 0.0
    return lt


@numba.njit(cache=True)
def _optimal_bins_kernel(y, p, t, omt):
    """Layered DP with backpointers; returns (bin_of_grid, outputs, loss) in scaled units."""
    k = y.size
    c0, c1, c2 = _prefix_sums(y, p)
    lt = _interval_costs(c0, c1, c2, t, omt)
    total = c0[k]
    variance = c2[k] - c1[k] * c1[k] / total
    if variance < 0.0:
        variance = 0.0
    parent = np.zeros((k + 1, k + 1), dtype=np.int32)
    prev = np.full(k + 1, np.inf)
    prev[0] = 0.0
    cur = np.full(k + 1, np.inf)
    best = np.inf
    best_d = 0
    for d in range(1, k + 1):
        cur[:] = np.inf
        for i in range(d, k + 1):
            row = lt[i - 1]
            best_v = np.inf
            best_r = -1
            for r in range(d - 1, i):
                v = prev[r] + row[r]
                if v < best_v:
                    best_v = v
                    best_r = r
            cur[i] = best_v
            parent[d, i] = best_r
        loss_d = cur[k] / (1.0 + (d - 1) * t)
        if loss_d < best:
            best = loss_d
            best_d = d
        prev, cur = cur, prev
        if best <= 0.0:
            break
        bound = (d + 1) * t * variance / (1.0 + d * t)
        if bound > best * (1.0 + _PRUNE_MARGIN):
            break
    bin_of_grid = np.empty(k, dtype=np.int64)
    outputs = np.empty(best_d)
    i = k
    for d in range(best_d, 0, -1):
        r = parent[d, i]
        for g in range(r, i):
            bin_of_grid[g] = d - 1
        outputs[d - 1] = _interval_output(c0, c1, y, r, i - 1, t, omt)
        i = r
    return bin_of_grid, outputs, best


def optimal_bins(grid: np.ndarray, probs: np.ndarray, epsilon: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Optimal squared-loss RR-on-Bins for prior (grid, probs): (bin_of_grid, outputs, expected_loss).

    ``bin_of_grid[g]`` is the bin (0..m−1) of grid point g, ``outputs`` the m bin
    values in ascending order, ``expected_loss`` E[(ŷ − y)²] under the prior.
    Zero-probability grid points are still assigned to a bin. O(k²) memory,
    O(k²·d_max) time where d_max is the last bin count the bound could not prune.
    """
    y, p, t, omt, centre, scale = _prepare(grid, probs, epsilon)
    bin_of_grid, outputs, loss = _optimal_bins_kernel(y, p, t, omt)
    return _finish(bin_of_grid, outputs, loss, centre, scale)


# --------------------------------------------------------------------------- numpy reference


def optimal_bins_reference(
    grid: np.ndarray, probs: np.ndarray, epsilon: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """Straightforward Algorithm 2 in numpy: the full O(k³) table over every bin count d.

    Same contract as :func:`optimal_bins`; kept as the readable reference the
    numba kernel is tested against.
    """
    y, p, t, omt, centre, scale = _prepare(grid, probs, epsilon)
    k = y.size
    zero = np.zeros(1)
    c0 = np.concatenate([zero, np.cumsum(p)])
    c1 = np.concatenate([zero, np.cumsum(p * y)])
    c2 = np.concatenate([zero, np.cumsum(p * y * y)])

    # LT[i, r]: cost of interval [r, i] (0-based, inclusive), inf where r > i.
    ii, rr = np.meshgrid(np.arange(k), np.arange(k), indexing="ij")
    w = t * c0[k] + omt * (c0[ii + 1] - c0[rr])
    m1 = t * c1[k] + omt * (c1[ii + 1] - c1[rr])
    m2 = t * c2[k] + omt * (c2[ii + 1] - c2[rr])
    with np.errstate(divide="ignore", invalid="ignore"):
        lt = np.where(w > 0, m2 - m1 * m1 / w, 0.0)
    lt = np.where(rr <= ii, np.maximum(lt, 0.0), np.inf)

    # a[d, i]: best scaled cost of the first i grid points in d bins.
    a = np.full((k + 1, k + 1), np.inf)
    a[0, 0] = 0.0
    parent = np.zeros((k + 1, k + 1), dtype=np.int64)
    for d in range(1, k + 1):
        cand = a[d - 1, :k][None, :] + lt  # cand[i-1, r] = A[r][d-1] + L[r+1..i]
        cand[:, : d - 1] = np.inf
        parent[d, 1:] = np.argmin(cand, axis=1)
        a[d, 1:] = cand[np.arange(k), parent[d, 1:]]
    losses = a[1:, k] / (1.0 + np.arange(k) * t)
    best_d = int(np.argmin(losses)) + 1

    bin_of_grid = np.empty(k, dtype=np.int64)
    outputs = np.empty(best_d)
    i = k
    for d in range(best_d, 0, -1):
        r = int(parent[d, i])
        bin_of_grid[r:i] = d - 1
        wgt = t * c0[k] + omt * (c0[i] - c0[r])
        outputs[d - 1] = (t * c1[k] + omt * (c1[i] - c1[r])) / wgt if wgt > 0 else 0.5 * (y[r] + y[i - 1])
        i = r
    return _finish(bin_of_grid, outputs, float(losses[best_d - 1]), centre, scale)
