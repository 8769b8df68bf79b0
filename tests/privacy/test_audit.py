"""Empirical privacy audit of every registered mechanism (cases.py), and of the audit itself.

For each case: 10⁶ draws per side on the two extreme inputs (categorical mechanisms: the pair of
classes with the largest exact privacy loss), events fixed before sampling,
Clopper–Pearson with Bonferroni at overall α = 0.05. The real mechanism's ε lower bound must
not exceed its claim; the same audit of a broken variant (noise calibrated to 1.5·ε while
ε is claimed; 2.5·ε for the exponential mechanism, see cases.py) must exceed it — that check
stays in the suite as proof of power. Lattice
mechanisms also get the floating-point test: no output, for any awkward input, leaves the
public lattice by even one bit.
"""

from __future__ import annotations

import functools
import math
import zlib

import numpy as np
import pytest
from scipy.stats import binomtest
from tests.privacy.audit import (
    AuditResult,
    Event,
    audit_epsilon_lower_bound,
    audit_summary,
    bonferroni,
    clopper_pearson,
    events_from_law,
    events_from_pilot,
    off_lattice,
)

from labeldp.mechanisms.categorical import max_privacy_loss

from .cases import CASES, AuditCase, blocked_law_events, lattice_inputs, worst_class_pair

N_DRAWS = 1_000_000  # per side
ALPHA = 0.05  # overall, Bonferroni-split over the events inside the audit
BROKEN_FACTOR = 1.5  # the broken variant's noise is calibrated to 1.5·ε (a case may raise it; see cases.py)
N_FLOAT = 100_000  # draws per awkward input in the floating-point test

LATTICE_CASES = [c for c in CASES if c.output_lattice is not None]


def _rng(case: AuditCase, purpose: int) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(case.name.encode()), purpose])


@functools.cache
def _audit(case_name: str, noise_factor: float) -> AuditResult:
    """Audit the case's mechanism with noise calibrated to noise_factor·ε against the claimed ε."""
    case = next(c for c in CASES if c.name == case_name)
    mech = case.mechanism(case.claimed_epsilon * noise_factor)
    lo, hi = case.neighbours(mech)  # fixed from public parameters / the exact law, before sampling
    events = case.events(mech, lo, hi, N_DRAWS, ALPHA)  # fixed before any sample is drawn
    return audit_epsilon_lower_bound(
        lambda n, rng: case.sample(mech, lo, n, rng),
        lambda n, rng: case.sample(mech, hi, n, rng),
        events,
        N_DRAWS,
        ALPHA,
        _rng(case, 1 if noise_factor == 1.0 else 2),
        delta=case.claimed_delta,
    )


# -- the mechanisms ---------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=str)
def test_audit_does_not_refute_the_claimed_epsilon(case: AuditCase) -> None:
    guarantee = getattr(case.mechanism(case.claimed_epsilon), "guarantee", None)
    if guarantee is not None:  # the claim audited is the one the code states
        assert guarantee.epsilon == case.claimed_epsilon and guarantee.delta == case.claimed_delta
    result = _audit(case.name, 1.0)
    assert result.epsilon_lower_bound <= case.claimed_epsilon, audit_summary(result)
    # The audit is sharp: with its chosen events it certifies most of the claimed ε.
    # (It would also flag a mechanism that wastes budget by over-noising.)
    if case.sharpness is not None:
        assert result.epsilon_lower_bound >= case.sharpness * case.claimed_epsilon, audit_summary(result)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_audit_detects_noise_calibrated_to_1_5_epsilon(case: AuditCase) -> None:
    """The must-fail check, kept: the audit of a broken variant exceeds the claimed ε."""
    assert case.broken_factor >= BROKEN_FACTOR
    result = _audit(case.name, case.broken_factor)
    assert not result.passes(case.claimed_epsilon), audit_summary(result)


@pytest.mark.parametrize("case", LATTICE_CASES, ids=str)
def test_outputs_are_exact_lattice_values_for_awkward_inputs(case: AuditCase) -> None:
    """Precision attack (Mironov 2012): P(output off the lattice) = 0 for every input, bit for bit."""
    mech = case.mechanism(case.claimed_epsilon)
    lattice = case.output_lattice(mech)
    assert lattice.size == np.unique(lattice).size
    rng = _rng(case, 3)
    seen = []
    for x in lattice_inputs(lattice, case.extra_inputs):
        out = case.sample(mech, x, N_FLOAT, rng)
        off = off_lattice(out, lattice)
        assert not off.any(), f"input {x!r}: {int(off.sum())} outputs off the lattice, e.g. {out[off][:3]!r}"
        seen.append(np.unique(np.asarray(out, dtype=np.float64).view(np.uint64)))
    # Every bit pattern that ever came out is a lattice point computed from the public spec;
    # so the low-order mantissa bits are a function of the lattice index alone.
    all_bits = np.unique(np.concatenate(seen))
    assert np.isin(all_bits, lattice.view(np.uint64)).all()


CATEGORICAL_CASES = [c for c in CASES if c.extremes is worst_class_pair]


@pytest.mark.parametrize("case", CATEGORICAL_CASES, ids=str)
def test_categorical_pair_is_the_worst_and_outputs_are_class_indices(case: AuditCase) -> None:
    """The audited pair attains the matrix's exact privacy loss (so a broken entry anywhere would
    show up on it), and outputs are int class indices: no float bits, hence no lattice test."""
    for factor in (1.0, case.broken_factor):
        mech = case.mechanism(case.claimed_epsilon * factor)
        t = mech.transition_matrix()
        y, y2 = worst_class_pair(mech)
        used = (t[y] > 0) | (t[y2] > 0)
        assert y != y2
        assert np.max(np.log(t[y, used]) - np.log(t[y2, used])) == pytest.approx(max_privacy_loss(t), abs=1e-12)
    out = case.sample(mech, y, 1000, _rng(case, 4))
    assert out.dtype.kind == "i" and out.min() >= 0 and out.max() < t.shape[0]


# -- the audit itself -------------------------------------------------------------


def test_clopper_pearson_matches_scipy_binomtest() -> None:
    n = 1000
    for k in [0, 1, 17, 500, 999, 1000]:
        lower, upper = clopper_pearson(k, n, 0.01)
        ref = binomtest(k, n).proportion_ci(confidence_level=0.99, method="exact")
        assert float(lower) == pytest.approx(ref.low, abs=1e-12)
        assert float(upper) == pytest.approx(ref.high, abs=1e-12)
    lower, upper = clopper_pearson(np.array([0, n]), n, 0.05)
    assert lower[0] == 0.0 and upper[1] == 1.0
    assert upper[0] == pytest.approx(1 - 0.025 ** (1 / n))


def test_bonferroni_splits_alpha() -> None:
    assert bonferroni(0.05, 10) == pytest.approx(0.005)
    with pytest.raises(ValueError):
        bonferroni(0.05, 0)


def _bernoulli(p: float):
    return lambda n, rng: rng.random(n) < p


def test_audit_bound_is_a_valid_lower_bound() -> None:
    """On a pair that is exactly ε-DP (tight), the bound exceeds ε in at most ~α of repetitions."""
    eps, n, reps = 1.0, 2_000, 300
    p = math.exp(eps) / (1 + math.exp(eps))  # Bernoulli(p) vs Bernoulli(1 − p): ratio e^ε exactly
    events = [Event("true", lambda out: out), Event("false", lambda out: ~out)]
    rng = np.random.default_rng(7)
    bounds = [
        audit_epsilon_lower_bound(_bernoulli(p), _bernoulli(1 - p), events, n, 0.05, rng).epsilon_lower_bound
        for _ in range(reps)
    ]
    assert np.mean(np.array(bounds) > eps) <= 0.05
    assert np.median(bounds) > 0.6 * eps  # and it is not vacuous


def test_audit_reports_the_worst_event_and_both_directions() -> None:
    events = [Event("true", lambda out: out), Event("false", lambda out: ~out)]
    rng = np.random.default_rng(1)
    result = audit_epsilon_lower_bound(_bernoulli(0.2), _bernoulli(0.6), events, 100_000, 0.05, rng)
    assert result.worst_event == "true" and result.direction == "b>a"  # 0.6 / 0.2 beats 0.8 / 0.4
    assert result.epsilon_lower_bound == pytest.approx(math.log(0.6 / 0.2), abs=0.05)
    assert result.events[1].epsilon_ab == pytest.approx(math.log(0.8 / 0.4), abs=0.05)
    assert result.count_a + result.events[1].count_a == 100_000  # "true" and "false" partition a


def test_audit_with_delta_subtracts_it() -> None:
    events = [Event("true", lambda out: out)]
    plain = audit_epsilon_lower_bound(_bernoulli(0.3), _bernoulli(0.1), events, 100_000, 0.05, np.random.default_rng(2))
    loose = audit_epsilon_lower_bound(
        _bernoulli(0.3), _bernoulli(0.1), events, 100_000, 0.05, np.random.default_rng(2), delta=0.1
    )
    assert loose.epsilon_lower_bound < plain.epsilon_lower_bound
    assert loose.epsilon_lower_bound == pytest.approx(math.log(0.2 / 0.1), abs=0.06)


def test_audit_checks_event_shapes_and_chunks_consistently() -> None:
    bad = [Event("scalar", lambda out: np.array(True))]
    with pytest.raises(ValueError):
        audit_epsilon_lower_bound(_bernoulli(0.5), _bernoulli(0.5), bad, 10, 0.05, np.random.default_rng(0))
    events = [Event("true", lambda out: out)]
    whole = audit_epsilon_lower_bound(_bernoulli(0.3), _bernoulli(0.1), events, 10_000, 0.05, np.random.default_rng(3))
    parts = audit_epsilon_lower_bound(
        _bernoulli(0.3), _bernoulli(0.1), events, 10_000, 0.05, np.random.default_rng(3), chunk_size=999
    )
    assert whole.n_draws == parts.n_draws == 10_000
    assert abs(whole.count_a - parts.count_a) < 500  # same law, different stream split


def test_events_from_law_pick_the_likelihood_ratio_extremes() -> None:
    support = np.array([0.0, 1.0, 2.0, 3.0])
    p_a = np.array([0.5, 0.2, 0.2, 0.1])
    p_b = np.array([0.1, 0.2, 0.2, 0.5])
    events = events_from_law(support, p_a, p_b, n_draws=10**6, alpha=0.05, max_events=4, ordered=True)
    assert len(events) == 4
    probe = np.array([0.0, 1.0, 2.0, 3.0])
    members = [tuple(probe[e(probe)]) for e in events]
    assert (0.0,) in members and (3.0,) in members  # the two singletons with ratio 5
    assert len(set(members)) == len(members)  # no duplicates spend Bonferroni budget


def test_pilot_events_also_detect_a_broken_mechanism() -> None:
    """Events from an independent pilot (other seed) instead of the exact law: same verdicts."""
    case = next(c for c in CASES if c.name == "laplace_unit_eps1")
    lo, hi = case.extremes
    for factor, refuted in [(1.0, False), (BROKEN_FACTOR, True)]:
        mech = case.mechanism(case.claimed_epsilon * factor)
        sample_lo = functools.partial(case.sample, mech, lo)
        sample_hi = functools.partial(case.sample, mech, hi)
        events = events_from_pilot(
            sample_lo, sample_hi, n_pilot=100_000, rng=np.random.default_rng(99), n_draws=N_DRAWS,
            alpha=ALPHA, ordered=True,
        )
        result = audit_epsilon_lower_bound(sample_lo, sample_hi, events, N_DRAWS, ALPHA, np.random.default_rng(100))
        assert (not result.passes(case.claimed_epsilon)) is refuted, audit_summary(result)


def test_blocked_law_events_keep_anchored_atoms_and_drop_outsiders() -> None:
    """Merged events are unions of whole blocks; anchors start blocks; off-support outputs hit none."""
    values = np.arange(10_000, dtype=np.float64) * 0.5
    p_a = np.full(values.size, 1.0 / values.size)
    p_b = p_a.copy()
    p_a[0], p_b[0] = p_a[0] * 50, p_b[0] / 50  # a lone informative atom at an anchor
    p_a, p_b = p_a / p_a.sum(), p_b / p_b.sum()
    events = blocked_law_events(values, p_a, p_b, anchors=[0, 1], n_draws=N_DRAWS, alpha=ALPHA, max_blocks=100)
    assert any(e(values).sum() == 1 and e(values)[0] for e in events)  # {values[0]} kept as a singleton
    probe = np.array([-0.5, values[-1] + 0.5, np.nan])
    assert not any(e(probe).any() for e in events)
    for e in events:  # blocks: [0], [1, 100), then runs of 100 atoms; an event takes whole blocks
        hits = e(values)
        assert np.all(hits[1:100] == hits[1])
        rows = hits[100:].reshape(-1, 100)
        assert np.all(rows == rows[:, :1])


def test_off_lattice_catches_one_ulp_and_negative_zero() -> None:
    lattice = np.array([0.0, 0.1, 0.2])
    out = np.array([0.0, 0.1, np.nextafter(0.1, 1.0), -0.0, 0.2, 0.30000000000000004, np.nan])
    np.testing.assert_array_equal(off_lattice(out, lattice), [False, False, True, True, False, True, True])
