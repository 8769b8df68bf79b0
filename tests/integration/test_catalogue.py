"""Every mechanism of the catalogue is selectable through the REST API and travels in the message."""

from __future__ import annotations

import time

import numpy as np
import pytest

from labeldp.mechanisms.registry import REGISTRY

from .conftest import create_label_set, upload_csv, wait_for_status

REGRESSION = [m for m, r in REGISTRY.items() if "real" in r.label_types]
CATEGORICAL = [m for m, r in REGISTRY.items() if "categorical" in r.label_types]


@pytest.fixture(scope="module")
def real_label_set(stack, data, feature_table):
    ids = data.ids[:600]
    with stack.labels_client() as labels:
        ls = create_label_set(labels, ids, budget=100.0, high=data.clip)
        assert upload_csv(labels, ls["id"], list(zip(ids, map(float, data.labels[:600])))).status_code == 200
    return ls


@pytest.mark.parametrize("mechanism", REGRESSION)
def test_regression_mechanism_through_rest(stack, real_label_set, feature_table, mechanism):
    with stack.labels_client() as labels, stack.features_client() as features:
        r = labels.post(
            f"/v1/label-sets/{real_label_set['id']}/releases",
            json={"mechanism": mechanism, "epsilon": 2, "feature_table": feature_table},
        )
        assert r.status_code == 202, r.text
        wait_for_status(labels, r.json()["id"], "delivered")
        got = features.get(f"/v1/releases/{r.json()['id']}").json()
        assert got["mechanism"] == got["mechanism_spec"]["name"] == mechanism
        assert got["accounting"]["total_epsilon_micro"] == 2_000_000
        assert len(features.get(f"/v1/releases/{r.json()['id']}/labels").json()["ids"]) == 600


def test_mechanism_parameters_are_validated(stack, real_label_set):
    with stack.labels_client() as labels:
        url = f"/v1/label-sets/{real_label_set['id']}/releases"
        before = labels.get(f"/v1/label-sets/{real_label_set['id']}").json()["budget"]["spent_micro"]
        r = labels.post(url, json={"mechanism": "gaussian", "epsilon": 1, "params": {"delta": 0.5}})
        assert r.status_code == 422 and r.json()["code"] == "invalid_parameters"
        r = labels.post(url, json={"mechanism": "block_rr", "epsilon": 1})
        assert r.status_code == 422 and r.json()["code"] == "mechanism_not_applicable"
        after = labels.get(f"/v1/label-sets/{real_label_set['id']}").json()["budget"]["spent_micro"]
        assert after == before


def test_categorical_label_set_release_and_classifier(stack, tmp_path):
    rng = np.random.default_rng(5)
    n, classes = 1500, ["low", "mid", "high"]
    x = rng.standard_normal(n)
    y = np.digitize(x, [-0.5, 0.7])  # class from the feature: learnable
    ids = [f"k{i:05d}" for i in range(n)]
    csv_body = "id,x\n" + "".join(f"{i},{v:.5f}\n" for i, v in zip(ids, x))
    with stack.labels_client() as labels, stack.features_client() as features:
        assert features.post(
            "/v1/feature-tables", params={"name": "cat_table", "id_column": "id"},
            content=csv_body.encode(), headers={"content-type": "text/csv"},
        ).status_code == 201
        r = labels.post(
            "/v1/label-sets",
            json={"name": "cats", "label_type": "categorical", "classes": classes, "total_epsilon": 10, "ids": ids},
        )
        assert r.status_code == 201, r.text
        ls = r.json()
        url = f"/v1/label-sets/{ls['id']}/labels"
        bad = labels.post(url, json={"rows": [{"id": ids[0], "label": "unknown"}]})
        assert bad.status_code == 422 and bad.json()["details"][0]["code"] == "unknown_class"
        good = labels.post(url, json={"ids": ids, "labels": [classes[c] for c in y]})
        assert good.status_code == 200, good.text
        for mechanism in CATEGORICAL:
            r = labels.post(
                f"/v1/label-sets/{ls['id']}/releases",
                json={"mechanism": mechanism, "epsilon": 2, "feature_table": "cat_table"},
            )
            assert r.status_code == 202, r.text
            wait_for_status(labels, r.json()["id"], "delivered")
            assert features.get(f"/v1/releases/{r.json()['id']}").json()["mechanism_spec"]["classes"] == classes
        t = features.post("/v1/trainings", json={"release_id": r.json()["id"], "epochs": 8, "batch_size": 128})
        assert t.status_code == 202, t.text
        deadline = time.monotonic() + 120
        while (status := features.get(f"/v1/trainings/{t.json()['id']}").json())["status"] not in (
            "succeeded", "failed"
        ):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert status["status"] == "succeeded", status
        card = features.get(f"/v1/models/{status['model_id']}").json()
        assert card["task"] == "classification" and card["classes"] == classes
        pred = features.post(f"/v1/models/{status['model_id']}/predict", json={"ids": ids}).json()
        accuracy = np.mean(np.asarray(pred["predictions"]) == np.asarray(classes)[y])
        assert accuracy > 0.6  # chance is about 0.4 for the majority class


def test_auto_is_the_default_mechanism_and_resolves_from_public_facts(stack, real_label_set, feature_table):
    from labeldp.release.defaults import default_mechanism

    with stack.labels_client() as labels:
        for eps in (0.1, 0.5, 8.0):
            r = labels.post(
                f"/v1/label-sets/{real_label_set['id']}/releases",
                json={"epsilon": eps, "feature_table": feature_table},  # no mechanism named
            )
            assert r.status_code == 202, r.text
            assert r.json()["mechanism"] == default_mechanism("real", eps)
    assert [default_mechanism("real", e) for e in (0.1, 0.5, 2.0, 8.0)] == [
        "rr_on_bins", "rp_with_prior", "rp_with_prior", "unbiased"
    ]
    assert default_mechanism("categorical", 1.0) == "randomized_response"
