"""The model card's numbers people can act on (issue 26, item 5): beside the loss against
privatized labels, the true-label-scale MSE and R² with their standard errors and the baseline
of predicting the private mean (labeldp.learning.true_scale; its unbiasedness is simulated in
tests/unit/test_true_scale.py)."""

from __future__ import annotations

import math

from tests.contract.conftest import FEATURES_AUTH, Parties


def test_the_model_card_shows_the_true_label_error_beside_the_private_mean(parties: Parties) -> None:
    card = parties.features.get(f"/v1/models/{parties.flow.model['id']}", headers=FEATURES_AUTH).json()
    true_label = card["metrics"]["true_label"]
    assert true_label is not None, card["metrics"]
    assert true_label["n_test"] == card["n_validation"] >= 2
    for key in ("test_mse", "test_mse_se", "baseline_mse", "baseline_mse_se", "noise_variance", "private_mean"):
        assert math.isfinite(true_label[key]), key
    assert true_label["test_mse_se"] > 0 and true_label["noise_variance"] > 0
    assert true_label["test_r2"] is None or true_label["test_r2"] <= 1
    listed = parties.features.get("/v1/models", headers=FEATURES_AUTH).json()["items"][0]
    assert "true_label" in listed["metrics"]  # same shape on list pages (null: cards from the catalogue)
    assert "true-label scale" in card["metrics_note"]
