"""How a release obtains its prior: one function per registry prior kind (labeldp.release.priors)."""

from __future__ import annotations

from typing import get_args

import numpy as np
import pytest

from labeldp.errors import RandomizerError
from labeldp.mechanisms import LabelDomain
from labeldp.mechanisms.categorical import PriorSplit, RandomizedResponse, prior_split_mask
from labeldp.mechanisms.prior import LaplaceHistogramPrior, default_grid
from labeldp.mechanisms.registry import ENTRIES, PriorKind
from labeldp.mechanisms.rp_with_prior import RPWithPriorParams, StepPrior
from labeldp.release.priors import PRIORS, PriorRequest, PublicPrior, obtain_prior

DOMAIN = LabelDomain("real", 0.0, 10.0)
CLASSES = ["a", "b", "c", "d"]
LABELS = np.random.default_rng(0).uniform(0.0, 10.0, 400)
CLASS_LABELS = (np.arange(400) % 4).astype(np.float64)
PUBLIC = PublicPrior(np.linspace(0.0, 10.0, 11), np.full(11, 1 / 11))


def test_one_function_per_prior_kind_and_every_entry_has_one() -> None:
    assert set(PRIORS) == set(get_args(PriorKind))
    for entry in ENTRIES:
        assert entry.prior_kind(entry.parse_params({})) in PRIORS


def _labels(kind: PriorKind) -> np.ndarray:
    return CLASS_LABELS if kind == "split" else LABELS


def _ask(kind: PriorKind, **kw) -> PriorRequest:
    categorical = kind == "split"
    name = {"split": "rr_with_prior", "noised_labels": "rp_with_prior", "histogram": "rr_on_bins"}.get(kind, "laplace")
    entry = next(e for e in ENTRIES if e.name == name)
    defaults = dict(
        mechanism=entry.name, n_rows=400, domain=None if categorical else DOMAIN,
        classes=CLASSES if categorical else None, params=entry.parse_params({}), epsilon_micro=1_000_000,
    )
    return PriorRequest(**{**defaults, **kw})


@pytest.mark.parametrize(
    "kind, kw, code",
    [
        ("none", {"public": PUBLIC}, "invalid_request"),
        ("none", {"epsilon_prior_micro": 10}, "invalid_request"),
        ("split", {"epsilon_prior_micro": 10}, "invalid_request"),
        ("histogram", {"public": PUBLIC, "epsilon_prior_micro": 10}, "invalid_request"),
        ("histogram", {"epsilon_prior_micro": 0}, "invalid_epsilon"),
        ("histogram", {"epsilon_prior_micro": 1_000_000}, "invalid_epsilon"),
        ("noised_labels", {"domain": None}, "invalid_request"),
    ],
)
def test_a_request_the_prior_cannot_serve_draws_nothing(kind: PriorKind, kw: dict, code: str) -> None:
    rng = np.random.default_rng(1)
    before = rng.bit_generator.state
    with pytest.raises(RandomizerError) as err:
        obtain_prior(kind, _ask(kind, **kw), _labels(kind), rng)
    assert err.value.code == code
    assert rng.bit_generator.state == before  # refused before any label was read


def test_a_public_prior_costs_nothing_and_is_what_the_mechanism_is_fitted_to() -> None:
    for kind, parts in (("histogram", [("prior", 0)]), ("noised_labels", [("prior", 0)]), ("split", [])):
        public = PublicPrior(np.arange(4.0), np.array([0.4, 0.3, 0.2, 0.1])) if kind == "split" else PUBLIC
        got = obtain_prior(kind, _ask(kind, public=public), _labels(kind), np.random.default_rng(2))
        assert [(name, micro) for name, micro, _ in got.parts] == parts and got.epsilon_micro == 1_000_000
        assert got.prior is not None and not isinstance(got.prior, StepPrior)
        np.testing.assert_array_equal(got.prior.probs, public.probs)
        assert got.spec is not None and got.spec.source == "public" and got.split is None


def test_the_histogram_prior_spends_eps1_on_the_release_grid() -> None:
    got = obtain_prior("histogram", _ask("histogram", epsilon_prior_micro=200_000), LABELS, np.random.default_rng(3))
    grid = default_grid(DOMAIN, LABELS.size, 1.0)
    expected = LaplaceHistogramPrior(0.2, grid).fit(LABELS, np.random.default_rng(3))
    assert [(name, micro) for name, micro, _ in got.parts] == [("prior", 200_000)] and got.epsilon_micro == 800_000
    assert got.prior is not None and not isinstance(got.prior, StepPrior)
    np.testing.assert_array_equal(got.prior.values, grid)
    np.testing.assert_array_equal(got.prior.probs, expected.probs_)


def test_the_noised_label_prior_is_a_step_prior_with_its_bin_width() -> None:
    ask = _ask("noised_labels", epsilon_prior_micro=500_000, params=RPWithPriorParams(private_prior="noised_labels"))
    got = obtain_prior("noised_labels", ask, LABELS, np.random.default_rng(4))
    assert isinstance(got.prior, StepPrior) and got.prior.sigma is not None
    assert got.spec is not None and got.spec.source == "noisy_label_histogram" and got.spec.sigma == got.prior.sigma
    assert [(name, micro) for name, micro, _ in got.parts] == [("prior", 500_000)]


def test_the_split_prior_is_the_debiased_first_stage_of_rows_it_has_released() -> None:
    got = obtain_prior("split", _ask("split"), CLASS_LABELS, np.random.default_rng(5))
    assert got.parts == () and got.epsilon_micro == 1_000_000 and got.spec is None and got.split is not None
    mask = prior_split_mask(CLASS_LABELS.size, 0.1)
    np.testing.assert_array_equal(got.split.rows_at(0, CLASS_LABELS.size), np.flatnonzero(mask))
    whole = PriorSplit(1.0, CLASSES, 0.1)  # the same draws over the whole array keep every output
    whole.release(CLASS_LABELS, np.random.default_rng(5))
    np.testing.assert_array_equal(whole.mask_, mask)
    first = RandomizedResponse(1.0, CLASSES).fit_to()
    assert got.prior is not None
    np.testing.assert_array_equal(got.prior.probs, first.estimate_prior(whole.outputs_[mask]))
