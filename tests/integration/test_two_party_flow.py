"""The whole flow through real HTTP between real processes."""

from __future__ import annotations

import io
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort
import pyarrow as pa
import pyarrow.parquet as pq

from labeldp.synthetic import make_conversions

from .conftest import create_label_set, shuffled, upload_csv, wait_charged, wait_for_status


def test_full_flow_release_train_predict(stack, data, feature_table):
    train_ids = data.ids[:1200]
    truth = dict(zip(data.ids, data.labels))
    with stack.labels_client() as labels, stack.features_client() as features:
        # Ids declared and labels uploaded in two different shuffled orders.
        ls = create_label_set(labels, shuffled(train_ids, 1), budget=4.0, high=data.clip)
        order = shuffled(train_ids, 2)
        r = upload_csv(labels, ls["id"], [(i, float(truth[i])) for i in order[:700]])
        assert r.status_code == 200, r.text
        assert r.json()["missing"] == 500
        r = labels.post(
            f"/v1/label-sets/{ls['id']}/labels",
            json={"rows": [{"id": i, "label": float(truth[i])} for i in order[700:]]},
        )
        assert r.status_code == 200 and r.json()["missing"] == 0

        r = labels.post(
            f"/v1/label-sets/{ls['id']}/releases",
            json={"mechanism": "rr_on_bins", "epsilon": 2, "feature_table": feature_table},
        )
        assert r.status_code == 202, r.text
        assert r.headers["location"] == f"/v1/releases/{r.json()['id']}"
        release = wait_for_status(labels, r.json()["id"], "delivered")
        assert release["epsilon_micro"] == 2_000_000

        got = features.get(f"/v1/releases/{release['id']}").json()
        assert got["message_sha256"] == release["message_sha256"]
        assert got["accounting"]["total_epsilon_micro"] == 2_000_000
        assert got["id"] == release["id"]
        assert got["mechanism"] == got["mechanism_spec"]["name"] == "rr_on_bins"
        cols = features.get(f"/v1/releases/{release['id']}/labels").json()
        # Invariant 2: every id exactly once, in sorted order, whatever the upload order.
        assert cols["ids"] == sorted(train_ids)
        assert set(cols["labels"]) <= set(got["mechanism_spec"]["outputs"])

        t = features.post("/v1/trainings", json={"release_id": release["id"], "epochs": 2, "batch_size": 128})
        assert t.status_code == 202, t.text
        training_id = t.json()["id"]
        deadline = time.monotonic() + 120
        while True:
            status = features.get(f"/v1/trainings/{training_id}").json()
            if status["status"] in ("succeeded", "failed") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert status["status"] == "succeeded", status
        assert len(status["history"]) == 2
        card = features.get(f"/v1/models/{status['model_id']}").json()
        assert card["epsilon"] == 2.0 and card["mechanism"] == "rr_on_bins"
        assert card["n_train"] + card["n_validation"] == 1200
        test_ids = data.ids[1200:]
        pred = features.post(f"/v1/models/{status['model_id']}/predict", json={"ids": test_ids})
        assert pred.status_code == 200
        assert len(pred.json()["predictions"]) == len(test_ids)
        assert np.all(np.isfinite(pred.json()["predictions"]))

        # Models elsewhere over the real stack: the ONNX download loads in ONNX Runtime, and a
        # Parquet file of ids gets the JSON route's predictions back as Parquet.
        onnx = features.get(f"/v1/models/{status['model_id']}/export", params={"format": "onnx"})
        assert onnx.status_code == 200, onnx.text
        graph = ort.InferenceSession(onnx.content, providers=["CPUExecutionProvider"])
        names = [i.name for i in graph.get_inputs()]  # the raw feature columns, by name
        assert "id" not in names and {"advertiser", "campaign", "device", "site"} <= set(names)
        assert "labeldp" in graph.get_modelmeta().custom_metadata_map
        upload = io.BytesIO()
        pq.write_table(pa.table({"id": test_ids}), upload)
        (table,) = features.get("/v1/feature-tables", params={"name": feature_table}).json()["items"]
        table_id = table["id"]  # the name finds the id; paths and fields take the id
        r = features.post(
            f"/v1/models/{status['model_id']}/predictions", params={"feature_table_id": table_id},
            content=upload.getvalue(), headers={"content-type": "application/vnd.apache.parquet"},
        )
        assert r.status_code == 200, r.text
        batch = pq.read_table(io.BytesIO(r.content))
        assert batch.column("id").to_pylist() == list(test_ids)
        assert np.allclose(batch.column("prediction").to_numpy(), pred.json()["predictions"])

        summary = labels.get(f"/v1/label-sets/{ls['id']}").json()
        assert summary["budget"]["spent_micro"] == 2_000_000
        assert summary["budget"]["remaining_micro"] == 2_000_000
        assert [x["id"] for x in summary["releases"]] == [release["id"]]


def test_twenty_concurrent_releases_against_a_budget_of_three(stack):
    # Enough labels that privatizing takes a while: requests overlap between their
    # budget pre-check and their charge, so only the transactional check can hold the line.
    big = make_conversions(20_000, seed=11)
    with stack.labels_client() as labels:
        ls = create_label_set(labels, big.ids, budget=0.3, high=big.clip)  # 0.1 + 0.1 + 0.1 fits exactly
        r = upload_csv(labels, ls["id"], list(zip(big.ids, map(float, big.labels))))
        assert r.status_code == 200, r.text
        barrier = threading.Barrier(20)

        def ask(_: int) -> tuple[int, str]:
            barrier.wait()
            r = labels.post(f"/v1/label-sets/{ls['id']}/releases", json={"mechanism": "rr_on_bins", "epsilon": 0.1})
            return r.status_code, r.json().get("code", "")

        with ThreadPoolExecutor(20) as pool:
            results = list(pool.map(ask, range(20)))
        assert [s for s, _ in results].count(202) == 3
        assert [c for s, c in results if s != 202] == ["budget_exhausted"] * 17  # queued jobs hold the cap
        for release in labels.get("/v1/releases", params={"label_set_id": ls["id"]}).json()["items"]:
            wait_charged(labels, release["id"])
        summary = labels.get(f"/v1/label-sets/{ls['id']}").json()
        assert summary["budget"]["spent_micro"] == 3 * 100_000 == summary["budget"]["total_micro"]
        assert len(summary["releases"]) == 3


def test_a_release_naming_no_feature_table_is_delivered_and_bound_at_training(stack, data, feature_table):
    # Nothing charged that cannot be delivered: the features party stores the release; the
    # publisher picks the table when it trains.
    ids = data.ids[:300]
    truth = dict(zip(data.ids, data.labels))
    with stack.labels_client() as labels, stack.features_client() as features:
        ls = create_label_set(labels, ids, budget=1.0, high=data.clip)
        assert upload_csv(labels, ls["id"], [(i, float(truth[i])) for i in ids]).status_code == 200
        r = labels.post(f"/v1/label-sets/{ls['id']}/releases", json={"mechanism": "laplace", "epsilon": 1})
        assert r.status_code == 202, r.text
        release = wait_for_status(labels, r.json()["id"], "delivered")
        assert features.get(f"/v1/releases/{release['id']}").json()["feature_table"] is None
        unbound = features.post("/v1/trainings", json={"release_id": release["id"], "epochs": 1})
        assert unbound.status_code == 422 and unbound.json()["code"] == "feature_table_required"
        (table,) = features.get("/v1/feature-tables", params={"name": feature_table}).json()["items"]
        bound = features.post(
            "/v1/trainings", json={"release_id": release["id"], "epochs": 1, "feature_table_id": table["id"]}
        )
        assert bound.status_code == 202, bound.text
