"""Categorical label DP (Liu & Ding): RR, RRWithPrior, BlockRR and Alg. 2's split prior.

Labels are class indices 0..K−1; class names are public. Each mechanism is a
K×K row-stochastic transition matrix T[y, ŷ] = Pr[ŷ | y], computed once from
closed forms. One replaced label changes one row of the input, so the mechanism
is ε-DP iff in every column the largest entry is at most e^ε times the smallest
(Def. 2.2); ``max_privacy_loss`` measures exactly that. ``privatize`` samples the
rows of that same matrix, and the features party rebuilds it from the spec
(``from_spec(spec).transition_matrix()``) to debias or forward-correct.

Sampling is exact to 2^−63. Each row is turned into integer cells out of 2^63
(``cell_table``): every entry but the row's largest is rounded *up*, the largest
takes the remainder. Zero entries get zero cells (an output outside RRWithPrior's
Y_k is impossible, not merely unlikely), and small probabilities — the ones a
ratio bound is sensitive to — are never rounded down. The top 63 bits of one raw
word per label then pick the output from its row's exact alias table
(``sampling.TableSampler``: each output owns exactly its cells of the 2^63 values).

Prior-based mechanisms (RRWithPrior, BlockRR) are fitted (``fit_to``) to a prior that must
itself be public or DP; ``PriorSplit`` (and ``SplitPriorRandomizer`` around it) builds such
a prior from the data as in Alg. 2 while randomizing every row exactly once.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal, Self

import numpy as np
from pydantic import Field, model_validator

from labeldp.mechanisms import kernels
from labeldp.mechanisms.checks import check_epsilon
from labeldp.mechanisms.contract import Params, Prior
from labeldp.mechanisms.exact_cells import nudge_to_epsilon
from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.mechanisms.law import TransitionLaw
from labeldp.mechanisms.rr_sampling import rr_probabilities
from labeldp.mechanisms.sampling import TableSampler, cumulative_cells
from labeldp.mechanisms.spool import Spool
from labeldp.specs.categorical import (
    BlockRRSpec,
    PriorSplitSpec,
    RandomizedResponseSpec,
    RRWithPriorSpec,
)

CELL_BITS = 63

SplitRule = Literal["prefix", "evenly_spaced"]


# --------------------------------------------------------------------------- input checks


def check_classes(classes: int | Sequence[str]) -> list[str]:
    """Public class names in index order; an int K means names "0".."K−1"."""
    if isinstance(classes, (int, np.integer)) and not isinstance(classes, bool):
        names = [str(i) for i in range(int(classes))]
    elif isinstance(classes, (str, bytes)) or not isinstance(classes, Sequence):
        raise ValueError("classes must be a number of classes or a list of class names")
    else:
        names = [str(c) for c in classes]
    if len(names) < 2:
        raise ValueError("a categorical domain needs at least 2 classes")
    if len(set(names)) != len(names) or any(not n for n in names):
        raise ValueError("class names must be unique and non-empty")
    return names


def check_class_labels(labels: np.ndarray, n_classes: int) -> np.ndarray:
    """Class indices as int64; integral floats (the wire's label column) are accepted."""
    arr = np.asarray(labels)
    if arr.dtype.kind in "iu":
        out = arr.astype(np.int64, copy=False)
    elif arr.dtype.kind == "f" or arr.size == 0:
        as_float = arr.astype(np.float64)
        if not np.all(np.isfinite(as_float)) or np.any(as_float != np.floor(as_float)):
            raise ValueError("categorical labels must be whole class indices")
        out = as_float.astype(np.int64)
    else:
        raise ValueError("categorical labels must be integer class indices")
    if out.size and (out.min() < 0 or out.max() >= n_classes):
        raise ValueError(f"class indices must lie in [0, {n_classes})")
    return out


def check_class_probs(probs: np.ndarray, n_classes: int, grid: np.ndarray | None = None) -> np.ndarray:
    """A prior over the K classes, normalized; ``grid`` lists the classes ``probs`` refer to."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError("probs must be 1-D")
    if grid is not None:
        idx = check_class_labels(grid, n_classes)
        if idx.shape != p.shape or np.unique(idx).size != idx.size:
            raise ValueError("grid must list distinct class indices, one per prob")
        full = np.zeros(n_classes)
        full[idx] = p
        p = full
    if p.size != n_classes:
        raise ValueError(f"probs must have one entry per class ({n_classes})")
    if not np.all(np.isfinite(p)) or np.any(p < 0) or p.sum() <= 0:
        raise ValueError("probs must be finite, >= 0, with a positive sum")
    return p / p.sum()


# --------------------------------------------------------------------------- transition matrices


def max_privacy_loss(matrix: np.ndarray) -> float:
    """max over outputs and input pairs of ln(T[y, ŷ] / T[y', ŷ]); 0 for all-zero columns.

    A column with both zero and positive entries has infinite loss.
    """
    t = np.asarray(matrix, dtype=np.float64)
    hi, lo = t.max(axis=0), t.min(axis=0)
    used = hi > 0
    if np.any(lo[used] <= 0):
        return math.inf
    if not np.any(used):
        return 0.0
    return float(np.max(np.log(hi[used]) - np.log(lo[used])))


def randomized_response_matrix(epsilon: float, n_classes: int) -> np.ndarray:
    """Def. 2.3: e^ε/(e^ε+K−1) on the diagonal, 1/(e^ε+K−1) elsewhere (via t = e^{−ε})."""
    keep, other = rr_probabilities(epsilon, n_classes)
    matrix = np.full((n_classes, n_classes), other)
    np.fill_diagonal(matrix, keep)
    return matrix


def optimal_top_k(probs: np.ndarray, epsilon: float) -> tuple[np.ndarray, int, np.ndarray]:
    """(order, k*, accuracy): RRWithPrior's top-k set maximizing Pr[ŷ = y] exactly.

    ``order`` ranks classes by prior, highest first, ties to the lower index. For
    Y_k = order[:k], Pr[ŷ = y] = e^ε/(e^ε+k−1)·Σ_{y∈Y_k} p_y = P_k / (1 + (k−1)e^{−ε})
    (labels outside Y_k are never reported correctly); ``accuracy[k−1]`` is that
    value and k* is its first maximizer. O(K log K), exact over all k.
    """
    p = np.asarray(probs, dtype=np.float64)
    k_all = np.arange(1, p.size + 1)
    order = np.lexsort((np.arange(p.size), -p))
    accuracy = np.cumsum(p[order]) / (1.0 + (k_all - 1) * math.exp(-epsilon))
    return order.astype(np.int64), int(np.argmax(accuracy)) + 1, accuracy


def rr_with_prior_matrix(epsilon: float, n_classes: int, top_k: np.ndarray) -> np.ndarray:
    """Def. 2.4: k-ary RR inside Y_k, uniform over Y_k for labels outside it; 0 outside Y_k."""
    top_k = np.asarray(top_k, dtype=np.int64)
    k = top_k.size
    keep, other = rr_probabilities(epsilon, k)
    matrix = np.zeros((n_classes, n_classes))
    matrix[:, top_k] = 1.0 / k
    inside = np.zeros(n_classes, dtype=bool)
    inside[top_k] = True
    matrix[np.ix_(inside, top_k)] = other
    matrix[top_k, top_k] = keep
    return matrix


def weight_matrix(probs: np.ndarray, sigma: float) -> np.ndarray:
    """Eq. (3.3): w_ij = p_j · exp(−1[i ≠ j] / σ). K×K; kept as the partition's reference."""
    p = np.asarray(probs, dtype=np.float64)
    w = np.tile(p * math.exp(-1.0 / sigma), (p.size, 1))
    np.fill_diagonal(w, p)
    return w


def majority_mask(probs: np.ndarray, sigma: float) -> np.ndarray:
    """S₁ = {i : w_ii ≥ w_ij ∀j} without the K×K matrix: p_i ≥ e^{−1/σ}·max_j p_j.

    Equivalent bit for bit: w_ii = p_i, w_ij = p_j·e^{−1/σ}, and rounding is monotone,
    so max_j (p_j·c) = c·max_j p_j; the j = i term holds since c < 1.
    """
    p = np.asarray(probs, dtype=np.float64)
    return p >= math.exp(-1.0 / sigma) * p.max()


def block_rr_coefficients(epsilon: float, n_major: int, n_minor: int, l: int) -> tuple[float, float, float, float]:
    """(β, γ, e^ε·β, e^ε·γ) of eq. (3.2) with |B(y)| = 1, |S̃₁| = n_major, |S̃₂| = n_minor, |Δ| = l.

    Eq. (3.2) with numerator and denominator multiplied by t² = e^{−2ε} (a = 1 − t, taken
    as −expm1(−ε)), so no e^ε overflows and small ε keeps its digits; N = n₁ + n₂ = |S̃|:

        κ·t² = a² + a·t·N + t²·l·n₂
        β₁·t² = a·t + t²·l·n₂/N                 β = β₁/κ
        γ₁·t² = a·t·(1 − l/N) + t²·l·n₂/N       γ = γ₁/κ

    (γ₁ = (e^ε−1)(1 − l/N) + l·n₂/N is eq. (3.2)'s γ₁ rearranged.) e^ε·β and e^ε·γ
    divide one t out of the numerators instead of multiplying by e^ε.
    """
    if not (n_major >= 1 and n_minor >= 0 and 0 <= l <= n_major):
        raise ValueError("need |S̃₁| >= 1, |S̃₂| >= 0 and 0 <= l <= |S̃₁|")
    t = math.exp(-epsilon)
    a = -math.expm1(-epsilon)
    n = n_major + n_minor
    share = l * n_minor / n
    kappa = a * a + a * t * n + t * t * l * n_minor
    beta = (a * t + t * t * share) / kappa
    keep_beta = (a + t * share) / kappa
    gamma = (a * t * (1.0 - l / n) + t * t * share) / kappa
    keep_gamma = (a * (1.0 - l / n) + t * share) / kappa
    return beta, gamma, keep_beta, keep_gamma


def block_rr_matrix(
    epsilon: float,
    n_classes: int,
    majority: np.ndarray,
    delta: np.ndarray,
    outputs: Literal["all", "majority"] = "all",
) -> np.ndarray:
    """Alg. 1 with B = identity as a K×K matrix (rows y, columns ŷ).

    ``outputs='all'`` (S̃ = S): a majority row y ∈ S₁ puts e^ε·β on y, β on the rest of
    S̃₁, γ on S̃₂; a minority row y ∈ S₂ puts 1/|S̃| on Δ, β on S̃₁∖Δ, e^ε·γ on y, γ on
    S̃₂∖{y}. ``outputs='majority'`` (S̃ = S̃₁ = S₁, Δ = S̃₁): majority rows are RR over
    S₁, minority rows uniform over S₁, minority columns 0 (Table 1, RRWithPrior).
    """
    is_major = np.zeros(n_classes, dtype=bool)
    is_major[np.asarray(majority, dtype=np.int64)] = True
    in_delta = np.zeros(n_classes, dtype=bool)
    in_delta[np.asarray(delta, dtype=np.int64)] = True
    n_major = int(is_major.sum())
    if outputs == "majority":
        if not np.array_equal(in_delta, is_major):
            raise ValueError("outputs='majority' needs Δ = S̃₁")
        n_minor = 0
    else:
        n_minor = n_classes - n_major
    beta, gamma, keep_beta, keep_gamma = block_rr_coefficients(epsilon, n_major, n_minor, int(in_delta.sum()))
    other_column = gamma if outputs == "all" else 0.0
    matrix = np.tile(np.where(is_major, beta, other_column), (n_classes, 1))
    matrix[np.ix_(~is_major, in_delta)] = 1.0 / (n_major + n_minor)
    diagonal = np.where(is_major, keep_beta, keep_gamma if outputs == "all" else 0.0)
    matrix[np.arange(n_classes), np.arange(n_classes)] = diagonal
    return matrix


# --------------------------------------------------------------------------- exact sampling


def cell_table(matrix: np.ndarray, bits: int = CELL_BITS) -> np.ndarray:
    """Cumulative integer cells (uint64, K×K) out of 2^bits per row; see the module docstring.

    Every entry except the row's largest (first on ties) gets ⌈T·2^bits⌉ cells — exact
    in float, since scaling by a power of two is exact — and the largest gets the rest,
    so each row ends at exactly 2^bits and zero entries get no cells
    (``sampling.cumulative_cells``, the rule every exact table uses).
    """
    return cumulative_cells(np.atleast_2d(np.asarray(matrix, dtype=np.float64)), bits)


def realized_matrix(cdf_cells: np.ndarray, bits: int = CELL_BITS) -> np.ndarray:
    """The law ``privatize`` actually draws from: cells / 2^bits."""
    cells = np.diff(cdf_cells, axis=1, prepend=np.zeros((cdf_cells.shape[0], 1), dtype=np.uint64))
    return np.ldexp(cells.astype(np.float64), -bits)


# --------------------------------------------------------------------------- parameters


class RandomizedResponseParams(Params):
    """Plain RR takes no parameters."""


class RRWithPriorParams(Params):
    """``prior_fraction``: the share of rows whose RR output is the prior (Alg. 2's split)."""

    prior_fraction: float = Field(0.1, gt=0, lt=1)

    def mechanism_kwargs(self) -> dict[str, Any]:
        return self.model_dump(exclude={"prior_fraction"})


class BlockRRParams(RRWithPriorParams):
    """``sigma`` of the weight matrix (eq. (3.3)), ``l`` = |Δ| ("auto": the most accurate under
    the prior; None: all of S̃₁), ``outputs`` ("majority": Table 1's RRWithPrior row, Δ = S̃₁)."""

    sigma: float = Field(1.0, gt=0, allow_inf_nan=False)
    l: Annotated[int, Field(ge=0)] | Literal["auto"] | None = Field(
        "auto", description="|Δ|; auto = most accurate under the prior"
    )
    outputs: Literal["all", "majority"] = "all"

    @model_validator(mode="after")
    def _majority_fixes_delta(self) -> BlockRRParams:
        if self.outputs == "majority" and self.l not in (None, "auto"):
            raise ValueError("outputs='majority' fixes Δ = S̃₁; leave l unset")
        return self


# --------------------------------------------------------------------------- mechanisms


class _CategoricalMechanism(ABC):
    """Shared machinery: the fitted matrix ``matrix_``, its cells, sampling, accuracy."""

    name: ClassVar[str]
    params_model: ClassVar[type[Params]] = RandomizedResponseParams
    uses_prior: ClassVar[bool] = False

    def __init__(self, epsilon: float, classes: int | Sequence[str]) -> None:
        self.epsilon = epsilon
        self.classes = classes

    # -- fitted state ----------------------------------------------------------

    def _set_matrix(self, matrix: np.ndarray) -> None:
        self.classes_ = check_classes(self.classes)
        self.matrix_ = matrix
        # Float rounding can leave a column's ratio a few 1e-16 above e^ε; the cells sampled
        # are moved so the realized loss is ≤ ε exactly (mechanisms/exact_cells.py).
        self.cells_ = nudge_to_epsilon(cell_table(matrix), check_epsilon(self.epsilon))

    def _fitted(self) -> np.ndarray:
        if not hasattr(self, "matrix_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit_to() first")
        return self.matrix_

    def sampler(self) -> TableSampler:
        """The exact table sampler of ``cells_`` (built on first use, rebuilt if the cells change)."""
        cached = getattr(self, "_sampler", None)
        if cached is None or cached[0] is not self.cells_:
            cached = (self.cells_, TableSampler.from_cumulative(self.cells_, CELL_BITS))
            self._sampler = cached
        return cached[1]

    # -- the law ---------------------------------------------------------------

    def transition_matrix(self) -> np.ndarray:
        """T[y, ŷ] = Pr[ŷ | y], K×K, rows summing to 1 (a copy)."""
        return self._fitted().copy()

    def output_probabilities(self, label: int) -> np.ndarray:
        """Row ``label`` of the transition matrix: Pr[ŷ = j | y = label] for every class j."""
        matrix = self._fitted()
        (y,) = check_class_labels(np.asarray([label]), matrix.shape[0])
        return matrix[y].copy()

    def expected_accuracy(self, prior: Prior) -> float:
        """Exact Pr[ŷ = y] for y ~ prior (over the classes ``prior.values``): Σ_y p_y T[y, y]."""
        matrix = self._fitted()
        p = check_class_probs(prior.probs, matrix.shape[0], prior.values)
        return float(np.dot(p, np.diag(matrix)))

    # -- sampling --------------------------------------------------------------

    def privatize(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One draw per label from its row (int64 class indices), exact to 2^−63.

        The table kernel: the top 63 bits of one raw word per label pick the output.
        """
        matrix = self._fitted()
        y = check_class_labels(labels, matrix.shape[0])
        return kernels.rows(y, self.sampler(), rng)

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(epsilon=float(self.epsilon), statement=self._statement)

    _statement: ClassVar[str] = ""

    # -- the contract (labeldp.mechanisms.contract) ------------------------------

    @abstractmethod
    def fit_to(self, prior: Prior | None = None) -> Self:
        """Fit to a prior over class indices (``values``): RR ignores it, RRWithPrior and BlockRR
        pick from it."""

    def loss_under(self, prior: Prior) -> float:
        """The exact 0-1 loss Pr[ŷ ≠ y] for y ~ prior."""
        return 1.0 - self.expected_accuracy(prior)

    def law(self) -> TransitionLaw:
        """The K×K transition matrix T[y, ŷ] = Pr[ŷ | y]."""
        return TransitionLaw.of_matrix(self.name, self.transition_matrix())


class RandomizedResponse(_CategoricalMechanism):
    """K-ary randomized response (Def. 2.3); prior-free, ``fit_to`` takes no data.

    Fitted: ``classes_``, ``keep_probability_`` = e^ε/(e^ε+K−1),
    ``other_probability_`` = 1/(e^ε+K−1), ``matrix_``.
    """

    name: ClassVar[str] = "randomized_response"
    _statement: ClassVar[str] = (
        "K-ary randomized response: each output has probability e^ε/(e^ε+K−1) under its own label "
        "and 1/(e^ε+K−1) under any other, ratio exactly e^ε"
    )

    def fit_to(self, prior: Prior | None = None) -> Self:
        """Build the matrix; ``prior`` is accepted and ignored (no prior needed)."""
        epsilon = check_epsilon(self.epsilon)
        k = len(check_classes(self.classes))
        matrix = randomized_response_matrix(epsilon, k)
        self.keep_probability_ = float(matrix[0, 0])
        self.other_probability_ = float(matrix[0, 1])
        self._set_matrix(matrix)
        return self

    def _fitted(self) -> np.ndarray:
        if not hasattr(self, "matrix_"):
            self.fit_to()
        return self.matrix_

    def estimate_prior(self, privatized: np.ndarray) -> np.ndarray:
        """Debiased class frequencies of RR outputs: (f_j − q)/(p − q), clipped at 0, normalized.

        E[f_j] = q + (p − q)·π_j, so this is unbiased before clipping; it is
        post-processing of the privatized labels. No outputs → uniform.
        """
        k = self._fitted().shape[0]
        out = check_class_labels(privatized, k).ravel()
        return self.estimate_prior_counts(np.bincount(out, minlength=k))

    def estimate_prior_counts(self, counts: np.ndarray) -> np.ndarray:
        """:meth:`estimate_prior` from the outputs' count per class (they add over chunks)."""
        matrix = self._fitted()
        k = matrix.shape[0]
        counts = np.asarray(counts, dtype=np.int64)
        total_outputs = int(counts.sum())
        if total_outputs == 0:
            return np.full(k, 1.0 / k)
        freq = counts / total_outputs
        p, q = self.keep_probability_, self.other_probability_
        est = np.maximum((freq - q) / (p - q), 0.0)
        total = est.sum()
        return est / total if total > 0 else np.full(k, 1.0 / k)

    def to_spec(self) -> RandomizedResponseSpec:
        self._fitted()
        return RandomizedResponseSpec(
            epsilon=float(self.epsilon),
            classes=list(self.classes_),
            keep_probability=self.keep_probability_,
            other_probability=self.other_probability_,
        )

    @classmethod
    def from_spec(cls, spec: RandomizedResponseSpec) -> RandomizedResponse:
        return cls(spec.epsilon, list(spec.classes)).fit_to()


class RRWithPrior(_CategoricalMechanism):
    """RRWithPrior (Def. 2.4, Ghazi et al. 2021) with the exactly optimal k.

    ``fit_to(prior)`` ranks classes by the prior and picks k maximizing the exact
    Pr[ŷ = y] (``optimal_top_k``). Fitted: ``prior_`` (None after ``from_spec``),
    ``top_k_`` (Y_k, most likely first), ``k_``, ``keep_probability_`` =
    e^ε/(e^ε+k−1), ``other_probability_`` = 1/(e^ε+k−1), ``outside_probability_`` = 1/k,
    ``accuracy_by_k_`` (the objective for k = 1..K), ``matrix_``.
    """

    name: ClassVar[str] = "rr_with_prior"
    params_model: ClassVar[type[Params]] = RRWithPriorParams
    uses_prior: ClassVar[bool] = True
    _statement: ClassVar[str] = (
        "RR over the top-k set Y_k chosen from a public or DP prior (post-processing): an output in Y_k "
        "has probability e^ε/(e^ε+k−1), 1/(e^ε+k−1) or 1/k, and 1/(e^ε+k−1) <= 1/k <= e^ε/(e^ε+k−1), "
        "ratio at most e^ε; outputs outside Y_k have probability 0 for every label"
    )

    def fit_to(self, prior: Prior | None = None) -> Self:
        """Choose Y_k from ``prior`` (public or DP, over the class indices ``prior.values``)."""
        if prior is None:
            raise ValueError("rr_with_prior needs a prior: fit_to(prior)")
        epsilon = check_epsilon(self.epsilon)
        k_classes = len(check_classes(self.classes))
        probs = check_class_probs(prior.probs, k_classes, prior.values)
        order, k, accuracy = optimal_top_k(probs, epsilon)
        self.prior_: np.ndarray | None = probs
        self.accuracy_by_k_ = accuracy
        self._set_top_k(epsilon, k_classes, order[:k])
        return self

    def _set_top_k(self, epsilon: float, n_classes: int, top_k: np.ndarray) -> None:
        matrix = rr_with_prior_matrix(epsilon, n_classes, top_k)
        self.top_k_ = np.asarray(top_k, dtype=np.int64)
        self.k_ = int(self.top_k_.size)
        self.keep_probability_, self.other_probability_ = rr_probabilities(epsilon, self.k_)
        self.outside_probability_ = 1.0 / self.k_
        self._set_matrix(matrix)

    def to_spec(self, prior_split: PriorSplitSpec | None = None) -> RRWithPriorSpec:
        self._fitted()
        return RRWithPriorSpec(
            epsilon=float(self.epsilon),
            classes=list(self.classes_),
            top_k=self.top_k_.tolist(),
            keep_probability=self.keep_probability_,
            other_probability=self.other_probability_,
            outside_probability=self.outside_probability_,
            prior_split=prior_split,
        )

    @classmethod
    def from_spec(cls, spec: RRWithPriorSpec) -> RRWithPrior:
        """Rebuild the public mechanism (Y_k from the spec; ``prior_`` stays None)."""
        mech = cls(spec.epsilon, list(spec.classes))
        mech.prior_ = None
        mech._set_top_k(check_epsilon(spec.epsilon), len(spec.classes), np.asarray(spec.top_k, dtype=np.int64))
        return mech


class BlockRR(_CategoricalMechanism):
    """BlockRR (Liu & Ding Alg. 1) with B = identity, partitioned by the weight matrix.

    ``fit_to(prior)``: S₁ = {i : w_ii ≥ w_ij ∀j} for w of eq. (3.3) with ``sigma``,
    S₂ = the rest; Δ = the ``l`` most likely classes of S̃₁ (``l=None``: all of S̃₁;
    an ``l`` above |S̃₁| is capped; ``l="auto"``, the default: the l in 0..|S̃₁| with the
    highest exact expected accuracy P(S₁)·e^ε·β(l) + P(S₂)·e^ε·γ(l) under the prior —
    post-processing of the prior, so free; the paper tunes l per ε, and l = |S̃₁| sends
    half of a minority label's mass to Δ even at large ε); β, γ from eq. (3.2). ``outputs='majority'``
    restricts the outputs to S̃ = S₁ with Δ = S̃₁ (Table 1's RRWithPrior row).

    Limits the paper states: l = 0 or S₂ = ∅ give plain RR (β = γ = 1/(e^ε+K−1)).

    Fitted: ``prior_`` (None after ``from_spec``), ``majority_`` (S₁), ``minority_`` (S₂),
    ``delta_`` (Δ, most likely first), ``l_``, ``beta_``, ``gamma_``, ``keep_beta_`` (e^ε·β),
    ``keep_gamma_`` (e^ε·γ), ``matrix_``.
    """

    name: ClassVar[str] = "block_rr"
    params_model: ClassVar[type[Params]] = BlockRRParams
    uses_prior: ClassVar[bool] = True
    _statement: ClassVar[str] = (
        "BlockRR (Liu & Ding Thm 3.4) with a partition from a public or DP prior (post-processing): "
        "columns in S̃₁ hold e^ε·β, β and 1/|S̃| with β <= 1/|S̃| <= e^ε·β; columns in S̃₂ hold e^ε·γ "
        "and γ; every ratio is at most e^ε"
    )

    def __init__(
        self,
        epsilon: float,
        classes: int | Sequence[str],
        sigma: float = 1.0,
        l: int | Literal["auto"] | None = "auto",
        outputs: Literal["all", "majority"] = "all",
    ) -> None:
        super().__init__(epsilon, classes)
        self.sigma = sigma
        self.l = l
        self.outputs = outputs

    def _check_params(self) -> tuple[float, float]:
        """ε, and σ as checked by the one validation of the parameters (``BlockRRParams``)."""
        epsilon = check_epsilon(self.epsilon)
        params = BlockRRParams(sigma=self.sigma, l=self.l, outputs=self.outputs)
        return epsilon, params.sigma

    def fit_to(self, prior: Prior | None = None) -> Self:
        """Partition by the weight matrix of ``prior`` (public or DP, over class indices), then eq. (3.2)."""
        if prior is None:
            raise ValueError("block_rr needs a prior: fit_to(prior)")
        epsilon, sigma = self._check_params()
        k_classes = len(check_classes(self.classes))
        probs = check_class_probs(prior.probs, k_classes, prior.values)
        majority = np.flatnonzero(majority_mask(probs, sigma))
        n_major = majority.size
        if self.l == "auto":
            l = self._most_accurate_l(epsilon, probs, majority, k_classes)
        else:
            l = n_major if self.l is None else min(int(self.l), n_major)
        ranked = majority[np.lexsort((majority, -probs[majority]))]
        self.prior_: np.ndarray | None = probs
        self._set_partition(epsilon, k_classes, majority, ranked[:l])
        return self

    def _most_accurate_l(self, epsilon: float, prior: np.ndarray, majority: np.ndarray, n_classes: int) -> int:
        """argmax over l of the exact Pr[ŷ = y] (ties: the smaller l); O(|S̃₁|)."""
        if self.outputs == "majority":
            return majority.size
        n_minor = n_classes - majority.size
        p_major = float(prior[majority].sum())
        best, best_accuracy = 0, -1.0
        for l in range(majority.size + 1):
            _, _, keep_beta, keep_gamma = block_rr_coefficients(epsilon, majority.size, n_minor, l)
            accuracy = p_major * keep_beta + (1.0 - p_major) * keep_gamma
            if accuracy > best_accuracy * (1 + 1e-12):
                best, best_accuracy = l, accuracy
        return best

    def _set_partition(self, epsilon: float, n_classes: int, majority: np.ndarray, delta: np.ndarray) -> None:
        majority = np.sort(np.asarray(majority, dtype=np.int64))
        delta = np.asarray(delta, dtype=np.int64)
        n_minor = 0 if self.outputs == "majority" else n_classes - majority.size
        beta, gamma, keep_beta, keep_gamma = block_rr_coefficients(epsilon, majority.size, n_minor, delta.size)
        self.majority_ = majority
        self.minority_ = np.setdiff1d(np.arange(n_classes), majority)
        self.delta_ = delta
        self.l_ = int(delta.size)
        self.beta_, self.gamma_ = beta, gamma
        self.keep_beta_, self.keep_gamma_ = keep_beta, keep_gamma
        self._set_matrix(block_rr_matrix(epsilon, n_classes, majority, delta, self.outputs))

    def to_spec(self, prior_split: PriorSplitSpec | None = None) -> BlockRRSpec:
        self._fitted()
        return BlockRRSpec(
            epsilon=float(self.epsilon),
            classes=list(self.classes_),
            sigma=float(self.sigma),
            outputs=self.outputs,
            majority=self.majority_.tolist(),
            delta=self.delta_.tolist(),
            beta=float(self.beta_),
            gamma=float(self.gamma_),
            prior_split=prior_split,
        )

    @classmethod
    def from_spec(cls, spec: BlockRRSpec) -> BlockRR:
        """Rebuild from S₁ and Δ (β, γ recomputed, not read); ``prior_`` stays None."""
        l = None if spec.outputs == "majority" else len(spec.delta)
        mech = cls(spec.epsilon, list(spec.classes), sigma=spec.sigma, l=l, outputs=spec.outputs)
        epsilon, _ = mech._check_params()
        mech.prior_ = None
        mech._set_partition(epsilon, len(spec.classes), np.asarray(spec.majority), np.asarray(spec.delta))
        return mech


# --------------------------------------------------------------------------- Alg. 2: split prior


def prior_split_size(n_rows: int, fraction: float) -> int:
    """m = round(fraction·n), at least 1 row when n >= 1; a function of public numbers only."""
    if n_rows < 0:
        raise ValueError("n_rows must be >= 0")
    if not (0.0 < fraction <= 1.0):
        raise ValueError("prior_fraction must lie in (0, 1]")
    if n_rows == 0:
        return 0
    return min(n_rows, max(1, int(round(fraction * n_rows))))


def prior_split_rows(n_rows: int, fraction: float, rule: SplitRule = "evenly_spaced", start: int = 0,
                     stop: int | None = None) -> np.ndarray:
    """The prior split's rows (int64, ascending) among rows ``start`` to ``stop`` of n (the whole
    set by default), from public numbers only: what :func:`prior_split_mask` marks, a range at a time."""
    m = prior_split_size(n_rows, fraction)
    stop = n_rows if stop is None else min(stop, n_rows)
    start = max(0, start)
    if rule == "prefix":
        return np.arange(start, max(start, min(stop, m)), dtype=np.int64)
    if rule != "evenly_spaced":
        raise ValueError("rule must be 'prefix' or 'evenly_spaced'")
    if not m or start >= stop:
        return np.zeros(0, dtype=np.int64)
    first, last = -(-start * m // n_rows), -(-stop * m // n_rows)  # i with start ≤ ⌊i·n/m⌋ < stop
    return (np.arange(first, last, dtype=np.int64) * n_rows) // m


def prior_split_mask(n_rows: int, fraction: float, rule: SplitRule = "evenly_spaced") -> np.ndarray:
    """Which rows (in the canonical sorted-id order) form the prior split; never looks at labels.

    ``prefix``: the first m rows. ``evenly_spaced``: rows ⌊i·n/m⌋, i = 0..m−1 — spread
    over the id order, so a trend along the ids does not bias the prior.
    """
    mask = np.zeros(n_rows, dtype=bool)
    mask[prior_split_rows(n_rows, fraction, rule)] = True
    return mask


class PriorSplit:
    """Alg. 2's first stage: a label-independent split of the rows, released with ε-RR, whose
    debiased output is the prior of the other rows.

    ``release(labels, rng)`` randomizes the rows of ``prior_split_mask(n, fraction, rule)``
    — chosen from n alone — with plain ε-RR (``first_stage_``) and sets ``prior_``, the
    debiased frequency of those outputs (post-processing); ``complete(mechanism, rng)`` then
    randomizes every other row of the same labels with ``mechanism``, an ε-DP mechanism
    fitted to ``prior_``. Each row is randomized exactly once, by an ε-DP mechanism chosen from data
    the row does not affect except through other rows' DP outputs, so the release is ε-DP
    (parallel composition, adaptive in the prior). Deviation from the paper: its D₁ gets a
    Laplace histogram and is dropped from the release; here D₁ is released through RR, and
    that RR output is the private prior — no extra ε.

    Fitted: ``n_rows_``, ``mask_``, ``rows_`` (indices), ``first_stage_``, ``prior_``,
    ``outputs_`` (int64 class indices; the split rows' after ``release``, all after ``complete``).
    """

    def __init__(
        self, epsilon: float, classes: int | Sequence[str], fraction: float = 0.1, rule: SplitRule = "evenly_spaced"
    ) -> None:
        self.epsilon = epsilon
        self.classes = classes
        self.fraction = fraction
        self.rule = rule
        self._labels: np.ndarray | None = None  # set by release(): the rows complete() finishes

    def release(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """ε-RR on the split rows (one raw word each, in row order); returns ``prior_``.

        :meth:`begin`, :meth:`release_rows` and :meth:`finish` with all rows as one chunk."""
        y = np.asarray(labels)
        if y.ndim != 1:
            raise ValueError("labels must be 1-D (one per row)")
        self.begin(y.size)
        out = np.empty(y.size, dtype=np.int64)
        out[self.rows_at(0, y.size)] = self.release_rows(labels, 0, rng)
        self.finish()
        self.mask_ = prior_split_mask(y.size, self.fraction, self.rule)
        self.rows_ = np.flatnonzero(self.mask_)
        self.outputs_ = out
        self._labels = check_class_labels(labels, len(self.first_stage_.classes_))
        return self.prior_

    @property
    def released_whole(self) -> bool:
        """True between :meth:`release` (every row at once) and :meth:`complete`."""
        return self._labels is not None

    def begin(self, n_rows: int) -> None:
        """Start a release of ``n_rows`` rows given a chunk at a time (the chunked form of :meth:`release`)."""
        epsilon = check_epsilon(self.epsilon)
        classes = check_classes(self.classes)
        self.n_rows_ = int(n_rows)
        self.first_stage_ = RandomizedResponse(epsilon, classes).fit_to()
        self.prior_rows_ = prior_split_size(self.n_rows_, self.fraction)
        self._counts = np.zeros(len(classes), np.int64)
        self._first = Spool(np.int64)

    def rows_at(self, start: int, stop: int) -> np.ndarray:
        """The split's rows among rows ``start`` to ``stop``, as offsets from ``start``."""
        return prior_split_rows(self.n_rows_, self.fraction, self.rule, start, stop) - start

    def release_rows(self, labels: np.ndarray, start: int, rng: np.random.Generator) -> np.ndarray:
        """ε-RR on the split rows of the chunk of rows ``start``… (one raw word each, in row order),
        counted and kept for :meth:`complete_rows`; returns their outputs."""
        y = check_class_labels(labels, len(self.first_stage_.classes_)).ravel()
        rows = self.rows_at(start, start + y.size)
        out = np.empty(y.size, dtype=np.int64)
        kernels.rows_at(y, rows, self.first_stage_.sampler(), rng, out)
        first = out[rows]
        self._counts += np.bincount(first, minlength=self._counts.size)
        self._first.append(first)
        return first

    def finish(self) -> np.ndarray:
        """``prior_``: the debiased frequency of every first-stage output (post-processing)."""
        self.prior_ = self.first_stage_.estimate_prior_counts(self._counts)
        return self.prior_

    def complete_rows(
        self, mechanism: RRWithPrior | BlockRR, labels: np.ndarray, start: int, rng: np.random.Generator
    ) -> np.ndarray:
        """The chunk of rows ``start``…: its split rows' first-stage outputs (in the order
        :meth:`release_rows` made them) and every other row through ``mechanism`` (one word per
        row, in row order). Chunks must come in row order, each row once."""
        y = check_class_labels(labels, len(self.first_stage_.classes_)).ravel()
        rows = self.rows_at(start, start + y.size)
        out = np.empty(y.size, dtype=np.int64)
        out[rows] = self._first.read(rows.size)
        mask = np.zeros(y.size, dtype=np.bool_)
        mask[rows] = True
        kernels.rows_where(y, mask, False, mechanism.sampler(), rng, out)
        return out

    def complete(self, mechanism: RRWithPrior | BlockRR, rng: np.random.Generator) -> np.ndarray:
        """Every other row of the released labels through ``mechanism`` (fitted to ``prior_``), in place.

        The draws are those of ``mechanism.privatize`` on the rows outside the split, in row
        order, after the first stage's: one word per row, without copying the labels.
        """
        y = self._labels
        if y is None:
            raise RuntimeError("PriorSplit.complete needs release() first, once")
        self._labels = None
        kernels.rows_where(y, self.mask_, False, mechanism.sampler(), rng, self.outputs_)
        self._first.close()
        return self.outputs_

    def to_spec(self) -> PriorSplitSpec:
        return PriorSplitSpec(
            rule=self.rule,
            fraction=float(self.fraction),
            n_rows=self.n_rows_,
            prior_rows=int(self.prior_rows_),
            first_stage=self.first_stage_.to_spec(),
            prior_probs=self.prior_.tolist(),
        )


class SplitPriorRandomizer:
    """Alg. 2 with every row released (:class:`PriorSplit`) for a given prior-based mechanism.

    ``privatize(labels, rng)`` (labels in the canonical sorted-id order) releases the split
    with ε-RR and every other row with ``mechanism_`` =
    ``mechanism_cls(epsilon, classes, **params).fit_to(prior_)``. The release pipeline runs
    the same two stages around the registry's mechanism (``labeldp.release.priors``).

    Fitted: ``n_rows_``, ``prior_mask_``, ``prior_rows_`` (indices), ``first_stage_``,
    ``prior_``, ``mechanism_``, ``split_`` (the :class:`PriorSplit`).
    """

    def __init__(
        self,
        mechanism_cls: type[RRWithPrior] | type[BlockRR],
        epsilon: float,
        classes: int | Sequence[str],
        prior_fraction: float = 0.1,
        split: SplitRule = "evenly_spaced",
        **params: Any,
    ) -> None:
        self.mechanism_cls = mechanism_cls
        self.epsilon = epsilon
        self.classes = classes
        self.prior_fraction = prior_fraction
        self.split = split
        self.params = params

    @property
    def name(self) -> str:
        return self.mechanism_cls.name

    def mechanism_for_prior(self, prior: np.ndarray) -> RRWithPrior | BlockRR:
        """The second-stage mechanism fitted to ``prior`` (the debiased first-stage output)."""
        return self.mechanism_cls(self.epsilon, self.classes, **self.params).fit_to(Prior.over_classes(prior))

    def privatize(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if not getattr(self.mechanism_cls, "uses_prior", False):
            raise ValueError("the split prior is for prior-based mechanisms (rr_with_prior, block_rr)")
        split = PriorSplit(self.epsilon, self.classes, self.prior_fraction, self.split)
        prior = split.release(labels, rng)
        mechanism = self.mechanism_for_prior(prior)
        out = split.complete(mechanism, rng)
        self.split_ = split
        self.n_rows_ = split.n_rows_
        self.prior_mask_ = split.mask_
        self.prior_rows_ = split.rows_
        self.first_stage_ = split.first_stage_
        self.prior_ = prior
        self.mechanism_ = mechanism
        return out

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon=float(self.epsilon),
            statement=(
                "Alg. 2: rows of a label-independent split get ε-RR, the rest get the ε-DP "
                f"{self.mechanism_cls.name} fitted to the debiased RR output (post-processing); "
                "each row is randomized once, so the release is ε-DP by parallel composition"
            ),
        )

    def to_spec(self) -> RRWithPriorSpec | BlockRRSpec:
        if not hasattr(self, "mechanism_"):
            raise RuntimeError("SplitPriorRandomizer has not privatized anything yet")
        return self.mechanism_.to_spec(prior_split=self.split_.to_spec())
