"""Accounting composed from the parts' guarantees: ε allotments add up, δ comes from the guarantees."""

from __future__ import annotations

import numpy as np
import pytest

from labeldp.accounting import AccountingError, compose
from labeldp.mechanisms import LabelDomain
from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.release.randomizer import randomize


def test_basic_composition_of_allotments_and_deltas() -> None:
    acc = compose([("prior", 300_000, PrivacyGuarantee(0.3)), ("randomizer", 700_000, PrivacyGuarantee(0.7, 1e-6))])
    assert [(p.name, p.epsilon_micro) for p in acc.parts] == [("prior", 300_000), ("randomizer", 700_000)]
    assert acc.total_epsilon_micro == 1_000_000 and acc.delta == pytest.approx(1e-6)


@pytest.mark.parametrize(
    "parts",
    [
        [("randomizer", 500_000, PrivacyGuarantee(1.0))],  # calibrated to more than it was given
        [("randomizer", 1_000_000, PrivacyGuarantee(1.0, adjacency="add-remove"))],
        [("a", 1, PrivacyGuarantee(0.0, 0.6)), ("b", 1, PrivacyGuarantee(0.0, 0.6))],
        [],
    ],
)
def test_parts_that_do_not_fit_raise(parts: list) -> None:
    with pytest.raises(AccountingError):
        compose(parts)


def test_a_gaussian_release_carries_the_delta_its_guarantee_states() -> None:
    domain = LabelDomain("real", 0.0, 1.0)
    labels = np.random.default_rng(0).uniform(0, 1, 100)
    out = randomize(labels, domain, "gaussian", 1_000_000, np.random.default_rng(1), params={"delta": 1e-5})
    assert out.accounting.delta == pytest.approx(1e-5)
    out = randomize(labels, domain, "rr_on_bins", 2_000_000, np.random.default_rng(1))
    assert out.accounting.delta == 0 and sum(p.epsilon_micro for p in out.accounting.parts) == 2_000_000
