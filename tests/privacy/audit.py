"""Empirical privacy audit: a statistically valid lower bound on a mechanism's ε.

A mechanism that is (ε, δ)-DP satisfies P_a(E) ≤ e^ε · P_b(E) + δ for every
event E and every pair of neighbouring inputs a, b. Sampling the mechanism
n times on each input and bounding both probabilities with Clopper–Pearson
intervals gives, for each event and each direction,

    ε ≥ log((lower_CP(P_a(E)) − δ) / upper_CP(P_b(E))),

and the maximum over events and directions is a lower bound on the true ε that
holds with probability ≥ 1 − α: every proportion gets a two-sided interval at
level α / (2·#events) (Bonferroni over the 2·#events proportions), so all of them
cover at once with probability ≥ 1 − α. An audit *fails* a mechanism when this
lower bound exceeds the ε it claims.

Why events must be fixed before sampling: the intervals are valid for events
chosen independently of the audit samples. Picking the event that looks most
extreme *in* the audit samples would overstate the bound (selection bias). So
``audit_epsilon_lower_bound`` takes the events as an argument, and they are built
either from the mechanism's exact output law (``events_from_law``) or from a
pilot sample drawn from an independent stream (``events_from_pilot``; give it a
generator with a different seed from the audit's).

Which events: the bound approaches the true ε only with the (near-)optimal event,
the likelihood-ratio level set {o : P_a(o)/P_b(o) ≥ t} (Neyman–Pearson). Both
builders score every singleton, every likelihood-ratio prefix and, for ordered
outputs, every half-line by the bound they are *expected* to give at the audit's
n and α, and keep the best few — so the Bonferroni price stays small.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
from scipy.stats import beta

Sampler = Callable[[int, np.random.Generator], np.ndarray]
"""``sample(n, rng)`` returns n independent outputs of the mechanism on one fixed input
(first axis = draws; extra axes allowed, e.g. a vector of noisy counts per draw)."""

Key = Callable[[np.ndarray], np.ndarray]
"""Maps an output array (n draws) to one comparable atom key per draw (shape (n,))."""

DEFAULT_MAX_EVENTS = 8
DEFAULT_CHUNK = 1_000_000


@dataclass(frozen=True)
class Event:
    """A named predicate over output arrays: ``predicate(outputs)`` is a bool array, one per draw."""

    name: str
    predicate: Callable[[np.ndarray], np.ndarray]

    def __call__(self, outputs: np.ndarray) -> np.ndarray:
        hits = np.asarray(self.predicate(outputs), dtype=bool)
        if hits.shape != (len(outputs),):
            raise ValueError(f"event {self.name!r} must return one bool per draw, got shape {hits.shape}")
        return hits


@dataclass(frozen=True)
class EventResult:
    """Counts of one event on both sides and the ε bound it gives in each direction."""

    event: str
    count_a: int
    count_b: int
    epsilon_ab: float  # from P_a(E) ≤ e^ε P_b(E) + δ
    epsilon_ba: float  # from P_b(E) ≤ e^ε P_a(E) + δ


@dataclass(frozen=True)
class AuditResult:
    """Outcome of one audit: ε lower bound (≥ 0), the event and direction attaining it, all counts."""

    epsilon_lower_bound: float
    worst_event: str
    direction: str  # "a>b" or "b>a"
    count_a: int  # hits of the worst event among the n_draws samples on input a
    count_b: int
    n_draws: int
    alpha: float
    delta: float
    events: tuple[EventResult, ...]

    def passes(self, claimed_epsilon: float) -> bool:
        """True when the data are consistent with the claim (lower bound ≤ claimed ε)."""
        return self.epsilon_lower_bound <= claimed_epsilon


# -- statistics -----------------------------------------------------------------


def bonferroni(alpha: float, m: int) -> float:
    """Per-test level so that m tests hold together with probability ≥ 1 − alpha."""
    if not (0.0 < alpha < 1.0):
        raise ValueError("alpha must lie in (0, 1)")
    if m < 1:
        raise ValueError("m must be >= 1")
    return alpha / m


def clopper_pearson(k, n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact two-sided (1 − alpha) binomial interval for k successes in n trials (vectorized in k).

    lower = Beta(α/2; k, n − k + 1) (0 at k = 0); upper = Beta(1 − α/2; k + 1, n − k) (1 at k = n).
    """
    k = np.asarray(k, dtype=np.float64)
    if n < 1 or np.any(k < 0) or np.any(k > n):
        raise ValueError("need 0 <= k <= n and n >= 1")
    if not (0.0 < alpha < 1.0):
        raise ValueError("alpha must lie in (0, 1)")
    with np.errstate(invalid="ignore", divide="ignore"):
        lower = np.where(k > 0, beta.ppf(alpha / 2, np.maximum(k, 1), n - k + 1), 0.0)
        upper = np.where(k < n, beta.ppf(1 - alpha / 2, k + 1, np.maximum(n - k, 1)), 1.0)
    return lower, upper


def _log_ratio_bound(lower_num: np.ndarray, upper_den: np.ndarray, delta: float) -> np.ndarray:
    """log((lower_num − δ) / upper_den), −inf where the numerator is not positive."""
    num = np.asarray(lower_num, dtype=np.float64) - delta
    den = np.asarray(upper_den, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(num) - np.log(den)
    return np.where(num > 0, out, -np.inf)


# -- the audit --------------------------------------------------------------------


def audit_epsilon_lower_bound(
    sample_a: Sampler,
    sample_b: Sampler,
    events: Sequence[Event],
    n_draws: int,
    alpha: float,
    rng: np.random.Generator,
    *,
    delta: float = 0.0,
    chunk_size: int = DEFAULT_CHUNK,
) -> AuditResult:
    """Lower bound on ε, valid with probability ≥ 1 − alpha, from n_draws samples per side.

    ``events`` must have been fixed before this call (exact law or independent pilot).
    Samples are drawn in chunks of ``chunk_size`` (memory only; counts are the same).
    """
    events = list(events)
    if not events:
        raise ValueError("need at least one event")
    if n_draws < 1 or chunk_size < 1:
        raise ValueError("n_draws and chunk_size must be >= 1")
    if not (0.0 <= delta < 1.0):
        raise ValueError("delta must lie in [0, 1)")
    counts = np.zeros((2, len(events)), dtype=np.int64)
    for side, sample in enumerate((sample_a, sample_b)):
        done = 0
        while done < n_draws:
            size = min(chunk_size, n_draws - done)
            outputs = np.asarray(sample(size, rng))
            if len(outputs) != size:
                raise ValueError(f"sampler returned {len(outputs)} draws, expected {size}")
            for i, event in enumerate(events):
                counts[side, i] += int(np.count_nonzero(event(outputs)))
            done += size
    level = bonferroni(alpha, 2 * len(events))
    lower, upper = clopper_pearson(counts, n_draws, level)
    eps_ab = _log_ratio_bound(lower[0], upper[1], delta)
    eps_ba = _log_ratio_bound(lower[1], upper[0], delta)
    results = tuple(
        EventResult(e.name, int(counts[0, i]), int(counts[1, i]), float(eps_ab[i]), float(eps_ba[i]))
        for i, e in enumerate(events)
    )
    both = np.stack([eps_ab, eps_ba])  # (direction, event)
    d, i = map(int, np.unravel_index(int(np.argmax(both)), both.shape))
    best = float(both[d, i])
    return AuditResult(
        epsilon_lower_bound=max(0.0, best),  # ε ≥ 0 always; a −inf bound says nothing
        worst_event=events[i].name,
        direction="a>b" if d == 0 else "b>a",
        count_a=int(counts[0, i]),
        count_b=int(counts[1, i]),
        n_draws=int(n_draws),
        alpha=float(alpha),
        delta=float(delta),
        events=results,
    )


# -- choosing events before sampling ----------------------------------------------


def expected_bound(
    p_num: np.ndarray, p_den: np.ndarray, n_draws: int, level: float, delta: float = 0.0
) -> np.ndarray:
    """The bound an event with these true probabilities is expected to give (counts at their means)."""
    k_num = np.clip(np.round(np.asarray(p_num) * n_draws), 0, n_draws)
    k_den = np.clip(np.round(np.asarray(p_den) * n_draws), 0, n_draws)
    lower_num = clopper_pearson(k_num, n_draws, level)[0]
    return _log_ratio_bound(lower_num, clopper_pearson(k_den, n_draws, level)[1], delta)


def _member_predicate(keys: np.ndarray, key: Key) -> Callable[[np.ndarray], np.ndarray]:
    chosen = np.sort(np.asarray(keys))

    def predicate(outputs: np.ndarray) -> np.ndarray:
        k = np.asarray(key(outputs))
        pos = np.clip(np.searchsorted(chosen, k), 0, chosen.size - 1)
        return chosen[pos] == k

    return predicate


def _group_prefix(order: np.ndarray, ends: np.ndarray, j: int) -> np.ndarray:
    """Atoms of the first ``j + 1`` tie groups of a likelihood-ratio order."""
    return order[: ends[j]]


def _head(idx: np.ndarray, j: int) -> np.ndarray:
    """The first ``j + 1`` atoms of a half-line order."""
    return idx[: j + 1]


def _describe(keys: np.ndarray, label: str) -> str:
    if keys.size <= 3:
        return f"out in {{{', '.join(f'{float(v):.6g}' for v in np.sort(keys))}}}"
    return f"{label} ({keys.size} atoms)"


def events_from_law(
    support: np.ndarray,
    p_a: np.ndarray,
    p_b: np.ndarray,
    *,
    n_draws: int,
    alpha: float,
    max_events: int = DEFAULT_MAX_EVENTS,
    key: Key | None = None,
    ordered: bool = False,
    delta: float = 0.0,
) -> list[Event]:
    """Pick the ≤ max_events most informative events of a discrete output law, before sampling.

    ``support`` holds one key per atom (``key(outputs)`` maps draws to these keys; identity by
    default, which needs 1-D outputs compared exactly); ``p_a``/``p_b`` are the atoms'
    probabilities on the two inputs (mass off the support is simply never in an event).
    Candidates: singletons, likelihood-ratio prefixes in both directions (ties kept together)
    and, when ``ordered`` (keys sorted by output value), half-lines "out ≤ t" and "out ≥ t".
    Each is scored by ``expected_bound`` at the Bonferroni level the audit will use.
    """
    support = np.asarray(support)
    p_a = np.asarray(p_a, dtype=np.float64)
    p_b = np.asarray(p_b, dtype=np.float64)
    if not (support.ndim == 1 and support.shape == p_a.shape == p_b.shape):
        raise ValueError("support, p_a and p_b must be 1-D of the same length")
    if np.unique(support).size != support.size:
        raise ValueError("support keys must be distinct")
    keep = (p_a > 0) | (p_b > 0)
    support, p_a, p_b = support[keep], p_a[keep], p_b[keep]
    if support.size == 0:
        raise ValueError("the law has no atom with positive probability")
    key = key if key is not None else (lambda out: out)
    level = bonferroni(alpha, 2 * max_events)

    # Each candidate: (expected bound, atom indices, family); only each family's best few are kept.
    candidates: list[tuple[float, np.ndarray, str]] = []

    def add(score: np.ndarray, members: Callable[[int], np.ndarray], label: str) -> None:
        for j in np.argsort(-score, kind="stable")[: 4 * max_events]:
            candidates.append((float(score[j]), members(int(j)), label))

    def either_way(q_a: np.ndarray, q_b: np.ndarray) -> np.ndarray:
        forward = expected_bound(q_a, q_b, n_draws, level, delta)
        return np.maximum(forward, expected_bound(q_b, q_a, n_draws, level, delta))

    add(either_way(p_a, p_b), lambda j: np.array([j]), "singleton")

    # Likelihood-ratio prefixes: atoms sorted by log(p_a/p_b), cut only between tie groups.
    with np.errstate(divide="ignore", invalid="ignore"):
        lr = np.log(p_a) - np.log(p_b)
    for sign, num, den, label in ((1.0, p_a, p_b, "LR prefix a>b"), (-1.0, p_b, p_a, "LR prefix b>a")):
        order = np.argsort(-sign * lr, kind="stable")
        s = sign * lr[order]
        gap = np.abs(np.diff(s)) > 1e-9 * np.maximum(1.0, np.abs(s[:-1]))
        gap |= np.isinf(s[:-1]) != np.isinf(s[1:])
        ends = np.flatnonzero(np.append(gap, True)) + 1  # prefix lengths at group ends
        score = expected_bound(np.cumsum(num[order])[ends - 1], np.cumsum(den[order])[ends - 1], n_draws, level, delta)
        add(score, partial(_group_prefix, order, ends), label)

    if ordered:
        for name, idx in (("out <= t", np.arange(support.size)), ("out >= t", np.arange(support.size)[::-1])):
            score = either_way(np.cumsum(p_a[idx]), np.cumsum(p_b[idx]))
            add(score, partial(_head, idx), name)

    candidates.sort(key=lambda c: -c[0])
    chosen: list[Event] = []
    seen: set[bytes] = set()
    for expected, members, label in candidates:
        keys = np.sort(support[members])
        fingerprint = keys.tobytes()
        if fingerprint in seen:
            continue
        seen.add(fingerprint)
        if label.startswith("out ") and keys.size > 3:
            bound = support[members[-1]]
            name = f"{label[:6]} {float(bound):.6g}"
        else:
            name = _describe(keys, label)
        chosen.append(Event(f"{name} [expected bound {expected:.4g}]", _member_predicate(keys, key)))
        if len(chosen) == max_events:
            break
    return chosen


def events_from_pilot(
    sample_a: Sampler,
    sample_b: Sampler,
    *,
    n_pilot: int,
    rng: np.random.Generator,
    n_draws: int,
    alpha: float,
    max_events: int = DEFAULT_MAX_EVENTS,
    key: Key | None = None,
    ordered: bool = False,
    delta: float = 0.0,
) -> list[Event]:
    """Events chosen from an empirical law of ``n_pilot`` draws per side, for mechanisms
    without an exact law. ``rng`` must be independent of the audit's generator (a different
    seed), so the chosen events are fixed with respect to the audit samples. Counts are
    smoothed by ½ so atoms seen on one side only are not taken as infinitely informative.
    """
    key = key if key is not None else (lambda out: out)
    keys_a = np.asarray(key(np.asarray(sample_a(n_pilot, rng))))
    keys_b = np.asarray(key(np.asarray(sample_b(n_pilot, rng))))
    support = np.unique(np.concatenate([keys_a, keys_b]))
    count_a = np.bincount(np.searchsorted(support, keys_a), minlength=support.size)
    count_b = np.bincount(np.searchsorted(support, keys_b), minlength=support.size)
    p_a = (count_a + 0.5) / (n_pilot + 0.5 * support.size)
    p_b = (count_b + 0.5) / (n_pilot + 0.5 * support.size)
    return events_from_law(
        support, p_a, p_b, n_draws=n_draws, alpha=alpha, max_events=max_events, key=key, ordered=ordered, delta=delta
    )


# -- floating-point precision check ----------------------------------------------


def off_lattice(outputs: np.ndarray, lattice: np.ndarray) -> np.ndarray:
    """True for each output whose float64 bit pattern is not exactly one of ``lattice``'s.

    Compares bits, not values, so −0.0 vs 0.0 or a last-ulp difference counts as off the
    lattice: those are exactly the channels of a precision attack (Mironov 2012).
    """
    lattice = np.sort(np.asarray(lattice, dtype=np.float64))
    out = np.ascontiguousarray(outputs, dtype=np.float64).ravel()
    pos = np.clip(np.searchsorted(lattice, out), 0, lattice.size - 1)
    hit = lattice[pos].view(np.uint64) == out.view(np.uint64)
    # A value equal to a lattice point but with other bits (−0.0) lands on pos of +0.0 and fails.
    return ~hit


def audit_summary(result: AuditResult) -> str:
    """One line for logs and reports."""
    return (
        f"eps_lb={result.epsilon_lower_bound:.4f} via {result.worst_event} ({result.direction}, "
        f"{result.count_a}/{result.count_b} of {result.n_draws}, alpha={result.alpha}, delta={result.delta})"
    )


__all__ = [
    "AuditResult",
    "Event",
    "EventResult",
    "Sampler",
    "audit_epsilon_lower_bound",
    "audit_summary",
    "bonferroni",
    "clopper_pearson",
    "events_from_law",
    "events_from_pilot",
    "expected_bound",
    "off_lattice",
]
