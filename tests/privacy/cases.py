"""The registry of mechanisms under the empirical privacy audit (see test_audit.py).

Adding a mechanism is ONE entry in ``CASES``::

    AuditCase(
        name="laplace_unit_eps1",                       # test id, unique
        claimed_epsilon=1.0,                            # the ε the mechanism's ``guarantee`` states
        mechanism=lambda eps: Laplace(eps, UNIT, variant="discrete").fit_to(),
        extremes=(0.0, 1.0),                            # the neighbouring inputs: the domain's ends
        events=law_events(lambda m: m.lattice_, ordered=True),
        output_lattice=spec_lattice,                    # optional: enables the floating-point test
    )

Fields:

* ``mechanism(eps)`` builds and fits the mechanism with its noise calibrated to ``eps``.
  The suite calls it with ``claimed_epsilon`` (must pass: audit lower bound ≤ claimed ε) and
  with 1.5·``claimed_epsilon`` (the deliberately broken variant: its lower bound must exceed
  the claimed ε, which proves the audit has power). Fit to a fixed *public* prior here.
* ``extremes`` = (lo, hi): the two neighbouring inputs, at the extremes of the domain (if the
  mechanism's worst pair lies elsewhere, e.g. for a prior-dependent mechanism, audit that pair
  in a second entry). Or a callable ``extremes(mech) -> (lo, hi)`` that picks the pair from the
  fitted mechanism's exact law before any sample is drawn (categorical mechanisms: the pair of
  classes with the largest privacy loss, ``worst_class_pair``); it is called on each variant,
  so the broken one is audited on its own worst pair.
* ``events(mech, lo, hi, n_draws, alpha) -> list[Event]``: the events, fixed BEFORE any audit
  sample is drawn — from the exact output law (``law_events`` wraps ``events_from_law`` for
  mechanisms with ``output_probabilities(label)``; ``additive_events`` / ``blocked_law_events``
  for laws with 10⁴–10⁶ atoms, merged into ≤ 2048 blocks of consecutive outputs first) or from
  a pilot sample on an independent generator (``tests.privacy.audit.events_from_pilot``).
* ``sample(mech, x, n, rng) -> outputs`` (optional): n independent outputs on input x; the
  default privatizes n copies of x with the real ``privatize``.
* ``output_lattice(mech) -> array`` (optional): every float the mechanism may output, computed
  from its public parameters (for lattice mechanisms: ``spec_lattice``, i.e. low + step·j with
  the last point = high, from ``to_spec()``). The floating-point test then checks, for awkward
  inputs (0.1, 1/3, lattice points ± 1 ulp, midpoints ± 1 ulp, ...), that every output's bit
  pattern is one of these, so the precision-attack event "output is off the lattice" has
  probability 0 for every input. Not for mechanisms whose outputs are integers (categorical
  class indices, the prior's noised lattice indices): they have no float bits to leak.
* ``extra_inputs`` (optional): more awkward inputs for that test; ``claimed_delta`` for (ε, δ)
  mechanisms (the audit then bounds ε from P_a(E) ≤ e^ε P_b(E) + δ; build the events with
  ``law_events(..., delta=...)`` so they are scored for that bound).
* ``sharpness`` (optional, default 0.9): the real mechanism's audit bound must also reach this
  fraction of the claimed ε — evidence the events are near-optimal (and a flag for a mechanism
  that over-noises). Lower it, or set None, only where the claim is knowingly loose at the
  extremes (say why in a comment), e.g. a range-restricted or (ε, δ) mechanism.
* ``broken_factor`` (optional, default 1.5): the broken variant's noise is calibrated to
  ``broken_factor``·ε. Keep 1.5. Only a mechanism whose true ε at the extremes is well below
  its claim may raise it, to the smallest factor at which the variant really violates the
  claim (a 1.5·ε variant of, e.g., the exponential mechanism — true loss ≈ ε/2 between the
  domain ends — is still ε-DP, and no audit can or should flag it); say why in a comment.

Keep each entry ≤ ~10 s in total (both audits use 10⁶ draws per side): vectorized sampling.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tests.privacy.audit import Event, events_from_law

from labeldp.mechanisms import LabelDomain, LaplaceHistogramPrior, RROnBins
from labeldp.mechanisms.additive import Exponential, Gaussian, Laplace, Staircase
from labeldp.mechanisms.categorical import BlockRR, RandomizedResponse, RRWithPrior
from labeldp.mechanisms.contract import Prior
from labeldp.mechanisms.lattice import Lattice
from labeldp.mechanisms.rp_with_prior import (
    NoisyLabelHistogramPrior,
    RPWithPrior,
    StepPrior,
    laplace_noised_indices,
)
from labeldp.mechanisms.unbiased import UnbiasedRandomizer, input_grid

EventsBuilder = Callable[[Any, Any, Any, int, float], "list[Event]"]


def privatize_copies(mech: Any, x: Any, n: int, rng: np.random.Generator) -> np.ndarray:
    """n outputs of the real ``privatize`` on n copies of one label."""
    return mech.privatize(np.full(n, x, dtype=np.float64), rng)


@dataclass(frozen=True)
class AuditCase:
    name: str
    claimed_epsilon: float
    mechanism: Callable[[float], Any]
    extremes: tuple[Any, Any] | Callable[[Any], tuple[Any, Any]]
    events: EventsBuilder
    sample: Callable[[Any, Any, int, np.random.Generator], np.ndarray] = privatize_copies
    output_lattice: Callable[[Any], np.ndarray] | None = None
    extra_inputs: tuple[float, ...] = ()
    claimed_delta: float = 0.0
    sharpness: float | None = 0.9
    broken_factor: float = 1.5

    def __str__(self) -> str:  # readable pytest ids
        return self.name

    def neighbours(self, mech: Any) -> tuple[Any, Any]:
        """The audited pair for this fitted mechanism (fixed before any sample is drawn)."""
        return self.extremes(mech) if callable(self.extremes) else self.extremes


def law_events(support: Callable[[Any], np.ndarray], *, ordered: bool = False, delta: float = 0.0) -> EventsBuilder:
    """Events from the exact law ``mech.output_probabilities(x)`` over ``support(mech)``.

    ``delta``: score the candidates for the (ε, δ) bound the audit will compute.
    """

    def build(mech: Any, lo: Any, hi: Any, n_draws: int, alpha: float) -> list[Event]:
        return events_from_law(
            support(mech),
            mech.output_probabilities(lo),
            mech.output_probabilities(hi),
            n_draws=n_draws,
            alpha=alpha,
            ordered=ordered,
            delta=delta,
        )

    return build


def spec_lattice(mech: Any) -> np.ndarray:
    """The lattice a spec with ``domain`` and ``step`` declares: low + step·j, j = 0..J, last = high.

    Computed from the public spec (what the features party sees), not from the sampler's code.
    """
    spec = mech.to_spec()
    low, high, step = float(spec.domain.low), float(spec.domain.high), float(spec.step)
    n_steps = int(round((high - low) / step))
    j = np.arange(n_steps + 1)
    return np.where(j == n_steps, high, low + step * j.astype(np.float64))


# -- RR-on-Bins ----------------------------------------------------------------------

RR_GRID = np.linspace(0.0, 10.0, 11)
RR_PROBS = np.array([1, 2, 4, 6, 8, 9, 8, 6, 4, 2, 1], dtype=np.float64) / 51.0  # a fixed public prior


def _rr(eps: float) -> RROnBins:
    return RROnBins(eps).fit_to(Prior(RR_GRID, RR_PROBS))


def _rr_outputs(mech: RROnBins) -> np.ndarray:
    return np.asarray(mech.to_spec().outputs, dtype=np.float64)


# -- discrete Laplace ----------------------------------------------------------------

UNIT = LabelDomain("real", 0.0, 1.0)
AWKWARD = LabelDomain("real", -1.0 / 3.0, 2.9)  # neither end nor step is a binary fraction
COUNTS = LabelDomain("integer", 0, 20)


# -- Laplace histogram prior ---------------------------------------------------------


class HistogramPairs:
    """``LaplaceHistogramPrior`` audited through its real ``fit``, 10⁶ datasets per call.

    One small dataset: public grid BLOCK (4 cells), labels BASE plus one moving label at the
    lowest cell (input lo = BLOCK[0]) or the highest (hi = BLOCK[-1]) — neighbours under
    replace-one. The output audited is the pair of noisy counts of those two cells (the only
    counts whose law differs). Calling ``fit`` 10⁶ times would take minutes, so one ``fit``
    runs on n disjoint copies of the small dataset laid side by side on one grid of 4n cells:
    ``fit`` adds i.i.d. noise per cell (its design), so the n pairs are n independent draws of
    the small dataset's pair — produced by the real snapping, counting, calibration
    (α = e^{−ε/2}), noise and clipping code.
    """

    BLOCK = np.array([0.0, 1.0, 2.0, 3.0])
    BASE = (1.0, 3.0)  # cell counts without the moving label: [0, 1, 0, 1]

    def __init__(self, epsilon: float) -> None:
        self.epsilon = epsilon
        self.prior = LaplaceHistogramPrior(epsilon, self.BLOCK)

    @property
    def guarantee(self):
        return self.prior.guarantee

    def sample(self, x: float, n: int, rng: np.random.Generator) -> np.ndarray:
        k = self.BLOCK.size
        offsets = (np.arange(n) * k).astype(np.float64)[:, None]
        grid = (offsets + self.BLOCK[None, :]).ravel()
        labels = (offsets + np.array([*self.BASE, x])[None, :]).ravel()
        noisy = LaplaceHistogramPrior(self.epsilon, grid).fit(labels, rng).noisy_counts_
        return noisy.reshape(n, k)[:, [0, k - 1]]

    def base_counts(self, x: float) -> tuple[int, int]:
        labels = np.array([*self.BASE, x])
        return int(np.sum(labels == self.BLOCK[0])), int(np.sum(labels == self.BLOCK[-1]))

    def cell_law(self, base: int, top: int) -> np.ndarray:
        """Pr[max(base + Z, 0) = c], c = 0..top, Z two-sided geometric with the fitted α."""
        alpha = LaplaceHistogramPrior(self.epsilon, self.BLOCK).fit(self.BLOCK, np.random.default_rng(0)).alpha_
        c = np.arange(top + 1)
        pmf = (1 - alpha) / (1 + alpha) * alpha ** np.abs(c - base).astype(np.float64)
        pmf[0] = alpha**base / (1 + alpha)  # Pr[Z <= −base]
        return pmf


def _histogram_events(mech: HistogramPairs, lo: float, hi: float, n_draws: int, alpha: float) -> list[Event]:
    top = max(*mech.base_counts(lo), *mech.base_counts(hi)) + int(math.ceil(80.0 / mech.epsilon))
    width = top + 1

    def law(x: float) -> np.ndarray:
        b_low, b_high = mech.base_counts(x)
        return np.outer(mech.cell_law(b_low, top), mech.cell_law(b_high, top)).ravel()

    def key(out: np.ndarray) -> np.ndarray:
        inside = np.all((out >= 0) & (out <= top), axis=1)
        return np.where(inside, out[:, 0] * width + out[:, 1], -1)

    return events_from_law(np.arange(width * width), law(lo), law(hi), n_draws=n_draws, alpha=alpha, key=key)


def _histogram_sample(mech: HistogramPairs, x: float, n: int, rng: np.random.Generator) -> np.ndarray:
    return mech.sample(x, n, rng)


# -- additive baselines (additive.py) ---------------------------------------------------

SMALL_INT = LabelDomain("integer", 0, 30)
ODD = LabelDomain("real", -0.7, 0.9)  # low + (high − low)/J·J ≠ high in float64 (off by 1 ulp)
TAIL_PERIODS = 40.0
"""Unclipped Laplace/staircase: the audited support reaches 40/ε periods of J beyond each end."""
TAIL_SIGMAS = 12.0
"""Unclipped Gaussian: the audited support reaches 12σ beyond each end (tail mass < 1e-32)."""
MAX_BLOCKS = 2048
"""Large exact laws are merged into at most ~this many blocks of consecutive atoms before the
events are chosen (``blocked_law_events``): scoring every atom of a 2^16 lattice costs seconds of
Clopper–Pearson quantiles, and the informative events of these laws (an end atom, a half-line)
survive the merge because blocks start at every anchor."""


def blocked_law_events(
    values: np.ndarray,
    p_a: np.ndarray,
    p_b: np.ndarray,
    *,
    anchors: Sequence[int],
    n_draws: int,
    alpha: float,
    delta: float = 0.0,
    max_blocks: int = MAX_BLOCKS,
) -> list[Event]:
    """``events_from_law`` on an ordered law whose atoms are merged into runs of consecutive values.

    ``values`` ascending (one per atom), ``anchors``: positions where a block must start (e.g. the
    domain ends, so the clipped end atoms stay singletons and "out ≤ low" is a candidate). A
    block is keyed by its first value; outputs outside [values[0], values[-1]] get key NaN, which
    is in no event. Any fixed partition gives valid events; this one keeps the sharp ones.
    """
    values = np.asarray(values, dtype=np.float64)
    n = values.size
    width = max(1, -(-n // max_blocks))
    anchors = np.asarray([a for a in anchors if 0 <= a < n], dtype=np.int64)
    starts = np.unique(np.concatenate([np.arange(0, n, width), anchors]))
    edges = values[starts]
    top = values[-1]
    last: list[Any] = [None, None]  # (outputs, keys): the audit asks every event about one chunk

    def key(out: np.ndarray) -> np.ndarray:
        if out is last[0]:
            return last[1]
        x = np.asarray(out, dtype=np.float64)
        block = np.searchsorted(edges, x, side="right") - 1
        inside = (block >= 0) & (x <= top)
        last[:] = [out, np.where(inside, edges[np.clip(block, 0, edges.size - 1)], np.nan)]
        return last[1]

    return events_from_law(
        edges,
        np.add.reduceat(np.asarray(p_a, dtype=np.float64), starts),
        np.add.reduceat(np.asarray(p_b, dtype=np.float64), starts),
        n_draws=n_draws,
        alpha=alpha,
        key=key,
        ordered=True,
        delta=delta,
    )


def _additive_outputs(mech: Any) -> np.ndarray:
    """Output indices whose law ``output_probabilities`` gives: 0..J, or wider without clipping."""
    J = mech.n_steps_
    if getattr(mech, "clip", True):
        margin = 0
    elif hasattr(mech, "sigma_"):  # Gaussian: σ in lattice steps
        margin = int(math.ceil(TAIL_SIGMAS * mech.sigma_))
    else:  # Laplace, staircase: geometric tails, a factor e^{−ε} per J steps
        margin = int(math.ceil(TAIL_PERIODS * J / float(mech.epsilon)))
    return np.arange(-margin, J + margin + 1, dtype=np.int64)


def additive_events(*, delta: float = 0.0) -> EventsBuilder:
    """Exact-law events of an additive lattice mechanism (clipped or not), keyed by output value."""

    def build(mech: Any, lo: Any, hi: Any, n_draws: int, alpha: float) -> list[Event]:
        idx = _additive_outputs(mech)
        J = mech.n_steps_
        return blocked_law_events(
            mech.lattice_value(idx),
            mech.output_probabilities(lo, idx),
            mech.output_probabilities(hi, idx),
            anchors=[int(a - idx[0]) for a in (0, 1, J, J + 1)],
            n_draws=n_draws,
            alpha=alpha,
            delta=delta,
        )

    return build


def additive_lattice(mech: Any) -> np.ndarray:
    """``spec_lattice`` for clipped mechanisms; unclipped ones may also leave the domain by whole
    steps, low + step·j for j beyond 0..J (the audited support), computed from the same spec."""
    lattice = spec_lattice(mech)
    spec = mech.to_spec()
    if getattr(spec, "clip", True):  # the exponential mechanism never leaves the domain
        return lattice
    low, step, n_steps = float(spec.domain.low), float(spec.step), lattice.size - 1
    j = _additive_outputs(mech)
    outside = j[(j < 0) | (j > n_steps)]
    return np.sort(np.concatenate([lattice, low + step * outside.astype(np.float64)]))


# -- RPWithPrior and its ε₁ prior (rp_with_prior.py) -------------------------------------

RP_PRIOR = StepPrior(np.array([0.0, 0.25, 0.5, 0.75, 1.0]), np.array([0.3, 0.2, 0.2, 0.3]))  # fixed, public
RP_INT_GRID = np.arange(0.0, 31.0)
RP_INT_PROBS = np.exp(-0.5 * ((RP_INT_GRID - 12.0) / 6.0) ** 2)  # a fixed public point-mass prior


def rp_lattice(mech: RPWithPrior) -> np.ndarray:
    """RPWithPrior's outputs from its public spec: low + step·t, t = a1 − z .. a2 + z (t = J → high).

    The range may leave the domain by up to z steps ([A₁ − ζ, A₂ + ζ]), so it is not ``spec_lattice``.
    """
    spec = mech.to_spec()
    low, high = float(spec.domain.low), float(spec.domain.high)
    t = np.arange(spec.a1_index - spec.zeta_steps, spec.a2_index + spec.zeta_steps + 1)
    return np.where(t == spec.n_steps, high, low + float(spec.step) * t.astype(np.float64))


class NoisedIndices:
    """The ε₁ part of RPWithPrior's private prior (Alg. 3): ``laplace_noised_indices`` per label.

    Each label is snapped to the estimator's lattice and released as an unclipped integer index
    plus discrete Laplace noise of sensitivity J; everything after (histogram, nodes, σ) is
    post-processing of those indices, so this per-label release is what ε₁ must cover. Its law
    is written here from the formula, independently of the sampler: P(k) = (1−α)/(1+α)·α^|k−t|,
    α = e^{−ε/J}, over a support reaching 40/ε periods beyond each end (tail mass e^{−40}).
    """

    def __init__(self, epsilon: float, domain: LabelDomain = UNIT) -> None:
        self.epsilon = epsilon
        self.estimator = NoisyLabelHistogramPrior(epsilon, domain)
        self.lattice = Lattice.for_domain(domain, None)  # the estimator's default lattice

    @property
    def guarantee(self):
        return self.estimator.guarantee

    def support(self) -> np.ndarray:
        J = self.lattice.n_steps
        margin = int(math.ceil(TAIL_PERIODS * J / self.epsilon))
        return np.arange(-margin, J + margin + 1, dtype=np.int64)

    def output_probabilities(self, x: float) -> np.ndarray:
        t = int(self.lattice.index(np.asarray([x]))[0])
        alpha = math.exp(-self.epsilon / self.lattice.n_steps)
        return (1 - alpha) / (1 + alpha) * alpha ** np.abs(self.support() - t).astype(np.float64)

    def sample(self, x: float, n: int, rng: np.random.Generator) -> np.ndarray:
        return laplace_noised_indices(np.full(n, x, dtype=np.float64), self.lattice, self.epsilon, rng)


def _noised_events(mech: NoisedIndices, lo: float, hi: float, n_draws: int, alpha: float) -> list[Event]:
    support = mech.support()
    J = mech.lattice.n_steps
    return blocked_law_events(
        support,
        mech.output_probabilities(lo),
        mech.output_probabilities(hi),
        anchors=[int(a - support[0]) for a in (0, 1, J, J + 1)],
        n_draws=n_draws,
        alpha=alpha,
    )


# -- unbiased randomizer (unbiased.py) --------------------------------------------------

TEN = LabelDomain("integer", 0, 10)


def unbiased_outputs(mech: UnbiasedRandomizer) -> np.ndarray:
    """The public output set of the spec (it reaches beyond the domain: [L_ε, U_ε])."""
    return np.asarray(mech.to_spec().outputs, dtype=np.float64)


def _grid_awkward(domain: LabelDomain) -> tuple[float, ...]:
    """Input-grid points ± 1 ulp and midpoints: where unbiased rounding switches rows."""
    grid = input_grid(domain)
    picks = [float(g) for g in grid[[1, 2, grid.size // 2, -2]]]
    mids = [0.5 * (float(grid[i]) + float(grid[i + 1])) for i in (0, grid.size // 3)]
    out = [v for p in picks + mids for v in (p, float(np.nextafter(p, -np.inf)), float(np.nextafter(p, np.inf)))]
    return tuple(out) + (domain.low + domain.width / 3.0, domain.low + 0.1 * domain.width, -0.0, 5e-324)


# -- categorical (categorical.py) -------------------------------------------------------

RRWP_PRIOR = np.array([0.3, 0.25, 0.2, 0.1, 0.1, 0.05])  # k* = 3 at ε = 1 and at 1.5
BLOCK_PRIOR = np.array([0.4, 0.3, 0.2, 0.05, 0.05])  # σ = 1: S₁ = {0, 1, 2}, S₂ = {3, 4} ≠ ∅


def worst_class_pair(mech: Any) -> tuple[int, int]:
    """(y, y') maximizing max_ŷ log(T[y, ŷ] / T[y', ŷ]) on the exact transition matrix.

    Computed from the fitted matrix before any sampling; all-zero columns (outputs outside
    RRWithPrior's Y_k) carry no information and are skipped; a zero against a positive entry
    counts as infinite loss.
    """
    t = mech.transition_matrix()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.log(t[:, None, :]) - np.log(t[None, :, :])  # (y, y', ŷ)
    ratio = np.where((t[:, None, :] == 0) & (t[None, :, :] == 0), -np.inf, ratio)
    loss = ratio.max(axis=2)
    np.fill_diagonal(loss, -np.inf)
    y, y2 = np.unravel_index(int(np.argmax(loss)), loss.shape)
    return int(y), int(y2)


def privatize_classes(mech: Any, y: Any, n: int, rng: np.random.Generator) -> np.ndarray:
    """n outputs of the real ``privatize`` on n copies of one class index."""
    return mech.privatize(np.full(n, int(y), dtype=np.int64), rng)


def class_events() -> EventsBuilder:
    return law_events(lambda m: np.arange(m.transition_matrix().shape[0], dtype=np.int64))


# -- the registry --------------------------------------------------------------------

CASES: list[AuditCase] = [
    AuditCase(
        name="rr_on_bins_eps1",
        claimed_epsilon=1.0,
        mechanism=_rr,
        extremes=(0.0, 10.0),
        events=law_events(lambda m: m.outputs_, ordered=True),
        output_lattice=_rr_outputs,
    ),
    AuditCase(
        name="rr_on_bins_eps3",
        claimed_epsilon=3.0,
        mechanism=_rr,
        extremes=(0.0, 10.0),
        events=law_events(lambda m: m.outputs_, ordered=True),
        output_lattice=_rr_outputs,
    ),
    AuditCase(
        name="laplace_unit_eps1",
        claimed_epsilon=1.0,
        mechanism=lambda eps: Laplace(eps, UNIT, variant="discrete").fit_to(),
        extremes=(UNIT.low, UNIT.high),
        events=law_events(lambda m: m.lattice_, ordered=True),
        output_lattice=spec_lattice,
        extra_inputs=(0.1, 1.0 / 3.0, 0.7, 1e-300, 5e-324, -0.0, -1e6, 1e6),
    ),
    AuditCase(
        name="laplace_awkward_eps3",
        claimed_epsilon=3.0,
        mechanism=lambda eps: Laplace(eps, AWKWARD, variant="discrete", step=0.01).fit_to(),
        extremes=(AWKWARD.low, AWKWARD.high),
        events=law_events(lambda m: m.lattice_, ordered=True),
        output_lattice=spec_lattice,
        extra_inputs=(0.1, 1.0 / 3.0, -0.3, 2.89999999, 0.0, -0.0, 1e-300),
    ),
    AuditCase(
        name="laplace_integer_eps0.5",
        claimed_epsilon=0.5,
        mechanism=lambda eps: Laplace(eps, COUNTS, variant="discrete").fit_to(),
        extremes=(COUNTS.low, COUNTS.high),
        events=law_events(lambda m: m.lattice_, ordered=True),
        output_lattice=spec_lattice,
        extra_inputs=(0.5, 0.49999999999999994, 10.5, 19.999999999999996, 1.0 / 3.0),
    ),
    AuditCase(
        name="laplace_histogram_prior_eps1",
        claimed_epsilon=1.0,
        mechanism=HistogramPairs,
        extremes=(HistogramPairs.BLOCK[0], HistogramPairs.BLOCK[-1]),
        events=_histogram_events,
        sample=_histogram_sample,
    ),
    AuditCase(
        name="laplace_histogram_prior_eps0.25",
        claimed_epsilon=0.25,
        mechanism=HistogramPairs,
        extremes=(HistogramPairs.BLOCK[0], HistogramPairs.BLOCK[-1]),
        events=_histogram_events,
        sample=_histogram_sample,
    ),
    # -- additive baselines: every output a lattice point, so all get the floating-point test.
    AuditCase(
        name="laplace_continuous_unit_eps1",  # Def. 23 on the 2^16 lattice, clipped
        claimed_epsilon=1.0,
        mechanism=lambda eps: Laplace(eps, UNIT, variant="continuous").fit_to(),
        extremes=(UNIT.low, UNIT.high),
        events=additive_events(),
        output_lattice=additive_lattice,
        extra_inputs=(0.1, 1.0 / 3.0, 0.7, 1e-300, 5e-324, -0.0, -1e6, 1e6),
    ),
    AuditCase(
        name="laplace_continuous_awkward_eps3",
        claimed_epsilon=3.0,
        mechanism=lambda eps: Laplace(eps, AWKWARD, variant="continuous").fit_to(),
        extremes=(AWKWARD.low, AWKWARD.high),
        events=additive_events(),
        output_lattice=additive_lattice,
        extra_inputs=(0.1, 1.0 / 3.0, -0.3, 2.89999999, 0.0, -0.0, 1e-300),
    ),
    AuditCase(
        name="laplace_discrete_integer_unclipped_eps1",  # Def. 22, no clipping: outputs leave the domain
        claimed_epsilon=1.0,
        mechanism=lambda eps: Laplace(eps, SMALL_INT, variant="discrete", clip=False).fit_to(),
        extremes=(SMALL_INT.low, SMALL_INT.high),
        events=additive_events(),
        output_lattice=additive_lattice,
        extra_inputs=(0.5, 0.49999999999999994, 10.5, 29.999999999999996, 1.0 / 3.0, -5.0, 35.0),
    ),
    AuditCase(
        # γ = 1/(1 + e^{ε/2}) on the 2^16 lattice, clipped. On ODD the top lattice point must be
        # mapped to exactly ``high`` (low + step·J misses it by an ulp): the float test checks it.
        name="staircase_continuous_odd_eps1",
        claimed_epsilon=1.0,
        mechanism=lambda eps: Staircase(eps, ODD, variant="continuous").fit_to(),
        extremes=(ODD.low, ODD.high),
        events=additive_events(),
        output_lattice=additive_lattice,
        extra_inputs=(0.1, 1.0 / 3.0, -0.3, 0.8999999999999999, 0.0, -0.0, 1e-300, -1e6, 1e6),
    ),
    AuditCase(
        name="staircase_discrete_integer_eps2",  # Def. 24, r minimizing the exact E|N|
        claimed_epsilon=2.0,
        mechanism=lambda eps: Staircase(eps, SMALL_INT, variant="discrete").fit_to(),
        extremes=(SMALL_INT.low, SMALL_INT.high),
        events=additive_events(),
        output_lattice=additive_lattice,
        extra_inputs=(0.5, 0.49999999999999994, 10.5, 29.999999999999996, 1.0 / 3.0),
    ),
    AuditCase(
        # (ε, δ) with a large δ, where 10⁶ draws have power: the audit bounds ε by
        # log((P_a(E) − δ)/P_b(E)). Unclipped, so the Neyman–Pearson half-line {out ≥ ½ + εσ²},
        # for which P_a − e^ε P_b = δ exactly (Balle & Wang's calibration is tight: the exact
        # lattice law's best bound is 1.0000), is an event. The 1024-step lattice keeps the
        # unclipped support (±12σ) small; rounding to it is the same code as on 2^16 steps.
        name="gaussian_unit_unclipped_eps1_delta0.1",
        claimed_epsilon=1.0,
        claimed_delta=0.1,
        mechanism=lambda eps: Gaussian(eps, UNIT, delta=0.1, variant="discrete", clip=False).fit_to(),
        extremes=(UNIT.low, UNIT.high),
        events=additive_events(delta=0.1),
        output_lattice=additive_lattice,
        extra_inputs=(0.1, 1.0 / 3.0, 0.7, 1e-300, 5e-324, -0.0, -1e6, 1e6),
    ),
    AuditCase(
        # The default for a real domain: continuous (2^16 steps) and clipped. Clipping is
        # post-processing and here it really lowers the loss: the tight half-line
        # {out ≥ ½ + εσ²} = {out ≥ 1.68} lies beyond the domain end, so the best event is
        # {out = high}; with infinitely many draws the exact law's best bound is 0.807
        # (1.5ε variant: 1.173). So sharpness 0.7 (the audit gets 0.79), not 0.9.
        name="gaussian_unit_eps1_delta0.1",
        claimed_epsilon=1.0,
        claimed_delta=0.1,
        mechanism=lambda eps: Gaussian(eps, UNIT, delta=0.1).fit_to(),
        extremes=(UNIT.low, UNIT.high),
        events=additive_events(delta=0.1),
        output_lattice=additive_lattice,
        extra_inputs=(0.1, 1.0 / 3.0, 0.7, 1e-300, 5e-324, -0.0, -1e6, 1e6),
        sharpness=0.7,
    ),
    AuditCase(
        # Range-restricted Laplace with weights e^{−ε|i−j|/(2J)}: the two domain ends have equal
        # normalizers, so their true privacy loss is ε/2, not ε (the claim is McSherry–Talwar's
        # generic factor 2). Hence sharpness=None, and a variant calibrated to 1.5ε has true loss
        # 0.75ε — still ε-DP, no audit can or should flag it. 2ε is exactly at the claim; 2.5ε
        # (true loss 1.25ε) is the smallest round factor that really violates it.
        name="exponential_unit_eps1",
        claimed_epsilon=1.0,
        mechanism=lambda eps: Exponential(eps, UNIT, variant="continuous").fit_to(),
        extremes=(UNIT.low, UNIT.high),
        events=additive_events(),
        output_lattice=additive_lattice,
        extra_inputs=(0.1, 1.0 / 3.0, 0.7, 1e-300, 5e-324, -0.0, -1e6, 1e6),
        sharpness=None,
        broken_factor=2.5,
    ),
    AuditCase(
        name="exponential_integer_eps2",  # same reasons as exponential_unit_eps1
        claimed_epsilon=2.0,
        mechanism=lambda eps: Exponential(eps, SMALL_INT, variant="discrete").fit_to(),
        extremes=(SMALL_INT.low, SMALL_INT.high),
        events=additive_events(),
        output_lattice=additive_lattice,
        extra_inputs=(0.5, 0.49999999999999994, 10.5, 29.999999999999996, 1.0 / 3.0),
        sharpness=None,
        broken_factor=2.5,
    ),
    # -- RPWithPrior: fitted to a fixed public prior; the domain ends project onto A₁ and A₂.
    AuditCase(
        name="rp_with_prior_unit_eps1",  # step prior, Alg. 1
        claimed_epsilon=1.0,
        mechanism=lambda eps: RPWithPrior(eps, UNIT).fit_to(RP_PRIOR),
        extremes=(UNIT.low, UNIT.high),
        events=law_events(lambda m: m.outputs_, ordered=True),
        output_lattice=rp_lattice,
        extra_inputs=(0.1, 1.0 / 3.0, 0.7, 1e-300, 5e-324, -0.0, -1e6, 1e6),
    ),
    AuditCase(
        name="rp_with_prior_integer_eps2",  # point-mass prior on an integer domain
        claimed_epsilon=2.0,
        mechanism=lambda eps: RPWithPrior(eps, SMALL_INT, zeta=2.0).fit_to(Prior(RP_INT_GRID, RP_INT_PROBS)),
        extremes=(SMALL_INT.low, SMALL_INT.high),
        events=law_events(lambda m: m.outputs_, ordered=True),
        output_lattice=rp_lattice,
        extra_inputs=(0.5, 0.49999999999999994, 10.5, 29.999999999999996, 1.0 / 3.0),
    ),
    AuditCase(
        # ε₁ of the private prior: one label at the low vs the high end of the domain. Outputs are
        # int64 lattice indices (no float bits to leak), so there is no floating-point test.
        name="rp_prior_noised_indices_unit_eps0.5",
        claimed_epsilon=0.5,
        mechanism=NoisedIndices,
        extremes=(UNIT.low, UNIT.high),
        events=_noised_events,
        sample=lambda m, x, n, rng: m.sample(x, n, rng),
    ),
    # -- unbiased randomizer: outputs are the spec's public output values (beyond the domain).
    AuditCase(
        name="unbiased_unit_eps1",
        claimed_epsilon=1.0,
        mechanism=lambda eps: UnbiasedRandomizer(eps, UNIT).fit_to(),
        extremes=(UNIT.low, UNIT.high),
        events=law_events(lambda m: m.outputs_, ordered=True),
        output_lattice=unbiased_outputs,
        extra_inputs=_grid_awkward(UNIT),
    ),
    AuditCase(
        name="unbiased_integer_eps2",
        claimed_epsilon=2.0,
        mechanism=lambda eps: UnbiasedRandomizer(eps, TEN).fit_to(),
        extremes=(TEN.low, TEN.high),
        events=law_events(lambda m: m.outputs_, ordered=True),
        output_lattice=unbiased_outputs,
        extra_inputs=_grid_awkward(TEN),
    ),
    # -- categorical: outputs are class indices (int64), so the floating-point test does not
    # apply (no output_lattice). The pair audited is the one with the largest exact privacy
    # loss in the fitted transition matrix (``worst_class_pair``), chosen before sampling.
    AuditCase(
        name="randomized_response_k5_eps1",
        claimed_epsilon=1.0,
        mechanism=lambda eps: RandomizedResponse(eps, 5).fit_to(),
        extremes=worst_class_pair,
        events=class_events(),
        sample=privatize_classes,
    ),
    AuditCase(
        name="randomized_response_k2_eps3",
        claimed_epsilon=3.0,
        mechanism=lambda eps: RandomizedResponse(eps, 2).fit_to(),
        extremes=worst_class_pair,
        events=class_events(),
        sample=privatize_classes,
    ),
    AuditCase(
        name="rr_with_prior_k6_eps1",  # Y_k = {0, 1, 2} at ε and at 1.5ε
        claimed_epsilon=1.0,
        mechanism=lambda eps: RRWithPrior(eps, 6).fit_to(Prior.over_classes(RRWP_PRIOR)),
        extremes=worst_class_pair,
        events=class_events(),
        sample=privatize_classes,
    ),
    AuditCase(
        name="block_rr_k5_eps1",  # S₂ = {3, 4} non-empty, Δ = S̃₁
        claimed_epsilon=1.0,
        mechanism=lambda eps: BlockRR(eps, 5, sigma=1.0).fit_to(Prior.over_classes(BLOCK_PRIOR)),
        extremes=worst_class_pair,
        events=class_events(),
        sample=privatize_classes,
    ),
]

if len({c.name for c in CASES}) != len(CASES):  # pragma: no cover - registry hygiene
    raise RuntimeError("audit case names must be unique")


def lattice_inputs(lattice: np.ndarray, extra: Sequence[float] = ()) -> list[float]:
    """Awkward inputs for the floating-point test: lattice points and midpoints ± 1 ulp, thirds."""
    lattice = np.sort(np.asarray(lattice, dtype=np.float64))
    low, high = float(lattice[0]), float(lattice[-1])
    size = lattice.size
    picks = np.unique(np.clip([0, 1, 2, size // 3, size // 2, size - 2], 0, size - 1))
    points: list[float] = [low, high]
    for i in picks:
        p = float(lattice[i])
        points += [p, float(np.nextafter(p, -np.inf)), float(np.nextafter(p, np.inf))]
        if i + 1 < lattice.size:
            mid = 0.5 * (p + float(lattice[i + 1]))
            points += [mid, float(np.nextafter(mid, -np.inf)), float(np.nextafter(mid, np.inf))]
    points += [low + (high - low) * f for f in (0.1, 1.0 / 3.0, 2.0 / 3.0, 1.0 / 7.0)]
    points += [float(x) for x in extra]
    return list(dict.fromkeys(points))  # unique, order kept
