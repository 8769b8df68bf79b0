"""Sub-collections that grow are cursor pages (issue 26): a set's releases, a training's history."""

from __future__ import annotations

from fastapi.testclient import TestClient
from tests.contract.conftest import FEATURES_AUTH, LABELS_AUTH

from features_party import store


def test_a_trainings_history_pages_over_http(features: TestClient) -> None:
    history = [{"epoch": e, "train_loss": 1.0 / e} for e in range(1, 6)]
    with features.app.state.ctx.sessions.begin() as s:
        s.add(store.Training(training_id="trn_paged", release_id="rel_x", feature_table="t", config={},
                             status=store.SUCCEEDED, epoch=5, epochs=5, history=history))
    seen, params = [], {"limit": 2}
    while True:
        page = features.get("/v1/trainings/trn_paged/history", params=params, headers=FEATURES_AUTH)
        assert page.status_code == 200, page.text
        seen += page.json()["items"]
        if page.json()["next_cursor"] is None:
            break
        params = {"limit": 2, "cursor": page.json()["next_cursor"]}
    assert seen == history
    bad = features.get("/v1/trainings/trn_paged/history", params={"cursor": "zz"}, headers=FEATURES_AUTH)
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_cursor"
    assert features.get("/v1/trainings/trn_nope/history", headers=FEATURES_AUTH).json()["code"] == "training_not_found"


def test_a_label_sets_releases_are_a_sub_collection(labels: TestClient) -> None:
    ls = labels.post("/v1/label-sets", json={"name": "s", "domain": {"low": 0, "high": 1}, "ids": ["a"]},
                     headers=LABELS_AUTH).json()["id"]
    page = labels.get(f"/v1/label-sets/{ls}/releases", headers=LABELS_AUTH)
    assert page.status_code == 200 and page.json() == {"items": [], "next_cursor": None}
    assert labels.get("/v1/label-sets/ls_nope/releases", headers=LABELS_AUTH).json()["code"] == "label_set_not_found"
    by_domain = labels.get("/v1/releases", params={"privacy_domain": "default"}, headers=LABELS_AUTH)
    assert by_domain.status_code == 200 and by_domain.json()["items"] == []
