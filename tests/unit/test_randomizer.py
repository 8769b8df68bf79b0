"""The generalized labels-party randomizer: every mechanism of the catalogue end to end."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from labeldp.mechanisms import LabelDomain
from labeldp.mechanisms.contract import Prior
from labeldp.mechanisms.registry import REGISTRY
from labeldp.release.randomizer import (
    MECHANISMS,
    RandomizerError,
    randomize,
    validate_public_prior,
)
from labeldp.schema import CATEGORICAL_SPECS, LabelRelease, encode_payload, payload_digest

DOMAIN = LabelDomain("real", 0.0, 10.0)
CLASSES = ["a", "b", "c", "d"]
REAL_MECHANISMS = [m for m in MECHANISMS if "real" in REGISTRY[m].label_types]
CATEGORICAL_MECHANISMS = [m for m in MECHANISMS if "categorical" in REGISTRY[m].label_types]


def _labels(n: int = 3000) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.clip(rng.gamma(2.0, 1.5, n), 0, 10)


def _message(out, n: int) -> LabelRelease:
    ids = [f"id{i:05d}" for i in range(n)]
    msg = LabelRelease(
        release_id="rel_x",
        label_set_id="ls_x",
        created_at=datetime.now(UTC),
        mechanism=out.mechanism,
        prior=out.prior,
        accounting=out.accounting,
        row_count=n,
        payload_digest=payload_digest(ids, out.labels),
        payload=encode_payload(ids, out.labels),
    )
    return LabelRelease.model_validate_json(msg.model_dump_json())


def test_every_mechanism_is_in_the_catalogue():
    assert set(MECHANISMS) == {
        "rr_on_bins", "rp_with_prior", "laplace", "staircase", "gaussian", "exponential", "unbiased",
        "randomized_response", "rr_with_prior", "block_rr",
    }


@pytest.mark.parametrize("mechanism", REAL_MECHANISMS)
def test_regression_mechanisms_release_a_valid_message(mechanism):
    labels = _labels(20_000)
    out = randomize(labels, DOMAIN, mechanism, 2_000_000, np.random.default_rng(1))
    assert out.labels.shape == labels.shape and np.all(np.isfinite(out.labels))
    assert out.accounting.total_epsilon_micro == 2_000_000
    assert sum(p.epsilon_micro for p in out.accounting.parts) == 2_000_000
    back = _message(out, labels.size)
    assert back.mechanism.name == mechanism
    if mechanism in ("rr_on_bins", "rp_with_prior"):
        assert [p.name for p in out.accounting.parts] == ["prior", "randomizer"]
        assert out.accounting.parts[0].epsilon_micro > 0 and back.prior is not None
    else:
        assert [p.name for p in out.accounting.parts] == ["randomizer"] and back.prior is None
    # Utility sanity: the release carries information about the labels.
    assert np.corrcoef(out.labels, labels)[0, 1] > 0.04  # over 5 standard errors at n = 20 000


@pytest.mark.parametrize("mechanism", CATEGORICAL_MECHANISMS)
def test_categorical_mechanisms_release_class_indices(mechanism):
    rng = np.random.default_rng(2)
    labels = rng.choice(4, size=4000, p=[0.6, 0.25, 0.1, 0.05]).astype(np.float64)
    out = randomize(labels, None, mechanism, 3_000_000, np.random.default_rng(3), classes=CLASSES)
    assert set(np.unique(out.labels)) <= {0.0, 1.0, 2.0, 3.0}
    assert isinstance(out.mechanism, CATEGORICAL_SPECS) and out.mechanism.classes == CLASSES
    assert out.accounting.parts[-1].epsilon_micro == 3_000_000
    assert np.mean(out.labels == labels) > 0.5
    _message(out, labels.size)


def test_public_prior_costs_nothing_and_is_recorded_as_public():
    labels = _labels()
    prior = validate_public_prior(list(np.linspace(0, 10, 21)), [1.0] * 21, DOMAIN)
    out = randomize(labels, DOMAIN, "rr_on_bins", 1_000_000, np.random.default_rng(4), public_prior=prior)
    assert [(p.name, p.epsilon_micro) for p in out.accounting.parts] == [("prior", 0), ("randomizer", 1_000_000)]
    assert out.prior.source == "public" and out.prior.epsilon == 0.0


def test_gaussian_records_delta():
    out = randomize(_labels(), DOMAIN, "gaussian", 1_000_000, np.random.default_rng(5), params={"delta": 1e-5})
    assert out.accounting.delta == 1e-5 and out.mechanism.delta == 1e-5


@pytest.mark.parametrize(
    "kwargs, code",
    [
        ({"mechanism": "nope"}, "unknown_mechanism"),
        ({"mechanism": "rr_with_prior"}, "mechanism_not_applicable"),
        ({"mechanism": "laplace", "params": {"bogus": 1}}, "invalid_parameters"),
        ({"mechanism": "gaussian", "params": {"delta": 0.5}}, "invalid_parameters"),
        ({"mechanism": "laplace", "epsilon_prior_micro": 10}, "invalid_request"),
        ({"mechanism": "rr_on_bins", "epsilon_prior_micro": 1_000_000}, "invalid_epsilon"),
    ],
)
def test_bad_requests_raise_stable_codes(kwargs, code):
    args = {"mechanism": "rr_on_bins", **kwargs}
    with pytest.raises(RandomizerError) as err:
        randomize(_labels(100), DOMAIN, args.pop("mechanism"), 1_000_000, np.random.default_rng(6), **args)
    assert err.value.code == code


@pytest.mark.parametrize(
    "mechanism, params, ok",
    [
        ("staircase", {"gamma": 1.0}, True),  # r = J: the service used to refuse what the mechanism and spec allow
        ("staircase", {"gamma": 1.5}, False),
        ("staircase", {"gamma": 0.0}, False),
        ("unbiased", {"grid_size": 130}, False),  # one limit (129): the mechanism used to allow 256
        ("rp_with_prior", {"zeta": float("inf")}, False),
        ("block_rr", {"outputs": "majority", "l": 2}, False),
    ],
)
def test_parameters_are_validated_once_for_the_api_and_direct_construction(mechanism, params, ok):
    """The params model is the only validation: a release and the mechanism built directly agree."""
    entry = REGISTRY[mechanism]
    classes = CLASSES if entry.categorical else None
    labels = np.arange(400, dtype=np.float64) % 4 if classes else _labels(400)
    if ok:
        randomize(labels, DOMAIN, mechanism, 1_000_000, np.random.default_rng(7), params=params, classes=classes)
        return
    with pytest.raises(RandomizerError) as err:
        randomize(labels, DOMAIN, mechanism, 1_000_000, np.random.default_rng(7), params=params, classes=classes)
    assert err.value.code == "invalid_parameters"
    with pytest.raises(ValueError):  # the same model refuses the same values on direct construction
        mech = entry.mechanism(1.0, classes, **params) if classes else entry.mechanism(1.0, DOMAIN, **params)
        mech.fit_to(None if entry.prior_kind(entry.params()) == "none" else mech_prior(entry))


def mech_prior(entry) -> Prior:
    """A public prior of the entry's label type (for mechanisms fitted to one)."""
    if entry.categorical:
        return Prior(np.arange(4.0), np.array([0.4, 0.3, 0.2, 0.1]))
    return Prior(np.linspace(0.0, 10.0, 11), np.ones(11) / 11)


def test_rp_with_prior_buys_the_laplace_histogram_prior_by_default():
    """Default private prior: ε₁ on k counts over the public grid, not Alg. 3's noised labels."""
    labels = _labels(5000)
    out = randomize(labels, DOMAIN, "rp_with_prior", 1_000_000, np.random.default_rng(11))
    back = _message(out, labels.size)
    assert back.prior is not None and back.prior.source == "laplace_histogram"
    assert back.mechanism.sigma is None
    alg3 = randomize(labels, DOMAIN, "rp_with_prior", 1_000_000, np.random.default_rng(11),
                     params={"private_prior": "noised_labels"})
    back3 = _message(alg3, labels.size)
    assert back3.prior is not None and back3.prior.source == "noisy_label_histogram"
    assert back3.mechanism.sigma is not None
    assert out.accounting.parts[0].epsilon_micro == alg3.accounting.parts[0].epsilon_micro  # the same ε₁ split


def test_rp_with_prior_sigma_belongs_to_the_noised_label_prior():
    with pytest.raises(RandomizerError) as err:
        randomize(_labels(400), DOMAIN, "rp_with_prior", 1_000_000, np.random.default_rng(7), params={"sigma": 1.0})
    assert err.value.code == "invalid_parameters" and "noised_labels" in str(err.value)
    randomize(_labels(400), DOMAIN, "rp_with_prior", 1_000_000, np.random.default_rng(7),
              params={"sigma": 1.0, "private_prior": "noised_labels"})


def test_rp_with_prior_histogram_prior_finds_a_skewed_count_distribution():
    """Counts piled near 0 on [0, 30] at ε = 0.5: Alg. 3's noised labels (scale 30/ε₁ per label)
    give a nearly flat prior and an interval over the whole domain; the histogram finds the pile."""
    domain = LabelDomain("integer", 0.0, 30.0)
    labels = np.minimum(np.random.default_rng(3).poisson(1.7, 16_000), 30).astype(np.float64)
    values, counts = np.unique(labels, return_counts=True)
    truth = Prior(values, counts / counts.sum())
    losses = {}
    for source in ("histogram", "noised_labels"):
        out = randomize(labels, domain, "rp_with_prior", 500_000, np.random.default_rng(5),
                        params={"private_prior": source})
        mech = REGISTRY["rp_with_prior"].from_spec(out.mechanism)
        losses[source] = mech.loss_under(truth)
        if source == "histogram":
            assert mech.a2_ < 15  # the interval is where the labels are
    assert losses["histogram"] < 0.1 * losses["noised_labels"]
