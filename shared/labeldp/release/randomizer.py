"""The labels party's randomizer (Ghazi et al. Alg. 3, generalized): prior, fit, privatize.

Everything returned here is ε-DP in the labels and may leave the labels party.
Every mechanism comes from the registry (``labeldp.mechanisms.registry``; docs/architecture.md,
"The mechanism contract"): its entry says which labels it takes, validates its parameters
with the mechanism's params model, builds it, and says how its prior is obtained (its
``PriorKind``, obtained by the one function :data:`labeldp.release.priors.PRIORS` maps it to).
A release is: validate → obtain the prior → ``fit_to`` it → privatize → accounting, over all
labels at once or a chunk at a time (:class:`Release`: one pass for the prior, one to privatize).

Each label is randomized once per release (parallel composition across rows), and the
accounting is the basic composition of the parts' guarantees (``labeldp.accounting``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import ValidationError

from labeldp.accounting import compose
from labeldp.epsilon import from_micro
from labeldp.errors import RandomizerError
from labeldp.mechanisms import LabelDomain
from labeldp.mechanisms.contract import Mechanism, Params, Prior
from labeldp.mechanisms.registry import NAMES, REGISTRY, Entry
from labeldp.release.defaults import tail_pick
from labeldp.release.priors import ObtainedPrior, PriorRequest, PublicPrior, need_classes, need_domain, prior_pass
from labeldp.schema import MechanismSpec, NoisyPrior, PrivacyAccounting
from labeldp.specs.rp_with_prior import HistogramPriorSpec

__all__ = [
    "MECHANISMS", "FittedRelease", "PublicPrior", "Randomized", "RandomizerError", "Release", "randomize",
    "validate_public_prior",
]

MAX_DELTA = 1e-3
"""The largest δ a release may carry, whatever its mechanism's parameters allow."""
MECHANISMS = NAMES


@dataclass(frozen=True)
class Randomized:
    mechanism: MechanismSpec
    prior: NoisyPrior | HistogramPriorSpec | None
    accounting: PrivacyAccounting
    labels: np.ndarray


def validate_public_prior(values: list[float], probs: list[float], domain: LabelDomain) -> PublicPrior:
    v = np.asarray(values, dtype=np.float64)
    p = np.asarray(probs, dtype=np.float64)
    if v.ndim != 1 or v.shape != p.shape or v.size == 0:
        raise RandomizerError("invalid_prior", "prior values and probs must be equal-length, non-empty lists")
    if not (np.all(np.isfinite(v)) and np.all(np.isfinite(p))):
        raise RandomizerError("invalid_prior", "prior values and probs must be finite")
    if np.any(np.diff(v) <= 0):
        raise RandomizerError("invalid_prior", "prior values must be strictly increasing")
    if v[0] < domain.low or v[-1] > domain.high:
        raise RandomizerError("invalid_prior", "prior values must lie inside the label domain")
    if np.any(p < 0) or p.sum() <= 0:
        raise RandomizerError("invalid_prior", "prior probs must be >= 0 with a positive sum")
    return PublicPrior(v, p / p.sum())


def entry_for(mechanism: str, label_type: str) -> Entry:
    """The registry entry of ``mechanism``, refused unless it takes ``label_type`` labels."""
    entry = REGISTRY.get(mechanism)
    if entry is None:
        raise RandomizerError("unknown_mechanism", f"mechanism must be one of {', '.join(MECHANISMS)}")
    if label_type not in entry.label_types:
        raise RandomizerError("mechanism_not_applicable", f"{mechanism} does not take {label_type} labels")
    return entry


def parse_params(entry: Entry, params: dict[str, Any] | None) -> Params:
    """The caller's parameters through the mechanism's params model (their one validation)."""
    try:
        return entry.parse_params(params)
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) or f"params ({e['msg']})" for e in exc.errors())
        raise RandomizerError("invalid_parameters", f"invalid parameters for {entry.name}: {fields}") from exc


def check_request(
    mechanism: str,
    epsilon_micro: int,
    domain: LabelDomain | None,
    *,
    classes: list[str] | None = None,
    params: dict[str, Any] | None = None,
) -> None:
    """What :func:`randomize` would refuse before it looks at a label: the mechanism, its
    parameters, ε and the δ they imply. Raises :class:`RandomizerError`; reads no label, so a
    service can refuse a bad request at once and privatize later (a release job)."""
    label_type = "categorical" if classes is not None else (domain.kind if domain else "real")
    entry = entry_for(mechanism, label_type)
    p = parse_params(entry, params)
    if epsilon_micro <= 0:
        raise RandomizerError("invalid_epsilon", "epsilon must be greater than 0")
    try:
        _build(mechanism, from_micro(epsilon_micro), domain, classes, p)
    except RandomizerError:
        raise
    except ValueError as exc:
        raise RandomizerError("invalid_parameters", f"{mechanism}: {exc}") from exc


def _build(name: str, epsilon: float, domain: LabelDomain | None, classes: list[str] | None, p: Params) -> Mechanism:
    """The registry's mechanism ``name`` at ``epsilon`` (unfitted), its δ within ``MAX_DELTA``."""
    entry = REGISTRY[name]
    if entry.categorical:
        mech = entry.build(epsilon, p, classes=need_classes(classes))
    else:
        mech = entry.build(epsilon, p, domain=need_domain(domain))
    if mech.guarantee.delta > MAX_DELTA:
        raise RandomizerError("invalid_parameters", f"{name}: a release's delta must be at most {MAX_DELTA}")
    return mech


def randomize(
    labels: np.ndarray,
    domain: LabelDomain | None,
    mechanism: str,
    epsilon_micro: int,
    rng: np.random.Generator,
    **kwargs: Any,
) -> Randomized:
    """Privatize ``labels`` (canonical id order): a :class:`Release` given them as one chunk.

    Mechanism-side ``ValueError``s (a parameter the mechanism refuses, e.g. a loss
    it does not support) become ``invalid_parameters``; their messages are written
    by our code and never contain label values.
    """
    labels = np.asarray(labels, dtype=np.float64)
    release = Release(labels.size, domain, mechanism, epsilon_micro, **kwargs)
    release.add(labels, rng)
    fitted = release.fit(rng)
    out = fitted.privatize(labels, rng)
    return Randomized(fitted.mechanism, fitted.prior, fitted.accounting, out)


@contextmanager
def _invalid_parameters(mechanism: str) -> Iterator[None]:
    try:
        yield
    except RandomizerError:
        raise
    except ValueError as exc:
        raise RandomizerError("invalid_parameters", f"{mechanism}: {exc}") from exc


class Release:
    """A release of ``n_rows`` labels (canonical id order) given a chunk at a time: the randomizer's
    one definition (:func:`randomize` is it with one chunk).

    Made: the request checked (mechanism, parameters, ε, prior), no label read. Pass one,
    :meth:`add` every chunk in row order: what the prior needs of all labels (the grid counts,
    the ε₁-noised labels, the split's first stage — :class:`labeldp.release.priors.PriorPass`).
    :meth:`fit`: the prior obtained once, the mechanism built and fitted to it, the accounting.
    Pass two, :meth:`FittedRelease.privatize` every chunk in the same row order: each label
    randomized once. The draws are those of the whole-array release in the same order, so a
    seeded stream gives the same labels however the rows are chunked wherever the mechanism
    draws a fixed number of words per label.

    ``domain`` for real/integer labels, ``classes`` (labels = class indices) for categorical ones.
    ``auto``: ``mechanism`` is ``auto``'s pick; an ``rp_with_prior`` pick without parameters may
    become ``rr_on_bins`` from its prior (:func:`labeldp.release.defaults.tail_pick`); the fitted
    spec names the mechanism used.
    """

    def __init__(
        self,
        n_rows: int,
        domain: LabelDomain | None,
        mechanism: str,
        epsilon_micro: int,
        *,
        classes: list[str] | None = None,
        params: dict[str, Any] | None = None,
        epsilon_prior_micro: int | None = None,
        public_prior: PublicPrior | None = None,
        auto: bool = False,
    ) -> None:
        label_type = "categorical" if classes is not None else (domain.kind if domain else "real")
        self._label_type, self._auto, self._params = label_type, auto, params
        entry = entry_for(mechanism, label_type)
        self._p = parse_params(entry, params)
        if epsilon_micro <= 0:
            raise RandomizerError("invalid_epsilon", "epsilon must be greater than 0")
        self.n_rows, self.name, self._domain, self._classes = int(n_rows), mechanism, domain, classes
        ask = PriorRequest(mechanism, self.n_rows, domain, classes, self._p, epsilon_micro, epsilon_prior_micro,
                           public_prior)
        with _invalid_parameters(mechanism):
            self._pass = prior_pass(entry.prior_kind(self._p), ask)
        self._rows = 0

    def add(self, labels: np.ndarray, rng: np.random.Generator) -> None:
        """Pass one: the next chunk of labels (float64, none missing)."""
        labels = np.asarray(labels, dtype=np.float64)
        if self._rows + labels.size > self.n_rows:
            raise ValueError("more labels than the release's rows")
        with _invalid_parameters(self.name):
            self._pass.add(labels, self._rows, rng)
        self._rows += labels.size

    def fit(self, rng: np.random.Generator) -> FittedRelease:
        """The prior (once, from every label added), the mechanism fitted to it, the accounting."""
        if self._rows != self.n_rows:
            raise ValueError("fit needs every label of the release added first")
        with _invalid_parameters(self.name):
            obtained = self._pass.obtain(rng)
            mech = obtained.fit(_build(self.name, from_micro(obtained.epsilon_micro), self._domain, self._classes,
                                       self._p))
            if self._auto and self.name == "rp_with_prior" and not self._params and obtained.spec is not None:
                # Post-processing of the prior just drawn (and public facts): the same prior fits either mechanism.
                pick = tail_pick(obtained.spec, obtained.mechanism_spec(mech), self.n_rows)
                if pick != self.name:
                    alt = parse_params(entry_for(pick, self._label_type), None)
                    mech = obtained.fit(_build(pick, from_micro(obtained.epsilon_micro), self._domain, self._classes,
                                               alt))
            accounting = compose([*obtained.parts, ("randomizer", obtained.epsilon_micro, mech.guarantee)])
            spec = obtained.mechanism_spec(mech)
        return FittedRelease(spec, obtained.spec, accounting, self.n_rows, self.name, obtained, mech)


class FittedRelease:
    """A :class:`Release` fitted: its message's mechanism, prior and accounting; :meth:`privatize`
    turns each chunk of labels, in row order, into privatized ones."""

    def __init__(
        self, mechanism: MechanismSpec, prior: NoisyPrior | HistogramPriorSpec | None, accounting: PrivacyAccounting,
        n_rows: int, name: str, obtained: ObtainedPrior, mech: Mechanism,
    ) -> None:
        self.mechanism, self.prior, self.accounting = mechanism, prior, accounting
        self.n_rows, self._name, self._obtained, self._mech = n_rows, name, obtained, mech
        self._rows = 0

    def privatize(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Pass two: the next chunk of labels privatized (float64); each row once, in row order."""
        labels = np.asarray(labels, dtype=np.float64)
        if self._rows + labels.size > self.n_rows:
            raise ValueError("more labels than the release's rows")
        with _invalid_parameters(self._name):
            out = self._obtained.privatize(self._mech, labels, self._rows, rng)
        self._rows += labels.size
        return np.asarray(out, dtype=np.float64)


def fit_to_public_prior(
    mechanism: str,
    epsilon: float,
    values: np.ndarray,
    probs: np.ndarray,
    *,
    domain: LabelDomain | None = None,
    classes: list[str] | None = None,
    params: dict[str, Any] | None = None,
) -> Mechanism:
    """The mechanism fitted for ``epsilon`` to a public prior (``labeldp optimize``).

    Prior-free mechanisms ignore it in ``fit_to``; it then only serves to evaluate
    their expected loss.
    """
    label_type = "categorical" if classes is not None else (domain.kind if domain else "real")
    entry = entry_for(mechanism, label_type)
    p = parse_params(entry, params)
    try:
        return _build(mechanism, epsilon, domain, classes, p).fit_to(Prior(values, probs))
    except RandomizerError:
        raise
    except ValueError as exc:
        raise RandomizerError("invalid_parameters", f"{mechanism}: {exc}") from exc
