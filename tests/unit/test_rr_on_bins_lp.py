"""RR-on-Bins is optimal among ALL ε-DP mechanisms (Ghazi et al. Theorem 5), checked by LP.

For small supports and each loss, the fitted mechanism's expected loss must

* equal the minimum over all interval partitions (brute force, per-bin optimal outputs), and
* not exceed the optimum of the linear program over every ε-DP mechanism from the k
  labels to a fine output grid that contains the fitted outputs (HiGHS). The fitted
  mechanism is feasible for that LP, so LP <= fitted always; Theorem 5 says the
  infimum over all mechanisms is attained by RR-on-Bins, so the two coincide.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import sparse
from scipy.optimize import linprog

from labeldp.mechanisms import RROnBins
from labeldp.mechanisms.contract import Prior

LOSSES = ["squared", "absolute", "poisson"]
CASES = [(4, 0.3), (5, 1.0), (6, 2.5), (6, 5.0), (8, 1.5), (8, 4.0)]


def loss_fn(o, y, loss: str):
    if loss == "squared":
        return (o - y) ** 2
    if loss == "absolute":
        return np.abs(o - y)
    return o - y * np.log(o)


def prior(loss: str, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    low = 0.0 if loss == "poisson" else -3.0
    grid = np.sort(rng.choice(np.arange(low, low + 12.0, 0.5), size=k, replace=False))
    probs = rng.dirichlet(np.full(k, 0.8))
    return grid, probs


def brute_force(grid: np.ndarray, probs: np.ndarray, epsilon: float, loss: str) -> float:
    """Min over all interval partitions; each bin's output minimizes its separable loss term."""
    k = grid.size
    best = math.inf
    for mask in range(2 ** (k - 1)):
        bins = np.concatenate([[0], np.cumsum([(mask >> g) & 1 for g in range(k - 1)])])
        m = int(bins[-1]) + 1
        keep = math.exp(epsilon) / (math.exp(epsilon) + m - 1)
        other = 1.0 / (math.exp(epsilon) + m - 1)
        total = 0.0
        for j in range(m):
            w = probs * np.where(bins == j, keep, other)
            if loss == "absolute":  # piecewise linear: the minimum sits at a label
                candidates = grid
            else:  # the weighted mean is the exact minimizer of both
                candidates = np.array([np.dot(w, grid) / w.sum()])
            total += min(float(np.dot(w, loss_fn(o, grid, loss))) for o in candidates)
        best = min(best, total)
    return best


def lp_optimum(grid: np.ndarray, probs: np.ndarray, epsilon: float, outputs: np.ndarray, loss: str) -> float:
    """min Σ_y p_y Σ_o M[y,o] ℓ(o,y) over row-stochastic M >= 0 with M[y,o] <= e^ε M[y',o]."""
    k, n = grid.size, outputs.size
    cost = (probs[:, None] * loss_fn(outputs[None, :], grid[:, None], loss)).ravel()  # variable y*n + o
    a_eq = sparse.kron(sparse.eye(k), np.ones((1, n)))
    rows = []
    for y in range(k):
        for y2 in range(k):
            if y != y2:
                pick = sparse.csr_matrix(([1.0, -math.exp(epsilon)], ([0, 0], [y, y2])), shape=(1, k))
                rows.append(sparse.kron(pick, sparse.eye(n)))  # n rows: M[y,o] − e^ε M[y2,o] <= 0
    a_ub = sparse.vstack(rows).tocsr()
    res = linprog(
        cost,
        A_ub=a_ub,
        b_ub=np.zeros(a_ub.shape[0]),
        A_eq=a_eq,
        b_eq=np.ones(k),
        bounds=(0, None),
        method="highs",
    )
    assert res.status == 0, res.message
    return float(res.fun)


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("k, epsilon", CASES)
def test_fitted_loss_is_the_partition_optimum_and_the_lp_optimum(loss: str, k: int, epsilon: float) -> None:
    grid, probs = prior(loss, k, seed=10 * k + int(10 * epsilon))
    mech = RROnBins(epsilon, loss=loss).fit_to(Prior(grid, probs))
    fitted = mech.expected_loss_
    scale = 1.0 + abs(fitted)

    assert fitted == pytest.approx(brute_force(grid, probs, epsilon, loss), rel=1e-9, abs=1e-12)

    low = max(grid[0], 0.05) if loss == "poisson" else grid[0]
    outputs = np.unique(np.concatenate([np.linspace(low, grid[-1], 81), mech.outputs_, grid[grid >= low]]))
    lp = lp_optimum(grid, probs, epsilon, outputs, loss)
    assert fitted <= lp + 1e-9 * scale, (fitted, lp)  # no ε-DP mechanism on this grid does better
    assert fitted >= lp - 1e-9 * scale, (fitted, lp)  # RR-on-Bins is feasible for the LP: equality (Theorem 5)


def test_lp_detects_a_suboptimal_mechanism() -> None:
    """Power check: plain randomized response on the raw labels is strictly worse than the LP."""
    grid, probs = prior("squared", 6, seed=3)
    epsilon = 2.5
    k = grid.size
    keep = math.exp(epsilon) / (math.exp(epsilon) + k - 1)
    other = 1.0 / (math.exp(epsilon) + k - 1)
    rr = sum(py * other * float(np.sum((grid - y) ** 2)) for y, py in zip(grid, probs))  # keep·0 on the diagonal
    assert keep > other
    outputs = np.unique(np.concatenate([np.linspace(grid[0], grid[-1], 81), grid]))
    assert lp_optimum(grid, probs, epsilon, outputs, "squared") < rr * (1 - 1e-3)
