"""The registry of mechanisms under the empirical privacy audit (see test_audit.py).

Adding a mechanism is ONE entry in ``CASES``::

    AuditCase(
        name="laplace_unit_eps1",                       # test id, unique
        claimed_epsilon=1.0,                            # the ε the mechanism's ``guarantee`` states
        mechanism=lambda eps: DiscreteLaplace(eps, UNIT).fit(),
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
  mechanisms with ``output_probabilities(label)``) or from a pilot sample on an independent
  generator (``labeldp.audit.events_from_pilot``).
* ``sample(mech, x, n, rng) -> outputs`` (optional): n independent outputs on input x; the
  default privatizes n copies of x with the real ``privatize``.
* ``output_lattice(mech) -> array`` (optional): every float the mechanism may output, computed
  from its public parameters (for lattice mechanisms: ``spec_lattice``, i.e. low + step·j with
  the last point = high, from ``to_spec()``). The floating-point test then checks, for awkward
  inputs (0.1, 1/3, lattice points ± 1 ulp, midpoints ± 1 ulp, ...), that every output's bit
  pattern is one of these, so the precision-attack event "output is off the lattice" has
  probability 0 for every input.
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
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from labeldp.audit import Event, events_from_law
from labeldp.mechanisms import DiscreteLaplace, LabelDomain, LaplaceHistogramPrior, RROnBins
from labeldp.mechanisms.additive import Exponential, Gaussian, Laplace, Staircase
from labeldp.mechanisms.categorical import BlockRR, RandomizedResponse, RRWithPrior
from labeldp.mechanisms.rp_with_prior import (
    NoisyLabelHistogramPrior,
    RPWithPrior,
    StepPrior,
    _Lattice,
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
    return RROnBins(eps).fit(RR_GRID, RR_PROBS)


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
        mechanism=lambda eps: DiscreteLaplace(eps, UNIT).fit(),
        extremes=(UNIT.low, UNIT.high),
        events=law_events(lambda m: m.lattice_, ordered=True),
        output_lattice=spec_lattice,
        extra_inputs=(0.1, 1.0 / 3.0, 0.7, 1e-300, 5e-324, -0.0, -1e6, 1e6),
    ),
    AuditCase(
        name="laplace_awkward_eps3",
        claimed_epsilon=3.0,
        mechanism=lambda eps: DiscreteLaplace(eps, AWKWARD, step=0.01).fit(),
        extremes=(AWKWARD.low, AWKWARD.high),
        events=law_events(lambda m: m.lattice_, ordered=True),
        output_lattice=spec_lattice,
        extra_inputs=(0.1, 1.0 / 3.0, -0.3, 2.89999999, 0.0, -0.0, 1e-300),
    ),
    AuditCase(
        name="laplace_integer_eps0.5",
        claimed_epsilon=0.5,
        mechanism=lambda eps: DiscreteLaplace(eps, COUNTS).fit(),
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
