"""A features API configured with LABELDP_TRAINING_WORKERS=2 trains a delivered release as a torchrun job."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from labeldp.synthetic import make_conversions
from labeldp_tools.local_stack import LocalStack

from .conftest import create_label_set, upload_csv, wait_for_status

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    s = LocalStack(tmp_path_factory.mktemp("stack"), extra_env={"LABELDP_TRAINING_WORKERS": "2"})
    s.start()
    yield s
    s.stop()


def test_a_training_runs_as_two_torchrun_workers_behind_the_api(stack: LocalStack) -> None:
    data = make_conversions(1500, seed=3)
    train_ids = data.ids[:1200]
    truth = dict(zip(data.ids, data.labels))
    with stack.labels_client() as labels, stack.features_client() as features:
        r = features.post(
            "/v1/feature-tables",
            params={"name": "clicks", "id_column": "id", "categorical": "advertiser,campaign,device,site"},
            content=data.to_csv(), headers={"content-type": "text/csv"},
        )
        assert r.status_code == 201, r.text
        ls = create_label_set(labels, train_ids, budget=4.0, high=data.clip)
        assert upload_csv(labels, ls["id"], [(i, float(truth[i])) for i in train_ids]).status_code == 200
        r = labels.post(f"/v1/label-sets/{ls['id']}/releases", json={"epsilon": 2, "feature_table": "clicks"})
        assert r.status_code == 202, r.text
        release = wait_for_status(labels, r.json()["id"], "delivered")

        t = features.post(
            "/v1/trainings", json={"release_id": release["id"], "epochs": 3, "batch_size": 128, "precision": "bf16"}
        )
        assert t.status_code == 202, t.text
        training_id = t.json()["id"]
        deadline = time.monotonic() + 240
        while True:
            status = features.get(f"/v1/trainings/{training_id}").json()
            if status["status"] in ("succeeded", "failed") or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert status["status"] == "succeeded", status
        assert [h["epoch"] for h in status["history"]] == [1, 2, 3]  # relayed from rank 0 as it trained
        card = features.get(f"/v1/models/{status['model_id']}").json()
        assert card["runtime"]["workers"] == 2 and card["runtime"]["precision"] == "bf16"
        assert card["runtime"]["device"] == "cpu" and card["runtime"]["rows_per_second"] > 0
        assert card["n_train"] + card["n_validation"] == 1200
        assert card["learning"]["selected_epoch"] in (1, 2, 3)
        pred = features.post(f"/v1/models/{status['model_id']}/predict", json={"ids": data.ids[1200:]})
        assert pred.status_code == 200 and np.all(np.isfinite(pred.json()["predictions"]))

        bad = features.post("/v1/trainings", json={"release_id": release["id"], "precision": "fp8"})
        assert bad.status_code == 422
