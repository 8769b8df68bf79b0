"""The REST half of the registry's conformance test (tests/unit/test_mechanism_contract.py):
every entry released over real HTTP and trained on with the default learning.

For each registry entry: a release through the labels party, delivered by the outbox to the
features party, then ``POST /v1/trainings`` naming only the release (and few epochs, to keep
the suite short) — the learning options stay the service's defaults. A regression release
must train with the default learning as asked (debiasing through the law the registry
derives, never plain learning in its place); a categorical one trains a classifier.
"""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest

from labeldp.learning.config import DEFAULT_LEARNING
from labeldp.mechanisms.registry import ENTRIES, Entry
from labeldp_tools.local_stack import LocalStack

from .conftest import create_label_set, upload_csv, wait_for_status

pytestmark = pytest.mark.integration

EPSILON = 2
ROWS = 600
CLASSES = ["low", "mid", "high"]


@pytest.fixture(scope="module")
def real_set(stack: LocalStack, data, feature_table: str) -> dict:
    ids = data.ids[:ROWS]
    with stack.labels_client() as labels:
        ls = create_label_set(labels, ids, budget=100.0, high=data.clip)
        assert upload_csv(labels, ls["id"], list(zip(ids, map(float, data.labels[:ROWS])))).status_code == 200
    return ls


@pytest.fixture(scope="module")
def class_set(stack: LocalStack, data, feature_table: str) -> dict:
    """Classes of the same rows (public cut points of the conversion value), on the same feature table."""
    ids = data.ids[:ROWS]
    y = np.digitize(data.labels[:ROWS], np.quantile(data.labels[:ROWS], [0.4, 0.8]))
    with stack.labels_client() as labels:
        r = labels.post(
            "/v1/label-sets",
            json={"name": "classes", "label_type": "categorical", "classes": CLASSES, "total_epsilon": 100,
                  "ids": ids},
        )
        assert r.status_code == 201, r.text
        ls = r.json()
        good = labels.post(f"/v1/label-sets/{ls['id']}/labels", json={"ids": ids, "labels": [CLASSES[c] for c in y]})
        assert good.status_code == 200, good.text
    return ls


def _train(features: httpx.Client, release_id: str) -> dict:
    t = features.post("/v1/trainings", json={"release_id": release_id, "epochs": 2, "batch_size": 128})
    assert t.status_code == 202, t.text
    deadline = time.monotonic() + 180
    while (status := features.get(f"/v1/trainings/{t.json()['id']}").json())["status"] not in (
        "succeeded", "failed"
    ):
        assert time.monotonic() < deadline, status
        time.sleep(0.2)
    assert status["status"] == "succeeded", status
    return features.get(f"/v1/models/{status['model_id']}").json()


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_entry_releases_over_rest_and_trains_with_the_default_learning(
    stack: LocalStack, real_set: dict, class_set: dict, feature_table: str, entry: Entry
) -> None:
    label_set = class_set if entry.categorical else real_set
    with stack.labels_client() as labels, stack.features_client() as features:
        r = labels.post(
            f"/v1/label-sets/{label_set['id']}/releases",
            json={"mechanism": entry.name, "epsilon": EPSILON, "feature_table": feature_table},
        )
        assert r.status_code == 202, r.text
        wait_for_status(labels, r.json()["id"], "delivered")
        got = features.get(f"/v1/releases/{r.json()['id']}").json()
        assert got["mechanism"] == entry.name and got["mechanism_spec"]["name"] == entry.name
        card = _train(features, r.json()["id"])
    assert card["mechanism"] == entry.name
    if entry.categorical:
        assert card["task"] == "classification" and card["classes"] == CLASSES and card["learning"] is None
        return
    assert card["task"] == "regression"
    learning = card["learning"]
    assert learning is not None
    assert (learning["debias"], learning["shrinkage"], learning["select_epoch"]) == (
        DEFAULT_LEARNING.debias, DEFAULT_LEARNING.shrinkage, DEFAULT_LEARNING.select_epoch,
    )
    assert learning["label_law"] == entry.name  # the law the registry derives, not the identity
