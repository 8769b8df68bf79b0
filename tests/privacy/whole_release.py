"""Whole-release privacy audit: the real ``randomize()`` on two neighbouring label sets.

What a user is promised is that the *whole release* — private prior, the bins, interval,
partition or grid fitted to it, and every privatized label — is ε-DP. Each
:class:`ReleasePair` names two label sets that differ in one row (``changed``) and
runs the labels party's real release (``labeldp.release.randomizer.randomize``) on each,
many times. The audit then works on one integer per release, the *joint key*: a function
of the public release only (the prior spec, the mechanism spec, the changed row's
privatized label), so every event on it is an event on the release itself.

The joint key pairs

* the **prior part** — for a Laplace histogram, the difference of the noisy counts of the
  two grid cells the changed label moves between, against that difference without the
  label (read back from the released probabilities: the Norm-Sub prior is (c − δ)/n on
  the cells it keeps, so n·(p_a − p_b) is c_a − c_b exactly when both are kept; the
  neighbours shift it by 2, one unit in each cell, which is the histogram's whole
  likelihood ratio); for the noised-label prior (RPWithPrior), the bucket of
  the released prior's mean; for Alg. 2's split prior, where the two classes sit in the
  public partition (Y_k, S₁, Δ) and which has the larger released prior; none for a
  public or absent prior (then the public parts are checked to be the same for every
  label set, see below);
* with the **changed row's output**, as the log-likelihood ratio log P(ŷ | a) − log P(ŷ | b)
  under the law the release itself declares (its spec rebuilt with ``from_spec``; for a
  split release, the law of that row's stage), rounded to eighths of ε.

Given the public parts, the other rows' outputs have the same law on both sides (each
label is randomized once, independently), so the prior part and the changed row's output
carry all of the loss. Events are LR prefixes of a pilot's empirical law on an independent
generator (``events_from_pilot``), so they are fixed before the audit samples; the bound is
Clopper–Pearson with Bonferroni (``audit_epsilon_lower_bound``), as for single mechanisms.

Speed: a release of tens of labels takes about a millisecond, so a pair runs a few
thousand releases per side. Where the public parts do not depend on the labels (no prior,
or a public one), one ``randomize()`` call on N copies of the changed label gives N draws
of the changed row's output at once; the pair's sampler then checks, on every chunk, that
the public parts of that release equal those of the real n-row releases on both label sets.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tests.privacy.audit import AuditResult, audit_epsilon_lower_bound, events_from_pilot

from labeldp.epsilon import exact_micro
from labeldp.mechanisms import LabelDomain
from labeldp.mechanisms.prior import snap_to_grid
from labeldp.mechanisms.registry import entry_for_spec
from labeldp.mechanisms.release_laws import release_laws
from labeldp.release import randomizer
from labeldp.release.randomizer import PublicPrior, Randomized

ALPHA = 0.05
LLR_STEPS = 8  # the changed row's log-likelihood ratio is rounded to 1/LLR_STEPS of ε
LLR_CLIP = 16  # ... and clipped to ±LLR_CLIP steps
_OUT_KEYS = 2 * LLR_CLIP + 1
MEAN_BUCKETS = 8  # noised-label prior: its mean in eighths of the domain width (clipped to ±1 width)


@dataclass(frozen=True)
class ReleasePair:
    """Two neighbouring label sets (row ``changed`` is ``labels[changed]`` vs ``other``) and a release."""

    name: str
    mechanism: str
    epsilon: float  # the release's ε (what is charged and claimed)
    labels: np.ndarray  # label set a; label set b replaces row ``changed`` by ``other``
    changed: int
    other: float
    domain: LabelDomain | None = None
    classes: tuple[str, ...] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    epsilon_prior: float | None = None
    public_prior: PublicPrior | None = None
    claimed_delta: float = 0.0
    n_draws: int = 1200  # releases per side in the audit
    n_pilot: int = 300  # releases per side in the pilot that picks the events
    batched: bool = False  # public parts do not depend on the labels: N outputs per call
    sharpness: float | None = None  # if set, the bound must also reach sharpness·ε
    slow: bool = False

    def __str__(self) -> str:
        return self.name

    @property
    def labels_b(self) -> np.ndarray:
        out = np.array(self.labels, dtype=np.float64)
        out[self.changed] = self.other
        return out

    @property
    def value_a(self) -> float:
        return float(self.labels[self.changed])

    def release(self, labels: np.ndarray, rng: np.random.Generator) -> Randomized:
        """The labels party's real release (looked up at call time, so a test may break it)."""
        return randomizer.randomize(
            labels,
            self.domain,
            self.mechanism,
            exact_micro(self.epsilon),
            rng,
            classes=None if self.classes is None else list(self.classes),
            params=self.params or None,
            epsilon_prior_micro=None if self.epsilon_prior is None else exact_micro(self.epsilon_prior),
            public_prior=self.public_prior,
        )


# -- the joint key ------------------------------------------------------------------


COUNT_STEPS = 2
"""The prior key resolves the count difference to ±COUNT_STEPS around its value without the changed label."""


def released_count_difference(probs: np.ndarray, n: int, a: int, b: int) -> int | None:
    """c_a − c_b of the noisy histogram read back from the released prior (a public function).

    The released probabilities are the Norm-Sub projection max(c − δ, 0)/n of the noisy
    counts c with the public total n: on the cells it keeps, n·p = c − δ with one δ, so the
    difference of two kept cells is the integer c_a − c_b. None when a cell was not kept.
    """
    probs = np.asarray(probs, dtype=np.float64)
    if probs[a] <= 0 or probs[b] <= 0:
        return None
    difference = n * (probs[a] - probs[b])
    if abs(difference - round(difference)) > 1e-6:
        raise AssertionError("released probabilities are not a Norm-Sub histogram with total n")
    return int(round(difference))


@functools.lru_cache(maxsize=4096)
def _law(spec_json: str) -> Any:
    """The public mechanism a (non-categorical) spec describes, rebuilt as the receiver would."""
    from pydantic import TypeAdapter

    from labeldp.schema import MechanismSpec

    spec: Any = TypeAdapter(MechanismSpec).validate_json(spec_json)
    return entry_for_spec(spec).from_spec(spec)


@functools.lru_cache(maxsize=4096)  # split releases repeat a few partitions: rebuild each once
def _class_llrs(spec_json: str, n: int, row: int, a: int, b: int) -> np.ndarray:
    """log T[a, ŷ] − log T[b, ŷ] for every class ŷ, T the law of ``row``'s stage in the release."""
    from pydantic import TypeAdapter

    from labeldp.schema import MechanismSpec

    spec: Any = TypeAdapter(MechanismSpec).validate_json(spec_json)
    stage, matrices = release_laws(spec, n)
    t = matrices[stage[row]]
    with np.errstate(divide="ignore", invalid="ignore"):  # 0/0: an output neither side can give
        return np.log(t[a]) - np.log(t[b])


def _support(law: Any) -> np.ndarray:
    """The outputs ``law.output_probabilities`` refers to, ascending."""
    return np.asarray(law.lattice_ if hasattr(law, "lattice_") else law.outputs_, dtype=np.float64)


class KeyMaker:
    """Maps a release of a pair to its joint key (see the module docstring)."""

    def __init__(self, pair: ReleasePair) -> None:
        self.pair = pair
        self.n = len(pair.labels)
        self.scale = LLR_STEPS / pair.epsilon

    # -- the changed row's output ------------------------------------------------

    def output_llrs(self, release: Randomized, outputs: np.ndarray) -> np.ndarray:
        """log P(ŷ | a) − log P(ŷ | b) for each output of the changed row, under the declared law."""
        pair = self.pair
        spec = release.mechanism
        if pair.classes is not None:
            llr = _class_llrs(spec.model_dump_json(), self.n, pair.changed, int(pair.value_a), int(pair.other))
            return llr[np.asarray(outputs, dtype=np.int64)]
        law = _law(spec.model_dump_json())
        support = _support(law)
        with np.errstate(divide="ignore", invalid="ignore"):  # 0/0: an output neither side can give
            llr = np.log(law.output_probabilities(pair.value_a)) - np.log(law.output_probabilities(pair.other))
        idx = np.clip(np.searchsorted(support, outputs), 0, support.size - 1)
        if not np.all(support[idx] == outputs):
            raise AssertionError("an output is not on the support its spec declares")
        return llr[idx]

    def output_keys(self, release: Randomized, outputs: np.ndarray) -> np.ndarray:
        llr = np.nan_to_num(self.output_llrs(release, outputs), posinf=1e9, neginf=-1e9)
        return np.clip(np.rint(llr * self.scale), -LLR_CLIP, LLR_CLIP).astype(np.int64) + LLR_CLIP

    # -- the public prior part ---------------------------------------------------

    def prior_key(self, release: Randomized) -> int:
        pair = self.pair
        prior = release.prior
        split = getattr(release.mechanism, "prior_split", None)
        if split is not None:
            return self._partition_key(release, np.asarray(split.prior_probs))
        if prior is None or getattr(prior, "source", None) == "public":
            return 0
        if prior.source == "laplace_histogram":
            grid = np.asarray(prior.grid, dtype=np.float64)
            probs = np.asarray(prior.probs)
            others = np.delete(np.asarray(pair.labels, dtype=np.float64), pair.changed)
            base = np.bincount(snap_to_grid(others, grid), minlength=grid.size)
            cell_a, cell_b = (int(c) for c in snap_to_grid(np.array([pair.value_a, pair.other]), grid))
            difference = released_count_difference(probs, self.n, cell_a, cell_b)
            if difference is None:  # a cell not kept: which ones, still a function of the release
                return 2 * COUNT_STEPS + 1 + int(probs[cell_a] > 0) + 2 * int(probs[cell_b] > 0)
            shift = difference - int(base[cell_a] - base[cell_b])
            return int(np.clip(shift, -COUNT_STEPS, COUNT_STEPS)) + COUNT_STEPS
        if prior.source == "noisy_label_histogram":
            nodes, masses = np.asarray(prior.nodes), np.asarray(prior.masses)
            mean = float(np.dot(masses, 0.5 * (nodes[1:] + nodes[:-1])))
            domain = pair.domain
            assert domain is not None
            bucket = math.floor((mean - domain.low) / domain.width * MEAN_BUCKETS)
            return int(np.clip(bucket, -MEAN_BUCKETS, 2 * MEAN_BUCKETS)) + MEAN_BUCKETS
        raise AssertionError(f"no prior key for prior source {prior.source!r}")

    def _partition_key(self, release: Randomized, prior_probs: np.ndarray) -> int:
        spec: Any = release.mechanism
        a, b = int(self.pair.value_a), int(self.pair.other)
        sets = [spec.top_k] if spec.name == "rr_with_prior" else [spec.majority, spec.delta]
        bits = [int(c in s) for s in sets for c in (a, b)]
        bits.append(int(prior_probs[a] > prior_probs[b]))
        bits.append(int(prior_probs[a] < prior_probs[b]))
        return int(sum(bit << i for i, bit in enumerate(bits)))

    def key(self, release: Randomized) -> int:
        out = release.labels[self.pair.changed : self.pair.changed + 1]
        return self.prior_key(release) * _OUT_KEYS + int(self.output_keys(release, out)[0])


# -- samplers -------------------------------------------------------------------------


Sampler = Callable[[int, np.random.Generator], np.ndarray]


def _public_parts(release: Randomized) -> tuple[str, str]:
    prior = "" if release.prior is None else release.prior.model_dump_json()
    return release.mechanism.model_dump_json(), prior


def release_sampler(pair: ReleasePair, labels: np.ndarray, keys: KeyMaker) -> Sampler:
    """n joint keys of n independent whole releases on ``labels``."""
    labels = np.asarray(labels, dtype=np.float64)

    def sample(n: int, rng: np.random.Generator) -> np.ndarray:
        if pair.batched:
            return _batched(pair, labels, keys, n, rng)
        return np.fromiter((keys.key(pair.release(labels, rng)) for _ in range(n)), dtype=np.int64, count=n)

    return sample


def _batched(pair: ReleasePair, labels: np.ndarray, keys: KeyMaker, n: int, rng: np.random.Generator) -> np.ndarray:
    """n outputs of the changed row from one release of n copies of its label.

    Valid only because the public parts do not depend on the labels: checked here against
    real n-row releases on both label sets, on every call.
    """
    many = pair.release(np.full(n, labels[pair.changed]), rng)
    expected = _public_parts(many)
    for real in (labels, pair.labels_b):
        if _public_parts(pair.release(real, rng)) != expected:
            raise AssertionError(f"{pair.name}: the public parts of the release depend on the labels")
    return keys.prior_key(many) * _OUT_KEYS + keys.output_keys(many, many.labels)


# -- the audit ------------------------------------------------------------------------


def _rng(pair: ReleasePair, purpose: int) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(pair.name.encode()), purpose])


def audit_release(pair: ReleasePair, n_draws: int | None = None, n_pilot: int | None = None) -> AuditResult:
    """ε lower bound for the whole release of ``pair`` (valid with probability ≥ 1 − ALPHA)."""
    n_draws = pair.n_draws if n_draws is None else n_draws
    n_pilot = pair.n_pilot if n_pilot is None else n_pilot
    keys = KeyMaker(pair)
    sample_a = release_sampler(pair, pair.labels, keys)
    sample_b = release_sampler(pair, pair.labels_b, keys)
    events = events_from_pilot(
        sample_a, sample_b, n_pilot=n_pilot, rng=_rng(pair, 1), n_draws=n_draws, alpha=ALPHA,
        delta=pair.claimed_delta,
    )
    return audit_epsilon_lower_bound(
        sample_a, sample_b, events, n_draws, ALPHA, _rng(pair, 2), delta=pair.claimed_delta,
        chunk_size=max(n_draws, 1),
    )
