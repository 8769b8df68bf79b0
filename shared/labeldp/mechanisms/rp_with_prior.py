"""RPWithPrior (Liu & Huang, Alg. 1–4): randomized response onto an optimal interval.

For a label y the paper's output density (eq. (3.4), extended by the projection
P of eq. (3.12)) is 1/γ on N_{P(y)} = [P(y) − ζ, P(y) + ζ] and e^{−ε}/γ on the
rest of [A₁ − ζ, A₂ + ζ], with γ = 2ζ + e^{−ε}(A₂ − A₁). Every output's density
lies in {1/γ, e^{−ε}/γ} whatever the label, hence ε-DP. The interval maximizes
F(A₁, A₂) = 2ζ/γ · ∫_{A₁}^{A₂} f_Y (Lemma 3.3) for a step-function prior f_Y
(Alg. 1, Lemma 3.5).

Discretization (so no float bit depends on the label, Mironov 2012): labels snap
to the public lattice low + h·t, t ∈ [0, J]; A₁, A₂ are lattice points a₁, a₂;
N_c is the 2z + 1 lattice points around c = clip(t, a₁, a₂); outputs are the N =
a₂ − a₁ + 2z + 1 lattice points of [a₁ − z, a₂ + z], z = ⌊ζ/h⌋. The near block has total
probability κ = (2z+1)/((2z+1) + e^{−ε}(a₂ − a₁)), i.e. eq. (3.4) with
ζ_eff = (z + ½)h, and it is sampled as an integer comparison against
T/2^53 ≤ κ, so every near point has T/2^53/(2z+1), every far point
(1 − T/2^53)/(a₂ − a₁), and their ratio is at most e^ε exactly (T is rounded
down with a margin that covers the float error of κ).

The prior of Alg. 3 is built by :class:`NoisyLabelHistogramPrior` from labels
that first went through the ε₁ discrete Laplace mechanism; the histogram
function :func:`histogram_from_noised` only ever sees those noised values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal, Self

import numpy as np
from pydantic import Field, model_validator

from labeldp.mechanisms import kernels
from labeldp.mechanisms.checks import check_epsilon, check_labels
from labeldp.mechanisms.contract import Params, Prior
from labeldp.mechanisms.exact_noise import discrete_laplace, rate_from_epsilon
from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.mechanisms.lattice import Lattice
from labeldp.mechanisms.law import TransitionLaw
from labeldp.mechanisms.prior import LabelDomain
from labeldp.mechanisms.spool import Spool
from labeldp.specs.rp_with_prior import KEEP_DENOMINATOR, HistogramPriorSpec, RPWithPriorSpec

ZETA_SCALE = 0.4
ZETA_FRACTIONS = (0.05, 0.2)
"""ζ defaults to clip(0.4/ε, 0.05, 0.2)·(high − low), ε the randomizer's: 0.2 of the range up to
ε = 2, 0.1 at 4, 0.05 from 8 on. A wide near block keeps more of each label (what learning
needs at small ε); at large ε a narrow one is more precise. The paper has no single default
(Table 5 tunes ζ per data set). Decided in docs/decisions/0006-rp-with-prior-zeta.md."""


def default_zeta_fraction(epsilon: float) -> float:
    """ζ/(high − low) when no ζ is given: clip(0.4/ε, 0.05, 0.2) (see ``ZETA_SCALE``)."""
    low, high = ZETA_FRACTIONS
    return min(high, max(low, ZETA_SCALE / epsilon))


_KEEP_MARGIN = 8
"""Units of 2^-53 taken off κ: the float evaluation of κ is within ~3 of them."""

_TIE_TOLERANCE = 1e-12
_BLOCK = 256


# -- step-function prior ------------------------------------------------------


@dataclass(frozen=True)
class StepPrior:
    """A histogram prior: cell k = [nodes[k], nodes[k+1]] carries probability masses[k];
    ``sigma``: the bin width it was built with from noised labels (Alg. 3), if so."""

    nodes: np.ndarray
    masses: np.ndarray
    sigma: float | None = None

    def __post_init__(self) -> None:
        nodes = np.ascontiguousarray(self.nodes, dtype=np.float64)
        masses = np.ascontiguousarray(self.masses, dtype=np.float64)
        if nodes.ndim != 1 or masses.ndim != 1 or nodes.size != masses.size + 1 or masses.size == 0:
            raise ValueError("a step prior needs k + 1 nodes and k >= 1 masses")
        if not (np.all(np.isfinite(nodes)) and np.all(np.diff(nodes) > 0)):
            raise ValueError("nodes must be finite and strictly increasing")
        if not (np.all(np.isfinite(masses)) and np.all(masses >= 0) and masses.sum() > 0):
            raise ValueError("masses must be finite, >= 0, with a positive sum")
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "masses", masses / masses.sum())

    @property
    def densities(self) -> np.ndarray:
        return self.masses / np.diff(self.nodes)

    def truncated(self, low: float, high: float) -> StepPrior | None:
        """The prior conditioned on [low, high] (None when it has no mass there)."""
        lo = np.maximum(self.nodes[:-1], low)
        hi = np.minimum(self.nodes[1:], high)
        keep = hi > lo
        if not np.any(keep):
            return None
        masses = self.densities[keep] * (hi[keep] - lo[keep])
        if masses.sum() <= 0:
            return None
        return StepPrior(np.append(lo[keep], hi[keep][-1]), masses)

    def on_lattice(self, low: float, step: float, n_steps: int) -> tuple[np.ndarray, np.ndarray]:
        """(integer node indices in [0, n_steps], masses) with every node snapped to low + step·t.

        Each cell's mass goes to the snapped cell that contains the cell's midpoint,
        so cells narrower than a step merge into a neighbour instead of vanishing.
        """
        snapped = np.unique(np.clip(np.rint((self.nodes - low) / step), 0, n_steps).astype(np.int64))
        if snapped.size == 1:  # the whole prior within half a step: one cell of one step
            s = int(snapped[0])
            snapped = np.array([s, s + 1] if s < n_steps else [s - 1, s], dtype=np.int64)
        mids = 0.5 * (self.nodes[:-1] + self.nodes[1:])
        cell = np.searchsorted(snapped, (mids - low) / step, side="right") - 1
        cell = np.clip(cell, 0, snapped.size - 2)
        masses = np.bincount(cell, weights=self.masses, minlength=snapped.size - 1)
        return snapped, masses

    def to_spec(self, epsilon: float = 0.0, sigma: float | None = None, source: str = "public") -> HistogramPriorSpec:
        return HistogramPriorSpec(
            source=source,
            nodes=self.nodes.tolist(),
            masses=self.masses.tolist(),
            epsilon=float(epsilon),
            sigma=sigma,
        )


# -- Alg. 1: the optimal interval ----------------------------------------------


def interval_objective(a1, a2, nodes: np.ndarray, densities: np.ndarray, epsilon: float, zeta: float) -> np.ndarray:
    """F(A₁, A₂) = 2ζ ∫_{A₁}^{A₂} f / (2ζ + e^{−ε}(A₂ − A₁)) (Lemma 3.3); −inf where A₁ > A₂."""
    nodes = np.asarray(nodes, dtype=np.float64)
    cum = np.concatenate(([0.0], np.cumsum(np.asarray(densities, dtype=np.float64) * np.diff(nodes))))
    a1 = np.asarray(a1, dtype=np.float64)
    a2 = np.asarray(a2, dtype=np.float64)
    mass = np.interp(a2, nodes, cum) - np.interp(a1, nodes, cum)  # the CDF of a step density is piecewise linear
    value = 2.0 * zeta * mass / (2.0 * zeta + math.exp(-epsilon) * (a2 - a1))
    return np.where(a1 <= a2, value, -np.inf)


def _corner_values(pos: np.ndarray, lo_cum: np.ndarray, hi_cum: np.ndarray, rows: slice, epsilon: float, zeta: float):
    """F at every pair (pos[a], pos[b]), a in rows, b >= a; mass = hi_cum[b] − lo_cum[a]."""
    a = np.arange(rows.start, rows.stop)[:, None]
    b = np.arange(pos.size)[None, :]
    mass = hi_cum[None, :] - lo_cum[a]
    length = pos[None, :] - pos[a]
    value = 2.0 * zeta * mass / (2.0 * zeta + math.exp(-epsilon) * length)
    return np.where(b >= a, value, -np.inf)


def _stationary_candidates(
    nodes: np.ndarray, dens: np.ndarray, cum: np.ndarray, rows: slice, epsilon: float, zeta: float
):
    """Lemma 3.5's critical points for cells i in rows, j > i, paired as in Alg. 1 lines 9–25.

    Returns flat arrays (A1, A2, F, i, j) of the candidates that fall inside their cells:
    (n_i, e₂), (n_{i+1}, e₂) when n_j < e₂ < n_{j+1}; (e₁, n_j), (e₁, n_{j+1}) when
    n_i < e₁ < n_{i+1}; (e₁, e₂) when both do.
    """
    r = math.exp(-epsilon)
    k = dens.size
    i = np.arange(rows.start, min(rows.stop, k))[:, None]
    j = np.arange(k)[None, :]
    ai, aj = dens[i], dens[j]
    h = ai * nodes[i + 1] + (cum[j] - cum[i + 1]) - aj * nodes[j]
    c1 = 2.0 * zeta * ai - r * h
    c2 = 2.0 * zeta * aj - r * h
    valid = (j > i) & (ai != aj)
    with np.errstate(divide="ignore", invalid="ignore"):
        den = r * (aj - ai)
        e1 = c2 / den
        e2 = c1 / den
    in1 = valid & (nodes[i] < e1) & (e1 < nodes[i + 1])
    in2 = valid & (nodes[j] < e2) & (e2 < nodes[j + 1])
    i_b, j_b = np.broadcast_to(i, valid.shape), np.broadcast_to(j, valid.shape)
    ni, ni1 = nodes[i_b], nodes[i_b + 1]
    nj, nj1 = nodes[j_b], nodes[j_b + 1]
    picks = [
        (in2, ni, e2),
        (in2, ni1, e2),
        (in1, e1, nj),
        (in1, e1, nj1),
        (in1 & in2, e1, e2),
    ]
    cand_a1 = np.concatenate([x[m] for m, x, _ in picks])
    cand_a2 = np.concatenate([y[m] for m, _, y in picks])
    cell_i = np.concatenate([i_b[m] for m, _, _ in picks])
    cell_j = np.concatenate([j_b[m] for m, _, _ in picks])
    # Mass by the cell formula of Lemma 3.5: C(A) = cum[cell] + α_cell (A − n_cell).
    mass = (cum[cell_j] + dens[cell_j] * (cand_a2 - nodes[cell_j])) - (
        cum[cell_i] + dens[cell_i] * (cand_a1 - nodes[cell_i])
    )
    value = 2.0 * zeta * mass / (2.0 * zeta + r * (cand_a2 - cand_a1))
    return cand_a1, cand_a2, value, cell_i, cell_j


def optimal_interval(
    nodes: np.ndarray, densities: np.ndarray, epsilon: float, zeta: float
) -> tuple[float, float, float]:
    """Alg. 1: (A₁, A₂, F) maximizing F over n₀ ≤ A₁ ≤ A₂ ≤ n_k for a step density.

    Checks every candidate of Alg. 1 — the four corners of each cell pair (i ≤ j),
    i.e. every pair of nodes, and Lemma 3.5's stationary points e₁, e₂ — in blocks
    of rows, O(k²) time and O(k·block) memory. Inside a cell pair F is a ratio of
    two affine functions of (A₁, A₂), so its maximum over the cell is attained at a
    corner; the stationary candidates therefore never win by more than rounding,
    and ties go to the corner. So A₁, A₂ are always nodes.
    """
    epsilon = check_epsilon(epsilon)
    nodes = np.ascontiguousarray(nodes, dtype=np.float64)
    dens = np.ascontiguousarray(densities, dtype=np.float64)
    if nodes.size != dens.size + 1 or dens.size == 0 or np.any(np.diff(nodes) <= 0) or np.any(dens < 0):
        raise ValueError("need k + 1 increasing nodes and k >= 1 non-negative densities")
    if not zeta > 0:
        raise ValueError("zeta must be > 0")
    cum = np.concatenate(([0.0], np.cumsum(dens * np.diff(nodes))))
    best_corner = (-np.inf, 0, 0)
    best_stationary = (-np.inf, 0.0, 0.0)
    for start in range(0, nodes.size, _BLOCK):
        rows = slice(start, min(start + _BLOCK, nodes.size))
        values = _corner_values(nodes, cum, cum, rows, epsilon, zeta)
        flat = int(np.argmax(values))
        a, b = divmod(flat, nodes.size)
        if values[a, b] > best_corner[0]:
            best_corner = (float(values[a, b]), start + a, b)
        if start < dens.size:
            c1, c2, v, _, _ = _stationary_candidates(nodes, dens, cum, rows, epsilon, zeta)
            if v.size and v.max() > best_stationary[0]:
                t = int(np.argmax(v))
                best_stationary = (float(v[t]), float(c1[t]), float(c2[t]))
    if best_stationary[0] > best_corner[0] + _TIE_TOLERANCE:
        return best_stationary[1], best_stationary[2], best_stationary[0]
    _, a, b = best_corner
    return float(nodes[a]), float(nodes[b]), best_corner[0]


def optimal_interval_reference(
    nodes: np.ndarray, densities: np.ndarray, epsilon: float, zeta: float
) -> tuple[float, float, float]:
    """Alg. 1 transcribed loop by loop (tests compare :func:`optimal_interval` with it).

    Two fixes to the printed listing: line 23 also updates f, and corners with
    A₁ > A₂ (cell pair i = j) are skipped.
    """
    nodes = np.asarray(nodes, dtype=np.float64)
    dens = np.asarray(densities, dtype=np.float64)
    r = math.exp(-epsilon)
    k = dens.size
    cum = np.concatenate(([0.0], np.cumsum(dens * np.diff(nodes))))

    def F(x1: float, x2: float) -> float:
        if x1 > x2:
            return -math.inf
        return float(interval_objective(x1, x2, nodes, dens, epsilon, zeta))

    f, A1, A2 = 0.0, float(nodes[0]), float(nodes[0])
    for i in range(k):
        for j in range(i, k):
            pairs = [
                (nodes[i], nodes[j]),
                (nodes[i], nodes[j + 1]),
                (nodes[i + 1], nodes[j]),
                (nodes[i + 1], nodes[j + 1]),
            ]
            vals = [F(p, q) for p, q in pairs]
            if f < max(vals):
                f = max(vals)
                A1, A2 = pairs[int(np.argmax(vals))]
            if i == j or dens[i] == dens[j]:
                continue
            h = dens[i] * nodes[i + 1] + (cum[j] - cum[i + 1]) - dens[j] * nodes[j]
            e1 = (2 * zeta * dens[j] - r * h) / (r * (dens[j] - dens[i]))
            e2 = (2 * zeta * dens[i] - r * h) / (r * (dens[j] - dens[i]))
            if nodes[j] < e2 < nodes[j + 1]:
                pairs = [(nodes[i], e2), (nodes[i + 1], e2)]
                vals = [F(p, q) for p, q in pairs]
                if f < max(vals):
                    f = max(vals)
                    A1, A2 = pairs[int(np.argmax(vals))]
            if nodes[i] < e1 < nodes[i + 1]:
                pairs = [(e1, nodes[j]), (e1, nodes[j + 1])]
                vals = [F(p, q) for p, q in pairs]
                if f < max(vals):
                    f = max(vals)
                    A1, A2 = pairs[int(np.argmax(vals))]
            if nodes[j] < e2 < nodes[j + 1] and nodes[i] < e1 < nodes[i + 1] and f < F(e1, e2):
                f = F(e1, e2)
                A1, A2 = e1, e2
    return float(A1), float(A2), f


def optimal_interval_points(
    positions: np.ndarray, masses: np.ndarray, epsilon: float, zeta: float
) -> tuple[int, int, float]:
    """Best [positions[a], positions[b]] for a point-mass prior: max 2ζW/(2ζ + e^{−ε}L).

    W is the mass of the points in the closed interval. A point-mass prior is the
    limit of a step prior with vanishing cells, where Alg. 1's corners become pairs
    of support points (shrinking an interval to its outermost support points keeps
    W and shortens L). Returns (a, b, F) as indices into ``positions``.
    """
    epsilon = check_epsilon(epsilon)
    pos = np.ascontiguousarray(positions, dtype=np.float64)
    masses = np.ascontiguousarray(masses, dtype=np.float64)
    cum = np.concatenate(([0.0], np.cumsum(masses)))
    best = (-np.inf, 0, 0)
    for start in range(0, pos.size, _BLOCK):
        rows = slice(start, min(start + _BLOCK, pos.size))
        values = _corner_values(pos, cum[:-1], cum[1:], rows, epsilon, zeta)
        a, b = divmod(int(np.argmax(values)), pos.size)
        if values[a, b] > best[0]:
            best = (float(values[a, b]), start + a, b)
    return best[1], best[2], best[0]


# -- Alg. 3: the histogram prior from noised labels ----------------------------


def laplace_noised_indices(
    labels: np.ndarray, lattice: Lattice, epsilon: float, rng: np.random.Generator
) -> np.ndarray:
    """ε-DP per label: snap to the lattice, add two-sided geometric noise P(k) ∝ e^{−ε|k|/J}.

    Snapped indices of two labels differ by at most J, so each noised index has
    probability ratio ≤ e^ε between any two labels (the discrete Laplace mechanism
    with sensitivity high − low). The result is unclipped integer lattice indices. The noise
    comes from the exact integer sampler (``exact_noise.discrete_laplace``, rate ε/J rounded
    down): its support is all of Z, so the guarantee is pure ε, not (ε, 2⁻⁵³).
    """
    epsilon = check_epsilon(epsilon)
    snapped = lattice.index(labels).ravel()
    return snapped + discrete_laplace(*rate_from_epsilon(epsilon, lattice.n_steps), snapped.size, rng)


STAT_BLOCK = 1 << 20
"""Noised values per block of the σ sum: fixed, so a chunked release sums exactly as a whole-array one.
Decided in docs/decisions/0023-release-job-streamed.md."""


def _nodes(n: int, lo: int, hi: int, total: int, squares: float, sigma_steps: float | None) -> tuple[np.ndarray, float]:
    """Alg. 3's nodes and bin width from the noised values' count, min, max, exact integer sum and
    Σ(x − μ)² (blocks of :data:`STAT_BLOCK`, each summed as numpy sums)."""
    mu = total / n  # the integer sum divided once: numpy's mean of the same values
    sigma = math.sqrt(squares / n) if sigma_steps is None else float(sigma_steps)
    if not math.isfinite(sigma):
        raise ValueError("sigma must be finite")
    sigma = max(sigma, 1.0)
    if lo == hi:
        return np.array([lo, lo + 1], dtype=np.int64), sigma
    k0 = math.floor((lo - mu) / sigma)
    k1 = math.ceil((hi - mu) / sigma) - 1
    interior = np.rint(mu + (np.arange(1, k1 - k0 + 1) + k0) * sigma).astype(np.int64)
    return np.unique(np.concatenate(([lo], interior, [hi]))), sigma


def _cell_counts(nodes: np.ndarray, noised: np.ndarray) -> np.ndarray:
    cell = np.clip(np.searchsorted(nodes, noised, side="right") - 1, 0, nodes.size - 2)
    return np.bincount(cell, minlength=nodes.size - 1).astype(np.int64)


def _check_noised(noised: np.ndarray) -> np.ndarray:
    noised = np.asarray(noised)
    if not np.issubdtype(noised.dtype, np.integer):
        raise TypeError("noised labels must be integer lattice indices")
    return noised.astype(np.int64).ravel()


class NoisedHistogram:
    """Alg. 3's histogram of noised lattice indices, fed a chunk at a time (``add``), computed by
    ``finish``: the nodes from the count, min, max, mean and σ of all of them, then the cells'
    counts by a second read of them (kept in a :class:`~labeldp.mechanisms.spool.Spool`). The
    noised values are its only input; one chunk or many give the same histogram."""

    def __init__(self, sigma_steps: float | None = None) -> None:
        self.sigma_steps = sigma_steps
        self.n, self.lo, self.hi, self.total = 0, 0, 0, 0
        self._spool = Spool(np.int64)

    def add(self, noised: np.ndarray) -> None:
        noised = _check_noised(noised)
        if noised.size == 0:
            return
        lo, hi = int(noised.min()), int(noised.max())
        self.lo, self.hi = (lo, hi) if self.n == 0 else (min(self.lo, lo), max(self.hi, hi))
        self.total += int(noised.sum())  # exact: |values| ≪ 2⁶³ / chunk size
        self.n += noised.size
        self._spool.append(noised)

    def finish(self) -> tuple[np.ndarray, np.ndarray, float]:
        """(integer nodes, cell counts, bin width used); the spool is closed."""
        if self.n == 0:
            raise ValueError("need at least one noised label")
        try:
            mu = self.total / self.n
            squares = 0.0
            if self.sigma_steps is None:
                for block in self._spool.blocks(STAT_BLOCK):
                    d = block - mu
                    squares += float(np.sum(d * d))
            nodes, sigma = _nodes(self.n, self.lo, self.hi, self.total, squares, self.sigma_steps)
            counts = np.zeros(nodes.size - 1, np.int64)
            for block in self._spool.blocks(STAT_BLOCK):
                counts += _cell_counts(nodes, block)
            return nodes, counts, sigma
        finally:
            self._spool.close()


def histogram_from_noised(noised: np.ndarray, sigma_steps: float | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """Alg. 3 on noised lattice indices only: (integer nodes, cell counts, bin width used).

    μ = mean, σ = ``sigma_steps`` or the standard deviation of the noised values
    (Remark 4.1), at least one lattice step. Nodes: n₀ = min, μ + (i + k₀)σ for
    i = 1..k₁ − k₀ rounded to the lattice, n_last = max; cells [n_k, n_{k+1}),
    the last one closed. The input is the only data this function sees
    (:class:`NoisedHistogram` with one chunk).
    """
    noised = _check_noised(noised)
    if noised.size == 0:
        raise ValueError("need at least one noised label")
    histogram = NoisedHistogram(sigma_steps)
    histogram.add(noised)
    return histogram.finish()


class NoisyLabelHistogramPrior:
    """ε₁-DP step-function prior (Liu & Huang Alg. 3) from Laplace-noised labels.

    ``fit`` first privatizes every label with :func:`laplace_noised_indices` and then
    hands only those noised values to :func:`histogram_from_noised`; the raw labels
    never reach the histogram. The same a chunk of labels at a time: ``begin``, ``add``
    each chunk (its labels noised in order, as ``fit`` noises them), ``finish``. Fitted:
    ``prior_`` (StepPrior, label units), ``sigma_`` (bin width used, label units), ``n_``
    (row count), ``step_``, ``n_steps_``.
    """

    def __init__(
        self, epsilon: float, domain: LabelDomain, sigma: float | None = None, step: float | None = None
    ) -> None:
        self.epsilon = epsilon
        self.domain = domain
        self.sigma = sigma
        self.step = step

    def fit(self, labels: np.ndarray, rng: np.random.Generator) -> NoisyLabelHistogramPrior:
        self.begin()
        self.add(labels, rng)
        return self.finish()

    def begin(self) -> NoisyLabelHistogramPrior:
        self._lattice = Lattice.for_domain(self.domain, self.step)
        sigma_steps = None if self.sigma is None else float(self.sigma) / self._lattice.step
        self._histogram = NoisedHistogram(sigma_steps)
        return self

    def add(self, labels: np.ndarray, rng: np.random.Generator) -> None:
        """Noise a chunk of labels (the next rows) and count them in; the raw labels are not kept."""
        self._histogram.add(laplace_noised_indices(labels, self._lattice, self.epsilon, rng))

    def finish(self) -> NoisyLabelHistogramPrior:
        lattice = self._lattice
        nodes, counts, sigma_used = self._histogram.finish()
        self.sigma_ = sigma_used * lattice.step
        self.prior_ = StepPrior(
            lattice.low + lattice.step * nodes.astype(np.float64), counts.astype(np.float64), sigma=self.sigma_
        )
        self.n_ = int(self._histogram.n)
        self.step_ = lattice.step
        self.n_steps_ = lattice.n_steps
        return self

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon=float(self.epsilon),
            sensitivity=self.domain.width,
            statement=(
                "Each label is snapped to the public lattice and released once with discrete Laplace "
                "noise P(k) ∝ e^{-ε|k|/J} (sensitivity J steps = high − low); the histogram, its "
                "nodes, μ and σ are post-processing of the noised labels only"
            ),
        )

    def to_spec(self) -> HistogramPriorSpec:
        return self.prior_.to_spec(
            epsilon=float(self.epsilon), sigma=float(self.sigma_), source="noisy_label_histogram"
        )


# -- the mechanism ----------------------------------------------------------------


def _range_sum_squares(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Σ_{u=lo}^{hi} u² for integer lo ≤ 0 ≤ hi."""
    lo = -np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    return lo * (lo + 1) * (2 * lo + 1) / 6.0 + hi * (hi + 1) * (2 * hi + 1) / 6.0


PrivatePrior = Literal["histogram", "noised_labels"]


class RPWithPriorParams(Params):
    """``zeta`` (ζ, label units; None: :func:`default_zeta_fraction` (ε)·(high − low)); ``private_prior``, how a release
    without a public prior buys its ε₁ prior: "histogram" (default; the Laplace histogram
    over the public grid, Ghazi et al. Alg. 4) or "noised_labels" (Liu & Huang Alg. 3);
    ``sigma`` (Alg. 3's bin width, label units; None: the noised labels' standard
    deviation), only with "noised_labels".

    Why the histogram by default: at the ε₁ a release can spare, Alg. 3's noise of scale
    (high − low)/ε₁ is many domain widths wide and its histogram close to flat; the
    histogram prior spends the same ε₁ on k counts instead.
    Decided in docs/decisions/0007-rp-with-prior-histogram-prior.md.
    """

    zeta: float | None = Field(None, gt=0, allow_inf_nan=False)
    private_prior: PrivatePrior = "histogram"
    sigma: float | None = Field(None, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _sigma_needs_noised_labels(self) -> RPWithPriorParams:
        if self.sigma is not None and self.private_prior != "noised_labels":
            raise ValueError('sigma is the bin width of the "noised_labels" prior; set private_prior="noised_labels"')
        return self


class RPWithPrior:
    """ε-DP RPWithPrior on a lattice, fitted to a step-function (or point-mass) prior.

    Parameters: ``epsilon`` (ε₂, the randomizer's budget), ``domain``, ``zeta``
    (label units; default clip(0.4/ε, 0.05, 0.2)·(high − low)), ``private_prior`` (the ε₁ prior
    a release buys for it: "histogram" or "noised_labels", see :class:`RPWithPriorParams`),
    ``sigma`` (Alg. 3's bin width; default: the std of the noised labels), ``step``
    (lattice step; default 1 for integer domains, (high − low)/1024 otherwise).

    Fitted: ``a1_index_``, ``a2_index_``, ``a1_``, ``a2_``, ``zeta_steps_`` (z),
    ``zeta_effective_`` ((z + ½)h), ``keep_numerator_`` (T), ``keep_probability_``
    (T/2^53), ``outputs_`` (the N output lattice values), ``objective_`` (F of the
    fitted interval), ``expected_loss_`` (under the fitted prior), ``prior_``.
    """

    name: ClassVar[str] = "rp_with_prior"
    params_model: ClassVar[type[Params]] = RPWithPriorParams

    def __init__(
        self,
        epsilon: float,
        domain: LabelDomain,
        zeta: float | None = None,
        private_prior: PrivatePrior = "histogram",
        sigma: float | None = None,
        step: float | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.domain = domain
        self.zeta = zeta
        self.private_prior = private_prior
        self.sigma = sigma
        self.step = step

    # -- fitting ------------------------------------------------------------------

    def _prepare(self) -> tuple[float, Lattice, float, int]:
        epsilon = check_epsilon(self.epsilon)
        RPWithPriorParams(  # the one validation of the parameters
            zeta=self.zeta, private_prior=self.private_prior, sigma=self.sigma
        )
        lattice = Lattice.for_domain(self.domain, self.step)
        zeta = default_zeta_fraction(epsilon) * self.domain.width if self.zeta is None else float(self.zeta)
        z = max(0, math.floor(zeta / lattice.step + 1e-9))  # the lattice points of N_y = [y − ζ, y + ζ]
        return epsilon, lattice, zeta, z

    def fit_to(self, prior: Prior | StepPrior | None = None) -> Self:
        """Choose [A₁, A₂] for ``self.epsilon`` (ε₂) from a prior that is public or already DP.

        A point-mass :class:`Prior`: exact search over pairs of support points. A
        :class:`StepPrior`: Alg. 1 on it, restricted to the domain, nodes snapped to the
        lattice. None: uniform on the domain.
        """
        epsilon, lattice, zeta, z = self._prepare()
        zeta_eff = z + 0.5  # in lattice steps
        if isinstance(prior, Prior):
            grid = check_labels(prior.values)
            probs = np.asarray(prior.probs, dtype=np.float64)
            if grid.shape != probs.shape or grid.ndim != 1 or np.any(probs < 0) or not probs.sum() > 0:
                raise ValueError("grid and probs must be 1-D of equal length, probs >= 0 with a positive sum")
            idx = lattice.index(grid)
            support, where = np.unique(idx, return_inverse=True)
            masses = np.bincount(where, weights=probs / probs.sum())
            a, b, value = optimal_interval_points(support.astype(np.float64), masses, epsilon, zeta_eff)
            a1, a2 = int(support[a]), int(support[b])
            fitted_prior: StepPrior | Prior = Prior(grid, probs / probs.sum())
        else:
            if prior is None:
                prior = StepPrior(np.array([self.domain.low, self.domain.high]), np.array([1.0]))
            inside = prior.truncated(self.domain.low, self.domain.high)
            if inside is None:
                inside = StepPrior(np.array([self.domain.low, self.domain.high]), np.array([1.0]))
            nodes, masses = inside.on_lattice(lattice.low, lattice.step, lattice.n_steps)
            nodes_f = nodes.astype(np.float64)
            A1, A2, value = optimal_interval(nodes_f, masses / np.diff(nodes_f), epsilon, zeta_eff)
            a1, a2 = int(np.rint(A1)), int(np.rint(A2))  # nodes are integers, so exact
            fitted_prior = prior
        self._set_interval(epsilon, lattice, zeta, z, a1, a2)
        self.objective_ = float(value)
        self.prior_ = fitted_prior
        self.expected_loss_ = self.loss_under(fitted_prior)
        return self

    def _set_interval(self, epsilon: float, lattice: Lattice, zeta: float, z: int, a1: int, a2: int) -> None:
        if not 0 <= a1 <= a2 <= lattice.n_steps:
            raise ValueError("interval must lie on the domain lattice")
        near = 2 * z + 1
        far = a2 - a1
        if far == 0:
            keep = KEEP_DENOMINATOR
        else:
            kappa = near / (near + math.exp(-epsilon) * far)
            keep = max(0, math.floor(kappa * KEEP_DENOMINATOR) - _KEEP_MARGIN)
        self._lattice = lattice
        self.step_ = lattice.step
        self.n_steps_ = lattice.n_steps
        self.zeta_ = zeta
        self.zeta_steps_ = z
        self.zeta_effective_ = (z + 0.5) * lattice.step
        self.a1_index_, self.a2_index_ = a1, a2
        self.a1_ = float(lattice.value(np.int64(a1)))
        self.a2_ = float(lattice.value(np.int64(a2)))
        self.keep_numerator_ = int(keep)
        self.keep_probability_ = keep / KEEP_DENOMINATOR
        self.output_indices_ = np.arange(a1 - z, a2 + z + 1, dtype=np.int64)
        self.outputs_ = lattice.value(self.output_indices_)
        self.near_probability_ = self.keep_probability_ / near
        self.far_probability_ = (1.0 - self.keep_probability_) / far if far else 0.0

    @classmethod
    def from_spec(cls, spec: RPWithPriorSpec) -> RPWithPrior:
        """Rebuild the public mechanism from its wire form (no prior needed)."""
        domain = LabelDomain.from_spec(spec.domain)
        private_prior: PrivatePrior = "histogram" if spec.sigma is None else "noised_labels"
        mech = cls(
            spec.epsilon,
            domain,
            zeta=spec.zeta,
            private_prior=private_prior,
            sigma=spec.sigma,
            step=domain.width / spec.n_steps,
        )
        lattice = Lattice(domain.low, domain.high, spec.n_steps)
        mech._set_interval(
            check_epsilon(spec.epsilon), lattice, spec.zeta, spec.zeta_steps, spec.a1_index, spec.a2_index
        )
        if mech.keep_numerator_ != spec.keep_numerator:  # the receiver trusts the wire's exact law
            mech.keep_numerator_ = int(spec.keep_numerator)
            mech.keep_probability_ = spec.keep_numerator / KEEP_DENOMINATOR
            far = spec.a2_index - spec.a1_index
            mech.near_probability_ = mech.keep_probability_ / (2 * spec.zeta_steps + 1)
            mech.far_probability_ = (1.0 - mech.keep_probability_) / far if far else 0.0
        return mech

    # -- the contract (labeldp.mechanisms.contract) ------------------------------------

    def law(self) -> TransitionLaw:
        """E[ŷ | y] = (1 − κ)·t(y) + κ·centre, t(y) = the snapped label projected onto [A₁, A₂].

        The far points are uniform over the interval's lattice and the near block is
        symmetric, so the law is affine in the projected value; a and b are read off the
        exact conditional mean at A₁ and A₂ and checked on every lattice point between.
        """
        first = int(self.output_indices_[0])
        outputs = self.outputs_

        def projected(labels: np.ndarray) -> np.ndarray:
            return outputs[self.projected_index(labels) - first]

        inside = outputs[self.a1_index_ - first : self.a2_index_ - first + 1]
        low, high = self.domain.low, self.domain.high
        return TransitionLaw.affine_or_monotone(self.name, self.conditional_mean, projected, inside, outputs, low, high)

    # -- the randomizer ---------------------------------------------------------------

    def projected_index(self, labels: np.ndarray) -> np.ndarray:
        """c = P_I(t): the snapped label's index clipped to [a₁, a₂] (eq. (3.12))."""
        return np.clip(self._lattice.index(labels), self.a1_index_, self.a2_index_)

    def privatize(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One draw per label; every output is an element of ``outputs_``.

        The kernel (``kernels.rp_with_prior``): keep iff the top 53 bits of the label's
        own raw word are below T, then an exactly uniform near or far point (Lemire's
        method, rejection on 32-bit halves).
        """
        return kernels.rp_with_prior(
            labels, self._lattice, self.a1_index_, self.a2_index_, self.zeta_steps_, self.keep_numerator_, rng
        )

    # -- the output law -----------------------------------------------------------------

    def output_probabilities(self, label: float) -> np.ndarray:
        """Exact Pr[ŷ = outputs_[i] | y = label] (up to float rounding of T/2^53/(2z+1))."""
        c = int(self.projected_index(np.asarray([label]))[0])
        z = self.zeta_steps_
        probs = np.full(self.outputs_.size, self.far_probability_)
        start = c - z - self.output_indices_[0]
        probs[start : start + 2 * z + 1] = self.near_probability_
        return probs

    def _moments(self, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(E[t − c], E[(t − c)²]) of the output index given the projected index c."""
        c = np.asarray(c, dtype=np.float64)
        z = self.zeta_steps_
        a1, a2 = self.a1_index_, self.a2_index_
        n_all = a2 - a1 + 2 * z + 1
        pn, pf = self.near_probability_, self.far_probability_
        first = pf * n_all * (0.5 * (a1 + a2) - c)  # the near block is symmetric around c
        near_sq = z * (z + 1) * (2 * z + 1) / 3.0
        second = pf * _range_sum_squares(a1 - z - c, a2 + z - c) + (pn - pf) * near_sq
        return first, second

    def conditional_mean(self, labels: np.ndarray) -> np.ndarray:
        """E[ŷ | y] exactly: the projected lattice value pulled toward the interval's centre."""
        c = self.projected_index(labels)
        first, _ = self._moments(c)
        return self._lattice.value(c) + self.step_ * first

    def _loss_given_index(self, c: np.ndarray, y: np.ndarray) -> np.ndarray:
        first, second = self._moments(c)
        d = self._lattice.value(c) - y
        return self.step_**2 * second + 2.0 * self.step_ * first * d + d * d

    def loss_under(self, prior: Prior | StepPrior) -> float:
        """Exact E[(ŷ − y)²] for a point-mass :class:`Prior` or a :class:`StepPrior`.

        Point masses: a finite sum of closed-form lattice moments. Step prior: the
        label's lattice index is constant between half-step boundaries, so the
        loss is a quadratic in y there and is integrated in closed form per piece.
        """
        if isinstance(prior, Prior):
            grid = check_labels(prior.values)
            probs = np.asarray(prior.probs, dtype=np.float64)
            probs = probs / probs.sum()
            c = self.projected_index(grid)
            return float(np.dot(probs, self._loss_given_index(c, grid)))
        lat = self._lattice
        m_lo = int(np.clip(math.floor((prior.nodes[0] - lat.low) / lat.step - 0.5), -1, lat.n_steps))
        m_hi = int(np.clip(math.ceil((prior.nodes[-1] - lat.low) / lat.step + 0.5), -1, lat.n_steps))
        halves = lat.low + lat.step * (np.arange(max(m_lo, 0), min(m_hi, lat.n_steps - 1) + 1) + 0.5)
        cuts = np.unique(np.concatenate((prior.nodes, halves[(halves > prior.nodes[0]) & (halves < prior.nodes[-1])])))
        u, w = cuts[:-1], cuts[1:]
        mid = 0.5 * (u + w)
        cell = np.clip(np.searchsorted(prior.nodes, mid, side="right") - 1, 0, prior.masses.size - 1)
        dens = prior.densities[cell]
        c = self.projected_index(mid)
        first, second = self._moments(c)
        v = lat.value(c)
        # ∫_u^w [h²·second + 2h·first·(v − y) + (v − y)²] dy
        integral = (
            self.step_**2 * second * (w - u)
            + self.step_ * first * ((v - u) ** 2 - (v - w) ** 2)
            + ((v - u) ** 3 - (v - w) ** 3) / 3.0
        )
        return float(np.dot(dens, integral))

    # -- accounting and wire ------------------------------------------------------------

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon=float(self.epsilon),
            statement=(
                "RPWithPrior on a lattice: for every label each output point has probability "
                "T/2^53/(2z+1) or (1 − T/2^53)/(a2 − a1), with T/2^53 ≤ (2z+1)/((2z+1) + e^{-ε}(a2 − a1)), "
                "so any two labels' probabilities differ by at most e^ε; the interval comes from a "
                "public or separately accounted DP prior"
            ),
        )

    def to_spec(self) -> RPWithPriorSpec:
        fitted = getattr(self, "prior_", None)
        if isinstance(fitted, StepPrior) and fitted.sigma is not None:  # Alg. 3's bin width, as used
            sigma: float | None = float(fitted.sigma)
        else:
            sigma = None if self.sigma is None else float(self.sigma)
        return RPWithPriorSpec(
            epsilon=float(self.epsilon),
            domain=self.domain.to_spec(),
            step=float(self.step_),
            n_steps=int(self.n_steps_),
            a1=self.a1_,
            a2=self.a2_,
            a1_index=self.a1_index_,
            a2_index=self.a2_index_,
            zeta=float(self.zeta_),
            zeta_steps=int(self.zeta_steps_),
            zeta_effective=float(self.zeta_effective_),
            keep_numerator=int(self.keep_numerator_),
            keep_probability=float(self.keep_probability_),
            sigma=sigma,
        )
