"""Optimal unbiased randomizer (Badanidiyuru et al. 2023; outline in Liu & Huang, App. J).

Two steps, each label independently:

1. **Unbiased randomized rounding** to a public input grid g_0 < … < g_{K−1}
   spanning the label domain: y ∈ [g_i, g_{i+1}] becomes g_{i+1} with probability
   (y − g_i)/(g_{i+1} − g_i) and g_i otherwise, so E[rounded | y] = y.
2. **An ε-DP transition matrix** M (K inputs × L public outputs o_j): the
   rounded point g_i reports o_j with probability M[i, j]. M minimizes the
   (prior-)weighted variance Σ_i w_i Σ_j M[i, j](o_j − g_i)² subject to rows
   being distributions, Σ_j M[i, j] o_j = g_i (unbiased on the grid) and
   M[i, j] ≤ e^ε M[i', j] (ε-DP): a linear program, solved with HiGHS.

Together E[ŷ | y] = y for every y in the domain, so a model trained on the
privatized labels has the same Bayes-optimal predictor as on the true labels.

Privacy. Given y, Pr[ŷ = o_j | y] = Σ_i r_i(y) M[i, j] with rounding weights
r(y) ≥ 0 summing to 1: a convex combination of rows. Each column's entries lie in
[min_i M[i, j], e^ε · min_i M[i, j]], so every mixture does too, and the ratio
between two labels is ≤ e^ε. This holds for *any* rounding weights, so float
error in the rounding probabilities can cost accuracy but never privacy.

Exactness. The LP solution carries solver tolerance. It is therefore solved at
ε_lp = ε(1 − 10⁻⁴) (and at most 12, see ``MAX_LP_EPSILON``), repaired in
floating point (negative entries clipped, each column clipped into its
e^{ε_lp} band, each row rescaled to restore its sum and its mean exactly), and
then stored as integers: N[i, j] counts out of 2^53 per row. Each column gets a
floor n_j and a cap ⌊n_j · e^ε⌋, every entry is clipped into [n_j, cap_j] and the
few counts of rounding residue go to a row's largest entry. So the law that
``privatize`` samples — the exact alias table of the integer counts
(``sampling.TableSampler``), driven by the top 53 bits of a raw word — is
exactly N / 2^53 and satisfies the ε-DP ratio by
construction; rows stay unbiased to ~1e-15 (the residue is a few counts of 2^-53).

Output grid. By default L = 2(K − 1) + 1 equally spaced points on [L_ε, U_ε] with

    L_ε = ((e^ε + K − 1)·min g − Σ g) / (e^ε − 1),
    U_ε = ((e^ε + K − 1)·max g − Σ g) / (e^ε − 1)

(App. J's outline of Badanidiyuru et al.), evaluated at ε_lp. These are the
debiased randomized-response values f(g_i) = ((e^ε + K − 1) g_i − Σ g)/(e^ε − 1)
of the end points; for the equally spaced input grid used here every f(g_i) is
an output point (every other one), so debiased RR at ε_lp is a feasible point
and the LP always has a solution. The range depends only on public quantities.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import ClassVar, Literal, Self

import numpy as np
from pydantic import Field
from scipy import sparse
from scipy.optimize import linprog

from labeldp.mechanisms import kernels
from labeldp.mechanisms.checks import check_epsilon, check_grid, check_labels
from labeldp.mechanisms.contract import Params, Prior
from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.mechanisms.law import TransitionLaw
from labeldp.mechanisms.prior import LabelDomain
from labeldp.mechanisms.sampling import TableSampler
from labeldp.specs.unbiased import TRANSITION_DENOMINATOR, UnbiasedSpec

DEFAULT_GRID_SIZE = 33
MIN_GRID_SIZE = 2
# K·2^53 must stay below 2^63 (flattened cumulative table), but the LP's time is the real
# limit. One limit for the API and for direct use (UnbiasedParams).
# Decided in docs/decisions/0008-unbiased-grid-limit.md.
MAX_GRID_SIZE = 129
MAX_OUTPUT_SIZE = 4096
LP_MARGIN = 1e-4
# Beyond ε ≈ 12 the smallest useful entries (~e^-ε) approach the solver's
# tolerance; a mechanism solved at 12 is ε-DP for every ε ≥ 12 and its variance
# (≈ 4e-5·width² for K = 33) is already below the rounding variance, up to
# (width/(K−1))²/4 ≈ 2.4e-4·width² between grid points.
MAX_LP_EPSILON = 12.0
LP_TOLERANCE = 1e-9
BIAS_TOLERANCE = 1e-9
ONE = TRANSITION_DENOMINATOR  # 2**53: transition entries are counts out of ONE
# The cap ⌊n·e^ε⌋ is computed in float64; shrinking by 4 ulps keeps it ≤ n·e^ε exactly.
_CAP_SHRINK = 1.0 - 2.0**-50

Weights = Literal["uniform", "prior"]


# -- public grids -------------------------------------------------------------


def input_grid(domain: LabelDomain, grid_size: int | None = None) -> np.ndarray:
    """K equally spaced points from low to high (both included).

    Default K = 33 (32 intervals); an integer domain with fewer integers uses
    every integer, so integer labels are never rounded.
    """
    if grid_size is None:
        grid_size = DEFAULT_GRID_SIZE
        if domain.kind == "integer":
            grid_size = min(grid_size, int(domain.high - domain.low) + 1)
    grid_size = int(grid_size)
    if not (MIN_GRID_SIZE <= grid_size <= MAX_GRID_SIZE):
        raise ValueError(f"grid_size must lie in [{MIN_GRID_SIZE}, {MAX_GRID_SIZE}]")
    grid = np.linspace(domain.low, domain.high, grid_size)
    grid[0], grid[-1] = domain.low, domain.high
    return grid


def output_range(grid: np.ndarray, epsilon: float) -> tuple[float, float]:
    """[L_ε, U_ε]: the debiased-RR values of the end points (App. J outline)."""
    grid = check_grid(grid)
    e = math.expm1(check_epsilon(epsilon))
    # Σ g − K·min g and K·max g − Σ g as sums of differences (no cancellation).
    below = float(np.sum(grid - grid[0]))
    above = float(np.sum(grid[-1] - grid))
    return float(grid[0]) - below / e, float(grid[-1]) + above / e


def default_output_grid(grid: np.ndarray, epsilon: float, size: int | None = None) -> np.ndarray:
    """``size`` (default 2(K − 1) + 1) equally spaced points on [L_ε, U_ε]."""
    grid = check_grid(grid)
    if size is None:
        size = 2 * (grid.size - 1) + 1
    size = int(size)
    if not (2 <= size <= MAX_OUTPUT_SIZE):
        raise ValueError(f"the output grid size must lie in [2, {MAX_OUTPUT_SIZE}]")
    low, high = output_range(grid, epsilon)
    out = np.linspace(low, high, size)
    out[0], out[-1] = low, high
    return out


def lp_epsilon(epsilon: float) -> float:
    """ε the LP is solved at: a 10⁻⁴ relative margin for the repair, capped at 12."""
    return min(check_epsilon(epsilon) * (1.0 - LP_MARGIN), MAX_LP_EPSILON)


# -- unbiased randomized rounding -----------------------------------------------


def rounding_probabilities(labels: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lower index i, Pr[round up to g_{i+1}]) so that E[rounded] = y (y clipped to the grid)."""
    labels = check_labels(labels)
    grid = np.asarray(grid, dtype=np.float64)
    y = np.clip(labels, grid[0], grid[-1])
    lower = np.clip(np.searchsorted(grid, y, side="right") - 1, 0, grid.size - 2).astype(np.int64)
    g_lo, g_hi = grid[lower], grid[lower + 1]
    p_up = np.clip((y - g_lo) / (g_hi - g_lo), 0.0, 1.0)
    return lower, p_up


def rounding_matrix(labels: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Dense (n, K) matrix of rounding probabilities r_i(y) (for exact laws, small n)."""
    lower, p_up = rounding_probabilities(labels, grid)
    n = lower.size
    r = np.zeros((n, np.asarray(grid).size))
    rows = np.arange(n)
    r[rows, lower.ravel()] += 1.0 - p_up.ravel()
    r[rows, lower.ravel() + 1] += p_up.ravel()
    return r


def prior_weights(grid: np.ndarray, prior_grid: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """The prior pushed through the rounding: w_i = Σ_k p_k · Pr[round(y_k) = g_i].

    With these weights the LP objective plus the (M-independent) rounding variance
    is exactly the expected squared error under the prior, so the LP optimum is
    optimal for the prior among all rounding-then-matrix randomizers on the grid.
    """
    probs = np.asarray(probs, dtype=np.float64)
    prior_grid = check_labels(prior_grid)
    if probs.shape != prior_grid.shape or probs.ndim != 1:
        raise ValueError("prior grid and probs must be equal-length 1-D arrays")
    if np.any(~np.isfinite(probs)) or np.any(probs < 0) or probs.sum() <= 0:
        raise ValueError("prior probs must be finite, >= 0, with a positive sum")
    w = (probs / probs.sum()) @ rounding_matrix(prior_grid, grid)
    return w / w.sum()


# -- the linear program -------------------------------------------------------


@dataclass(frozen=True)
class LPSolution:
    matrix: np.ndarray  # (K, L) raw solver values
    objective: float  # Σ_i w_i Σ_j M[i, j](o_j − g_i)² in label units²
    seconds: float


def _scaled(grid: np.ndarray, outputs: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Grid and outputs in units of the grid's half-width around its centre (conditioning)."""
    centre = 0.5 * (grid[0] + grid[-1])
    scale = 0.5 * (grid[-1] - grid[0])
    return (grid - centre) / scale, (outputs - centre) / scale, scale


def _lp_equalities(g: np.ndarray, o: np.ndarray, extra: int) -> tuple[sparse.csr_matrix, np.ndarray]:
    """Row sums = 1 and Σ_j M[i, j](o_j − g_i) = 0 (unbiased) over K·L (+ extra) variables."""
    k, m = g.size, o.size
    n = k * m
    rows = np.repeat(np.arange(k), m)
    cols = np.arange(n)
    sums = sparse.csr_matrix((np.ones(n), (rows, cols)), shape=(k, n + extra))
    means = sparse.csr_matrix(((o[None, :] - g[:, None]).ravel(), (rows, cols)), shape=(k, n + extra))
    return sparse.vstack([sums, means]).tocsr(), np.concatenate([np.ones(k), np.zeros(k)])


def _run_highs(cost, a_ub, b_ub, a_eq, b_eq):
    t0 = time.perf_counter()
    res = linprog(
        cost,
        A_ub=a_ub,
        b_ub=b_ub,
        A_eq=a_eq,
        b_eq=b_eq,
        bounds=(0, None),
        method="highs",
        options={"primal_feasibility_tolerance": LP_TOLERANCE, "dual_feasibility_tolerance": LP_TOLERANCE},
    )
    seconds = time.perf_counter() - t0
    if res.status != 0 or res.x is None:
        raise ValueError(f"the unbiased-randomizer LP has no solution: {res.message}")
    return res, seconds


def solve_unbiased_lp(grid: np.ndarray, outputs: np.ndarray, epsilon: float, weights: np.ndarray) -> LPSolution:
    """min Σ_i w_i Σ_j M_ij (o_j − g_i)² s.t. rows are distributions, unbiased, ε-DP.

    The K²·L pairwise constraints M_ij ≤ e^ε M_i'j are replaced by one floor
    variable t_j per output and a band e^{−ε/2} t_j ≤ M_ij ≤ e^{ε/2} t_j: a column
    fits in such a band iff max_i M_ij ≤ e^ε min_i M_ij, so the optimum is the
    same. Writing M_ij = e^{−ε/2} t_j + u_ij with u_ij ≥ 0 (a bound, not a row)
    leaves K·L rows u_ij ≤ (e^{ε/2} − e^{−ε/2}) t_j — 4–12× faster in HiGHS than
    the two-sided band, and ~K times fewer rows than the literal form
    (``solve_unbiased_lp_reference``, which tests compare against).
    """
    grid, outputs = check_grid(grid), check_grid(outputs)
    epsilon = check_epsilon(epsilon)
    w = np.asarray(weights, dtype=np.float64)
    k, m = grid.size, outputs.size
    n = k * m
    g, o, scale = _scaled(grid, outputs)
    low = math.exp(-epsilon / 2)
    width = math.exp(epsilon / 2) - low
    d = o[None, :] - g[:, None]
    cost_m = w[:, None] * d**2
    cost = np.concatenate([cost_m.ravel(), low * cost_m.sum(axis=0)])
    rows = np.repeat(np.arange(k), m)
    u_cols = np.arange(n)
    t_cols = n + np.tile(np.arange(m), k)
    both_rows = np.concatenate([rows, rows])
    both_cols = np.concatenate([u_cols, t_cols])
    sums = sparse.csr_matrix((np.concatenate([np.ones(n), np.full(n, low)]), (both_rows, both_cols)), shape=(k, n + m))
    means = sparse.csr_matrix((np.concatenate([d.ravel(), low * d.ravel()]), (both_rows, both_cols)), shape=(k, n + m))
    a_eq = sparse.vstack([sums, means]).tocsr()
    b_eq = np.concatenate([np.ones(k), np.zeros(k)])
    a_ub = sparse.csr_matrix(
        (np.concatenate([np.ones(n), np.full(n, -width)]), (np.concatenate([u_cols, u_cols]), both_cols)),
        shape=(n, n + m),
    )
    res, seconds = _run_highs(cost, a_ub, np.zeros(n), a_eq, b_eq)
    matrix = res.x[:n].reshape(k, m) + low * res.x[n:][None, :]
    return LPSolution(matrix, float(res.fun) * scale**2, seconds)


def solve_unbiased_lp_reference(
    grid: np.ndarray, outputs: np.ndarray, epsilon: float, weights: np.ndarray
) -> LPSolution:
    """The same LP written literally: M_ij − e^ε M_i'j ≤ 0 for every i ≠ i' and j (tests only)."""
    grid, outputs = check_grid(grid), check_grid(outputs)
    w = np.asarray(weights, dtype=np.float64)
    k, m = grid.size, outputs.size
    g, o, scale = _scaled(grid, outputs)
    cost = (w[:, None] * (o[None, :] - g[:, None]) ** 2).ravel()
    a_eq, b_eq = _lp_equalities(g, o, 0)
    pairs = [(i, ip) for i in range(k) for ip in range(k) if i != ip]
    rows, cols, vals = [], [], []
    r = 0
    for i, ip in pairs:
        for j in range(m):
            rows += [r, r]
            cols += [i * m + j, ip * m + j]
            vals += [1.0, -math.exp(epsilon)]
            r += 1
    a_ub = sparse.csr_matrix((vals, (rows, cols)), shape=(r, k * m))
    res, seconds = _run_highs(cost, a_ub, np.zeros(r), a_eq, b_eq)
    return LPSolution(res.x.reshape(k, m), float(res.fun) * scale**2, seconds)


# -- repair and exact integer table -------------------------------------------


def _restore_rows(matrix: np.ndarray, grid: np.ndarray, outputs: np.ndarray) -> np.ndarray:
    """Rescale each row by (1 + a_i + b_i d_ij) so it sums to 1 with mean g_i (d = scaled o − g).

    A relative change of order the solver tolerance: it moves each entry by a
    tiny factor, which the 10⁻⁴ ε margin absorbs.
    """
    g, o, _ = _scaled(grid, outputs)
    d = o[None, :] - g[:, None]
    out = matrix.copy()
    for _ in range(2):  # second pass removes the float residue of the first
        s0 = out.sum(axis=1)
        s1 = (out * d).sum(axis=1)
        s2 = (out * d * d).sum(axis=1)
        det = s0 * s2 - s1 * s1
        ok = det > 1e-12 * s0 * np.maximum(s2, 1e-300)
        safe = np.where(ok, det, 1.0)
        a = np.where(ok, ((1.0 - s0) * s2 + s1 * s1) / safe, (1.0 - s0) / s0)
        b = np.where(ok, -s1 / safe, 0.0)
        out = out * (1.0 + a[:, None] + b[:, None] * d)
    return np.maximum(out, 0.0)


def column_caps(floors: np.ndarray, epsilon: float) -> np.ndarray:
    """⌊n_j · e^ε⌋ (never above n_j · e^ε, never above 2^53), int64."""
    factor = math.exp(min(check_epsilon(epsilon), 60.0)) * _CAP_SHRINK
    caps = np.floor(np.minimum(floors.astype(np.float64) * factor, float(ONE)))
    return caps.astype(np.int64)


def quantize_transition(
    matrix: np.ndarray, grid: np.ndarray, outputs: np.ndarray, epsilon: float, lp_eps: float
) -> np.ndarray:
    """Exact ε-DP integer table N (rows sum to 2^53) from an LP solution at ``lp_eps`` ≤ ε.

    Float repair first (clip at 0, clip every column into [min, e^{lp_eps}·min],
    restore row sums and means), then counts: floor n_j = round(min_i M_ij·2^53),
    cap_j = ⌊n_j e^ε⌋, entries clipped into [n_j, cap_j], residue to the roomiest
    entries of the row. DP holds by construction of the bands, whatever the LP returned.
    """
    m = np.maximum(np.asarray(matrix, dtype=np.float64), 0.0)
    floor = m.min(axis=0)
    m = np.minimum(m, floor[None, :] * math.exp(lp_eps))
    m = _restore_rows(m, grid, outputs)

    floors = np.rint(m.min(axis=0) * ONE).astype(np.int64)
    caps = column_caps(floors, epsilon)
    counts = np.clip(np.rint(m * ONE).astype(np.int64), floors[None, :], caps[None, :])
    for i in range(counts.shape[0]):
        residue = ONE - int(counts[i].sum())
        for j in np.argsort(-counts[i], kind="stable"):
            if residue == 0:
                break
            room = int(caps[j] - counts[i, j]) if residue > 0 else int(floors[j] - counts[i, j])
            step = max(min(residue, room), 0) if residue > 0 else min(max(residue, room), 0)
            counts[i, j] += step
            residue -= step
        if residue != 0:
            raise ValueError("could not repair the LP solution into an exact ε-DP table")
    return counts


def satisfies_dp(counts: np.ndarray, epsilon: float) -> bool:
    """Every column: max ≤ e^ε · min (an all-zero column is fine; a zero beside a positive is not)."""
    counts = np.asarray(counts)
    hi = counts.max(axis=0).astype(np.float64)
    lo = counts.min(axis=0).astype(np.float64)
    return bool(np.all(hi <= lo * math.exp(min(check_epsilon(epsilon), 700.0))))


def max_log_ratio(table: np.ndarray) -> float:
    """max over columns of log(max_i / min_i) (inf if a column mixes zero and positive)."""
    table = np.asarray(table, dtype=np.float64)
    hi, lo = table.max(axis=0), table.min(axis=0)
    used = hi > 0
    if np.any(lo[used] <= 0):
        return math.inf
    return float(np.max(np.log(hi[used] / lo[used]), initial=0.0))


# -- sampling -------------------------------------------------------------------


TABLE_BITS = 53
"""Transition counts are cells out of 2^53 = ``ONE``: the table sampler draws them exactly."""


def transition_sampler(counts: np.ndarray) -> TableSampler:
    """The exact table sampler of a count table (rows sum to 2^53): Pr[j | row] = N[row, j] / 2^53."""
    return TableSampler.from_cumulative(np.cumsum(np.asarray(counts, dtype=np.int64), axis=1), TABLE_BITS)


# -- the mechanism ------------------------------------------------------------


class UnbiasedParams(Params):
    """``grid_size`` K of the input grid (None: 33, or every integer of a small integer domain)
    and ``weights`` of the LP's variances: "uniform", or "prior" (a prior is then needed)."""

    grid_size: int | None = Field(None, ge=MIN_GRID_SIZE, le=MAX_GRID_SIZE)
    weights: Weights = "uniform"


class UnbiasedRandomizer:
    """ε-DP unbiased label randomizer with minimal (weighted) variance.

    Parameters: ``epsilon``; ``domain`` (labels outside are clipped to it);
    ``grid_size`` K (default 33; every integer of a small integer domain);
    ``output_grid``: None (the default rule above), an int (that many points on
    [L_ε, U_ε]) or an explicit ascending array; ``weights``: "uniform" (the LP
    ignores any prior; no ε is spent on one), "prior" (``fit_to(prior)`` pushes
    the prior through the rounding) or an explicit array of K public weights.

    Fitted: ``grid_`` (K), ``outputs_`` (L), ``lp_epsilon_``, ``weights_``,
    ``transition_counts_`` (K×L int64, rows sum to 2^53), ``transition_``
    (= counts / 2^53, exact), ``row_means_`` (= grid_ up to ~1e-15),
    ``row_variances_``, ``variance_`` (weighted), ``max_bias_``, ``lp_objective_``,
    ``lp_seconds_``.
    """

    name: ClassVar[str] = "unbiased"
    params_model: ClassVar[type[Params]] = UnbiasedParams

    def __init__(
        self,
        epsilon: float,
        domain: LabelDomain,
        grid_size: int | None = None,
        output_grid: int | np.ndarray | None = None,
        weights: Weights | np.ndarray = "uniform",
    ) -> None:
        self.epsilon = epsilon
        self.domain = domain
        self.grid_size = grid_size
        self.output_grid = output_grid
        self.weights = weights

    @property
    def uses_prior(self) -> bool:
        """Whether ``fit_to`` needs a prior (and so a release must spend ε₁ or have a public one)."""
        return isinstance(self.weights, str) and self.weights == "prior"

    # -- fitting --------------------------------------------------------------

    def _outputs(self, grid: np.ndarray, lp_eps: float) -> np.ndarray:
        if self.output_grid is None or isinstance(self.output_grid, (int, np.integer)):
            return default_output_grid(grid, lp_eps, None if self.output_grid is None else int(self.output_grid))
        outputs = check_grid(self.output_grid)
        if outputs.size < 2 or outputs.size > MAX_OUTPUT_SIZE:
            raise ValueError(f"the output grid must have 2 to {MAX_OUTPUT_SIZE} points")
        if outputs[0] > grid[0] or outputs[-1] < grid[-1]:
            raise ValueError("the output grid must cover the label domain (unbiasedness at the ends)")
        return outputs

    def _weights(self, grid: np.ndarray, prior: Prior | None) -> tuple[np.ndarray, str]:
        if isinstance(self.weights, str):
            if self.weights == "uniform":
                return np.full(grid.size, 1.0 / grid.size), "uniform"
            if self.weights == "prior":
                if prior is None:
                    raise ValueError("weights='prior' needs a prior: fit_to(prior)")
                return prior_weights(grid, prior.values, prior.probs), "prior"
            raise ValueError("weights must be 'uniform', 'prior' or an array of grid weights")
        w = np.asarray(self.weights, dtype=np.float64)
        if w.shape != grid.shape or np.any(~np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError("explicit weights must be K finite values >= 0 with a positive sum")
        return w / w.sum(), "custom"

    def fit_to(self, prior: Prior | None = None) -> Self:
        """Solve the LP; ``prior`` (DP or public) only weights the variances (weights='prior', where it is required)."""
        epsilon = check_epsilon(self.epsilon)
        # The one validation of the caller's parameters (an explicit weight array is checked in _weights).
        UnbiasedParams(grid_size=self.grid_size, weights=self.weights if isinstance(self.weights, str) else "uniform")
        lp_eps = lp_epsilon(epsilon)
        in_grid = input_grid(self.domain, self.grid_size)
        outputs = self._outputs(in_grid, lp_eps)
        w, kind = self._weights(in_grid, prior)
        solution = solve_unbiased_lp(in_grid, outputs, lp_eps, w)
        counts = quantize_transition(solution.matrix, in_grid, outputs, epsilon, lp_eps)
        self.weights_ = w
        self.weights_kind_ = kind
        self.lp_epsilon_ = lp_eps
        self.lp_objective_ = solution.objective
        self.lp_seconds_ = solution.seconds
        self._set_table(in_grid, outputs, counts)
        return self

    def _set_table(self, grid: np.ndarray, outputs: np.ndarray, counts: np.ndarray) -> None:
        if not satisfies_dp(counts, self.epsilon):
            raise ValueError("transition table violates the ε-DP ratio bound")
        if np.any(counts < 0) or np.any(counts.sum(axis=1) != ONE):
            raise ValueError("transition rows must be non-negative counts summing to 2^53")
        q = counts.astype(np.float64) / ONE  # exact: counts < 2^53, ONE a power of two
        means = q @ outputs
        bias = float(np.max(np.abs(means - grid)))
        if bias > BIAS_TOLERANCE * max(1.0, float(np.max(np.abs(outputs)))):
            raise ValueError(f"transition table is not unbiased (max |E[ŷ|g] − g| = {bias:.3g})")
        self.grid_ = grid
        self.outputs_ = outputs
        self.transition_counts_ = counts
        self.transition_ = q
        self.row_means_ = means
        self.row_variances_ = (q * (outputs[None, :] - grid[:, None]) ** 2).sum(axis=1)
        self.max_bias_ = bias
        if not hasattr(self, "weights_"):
            self.weights_ = np.full(grid.size, 1.0 / grid.size)
        self.variance_ = float(self.weights_ @ self.row_variances_)
        self._table = transition_sampler(counts)

    # -- the contract (labeldp.mechanisms.contract) ----------------------------

    def law(self) -> TransitionLaw:
        """E[ŷ | y] = y for labels in the domain (labels outside are clipped first): a = 1, b = 0."""
        low, high = self.domain.low, self.domain.high

        def clipped(labels: np.ndarray) -> np.ndarray:
            return np.clip(labels, low, high)

        return TransitionLaw.affine(self.name, 1.0, 0.0, low, high, self.conditional_mean, clipped)

    # -- the mechanism --------------------------------------------------------

    def privatize(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Round each label (unbiased), then draw its output from that grid point's row.

        The fused kernel, two raw words per label: the rounding coin (top 53 bits as a
        double, as ``Generator.random``) and the row's exact draw (top 53 bits).
        """
        return kernels.unbiased(labels, self.grid_, self.outputs_, self._table, rng)

    def output_probabilities(self, label: float) -> np.ndarray:
        """Exact Pr[ŷ = outputs_[j] | y = label]: the rounding mixture of two rows."""
        return (rounding_matrix(np.asarray([label], dtype=np.float64), self.grid_) @ self.transition_)[0]

    def conditional_mean(self, labels: np.ndarray) -> np.ndarray:
        """E[ŷ | y]: equals y (clipped to the domain) up to ~1e-15; no debiasing needed."""
        labels = check_labels(labels)
        lower, p_up = rounding_probabilities(labels, self.grid_)
        return (1.0 - p_up) * self.row_means_[lower] + p_up * self.row_means_[lower + 1]

    def conditional_variance(self, labels: np.ndarray) -> np.ndarray:
        """Var[ŷ | y] exactly (rounding plus transition), e.g. for weighting losses."""
        labels = check_labels(labels)
        second = self.transition_ @ (self.outputs_**2)
        lower, p_up = rounding_probabilities(labels, self.grid_)
        e2 = (1.0 - p_up) * second[lower] + p_up * second[lower + 1]
        return e2 - self.conditional_mean(labels) ** 2

    def loss_under(self, prior: Prior) -> float:
        """Exact E[(ŷ − y)²] for y ~ prior, rounding included.

        Per input point i: Σ_j Q_ij (o_j − y)² = V_i + 2(μ_i − g_i)(g_i − y) + (g_i − y)²
        with V_i = Σ_j Q_ij (o_j − g_i)², μ_i the row mean (no cancellation).
        """
        grid = check_labels(prior.values)
        probs = np.asarray(prior.probs, dtype=np.float64)
        probs = probs / probs.sum()
        r = rounding_matrix(grid, self.grid_)
        gap = self.grid_[None, :] - grid[:, None]
        per_point = self.row_variances_[None, :] + 2.0 * (self.row_means_ - self.grid_)[None, :] * gap + gap**2
        return float(probs @ (r * per_point).sum(axis=1))

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon=float(self.epsilon),
            statement=(
                "Unbiased randomized rounding to a public grid, then a transition table whose every "
                "column lies in [n_j, n_j·e^ε] (integer counts of 2^-53, sampled exactly); any label's "
                "output law is a convex combination of rows, so every output's ratio is ≤ e^ε"
            ),
        )

    # -- wire form ------------------------------------------------------------

    def to_spec(self) -> UnbiasedSpec:
        return UnbiasedSpec(
            epsilon=float(self.epsilon),
            domain=self.domain.to_spec(),
            grid=self.grid_.tolist(),
            outputs=self.outputs_.tolist(),
            transition=self.transition_.tolist(),
            lp_epsilon=float(self.lp_epsilon_),
            weights=self.weights_kind_,
        )

    @classmethod
    def from_spec(cls, spec: UnbiasedSpec) -> UnbiasedRandomizer:
        """Rebuild the fitted mechanism exactly (no LP); re-checks DP and unbiasedness."""
        grid = check_grid(np.asarray(spec.grid))
        outputs = check_grid(np.asarray(spec.outputs))
        scaled = np.asarray(spec.transition, dtype=np.float64) * ONE
        counts = np.rint(scaled).astype(np.int64)
        if not np.array_equal(counts.astype(np.float64), scaled):
            raise ValueError("transition entries must be multiples of 2^-53")
        domain = LabelDomain.from_spec(spec.domain)
        if grid[0] != domain.low or grid[-1] != domain.high:
            raise ValueError("the grid must span the domain")
        weights: Weights = "prior" if spec.weights == "prior" else "uniform"
        mech = cls(spec.epsilon, domain, grid_size=grid.size, output_grid=outputs, weights=weights)
        mech.weights_kind_ = spec.weights
        mech.lp_epsilon_ = spec.lp_epsilon
        mech._set_table(grid, outputs, counts)
        return mech
