"""Idempotency-Key on the features party's mutating POSTs: feature tables and trainings.

A publisher system that times out after the server committed retries with the same
key; it must get the first answer back and no second table or training.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from tests.local_settings import TRANSPORT_KEY
from tests.unit.test_features_app import API_KEY, AUTH, PUBLIC_KEY, SMALL_CSV, post_release, release_body, upload

from features_party import store
from features_party.app import create_app
from labeldp.service.settings import Settings

TRAINING = {"release_id": "rel-1", "epochs": 1, "batch_size": 8, "seed": 0}


@pytest.fixture
def client(tmp_path: Path):
    settings = Settings(
        features_database_url=f"sqlite:///{tmp_path / 'features.db'}",
        features_data_dir=tmp_path / "data",
        features_api_key=API_KEY, inbox_transport_key=TRANSPORT_KEY,
        signing_public_keys=PUBLIC_KEY,
        device="cpu",
        training_threads=1,
    )
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture
def release(client: TestClient) -> str:
    assert upload(client, "clicks", SMALL_CSV, categorical="zip").status_code == 201
    assert post_release(client, release_body(["007", "008", "009"], [1.0, 2.0, 3.0])).status_code == 201
    return "rel-1"


def count(client: TestClient, table: type[store.Base]) -> int:
    with client.app.state.ctx.sessions() as session:
        return int(session.scalar(select(func.count()).select_from(table)) or 0)


def keyed(key: str) -> dict[str, str]:
    return {**AUTH, "Idempotency-Key": key}


def test_same_key_and_body_queue_one_training(client: TestClient, release: str) -> None:
    first = client.post("/v1/trainings", json=TRAINING, headers=keyed("train-1"))
    again = client.post("/v1/trainings", json=TRAINING, headers=keyed("train-1"))
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    assert again.headers["location"] == first.headers["location"]
    assert again.headers["idempotent-replay"] == "true" and "idempotent-replay" not in first.headers
    assert count(client, store.Training) == 1
    metrics = client.get("/metrics").text
    assert 'labeldp_trainings_total{status="queued"} 1.0' in metrics  # the replay queued nothing
    # without a key, every request is a new training
    assert client.post("/v1/trainings", json=TRAINING, headers=AUTH).status_code == 202
    assert count(client, store.Training) == 2


def test_same_key_with_another_body_is_refused(client: TestClient, release: str) -> None:
    assert client.post("/v1/trainings", json=TRAINING, headers=keyed("train-1")).status_code == 202
    other = client.post("/v1/trainings", json={**TRAINING, "epochs": 2}, headers=keyed("train-1"))
    assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"
    assert count(client, store.Training) == 1


def test_a_refused_training_leaves_the_key_free(client: TestClient, release: str) -> None:
    bad = client.post("/v1/trainings", json={**TRAINING, "feature_table_id": "nope"}, headers=keyed("k"))
    assert bad.status_code == 422 and bad.json()["code"] == "unknown_feature_table"
    # nothing happened, so the key may carry a corrected request
    good = client.post("/v1/trainings", json=TRAINING, headers=keyed("k"))
    assert good.status_code == 202 and count(client, store.Training) == 1


def test_concurrent_duplicates_create_one_training(client: TestClient, release: str) -> None:
    n = 8
    barrier = threading.Barrier(n)
    answers: list = [None] * n

    def post(i: int) -> None:
        barrier.wait()
        answers[i] = client.post("/v1/trainings", json=TRAINING, headers=keyed("same"))

    threads = [threading.Thread(target=post, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert count(client, store.Training) == 1
    created = [r for r in answers if r.status_code == 202 and "idempotent-replay" not in r.headers]
    assert len(created) == 1
    training_id = created[0].json()["id"]
    for r in answers:
        if r.status_code == 202:
            assert r.json()["id"] == training_id
        else:
            assert r.status_code == 409 and r.json()["code"] == "idempotency_in_progress", r.text


def test_same_key_and_body_store_one_feature_table(client: TestClient) -> None:
    first = client.post(
        "/v1/feature-tables", params={"name": "t", "categorical": "zip"}, content=SMALL_CSV.encode(),
        headers={**keyed("table-1"), "content-type": "text/csv"},
    )
    again = client.post(
        "/v1/feature-tables", params={"name": "t", "categorical": "zip"}, content=SMALL_CSV.encode(),
        headers={**keyed("table-1"), "content-type": "text/csv"},
    )
    assert first.status_code == again.status_code == 201  # not 409 feature_table_exists
    assert again.json() == first.json() and again.headers["idempotent-replay"] == "true"
    assert count(client, store.FeatureTable) == 1
    other_body = client.post(
        "/v1/feature-tables", params={"name": "t"}, content=SMALL_CSV.encode(),
        headers={**keyed("table-1"), "content-type": "text/csv"},
    )
    assert other_body.status_code == 422 and other_body.json()["code"] == "idempotency_key_reused"
    bad_key = client.post(
        "/v1/feature-tables", params={"name": "u"}, content=SMALL_CSV.encode(),
        headers={**keyed("\x7fbad"), "content-type": "text/csv"},
    )
    assert bad_key.status_code == 422 and bad_key.json()["code"] == "invalid_idempotency_key"
    assert count(client, store.FeatureTable) == 1
