"""``auto``'s tail rule (docs/decisions/0025-auto-tail-rule.md): its ``rp_with_prior`` becomes ``rr_on_bins``
where the release's own prior has a heavy tail past the interval fitted to it — decided from the prior
and public facts, never from the raw labels, and fitted to the same prior (no ε beyond the release's).
Planted once: the decision read from a histogram of the raw labels instead of the prior (red)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fastapi.testclient import TestClient
from tests.contract.conftest import LABELS_AUTH, contract_settings
from tests.release_jobs import wait_release

from labeldp.epsilon import to_micro_floor
from labeldp.mechanisms import LabelDomain
from labeldp.release.defaults import TAIL_CLIP_ABOVE, TAIL_ROWS_BELOW, default_mechanism, prior_tail, tail_pick
from labeldp.release.randomizer import randomize, validate_public_prior
from labeldp.schema import NoisyPrior
from labels_party.app import create_app as labels_app

DOMAIN = LabelDomain("real", 0.0, 30.0)
GRID = np.linspace(0.0, 30.0, 31)
N, EPS = 2_000, 1.0


def _public(heavy: bool):
    probs = np.where(GRID <= 4.0, 1.0, 0.0)
    if heavy:  # a third of the mass spread over [12, 30]
        probs = probs / probs.sum() * 2 + np.where(GRID >= 12.0, 1.0, 0.0) / (GRID >= 12.0).sum()
    return validate_public_prior(GRID.tolist(), (probs / probs.sum()).tolist(), DOMAIN)


def _auto(labels: np.ndarray, seed: int = 0, **kwargs):
    return randomize(labels, DOMAIN, "rp_with_prior", to_micro_floor(EPS), np.random.default_rng(seed), **kwargs)


def test_prior_tail_is_the_clipped_share_of_the_prior_s_mean_in_its_sds() -> None:
    prior = NoisyPrior(grid=[0.0, 10.0], probs=[0.5, 0.5], epsilon=1.0)
    assert math.isclose(prior_tail(prior, (0.0, 5.0)), 0.5)  # mean 5, clipped mean 2.5, sd 5
    assert prior_tail(prior, (0.0, 10.0)) == 0.0
    assert prior_tail(NoisyPrior(grid=[3.0], probs=[1.0], epsilon=1.0), (0.0, 1.0)) == 0.0  # no spread


def test_the_decision_follows_the_prior_and_never_the_raw_labels() -> None:
    """The same (public) prior, raw labels with no tail at all or all of them in it: one decision, the prior's."""
    assert default_mechanism("real", EPS, N) == "rp_with_prior"
    no_tail, all_tail = np.full(N, 1.0), np.full(N, 29.0)
    for heavy, expected in ((True, "rr_on_bins"), (False, "rp_with_prior")):
        public = _public(heavy)
        names = {_auto(labels, public_prior=public, auto=True).mechanism.name for labels in (no_tail, all_tail)}
        assert names == {expected}, heavy


def test_a_switch_fits_rr_on_bins_to_the_same_dp_prior_at_the_same_split() -> None:
    rng = np.random.default_rng(7)
    labels = np.where(rng.random(N) < 0.7, rng.uniform(0, 3, N), rng.uniform(10, 30, N))  # a heavy tail
    switched, named = _auto(labels, seed=3, auto=True), _auto(labels, seed=3)
    assert named.mechanism.name == "rp_with_prior"  # a named rp_with_prior is never switched
    assert switched.mechanism.name == "rr_on_bins"
    assert switched.prior == named.prior and switched.accounting == named.accounting
    assert prior_tail(named.prior, (named.mechanism.a1, named.mechanism.a2)) > TAIL_CLIP_ABOVE
    assert tail_pick(named.prior, named.mechanism) == "rr_on_bins"


def test_a_release_of_tail_rows_below_rows_or_more_keeps_rp_with_prior() -> None:
    """Record 0032: at full size the model is kept and RPWithPrior's finer noise wins; n is public."""
    public = _public(True)
    for n, expected in ((TAIL_ROWS_BELOW - 1, "rr_on_bins"), (TAIL_ROWS_BELOW, "rp_with_prior")):
        out = _auto(np.full(n, 1.0), public_prior=public, auto=True)
        assert out.mechanism.name == expected, n
        named = _auto(np.full(n, 1.0), public_prior=public)
        assert tail_pick(named.prior, named.mechanism, n) == expected
        assert tail_pick(named.prior, named.mechanism) == "rr_on_bins"  # rows not known: the rule applies


@pytest.mark.parametrize("params", [{"zeta": 3.0}])
def test_auto_with_parameters_keeps_rp_with_prior(params) -> None:
    labels = np.full(N, 29.0)
    out = _auto(labels, public_prior=_public(True), auto=True, params=params)
    assert out.mechanism.name == "rp_with_prior"


def test_a_release_says_which_mechanism_auto_ran_once_its_prior_switched_it(tmp_path) -> None:
    """The 202 answer names the band's pick; the charged release names what ran, as its message's spec does."""
    ids = [f"u{i:03d}" for i in range(400)]
    values = [25.0 if i % 10 < 3 else 1.0 for i in range(400)]  # 30 % far past any interval of width ζ
    with TestClient(labels_app(contract_settings(tmp_path))) as labels:
        ls = labels.post("/v1/label-sets", json={"name": "tail", "domain": {"low": 0, "high": 30}, "ids": ids},
                         headers=LABELS_AUTH).json()
        up = labels.post(f"/v1/label-sets/{ls['id']}/labels", json={"ids": ids, "labels": values}, headers=LABELS_AUTH)
        assert up.status_code == 200, up.text
        rel = labels.post(f"/v1/label-sets/{ls['id']}/releases", json={"epsilon": 1}, headers=LABELS_AUTH)
        assert rel.status_code == 202, rel.text
        assert rel.json()["mechanism"] == default_mechanism("real", 1.0, 400) == "rp_with_prior"
        done = wait_release(labels, rel.json()["id"], headers=LABELS_AUTH)
        assert done["mechanism"] == "rr_on_bins"
        named = labels.post(f"/v1/label-sets/{ls['id']}/releases", json={"epsilon": 1, "mechanism": "rp_with_prior"},
                            headers=LABELS_AUTH)
        assert wait_release(labels, named.json()["id"], headers=LABELS_AUTH)["mechanism"] == "rp_with_prior"
