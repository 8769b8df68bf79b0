"""The features party's processes share only the database and the object store (issue 23, item 2).

A features API and training workers, each with a data folder of its own, on one PostgreSQL
database and one S3 store (moto's server on loopback): a Parquet table uploaded through the
API is trained on by a worker, a worker killed mid-training is resumed by another worker
(another folder) from the checkpoint in the store, and the model and its export are served
by the API from the store. Nothing of the features party's lands in a process's folder.
"""

from __future__ import annotations

import io
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from tests.postgres_server import PostgresServer
from tests.s3_server import S3Server

from labeldp.synthetic import make_conversions

from .conftest import create_label_set, upload_csv, wait_for_status
from .test_training_jobs import LEASE_SECONDS, Fleet, _wait

pytestmark = pytest.mark.integration


@pytest.fixture
def shared_only(tmp_path: Path, postgres_server: PostgresServer, s3_server: S3Server) -> Iterator[tuple[Fleet, dict]]:
    name = postgres_server.create_database()
    # The stack's features API receives the release: its shards must be in the shared store too.
    storage = s3_server.env(s3_server.url())
    fleet = Fleet(tmp_path, {
        **storage,
        "LABELDP_FEATURES_DATABASE_URL": postgres_server.url(name),
        "LABELDP_TRAINING_IN_PROCESS_WORKER": "false",
        "LABELDP_TRAINING_LEASE_SECONDS": str(LEASE_SECONDS),
        "LABELDP_TRAINING_POLL_SECONDS": "0.3",
        "LABELDP_TRAINING_PROGRESS_SECONDS": "0.3",
        "LABELDP_TRAINING_THREADS": "1",
    })
    try:
        fleet.start()
        yield fleet, storage
    finally:
        fleet.close()
        postgres_server.drop_database(name)


def _own(folder: Path, storage: dict[str, str]) -> dict[str, str]:
    return {**storage, "LABELDP_FEATURES_DATA_DIR": str(folder)}


@pytest.mark.parametrize("streaming", [False, True], ids=["in_memory", "streamed"])
def test_an_api_and_workers_with_their_own_folders_share_tables_checkpoints_and_models_through_s3(
    shared_only: tuple[Fleet, dict], tmp_path: Path, s3_server: S3Server, streaming: bool
) -> None:
    """Streamed, the stage too is in the store (``stages/<training id>/``): the second worker, with
    another folder, fetches the stage the first one wrote instead of staging again; it goes with
    the checkpoint once the training succeeds."""
    fleet, storage = shared_only
    if streaming:
        storage = {**storage, "LABELDP_TRAINING_STREAMING": "true", "LABELDP_TRAINING_ROW_GROUP_ROWS": "128"}
    objects = s3_server.store(storage["LABELDP_STORAGE_URL"])
    folders = {name: tmp_path / name for name in ("api", "worker-1", "worker-2")}
    api = fleet.api("features-s3", _own(folders["api"], storage))
    data = make_conversions(1200, seed=5)
    table = io.BytesIO()
    pq.write_table(pacsv.read_csv(io.BytesIO(data.to_csv())), table, row_group_size=500)
    with fleet.client(api) as features, fleet.stack.labels_client() as labels:
        r = features.post("/v1/feature-tables", params={"name": "clicks",
                                                        "categorical": "advertiser,campaign,device,site"},
                          content=table.getvalue(), headers={"content-type": "application/vnd.apache.parquet"})
        assert r.status_code == 201, r.text
        ls = create_label_set(labels, data.ids, budget=5.0, high=data.clip)
        assert upload_csv(labels, ls["id"], list(zip(data.ids, [float(v) for v in data.labels]))).status_code == 200
        response = labels.post(f"/v1/label-sets/{ls['id']}/releases",
                               json={"mechanism": "laplace", "epsilon": 1, "feature_table": "clicks"})
        assert response.status_code == 202, response.text
        release_id = response.json()["id"]
        wait_for_status(labels, release_id, "delivered")  # to the stack's API: the release is in the database

        first = fleet.spawn("worker-1", ["worker", "features"], _own(folders["worker-1"], storage))
        long = features.post("/v1/trainings", json={"release_id": release_id, "epochs": 8, "batch_size": 16})
        assert long.status_code == 202, long.text
        training = long.json()["id"]
        _wait(features, training, lambda body: body["status"] == "running" and body["progress"]["epoch"] >= 2)
        assert objects.list("checkpoints") == [f"checkpoints/{training}.pt"]
        stage = [key for key in objects.list("stages") if key.endswith("/staged.json")]
        assert len(stage) == (1 if streaming else 0) and all(key.startswith(f"stages/{training}/") for key in stage)
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        fleet.spawn("worker-2", ["worker", "features"], _own(folders["worker-2"], storage))
        end = _wait(features, training, lambda body: body["status"] in ("succeeded", "failed", "cancelled"))
        assert end["status"] == "succeeded" and end["attempt"] == 2 and end["model_id"], end
        second_log = fleet.stack.log_path("worker-2").read_text()
        assert "resuming after epoch" in second_log
        assert ("is in the object store: fetched, not staged again" in second_log) == streaming
        model_id = end["model_id"]
        export = features.get(f"/v1/models/{model_id}/export", params={"format": "onnx"})
        assert export.status_code == 200 and export.content == objects.get_bytes(f"exports/{model_id}.onnx")
        predicted = features.post(f"/v1/models/{model_id}/predict", json={"ids": data.ids[:3]})
        assert predicted.status_code == 200 and len(predicted.json()["predictions"]) == 3
    assert objects.list("models") == [f"models/{model_id}.pt"] and objects.list("checkpoints") == []
    assert objects.list("stages") == []
    assert len(objects.list("tables")) == 1
    for folder in folders.values():  # scratch only: spools and stages, all removed
        for kept in ("tables", "models", "checkpoints", "exports"):
            assert not (folder / kept).exists(), (folder, kept)

