"""Additive baselines on a public lattice (Ghazi et al. 2023, App. D and F).

Laplace and staircase (continuous and discrete), Gaussian for (ε, δ) and the
exponential mechanism (Laplace restricted to the domain), with clipping to the
domain as post-processing.

Why a lattice. Adding float noise to a float label leaks the label through the
low-order bits of the sum (Mironov 2012). So every mechanism here snaps the label
to the public lattice low + step·j, j = 0..J, J = round((high − low)/step), adds
an *integer* noise N to j and maps the index back; no float bit of an output
depends on the label. Two snapped labels differ by at most J steps, so the noise
is calibrated to sensitivity J in lattice units (= high − low in label units) and
its guarantee is the one of the discretized law, not of a continuous density.

Variants. "continuous" realizes the continuous mechanism on a fine lattice
(J = 2^16 by default); "discrete" uses step 1 on integer domains (Def. 22/24)
and J = 1024 on real domains.
``variant=None`` picks discrete for integer domains and continuous for real ones,
as the paper does (App. E).

The lattice itself is ``lattice.Lattice`` (shared with RPWithPrior).

Sampling. Clipped, every output is clip(j + N, 0, J), which depends on N only
through its sign and min(|N|, J): ``privatize`` draws that magnitude from an exact
integer table of its law (``folded_clipped_noise``, cells out of 2^63,
``sampling.TableSampler``) and the sign from one more bit of the same raw word, in
the kernel ``kernels.clipped_additive``. The exponential mechanism draws from
the truncated two-sided geometric the same way and rejects draws that leave [0, J].
Unclipped noise, or lattices of more than ``MAX_TABLE_SIZE`` points, use the numpy
samplers (``_sample_noise``).

Exact laws. Each additive noise exposes its pmf and survival S(t) = P(N > t) in
closed form. Clipping index j + N to [0, J] then has, in index units,
E[clip − j] = H(J − j) − H(j) and E[(clip − j)²] = G(j) + G(J − j) with
H(t) = Σ_{s<t} S(s) and G(t) = Σ_{s<t} (2s + 1) S(s) (because
E[min(N⁺, t)] = Σ_{s<t} P(N > s) and min(N⁺, t)² = Σ_{m≤t} (2m − 1)·1{N ≥ m}),
so conditional means and expected losses for every j cost O(J) once.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import ClassVar, Literal, Self

import numpy as np
from pydantic import Field
from scipy import special

from labeldp.mechanisms import kernels
from labeldp.mechanisms.checks import check_epsilon, check_labels
from labeldp.mechanisms.contract import Params, Prior
from labeldp.mechanisms.exact_cells import nudge_folded_to_epsilon
from labeldp.mechanisms.exact_noise import discrete_laplace, rate_from_epsilon
from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.mechanisms.lattice import CONTINUOUS_STEPS as CONTINUOUS_STEPS
from labeldp.mechanisms.lattice import DISCRETE_REAL_STEPS as DISCRETE_REAL_STEPS
from labeldp.mechanisms.lattice import Lattice
from labeldp.mechanisms.lattice import Variant as Variant
from labeldp.mechanisms.law import TransitionLaw
from labeldp.mechanisms.prior import LabelDomain
from labeldp.mechanisms.sampling import MAX_TABLE_BITS, MAX_TABLE_SIZE, TableSampler, cumulative_cells
from labeldp.specs.additive import ExponentialSpec, GaussianSpec, StaircaseSpec
from labeldp.specs.laplace import LaplaceSpec

ROUNDED_GAUSSIAN_SHEPPARD_SIGMA = 3.0
"""From σ ≥ 3 lattice steps, E[round(σZ)²] = σ² + 1/12 up to e^{−2π²σ²} < 1e-77."""
DEFAULT_GAUSSIAN_DELTA = 1e-6


# --------------------------------------------------------------------------- #
# Parameters (labeldp.mechanisms.contract: the one validation of each)         #
# --------------------------------------------------------------------------- #


class ExponentialParams(Params):
    """``variant``: "continuous" (2^16 lattice steps) or "discrete"; None picks by the domain kind."""

    variant: Literal["continuous", "discrete"] | None = None


class AdditiveParams(ExponentialParams):
    """Lattice noise parameters: the variant, and ``clip`` (clip outputs to the domain: post-processing)."""

    clip: bool = True


class StaircaseParams(AdditiveParams):
    """``gamma`` = r/J ∈ (0, 1]: the share of each period at the higher level (None: the ℓ1-optimal one)."""

    gamma: float | None = Field(None, gt=0, le=1)


class GaussianParams(AdditiveParams):
    """``delta`` ∈ (0, 1): the δ of the analytic (ε, δ) calibration (a release caps it further)."""

    delta: float = Field(DEFAULT_GAUSSIAN_DELTA, gt=0, lt=1)


# --------------------------------------------------------------------------- #
# Gaussian calibration (Balle & Wang 2018, Theorem 8)                          #
# --------------------------------------------------------------------------- #


def analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """Smallest δ for which N(0, σ²) noise on a Δ-sensitive query is (ε, δ)-DP.

    δ(σ) = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ), exact for the Gaussian
    (Balle & Wang 2018, Thm. 8); the second term is taken in log space so that
    large ε cannot overflow.
    """
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    return float(special.ndtr(a - b) - math.exp(epsilon + float(special.log_ndtr(-a - b))))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest σ with analytic_gaussian_delta(σ, ε, Δ) ≤ δ, by bisection (δ(σ) decreases in σ).

    Returns the upper end of the final bracket, so the condition holds at the
    returned σ; the bracket is closed to a relative width of 1e-13.
    """
    epsilon = check_epsilon(epsilon)
    delta = float(delta)
    if not (0.0 < delta < 1.0):
        raise ValueError("delta must lie in (0, 1)")
    if not (math.isfinite(sensitivity) and sensitivity > 0):
        raise ValueError("sensitivity must be a finite number > 0")
    hi = sensitivity
    while analytic_gaussian_delta(hi, epsilon, sensitivity) > delta:
        hi *= 2.0
    lo = hi
    while analytic_gaussian_delta(lo, epsilon, sensitivity) <= delta:
        lo /= 2.0
        if lo < 1e-300:  # pragma: no cover - δ(σ) → 1 as σ → 0, so this cannot be reached
            raise RuntimeError("could not bracket sigma")
    for _ in range(400):
        if hi - lo <= 1e-13 * hi:
            break
        mid = 0.5 * (lo + hi)
        if analytic_gaussian_delta(mid, epsilon, sensitivity) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def classical_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """σ = √(2 ln(1.25/δ))·Δ/ε (Dwork & Roth Thm. A.1, valid for ε < 1); for comparison only."""
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon


# --------------------------------------------------------------------------- #
# Staircase parameters (Geng & Viswanath 2014)                                 #
# --------------------------------------------------------------------------- #


def staircase_gamma(epsilon: float) -> float:
    """γ* = 1/(1 + e^{ε/2}): the ℓ1-optimal continuous staircase (Geng & Viswanath 2014)."""
    return 1.0 / (1.0 + math.exp(0.5 * epsilon))


def staircase_mean_abs(epsilon: float, n_steps: int, r: np.ndarray) -> np.ndarray:
    """Exact E|N| of the discrete staircase (Def. 24, period Δ = n_steps, b = e^{−ε}) for each r."""
    r = np.asarray(r, dtype=np.float64)
    delta = float(n_steps)
    b = math.exp(-epsilon)
    one_minus_b = -math.expm1(-epsilon)
    weight = r + b * (delta - r)  # W = Σ_{u<Δ} w(u)
    a = one_minus_b / (2.0 * weight - one_minus_b)
    u1 = 0.5 * r * (r - 1.0) + b * 0.5 * (delta * (delta - 1.0) - r * (r - 1.0))  # Σ u·w(u)
    s0 = 1.0 / one_minus_b
    s1 = b / one_minus_b**2
    return 2.0 * a * (s1 * delta * weight + s0 * u1)


def staircase_l1_optimal_r(epsilon: float, n_steps: int) -> int:
    """The smallest r in 1..Δ minimizing the exact E|N| of the discrete staircase.

    With l = 2W − (1 − b) (affine in r), E|N| = c·l + d + e/l with c > 0: convex in
    r when e ≥ 0 and increasing when e < 0. So its forward difference changes sign
    once and a binary search for the first r with E|N|(r + 1) ≥ E|N|(r) is exact,
    in O(log Δ) and without O(Δ) memory for huge integer domains.
    """
    lo, hi = 1, n_steps  # the answer lies in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        here, after = staircase_mean_abs(epsilon, n_steps, np.array([mid, mid + 1]))
        if after >= here:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _sum_of_squares_below(n: float) -> float:
    """Σ_{u=0}^{n−1} u²."""
    return (n - 1.0) * n * (2.0 * n - 1.0) / 6.0


# --------------------------------------------------------------------------- #
# The lattice                                                                  #
# --------------------------------------------------------------------------- #


class LatticeMechanism(ABC):
    """Shared lattice plumbing: variant, step, J, snapping and mapping back.

    Subclasses calibrate their noise in ``_fit_noise(epsilon)`` (lattice units,
    sensitivity J) and use the index arithmetic here. Fitted: ``variant_``,
    ``n_steps_`` (J), ``step_`` = (high − low)/J.
    """

    name: ClassVar[str] = ""
    params_model: ClassVar[type[Params]] = ExponentialParams

    def __init__(
        self,
        epsilon: float,
        domain: LabelDomain,
        variant: Variant | None = None,
        step: float | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.domain = domain
        self.variant = variant
        self.step = step

    def fit_to(self, prior: Prior | None = None) -> Self:
        """Fix the lattice and calibrate the noise; prior-free, so ``prior`` is ignored.

        The caller's parameters are checked by the class's params model (the one validation).
        """
        epsilon = check_epsilon(self.epsilon)
        self.params_model.model_validate({k: getattr(self, k) for k in self.params_model.model_fields})
        variant = self.variant
        if variant is None:
            variant = "discrete" if self.domain.kind == "integer" else "continuous"
        lattice = Lattice.for_domain(self.domain, self.step, variant)
        self.variant_ = variant
        self._lattice = lattice
        self.n_steps_ = lattice.n_steps
        self.step_ = lattice.step
        self._fit_noise(epsilon)
        return self

    @abstractmethod
    def _fit_noise(self, epsilon: float) -> None:
        """Calibrate the noise law to ε at sensitivity J (lattice units)."""

    @abstractmethod
    def conditional_mean(self, labels: np.ndarray) -> np.ndarray:
        """Exact E[ŷ | y]."""

    @abstractmethod
    def loss_under(self, prior: Prior) -> float:
        """Exact E[(ŷ − y)²] for y ~ prior."""

    def law(self) -> TransitionLaw:
        """Monotone on the domain lattice (clipped or range-restricted noise moves the mean
        toward the centre non-linearly); affine in the snapped label without clipping."""
        low, high = self.domain.low, self.domain.high
        return TransitionLaw.monotone(self.name, self.conditional_mean, self.lattice_, low, high)

    def lattice_index(self, labels: np.ndarray) -> np.ndarray:
        """Index j of the nearest lattice point (labels outside the domain clip to the ends)."""
        return self._lattice.index(labels)

    def lattice_value(self, index: np.ndarray) -> np.ndarray:
        """low + step·i for any integer i; i = J is exactly ``high``, 0..J never leave the domain."""
        return self._lattice.value(index)

    @property
    def lattice_(self) -> np.ndarray:
        """The J + 1 lattice points of the domain."""
        return self._lattice.points

    def _loss_terms(self, prior: Prior) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(j, x_j − y, normalized probs) of a prior over labels."""
        grid = check_labels(prior.values).ravel()
        probs = np.asarray(prior.probs, dtype=np.float64).ravel()
        if probs.shape != grid.shape:
            raise ValueError("grid and probs must have the same length")
        if np.any(probs < 0) or not np.isfinite(probs).all() or probs.sum() <= 0:
            raise ValueError("probs must be finite, >= 0 and not all zero")
        j = self.lattice_index(grid)
        return j, self.lattice_value(j) - grid, probs / probs.sum()


# --------------------------------------------------------------------------- #
# Additive noise on the lattice, optionally clipped                            #
# --------------------------------------------------------------------------- #


class AdditiveLatticeMechanism(LatticeMechanism):
    """Output index j + N, N a symmetric integer noise, clipped to [0, J] when ``clip``.

    A subclass gives the noise law: ``noise_pmf(k)``, ``noise_survival(t)`` =
    P(N > t) for t ≥ 0, ``noise_second_moment()`` and ``_sample_noise``. The exact
    output law, conditional mean and expected loss follow here.
    """

    params_model: ClassVar[type[Params]] = AdditiveParams
    pure_epsilon: ClassVar[bool] = True
    """ε-DP with δ = 0: the clipped table is nudged to ≤ e^ε exactly (Gaussian: False)."""

    def __init__(
        self,
        epsilon: float,
        domain: LabelDomain,
        variant: Variant | None = None,
        step: float | None = None,
        clip: bool = True,
    ) -> None:
        super().__init__(epsilon, domain, variant, step)
        self.clip = clip

    def law(self) -> TransitionLaw:
        """Unclipped: E[ŷ | y] is the snapped label (symmetric noise), affine with t = snap."""
        if self.clip:
            return super().law()

        def snap(labels: np.ndarray) -> np.ndarray:
            return self.lattice_value(self.lattice_index(labels))

        low, high = self.domain.low, self.domain.high
        return TransitionLaw.affine(self.name, 1.0, 0.0, low, high, self.conditional_mean, snap)

    def fit_to(self, prior: Prior | None = None) -> Self:
        super().fit_to(prior)
        self._tables: tuple[np.ndarray, np.ndarray] | None = None  # H and G, built on first use (no O(J) memory)
        self._noise_table: TableSampler | None = None  # the folded clipped noise, built on first privatize
        return self

    def _moment_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """H(t) = Σ_{s<t} S(s) = E[min(N⁺, t)] and G(t) = Σ_{s<t} (2s+1) S(s) = E[min(N⁺, t)²], t = 0..J."""
        if self._tables is None:
            s = np.arange(self.n_steps_, dtype=np.int64)
            survival = self.noise_survival(s)
            h = np.concatenate(([0.0], np.cumsum(survival)))
            g = np.concatenate(([0.0], np.cumsum((2.0 * s + 1.0) * survival)))
            self._tables = (h, g)
        return self._tables

    # -- the noise law (subclasses) -------------------------------------------

    @abstractmethod
    def noise_pmf(self, k: np.ndarray) -> np.ndarray:
        """P(N = k) for integer noise k."""

    @abstractmethod
    def noise_survival(self, t: np.ndarray) -> np.ndarray:
        """P(N > t)."""

    @abstractmethod
    def noise_second_moment(self) -> float:
        """E[N²] in lattice units."""

    @abstractmethod
    def _sample_noise(self, size: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        """Integer noise draws of the given shape."""

    def _at_least(self, t: np.ndarray) -> np.ndarray:
        """P(N ≥ t) for t ≥ 0 (P(N ≥ 0) = 1 − P(N < 0) = 1 − S(0) by symmetry)."""
        t = np.asarray(t, dtype=np.int64)
        tail = self.noise_survival(np.maximum(t - 1, 0))
        return np.where(t <= 0, 1.0 - self.noise_survival(np.zeros_like(t)), tail)

    def folded_clipped_noise(self) -> np.ndarray:
        """Pr[min(|N|, J) = m], m = 0..J: the magnitude law the clipped output needs.

        P(0) = pmf(0), P(m) = 2·pmf(m) for 0 < m < J, P(J) = 2·P(N ≥ J) (J or more
        steps clip to the same end from every index). With an independent fair sign,
        clip(j ± m, 0, J) has exactly the law of clip(j + N, 0, J).
        """
        J = self.n_steps_
        m = np.arange(J + 1, dtype=np.int64)
        probs = 2.0 * np.asarray(self.noise_pmf(m), dtype=np.float64)
        probs[0] = float(self.noise_pmf(np.zeros(1, dtype=np.int64))[0])
        probs[J] = 2.0 * float(self.noise_survival(np.array([J - 1], dtype=np.int64))[0])
        return probs

    def noise_table(self) -> TableSampler:
        """The exact table of ``folded_clipped_noise`` (cells out of 2^63), built once per fit.

        A pure-ε noise (``pure_epsilon``) has its cells moved by
        ``exact_cells.nudge_folded_to_epsilon`` so the clipped output law is ε-DP in exact
        integers: the float pmf's rounding (the largest cell takes the remainder) would
        otherwise leave ratios up to ε + 5·10⁻¹³ (Laplace, ε = 5).
        """
        if self._noise_table is None:
            cdf = cumulative_cells(self.folded_clipped_noise(), MAX_TABLE_BITS)
            if self.pure_epsilon:
                cdf = nudge_folded_to_epsilon(cdf, check_epsilon(self.epsilon))
            self._noise_table = TableSampler.from_cumulative(cdf, MAX_TABLE_BITS)
        return self._noise_table

    # -- mechanism ------------------------------------------------------------

    def privatize(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Snap to the lattice, add the integer noise, clip (if ``clip``), map back.

        Clipped (the default): ``kernels.clipped_additive``, one raw word per label — its low
        bit the sign, its top 63 bits the magnitude from the exact table of
        ``folded_clipped_noise``. Unclipped, or a lattice above ``MAX_TABLE_SIZE``
        points: the numpy noise sampler ``_sample_noise``.
        """
        if self.clip and self.n_steps_ < MAX_TABLE_SIZE:
            return kernels.clipped_additive(labels, self._lattice, self.noise_table(), rng)
        j = self.lattice_index(labels)
        noisy = j + self._sample_noise(j.shape, rng)
        if self.clip:
            noisy = np.clip(noisy, 0, self.n_steps_)
        return self.lattice_value(noisy)

    def output_probabilities(self, label: float, indices: np.ndarray | None = None) -> np.ndarray:
        """Exact Pr[output = lattice_value(i)] for each i in ``indices`` (default 0..J).

        Clipped: the default covers the whole output law (ends carry the tails).
        Unclipped: outputs beyond the domain exist; ask for them through ``indices``.
        """
        j0 = int(self.lattice_index(np.asarray([label]))[0])
        J = self.n_steps_
        idx = np.arange(J + 1) if indices is None else np.asarray(indices, dtype=np.int64)
        probs = self.noise_pmf(idx - j0)
        if self.clip:
            probs = np.where((idx < 0) | (idx > J), 0.0, probs)
            probs = np.where(idx == 0, self._at_least(np.asarray(j0)), probs)
            probs = np.where(idx == J, self._at_least(np.asarray(J - j0)), probs)
        return np.asarray(probs, dtype=np.float64)

    def conditional_mean(self, labels: np.ndarray) -> np.ndarray:
        """Exact E[ŷ | y] per label; with clipping x_j + step·(H(J − j) − H(j)), else x_j."""
        j = self.lattice_index(labels)
        center = self.lattice_value(j)
        if not self.clip:
            return center
        h, _ = self._moment_tables()
        return center + self.step_ * (h[self.n_steps_ - j] - h[j])

    def loss_under(self, prior: Prior) -> float:
        """Exact E[(ŷ − y)²] for y ~ prior.

        E[(ŷ − y)²] = step²·E[(ŷ_idx − j)²] + 2(x_j − y)·step·E[ŷ_idx − j] + (x_j − y)²,
        with the clipped moments from H and G, or E[N²] and 0 without clipping.
        """
        j, err, p = self._loss_terms(prior)
        J = self.n_steps_
        if self.clip:
            h, g = self._moment_tables()
            second = g[j] + g[J - j]
            first = h[J - j] - h[j]
        else:
            second = np.full(j.shape, self.noise_second_moment())
            first = np.zeros(j.shape)
        step = self.step_
        per_label = step * step * second + 2.0 * err * step * first + err * err
        return float(np.dot(p, per_label))

    def _spec_common(self) -> dict:
        return {
            "epsilon": float(self.epsilon),
            "variant": self.variant_,
            "domain": self.domain.to_spec(),
            "step": float(self.step_),
            "clip": bool(self.clip),
        }


# --------------------------------------------------------------------------- #
# Laplace                                                                      #
# --------------------------------------------------------------------------- #


class Laplace(AdditiveLatticeMechanism):
    """ε-DP Laplace on the lattice: N two-sided geometric, P(N = k) ∝ α^|k|, α = e^{−ε/J}.

    "continuous" = Def. 23 realized on the fine lattice, "discrete" = Def. 22
    (DLap(Δ/ε) on integer labels). Fitted: ``alpha_``, ``scale_`` = (high − low)/ε.
    Sampling: clipped, the nudged exact table; unclipped (or beyond ``MAX_TABLE_SIZE``), the
    exact integer discrete Laplace sampler of ``exact_noise`` (rate ε/J rounded down).
    """

    name: ClassVar[str] = "laplace"

    def _fit_noise(self, epsilon: float) -> None:
        self._log_alpha = -epsilon / self.n_steps_
        self.alpha_ = math.exp(self._log_alpha)
        self.scale_ = self.domain.width / epsilon

    def noise_pmf(self, k: np.ndarray) -> np.ndarray:
        k = np.abs(np.asarray(k, dtype=np.float64))
        return (-math.expm1(self._log_alpha) / (1.0 + self.alpha_)) * np.exp(self._log_alpha * k)

    def noise_survival(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        return np.exp(self._log_alpha * (t + 1.0)) / (1.0 + self.alpha_)

    def noise_second_moment(self) -> float:
        return 2.0 * self.alpha_ / math.expm1(self._log_alpha) ** 2

    def _sample_noise(self, size, rng: np.random.Generator) -> np.ndarray:
        """Exact discrete Laplace of rate ε/J (rounded down), from integers only (``exact_noise``)."""
        n = int(np.prod(size))
        return discrete_laplace(*rate_from_epsilon(float(self.epsilon), self.n_steps_), n, rng).reshape(size)

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon=float(self.epsilon),
            sensitivity=self.domain.width,
            statement=(
                "Laplace on the domain lattice: snapped labels differ by at most J steps "
                "(high − low), noise P(k) ∝ e^{-ε|k|/J} bounds every output's ratio by e^ε"
                + ("; clipping to the domain is post-processing" if self.clip else "")
            ),
        )

    def to_spec(self) -> LaplaceSpec:
        return LaplaceSpec(scale=self.domain.width / float(self.epsilon), **self._spec_common())

    @classmethod
    def from_spec(cls, spec: LaplaceSpec) -> Laplace:
        mech = cls(spec.epsilon, LabelDomain.from_spec(spec.domain), spec.variant, spec.step, spec.clip).fit_to()
        _check_close(mech.scale_, spec.scale, "scale")
        return mech


# --------------------------------------------------------------------------- #
# Staircase                                                                    #
# --------------------------------------------------------------------------- #


class Staircase(AdditiveLatticeMechanism):
    """ε-DP staircase (Geng & Viswanath 2014; Ghazi et al. Def. 24, 25) with period J.

    P(N = i) = a·b^{q}·w(u) for |i| = qJ + u, w(u) = 1 for u < r and b for u ≥ r,
    b = e^{−ε}, a = (1 − b)/(2r + 2b(J − r) − (1 − b)). A shift by at most J moves
    the exponent ⌊(|i| + J − r)/J⌋ by at most 1, so every ratio is ≤ e^ε.

    r: "continuous" takes r = round(γ·J), γ = 1/(1 + e^{ε/2}) (the ℓ1-optimal γ of
    Def. 25); "discrete" takes the r in 1..J that minimizes the exact E|N| (Def. 24
    leaves r free). An explicit ``gamma`` sets r = round(γ·J) for either variant.
    Sampling: a sign, a geometric number q of periods, the stair (top with
    probability r/W), a uniform position in it; "−0" is rejected and redrawn.
    """

    name: ClassVar[str] = "staircase"
    params_model: ClassVar[type[Params]] = StaircaseParams

    def __init__(
        self,
        epsilon: float,
        domain: LabelDomain,
        variant: Variant | None = None,
        step: float | None = None,
        clip: bool = True,
        gamma: float | None = None,
    ) -> None:
        super().__init__(epsilon, domain, variant, step, clip)
        self.gamma = gamma

    def _fit_noise(self, epsilon: float) -> None:
        J = self.n_steps_
        if self.gamma is not None:
            r = int(round(float(self.gamma) * J))
        elif self.variant_ == "continuous":
            r = int(round(staircase_gamma(epsilon) * J))
        else:
            r = staircase_l1_optimal_r(epsilon, J)
        r = min(max(r, 1), J)
        b = math.exp(-epsilon)
        one_minus_b = -math.expm1(-epsilon)
        weight = r + b * (J - r)
        self._eps = epsilon
        self.r_ = r
        self.gamma_ = r / J
        self.b_ = b
        self._one_minus_b = one_minus_b
        self._weight = weight
        self.a_ = one_minus_b / (2.0 * weight - one_minus_b)

    def noise_pmf(self, k: np.ndarray) -> np.ndarray:
        m = np.abs(np.asarray(k, dtype=np.int64))
        q, u = np.divmod(m, self.n_steps_)
        exponent = q.astype(np.float64) + (u >= self.r_)
        return self.a_ * np.exp(-self._eps * exponent)

    def noise_survival(self, t: np.ndarray) -> np.ndarray:
        # Σ_{m ≥ t+1} f(m): the rest of the period holding t + 1, then whole periods.
        J, r, b = self.n_steps_, self.r_, self.b_
        q, s = np.divmod(np.asarray(t, dtype=np.int64) + 1, J)
        rest = np.maximum(r - s, 0) + b * (J - np.maximum(s, r))
        later = b * self._weight / self._one_minus_b
        return self.a_ * np.exp(-self._eps * q.astype(np.float64)) * (rest + later)

    def noise_second_moment(self) -> float:
        # E[N²] = 2 Σ_{m≥0} m² f(m) = 2a Σ_q b^q Σ_u (qJ + u)² w(u).
        J, r, b, omb = float(self.n_steps_), float(self.r_), self.b_, self._one_minus_b
        u1 = 0.5 * r * (r - 1.0) + b * 0.5 * (J * (J - 1.0) - r * (r - 1.0))
        u2 = _sum_of_squares_below(r) + b * (_sum_of_squares_below(J) - _sum_of_squares_below(r))
        s0, s1, s2 = 1.0 / omb, b / omb**2, b * (1.0 + b) / omb**3
        return 2.0 * self.a_ * (J * J * self._weight * s2 + 2.0 * J * u1 * s1 + u2 * s0)

    def _sample_noise(self, size, rng: np.random.Generator) -> np.ndarray:
        J, r = self.n_steps_, self.r_
        out = np.empty(size, dtype=np.int64).ravel()
        todo = np.arange(out.size)
        top_probability = r / self._weight
        while todo.size:
            n = todo.size
            periods = rng.geometric(self._one_minus_b, size=n).astype(np.int64) - 1
            top = rng.random(n) < top_probability
            position = np.where(
                top,
                rng.integers(0, r, size=n),
                rng.integers(min(r, J - 1), J, size=n),  # only used when r < J
            )
            magnitude = periods * J + position
            negative = rng.integers(0, 2, size=n).astype(bool)
            out[todo] = np.where(negative, -magnitude, magnitude)
            todo = todo[negative & (magnitude == 0)]  # "−0" would double P(0): redraw
        return out.reshape(size)

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon=float(self.epsilon),
            sensitivity=self.domain.width,
            statement=(
                "Staircase on the domain lattice with period J (= high − low): a shift of at most "
                "J steps changes the stair exponent by at most one, so every output's ratio is ≤ e^ε"
                + ("; clipping to the domain is post-processing" if self.clip else "")
            ),
        )

    def to_spec(self) -> StaircaseSpec:
        return StaircaseSpec(r=self.r_, gamma=self.gamma_, **self._spec_common())

    @classmethod
    def from_spec(cls, spec: StaircaseSpec) -> Staircase:
        domain = LabelDomain.from_spec(spec.domain)
        mech = cls(spec.epsilon, domain, spec.variant, spec.step, spec.clip)
        mech.gamma = spec.r / max(1, int(round(domain.width / spec.step)))
        mech.fit_to()
        if mech.r_ != spec.r:
            raise ValueError("staircase spec: r does not match the lattice")
        return mech


# --------------------------------------------------------------------------- #
# Gaussian                                                                     #
# --------------------------------------------------------------------------- #


class Gaussian(AdditiveLatticeMechanism):
    """(ε, δ)-DP Gaussian rounded to the lattice: N = round(σ·Z), σ = σ_BW(ε, δ)·J.

    σ is the analytic calibration of Balle & Wang (2018) for sensitivity J steps.
    Rounding is a deterministic map of the continuous Gaussian output, so the
    lattice law inherits (ε, δ) exactly by post-processing (and so does clipping);
    its pmf is P(N = k) = Φ((k + ½)/σ) − Φ((k − ½)/σ). Sampling: rint(σ·Z) with
    numpy's float64 normal generator — the integer law is exact up to float64
    rounding of Z; no support truncation, so nothing has to be added to δ.
    Fitted: ``sigma_`` (lattice steps), ``sigma_label_`` (label units).
    """

    name: ClassVar[str] = "gaussian"
    params_model: ClassVar[type[Params]] = GaussianParams
    pure_epsilon: ClassVar[bool] = False

    def __init__(
        self,
        epsilon: float,
        domain: LabelDomain,
        delta: float = DEFAULT_GAUSSIAN_DELTA,
        variant: Variant | None = None,
        step: float | None = None,
        clip: bool = True,
    ) -> None:
        super().__init__(epsilon, domain, variant, step, clip)
        self.delta = delta

    def _fit_noise(self, epsilon: float) -> None:
        sigma_unit = analytic_gaussian_sigma(epsilon, self.delta, 1.0)
        self.sigma_ = sigma_unit * self.n_steps_
        self.sigma_label_ = sigma_unit * self.domain.width

    def noise_pmf(self, k: np.ndarray) -> np.ndarray:
        m = np.abs(np.asarray(k, dtype=np.float64))
        scale = 1.0 / (self.sigma_ * math.sqrt(2.0))
        lo, hi = (m - 0.5) * scale, (m + 0.5) * scale
        # erf differences where the arguments are small, erfc differences in the tails.
        near = 0.5 * (special.erf(hi) - special.erf(lo))
        far = 0.5 * (special.erfc(lo) - special.erfc(hi))
        pmf = np.where(lo < 0.5, near, far)
        return np.where(m == 0, special.erf(0.5 * scale), pmf)

    def noise_survival(self, t: np.ndarray) -> np.ndarray:
        return special.ndtr(-(np.asarray(t, dtype=np.float64) + 0.5) / self.sigma_)

    def noise_second_moment(self) -> float:
        """E[round(σZ)²]: σ² + 1/12 (exact to float64 for σ ≥ 3, see the module constant), else summed."""
        sigma = self.sigma_
        if sigma >= ROUNDED_GAUSSIAN_SHEPPARD_SIGMA:
            return sigma * sigma + 1.0 / 12.0
        k = np.arange(1, int(math.ceil(40.0 * sigma)) + 3, dtype=np.float64)
        return float(2.0 * np.dot(k * k, self.noise_pmf(k)))

    def _sample_noise(self, size, rng: np.random.Generator) -> np.ndarray:
        return np.rint(self.sigma_ * rng.standard_normal(size)).astype(np.int64)

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon=float(self.epsilon),
            delta=float(self.delta),
            sensitivity=self.domain.width,
            statement=(
                "Gaussian with the analytic σ of Balle & Wang (2018) for sensitivity high − low, "
                "rounded to the lattice (post-processing)"
                + ("; clipping to the domain is post-processing" if self.clip else "")
            ),
        )

    def to_spec(self) -> GaussianSpec:
        return GaussianSpec(delta=float(self.delta), sigma=float(self.sigma_label_), **self._spec_common())

    @classmethod
    def from_spec(cls, spec: GaussianSpec) -> Gaussian:
        domain = LabelDomain.from_spec(spec.domain)
        mech = cls(spec.epsilon, domain, spec.delta, spec.variant, spec.step, spec.clip).fit_to()
        _check_close(mech.sigma_label_, spec.sigma, "sigma")
        return mech


# --------------------------------------------------------------------------- #
# Exponential mechanism = range-restricted Laplace                             #
# --------------------------------------------------------------------------- #


class Exponential(LatticeMechanism):
    """ε-DP exponential mechanism over the domain lattice, score −|ŷ − y| (Ghazi et al. App. F).

    P(i | j) = α^{|i−j|} / Z(j) over i = 0..J, α = e^{−ε/(2J)}: the score has
    sensitivity J steps, so McSherry–Talwar's factor 2 gives scale 2Δ/ε in label
    units. Outputs never leave the domain (no clipping). Sampling is exact and
    rejection-free: pick "stay", "left" or "right" by their masses, then a
    truncated geometric distance 1 + (G mod m) (memorylessness makes it exact).
    The exact worst-case ratio on the lattice is e^{ε/2} (normalizers of the two
    extreme inputs are equal); the guarantee states the paper's ε all the same.
    """

    name: ClassVar[str] = "exponential"

    def _fit_noise(self, epsilon: float) -> None:
        J = self.n_steps_
        self._log_alpha = -epsilon / (2.0 * J)
        self.alpha_ = math.exp(self._log_alpha)
        self.scale_ = 2.0 * self.domain.width / epsilon
        self._tables: tuple[np.ndarray, np.ndarray] | None = None
        self._noise_table: TableSampler | None = None

    def _geometric_mass(self, t: np.ndarray) -> np.ndarray:
        """Σ_{d=1}^{t} α^d = α(1 − α^t)/(1 − α), in expm1 form for α near 1."""
        t = np.asarray(t, dtype=np.float64)
        return self.alpha_ * np.expm1(self._log_alpha * t) / math.expm1(self._log_alpha)

    def _normalizer(self, j: np.ndarray) -> np.ndarray:
        return 1.0 + self._geometric_mass(j) + self._geometric_mass(self.n_steps_ - j)

    def _moment_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """Prefix sums over d = 1..t of d·α^d and d²·α^d, t = 0..J (built on first use)."""
        if self._tables is None:
            d = np.arange(self.n_steps_ + 1, dtype=np.float64)
            powers = np.exp(self._log_alpha * d)
            powers[0] = 0.0
            self._tables = (np.cumsum(d * powers), np.cumsum(d * d * powers))
        return self._tables

    def folded_noise(self) -> np.ndarray:
        """Pr[|D| = m], m = 0..J, for D two-sided geometric (∝ α^|d|) truncated to [−J, J]."""
        m = np.arange(self.n_steps_ + 1, dtype=np.float64)
        weights = 2.0 * np.exp(self._log_alpha * m)
        weights[0] = 1.0
        return weights / weights.sum()

    def noise_table(self) -> TableSampler:
        """The exact table of ``folded_noise`` (cells out of 2^63), built once per fit."""
        if self._noise_table is None:
            self._noise_table = TableSampler.from_probabilities(self.folded_noise())
        return self._noise_table

    def privatize(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Output j ± m (fair sign, m from ``noise_table``), redrawn while it leaves [0, J].

        P(i | j) ∝ α^|i − j| on 0..J is D conditioned on j + D ∈ [0, J], so rejection is
        exact; every j keeps at least one full side, so at most ~2 draws per label.
        Lattices above ``MAX_TABLE_SIZE`` points use :meth:`privatize_numpy`.
        """
        if self.n_steps_ < MAX_TABLE_SIZE:
            return kernels.exponential(labels, self._lattice, self.noise_table(), rng)
        return self.privatize_numpy(labels, rng)

    def privatize_numpy(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Direction by the masses, then a truncated geometric distance (numpy, any J)."""
        j = self.lattice_index(labels)
        shape, j = j.shape, j.ravel()
        J = self.n_steps_
        n = j.size
        left_mass = self._geometric_mass(j)
        u = rng.random(n) * self._normalizer(j)
        go_left = (u >= 1.0) & (u < 1.0 + left_mass)
        go_right = u >= 1.0 + left_mass
        span = np.maximum(np.where(go_left, j, J - j), 1)
        failures = rng.geometric(-math.expm1(self._log_alpha), size=n).astype(np.int64) - 1
        distance = 1 + failures % span
        out = j + np.where(go_left, -distance, np.where(go_right, distance, 0))
        return self.lattice_value(np.clip(out, 0, J).reshape(shape))

    def output_probabilities(self, label: float, indices: np.ndarray | None = None) -> np.ndarray:
        """Exact Pr[output = lattice_value(i)] for i in ``indices`` (default 0..J); 0 outside."""
        j0 = self.lattice_index(np.asarray([label]))[:1]
        J = self.n_steps_
        idx = np.arange(J + 1) if indices is None else np.asarray(indices, dtype=np.int64)
        probs = np.exp(self._log_alpha * np.abs(idx - j0[0]).astype(np.float64)) / self._normalizer(j0)[0]
        return np.where((idx < 0) | (idx > J), 0.0, probs)

    def conditional_mean(self, labels: np.ndarray) -> np.ndarray:
        """Exact E[ŷ | y] = x_j + step·(Σ_{d≤J−j} dα^d − Σ_{d≤j} dα^d)/Z(j)."""
        j = self.lattice_index(labels)
        p1, _ = self._moment_tables()
        shift = (p1[self.n_steps_ - j] - p1[j]) / self._normalizer(j)
        return self.lattice_value(j) + self.step_ * shift

    def loss_under(self, prior: Prior) -> float:
        """Exact E[(ŷ − y)²] for y ~ prior, from the prefix sums."""
        j, err, p = self._loss_terms(prior)
        J, z = self.n_steps_, self._normalizer(j)
        p1, p2 = self._moment_tables()
        second = (p2[j] + p2[J - j]) / z
        first = (p1[J - j] - p1[j]) / z
        step = self.step_
        return float(np.dot(p, step * step * second + 2.0 * err * step * first + err * err))

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon=float(self.epsilon),
            sensitivity=self.domain.width,
            statement=(
                "Exponential mechanism on the domain lattice, score −|ŷ − y| of sensitivity J steps "
                "(high − low), weights e^{-ε|ŷ−y|/(2J)}: score and normalizer each move the ratio "
                "by at most e^{ε/2}"
            ),
        )

    def to_spec(self) -> ExponentialSpec:
        return ExponentialSpec(
            epsilon=float(self.epsilon),
            variant=self.variant_,
            domain=self.domain.to_spec(),
            step=float(self.step_),
            scale=float(self.scale_),
        )

    @classmethod
    def from_spec(cls, spec: ExponentialSpec) -> Exponential:
        mech = cls(spec.epsilon, LabelDomain.from_spec(spec.domain), spec.variant, spec.step).fit_to()
        _check_close(mech.scale_, spec.scale, "scale")
        return mech


def _check_close(fitted: float, declared: float, what: str) -> None:
    if not math.isclose(fitted, declared, rel_tol=1e-9):
        raise ValueError(f"spec {what} {declared} does not match the mechanism's {fitted}")
