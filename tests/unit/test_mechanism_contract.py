"""Conformance of every registry entry to the one mechanism contract (docs/architecture.md,
"The mechanism contract").

Loops over ``labeldp.mechanisms.registry.ENTRIES``: the contract itself, the wire spec's
round trip through the schema's union, the exact transition law and the exact expected loss
against Monte-Carlo draws of the real ``privatize``, what the features party derives from the
law (no fall-back), and that tests/privacy audits each entry. Everything else that lists
mechanisms (schema union, randomizer, ``auto``, benchmark columns) must be the registry's list.
The REST release → training half is tests/integration/test_mechanism_contract.py.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from pydantic import BaseModel, TypeAdapter
from tests.privacy.cases import CASES
from tests.privacy.release_cases import release_pairs

from labeldp.learning.debiasing import label_law
from labeldp.learning.tasks import LabelTask
from labeldp.mechanisms.contract import Mechanism, Params, Prior
from labeldp.mechanisms.law import TransitionLaw
from labeldp.mechanisms.prior import LabelDomain
from labeldp.mechanisms.registry import ENTRIES, LABEL_TYPES, NAMES, REGISTRY, Entry, entry_for_spec, serving
from labeldp.release.defaults import default_mechanism
from labeldp.release.priors import PRIORS
from labeldp.release.randomizer import MECHANISMS
from labeldp.schema import CATEGORICAL_SPECS, MechanismSpec
from labeldp_research.utility import CLASSIFICATION_MECHANISMS, REGRESSION_MECHANISMS

EPSILON = 1.5
DOMAIN = LabelDomain("real", 0.0, 5.0)
REAL_PRIOR = Prior(np.linspace(0.0, 5.0, 11), np.array([1, 3, 6, 9, 8, 6, 4, 3, 2, 1, 1], dtype=np.float64) / 44)
CLASSES = ["a", "b", "c", "d"]
CLASS_PRIOR = Prior(np.arange(4, dtype=np.float64), np.array([0.5, 0.3, 0.15, 0.05]))
N_DRAWS = 200_000
SIGMAS = 6.0  # Monte-Carlo tolerance; the seeds are fixed, so a pass is reproducible
ADAPTER: TypeAdapter = TypeAdapter(MechanismSpec)
IDS = [e.name for e in ENTRIES]


def prior_for(entry: Entry) -> Prior:
    return CLASS_PRIOR if entry.categorical else REAL_PRIOR


@functools.cache
def fitted(name: str) -> Mechanism:
    """The entry's mechanism with default parameters, fitted to the label type's public prior."""
    entry = REGISTRY[name]
    params = entry.parse_params({})
    if entry.categorical:
        mech = entry.build(EPSILON, params, classes=CLASSES)
    else:
        mech = entry.build(EPSILON, params, domain=DOMAIN)
    return mech.fit_to(prior_for(entry))


def draws(mech: Mechanism, label: float, n: int, seed: int) -> np.ndarray:
    return np.asarray(mech.privatize(np.full(n, label), np.random.default_rng(seed)), dtype=np.float64)


# --------------------------------------------------------------------------- one list


def test_every_list_of_mechanisms_is_the_registry() -> None:
    assert len(set(NAMES)) == len(ENTRIES) == len(REGISTRY)
    assert MECHANISMS == NAMES  # the randomizer's catalogue
    union = set(ADAPTER.json_schema()["discriminator"]["mapping"])
    assert union == set(NAMES)  # the wire schema's spec union
    assert set(CATEGORICAL_SPECS) == {e.spec for e in ENTRIES if e.categorical}
    assert REGRESSION_MECHANISMS == serving("real") and CLASSIFICATION_MECHANISMS == serving("categorical")
    assert set(serving("real")) | set(serving("categorical")) == set(NAMES)
    for label_type in LABEL_TYPES:  # "auto" picks, at every ε, an entry that serves the label type
        for eps in (1e-3, 0.1, 0.49, 0.5, 0.999, 1.0, 4.0, 1e3):
            assert label_type in REGISTRY[default_mechanism(label_type, eps)].label_types


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_entry_declares_the_contract(entry: Entry) -> None:
    assert entry.mechanism.name == entry.name == entry.spec.model_fields["name"].default
    assert issubclass(entry.params, Params) and entry.params is entry.mechanism.params_model
    assert entry.label_types and entry.label_types <= set(LABEL_TYPES)
    assert entry.prior_kind(entry.parse_params({})) in PRIORS  # one function obtains each kind
    mech = fitted(entry.name)
    assert isinstance(mech, Mechanism) and isinstance(mech, entry.mechanism)
    g = mech.guarantee
    assert g.epsilon == EPSILON and g.adjacency == "replace-one-label" and 0.0 <= g.delta < 1e-3
    assert entry.parse_params({}) == entry.params()  # defaults are the model's
    with pytest.raises(ValueError):  # the params model refuses what it does not declare
        entry.parse_params({"not_a_parameter": 1})


# --------------------------------------------------------------------------- wire spec


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_spec_round_trips_through_the_schema_union(entry: Entry) -> None:
    mech = fitted(entry.name)
    spec = mech.to_spec()
    assert isinstance(spec, entry.spec) and isinstance(spec, BaseModel)
    back = ADAPTER.validate_json(spec.model_dump_json())
    assert back == spec and entry_for_spec(back) is entry
    rebuilt = entry.from_spec(back)
    assert rebuilt.to_spec() == spec  # the receiver's mechanism describes the same law
    ours, theirs = mech.law(), rebuilt.law()
    assert (ours.kind, ours.name) == (theirs.kind, entry.name)
    if ours.kind == "matrix":
        np.testing.assert_array_equal(ours.matrix, theirs.matrix)
    else:
        ys = np.linspace(DOMAIN.low - 1.0, DOMAIN.high + 1.0, 57)
        np.testing.assert_allclose(ours.conditional_mean(ys), theirs.conditional_mean(ys), rtol=0, atol=1e-12)
        assert (ours.a, ours.b, ours.low, ours.high) == pytest.approx((theirs.a, theirs.b, theirs.low, theirs.high))


# --------------------------------------------------------------------------- law and loss vs Monte-Carlo


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_law_matches_monte_carlo(entry: Entry) -> None:
    mech = fitted(entry.name)
    law = mech.law()
    assert isinstance(law, TransitionLaw)
    if entry.categorical:
        assert law.kind == "matrix" and law.matrix is not None
        for y in range(len(CLASSES)):
            freq = np.bincount(draws(mech, y, N_DRAWS, seed=y).astype(np.int64), minlength=len(CLASSES)) / N_DRAWS
            row = law.matrix[y]
            se = np.sqrt(np.maximum(row * (1 - row), 1e-12) / N_DRAWS)
            assert np.all(np.abs(freq - row) <= SIGMAS * se), (y, freq, row)
        return
    assert law.kind in ("affine", "monotone")
    for i, y in enumerate((0.0, 1.3, 2.5, 4.2, 5.0)):
        out = draws(mech, y, N_DRAWS, seed=i)
        mean = float(law.conditional_mean(np.array([y]))[0])
        assert abs(out.mean() - mean) <= SIGMAS * out.std() / math.sqrt(N_DRAWS), (y, out.mean(), mean)
        if law.kind == "affine":  # E[ŷ | y] = a·t(y) + b, the identity debiasing relies on
            assert law.target is not None
            assert law.a * float(law.target(np.array([y]))[0]) + law.b == pytest.approx(mean, abs=1e-9)


def _realized_loss(entry: Entry, mech: Mechanism, labels: np.ndarray, out: np.ndarray) -> np.ndarray:
    if entry.categorical:
        return (out != labels).astype(np.float64)
    if getattr(mech, "loss", "squared") == "absolute":
        return np.abs(out - labels)
    return (out - labels) ** 2


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_exact_expected_loss_matches_monte_carlo(entry: Entry) -> None:
    mech = fitted(entry.name)
    prior = prior_for(entry)
    exact = mech.loss_under(prior)
    rng = np.random.default_rng(11)
    labels = rng.choice(prior.values, size=N_DRAWS, p=prior.probs / prior.probs.sum())
    realized = _realized_loss(entry, mech, labels, np.asarray(mech.privatize(labels, rng), dtype=np.float64))
    assert abs(realized.mean() - exact) <= SIGMAS * realized.std() / math.sqrt(N_DRAWS), (realized.mean(), exact)


# --------------------------------------------------------------------------- what the features party derives


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_features_party_derives_its_law_from_the_entry(entry: Entry) -> None:
    mech = fitted(entry.name)
    stored = mech.to_spec().model_dump(mode="json")  # as a release row keeps it
    if entry.categorical:
        task = LabelTask.of(stored)
        assert task.classes == tuple(CLASSES)
        np.testing.assert_array_equal(np.asarray(task.transition_matrix), mech.law().matrix)
        with pytest.raises(ValueError):
            label_law(stored)
        return
    law, theirs = mech.law(), label_law(stored)
    assert theirs.name == entry.name and (theirs.a, theirs.b) == pytest.approx((law.a, law.b))
    assert theirs.linear == (law.kind == "affine")
    ys = np.linspace(DOMAIN.low, DOMAIN.high, 41)
    np.testing.assert_allclose(theirs.mean(ys), law.conditional_mean(ys), rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- privacy audits


@functools.cache
def _audited_classes() -> frozenset[type]:
    return frozenset(type(case.mechanism(case.claimed_epsilon)) for case in CASES)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_every_entry_has_an_audit_case_and_a_whole_release_pair(entry: Entry) -> None:
    assert any(issubclass(cls, entry.mechanism) for cls in _audited_classes()), f"no audit case for {entry.name}"
    assert any(p.mechanism == entry.name for p in _pairs()), f"no whole-release pair for {entry.name}"


@functools.cache
def _pairs() -> tuple:
    return tuple(release_pairs())


def test_the_import_contract_covers_every_family_module() -> None:
    """The contract that keeps the families from importing the registry lists every module of
    labeldp.mechanisms but the registry and what sits above it (a new module cannot slip past)."""
    import pkgutil
    import tomllib
    from pathlib import Path

    import labeldp.mechanisms

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    contract = next(
        c for c in pyproject["tool"]["importlinter"]["contracts"]
        if c.get("forbidden_modules") == ["labeldp.mechanisms.registry"]
    )
    modules = {f"labeldp.mechanisms.{m.name}" for m in pkgutil.iter_modules(labeldp.mechanisms.__path__)}
    above = {"labeldp.mechanisms.registry", "labeldp.mechanisms.release_laws"}
    assert set(contract["source_modules"]) == modules - above
