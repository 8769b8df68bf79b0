"""The features party over HTTP: feature tables, the release inbox, trainings, models, auth."""

from __future__ import annotations

import hashlib
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select
from tests.inbox_messages import Message, deliver, write
from tests.local_settings import TRANSPORT_AUTH, TRANSPORT_KEY

from features_party import store
from features_party.app import create_app
from labeldp import __version__
from labeldp.learning.selection import evidence_weight
from labeldp.mechanisms.contract import Prior
from labeldp.mechanisms.rr_on_bins import RROnBins
from labeldp.schema import EpsilonPart, LaplaceSpec, PrivacyAccounting, ReleaseMetadata
from labeldp.service.settings import Settings
from labeldp.signing import generate_keypair, key_id, sign, verify
from labeldp.specs.base import LabelDomainSpec

API_KEY = "test-features-key"
SECRET, PUBLIC_KEY = generate_keypair()  # the advertiser signs with SECRET; the app trusts PUBLIC_KEY
UNTRUSTED, _ = generate_keypair()  # a private key whose public half the app does not trust
AUTH = {"Authorization": f"Bearer {API_KEY}"}


# --------------------------------------------------------------------------- helpers


def release_body(
    ids: list[str],
    labels: np.ndarray | list[float],
    *,
    release_id: str = "rel-1",
    feature_table: str | None = "clicks",
    row_count: int | None = None,
    mechanism=None,
    shard_rows: int = 1_000_000,
) -> Message:
    """A release's message (manifest and shards) as the labels party would write it."""
    metadata = ReleaseMetadata(
        release_id=release_id,
        label_set_id="ls-1",
        feature_table=feature_table,
        created_at=datetime(2024, 1, 1, tzinfo=UTC),
        mechanism=mechanism
        or LaplaceSpec(epsilon=1.0, domain=LabelDomainSpec(low=-20, high=20), step=0.001, scale=40.0),
        accounting=PrivacyAccounting(
            parts=[EpsilonPart(name="randomizer", epsilon_micro=1_000_000)],
            total_epsilon_micro=1_000_000,
        ),
        row_count=len(ids),
    )
    message = write(metadata, ids, np.asarray(labels, dtype=np.float64), shard_rows)
    return message if row_count is None else message.with_manifest(row_count=row_count)


def post_release(client: TestClient, body: Message | bytes, secret: str | None = SECRET, signature=None):
    """Deliver a message as the outbox does (manifest, missing shards, complete); bytes: a manifest alone."""
    return deliver(client, body, secret, signature)


def upload(client: TestClient, name: str, csv: str, **params: str):
    return client.post(
        "/v1/feature-tables",
        params={"name": name, **params},
        content=csv.encode(),
        headers={**AUTH, "content-type": "text/csv"},
    )


def synthetic_csv(n: int, seed: int = 0) -> tuple[str, list[str], np.ndarray]:
    """Rows whose target is a simple function of the features: y = 2·x1 + 3·x2 + city effect."""
    rng = np.random.default_rng(seed)
    x1 = rng.normal(size=n)
    x2 = rng.uniform(size=n)
    city = rng.choice(["north", "south", "east"], size=n)
    effect = {"north": 1.5, "south": -1.0, "east": 0.0}
    y = 2 * x1 + 3 * x2 + np.array([effect[c] for c in city])
    ids = [f"u{i:05d}" for i in range(n)]
    lines = ["id,x1,x2,city"] + [f"{ids[i]},{x1[i]:.6f},{x2[i]:.6f},{city[i]}" for i in range(n)]
    return "\n".join(lines) + "\n", ids, y


def named_tables(client: TestClient, name: str) -> list[dict]:
    """The tables of that name, as the list's ``?name=`` filter finds them (paths take ids only)."""
    return client.get("/v1/feature-tables", params={"name": name}, headers=AUTH).json()["items"]  # type: ignore[no-any-return]


def release_count(client: TestClient) -> int:
    with client.app.state.ctx.sessions() as session:
        return session.scalar(select(func.count()).select_from(store.Release))


def shard_count(client: TestClient) -> int:
    with client.app.state.ctx.sessions() as session:
        return session.scalar(select(func.count()).select_from(store.ReleaseShard))


def training_count(client: TestClient) -> int:
    with client.app.state.ctx.sessions() as session:
        return session.scalar(select(func.count()).select_from(store.Training))


def wait_for_training(client: TestClient, training_id: str, timeout: float = 45.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(f"/v1/trainings/{training_id}", headers=AUTH).json()
        if body["status"] in ("succeeded", "failed"):
            return body
        time.sleep(0.05)
    raise AssertionError("training did not finish in time")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        features_database_url=f"sqlite:///{tmp_path / 'features.db'}",
        features_data_dir=tmp_path / "data",
        features_api_key=API_KEY, inbox_transport_key=TRANSPORT_KEY,
        signing_public_keys=PUBLIC_KEY,
        device="cpu",
        training_threads=1,  # a shared CPU: more threads only contend
    )


@pytest.fixture
def client(settings: Settings):
    with TestClient(create_app(settings)) as c:
        yield c


SMALL_CSV = "id,age,city,zip\n007,31,paris,75001\n008,,lyon,69001\n009,45,,13001\n"


@pytest.fixture
def small_table(client: TestClient) -> list[str]:
    assert upload(client, "clicks", SMALL_CSV, categorical="zip").status_code == 201
    return ["007", "008", "009"]


# --------------------------------------------------------------------------- feature tables


def test_upload_infers_kinds_and_keeps_ids_as_strings(client: TestClient, settings: Settings) -> None:
    response = upload(client, "clicks", SMALL_CSV, categorical="zip")
    assert response.status_code == 201
    body = response.json()
    assert response.headers["location"] == f"/v1/feature-tables/{body['id']}"
    assert body["id"].startswith("ft_") and datetime.fromisoformat(body.pop("created_at")).utcoffset() is not None
    assert body == {
        "id": body["id"],
        "name": "clicks",
        "n_rows": 3,
        "id_column": "id",
        "columns": [
            {"name": "age", "kind": "numeric"},
            {"name": "city", "kind": "categorical"},
            {"name": "zip", "kind": "categorical"},
        ],
    }
    got = client.get(f"/v1/feature-tables/{body['id']}", headers=AUTH).json()
    assert got.pop("created_at") and got == body
    import pyarrow.parquet as pq

    (parquet,) = (settings.features_data_dir / "tables").glob("*.parquet")
    table = pq.read_table(parquet)
    assert table.column("id").to_pylist() == ["007", "008", "009"]  # leading zeros kept
    assert table.column("zip").to_pylist() == ["75001", "69001", "13001"]


def test_upload_duplicate_ids_stores_nothing(client: TestClient, settings: Settings) -> None:
    response = upload(client, "dupes", "id,x\na,1\nb,2\na,3\n")
    assert response.status_code == 422
    assert response.json()["code"] == "duplicate_ids"
    assert response.json()["details"][0]["count"] == 1
    assert named_tables(client, "dupes") == []
    assert list((settings.features_data_dir / "tables").glob("*")) == []


@pytest.mark.parametrize(
    ("name", "csv", "params", "status", "code"),
    [
        ("bad/name", "id,x\na,1\n", {}, 422, "invalid_table_name"),
        ("x" * 65, "id,x\na,1\n", {}, 422, "invalid_table_name"),
        ("t", "key,x\na,1\n", {}, 422, "missing_id_column"),
        ("t", "id,x\na,1\n", {"numeric": "x,y"}, 422, "unknown_column"),
        ("t", "", {}, 422, "invalid_csv"),
        ("t", "id,x\na,1\nb,notanumber\n", {"numeric": "x"}, 422, "invalid_csv"),
    ],
)
def test_upload_rejections(client: TestClient, name: str, csv: str, params: dict, status: int, code: str) -> None:
    response = upload(client, name, csv, **params)
    assert response.status_code == status
    assert response.json()["code"] == code
    assert "notanumber" not in response.text  # cell values are not echoed


@pytest.mark.parametrize(
    ("csv", "code", "row"),
    [
        (b"id,x,city\na,1,p\n\xed\xa0\x80,2,q\n", "invalid_id", 2),  # a lone surrogate as CESU-8 bytes
        (b"id,x,city\na,1,p\nb,2,secret\xed\xa0\x80\n", "invalid_csv", 2),  # was a 500 (binary cast)
        (b"id,x,\xed\xa0\x80\na,1,p\n", "invalid_csv", None),  # a header that is not UTF-8: was a 500
    ],
)
def test_text_that_is_not_unicode_is_a_422_naming_the_row_and_stores_nothing(
    client: TestClient, settings: Settings, csv: bytes, code: str, row: int | None
) -> None:
    response = client.post(
        "/v1/feature-tables", params={"name": "odd"}, content=csv, headers={**AUTH, "content-type": "text/csv"}
    )
    assert (response.status_code, response.json()["code"]) == (422, code), response.text
    if row is not None:
        assert response.json()["details"] == [{"row": row, "code": code}]
        assert f"row {row}" in response.json()["message"]
    assert "secret" not in response.text
    assert named_tables(client, "odd") == []
    assert list((settings.features_data_dir / "tables").glob("*")) == []


def test_upload_existing_name_conflicts(client: TestClient, small_table: list[str]) -> None:
    response = upload(client, "clicks", "id,x\nz,1\n")
    assert response.status_code == 409
    assert response.json()["code"] == "feature_table_exists"
    assert named_tables(client, "clicks")[0]["n_rows"] == 3


# --------------------------------------------------------------------------- auth, health, metrics


def test_endpoints_need_the_bearer_key(client: TestClient, small_table: list[str]) -> None:
    table = named_tables(client, "clicks")[0]["id"]
    assert client.get(f"/v1/feature-tables/{table}").status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    assert client.get(f"/v1/feature-tables/{table}", headers=wrong).json()["code"] == "unauthorized"
    assert client.post("/v1/trainings", json={"release_id": "x"}).status_code == 401
    assert client.post("/v1/feature-tables?name=a", content=b"id\n1\n").status_code == 401
    assert client.get("/healthz").json() == {"status": "ok", "service": "features", "version": __version__}


def test_metrics_count_inbox_results(client: TestClient, small_table: list[str]) -> None:
    body = release_body(small_table, [1.0, 2.0, 3.0])
    post_release(client, body)
    post_release(client, body)
    post_release(client, body, secret=UNTRUSTED)
    text = client.get("/metrics").text
    assert 'labeldp_inbox_messages_total{result="manifest_new"} 1.0' in text
    assert 'labeldp_inbox_messages_total{result="shard_stored"} 1.0' in text
    assert 'labeldp_inbox_messages_total{result="complete"} 1.0' in text
    assert 'labeldp_inbox_messages_total{result="manifest_complete"} 1.0' in text
    assert 'labeldp_inbox_messages_total{result="bad_signature"} 1.0' in text


# --------------------------------------------------------------------------- inbox


def test_inbox_accepts_then_deduplicates(client: TestClient, small_table: list[str]) -> None:
    labels = [0.5, -1.25, 3.0]
    body = release_body(small_table, labels)
    first = post_release(client, body)
    assert first.status_code == 201
    assert first.json()["status"] == "complete"
    assert first.requests == ["manifest", "shard 0", "complete"]
    assert len(first.json()["message_sha256"]) == 64

    again = post_release(client, body)  # a duplicate is answered on its manifest, before any shard
    assert again.status_code == 200 and again.requests == ["manifest"]
    assert again.json() == {
        "id": "rel-1", "status": "complete", "missing": [], "message_sha256": first.json()["message_sha256"]
    }
    assert release_count(client) == 1

    meta = client.get("/v1/releases/rel-1", headers=AUTH).json()
    assert meta["feature_table"] == "clicks"
    assert meta["mechanism"] == meta["mechanism_spec"]["name"] == "laplace"
    assert meta["accounting"]["total_epsilon_micro"] == 1_000_000
    assert meta["row_count"] == 3
    assert meta["message_sha256"] == first.json()["message_sha256"]
    assert client.get("/v1/releases/rel-1/labels", headers=AUTH).json() == {"ids": small_table, "labels": labels}
    assert client.get("/v1/releases/nope", headers=AUTH).json()["code"] == "release_not_found"


def test_inbox_same_id_different_bytes_conflicts(client: TestClient, small_table: list[str]) -> None:
    assert post_release(client, release_body(small_table, [1.0, 2.0, 3.0])).status_code == 201
    response = post_release(client, release_body(small_table, [1.0, 2.0, 4.0]))
    assert response.status_code == 409
    assert response.json()["code"] == "release_conflict"
    assert client.get("/v1/releases/rel-1/labels", headers=AUTH).json()["labels"] == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("secret", [None, UNTRUSTED])
def test_inbox_rejects_bad_or_missing_signature(client: TestClient, small_table: list[str], secret) -> None:
    response = post_release(client, release_body(small_table, [1.0, 2.0, 3.0]), secret=secret)
    assert response.status_code == 401
    assert response.json()["code"] == "bad_signature"
    assert release_count(client) == 0


def test_inbox_bearer_key_is_not_enough(client: TestClient, small_table: list[str]) -> None:
    body = release_body(small_table, [1.0, 2.0, 3.0])
    response = client.post("/v1/releases", content=body.manifest, headers=AUTH)
    assert response.status_code == 401
    assert release_count(client) == 0


def test_the_signed_manifest_is_kept_and_shown_as_proof(client: TestClient, small_table: list[str]) -> None:
    """The features party keeps what it received with its signature (issue 24, item 2): anyone with the
    advertiser's public key can check it; the publisher cannot alter it and keep the signature valid."""
    assert post_release(client, release_body(small_table, [1.0, 2.0, 3.0])).status_code == 201
    shown = client.get("/v1/releases/rel-1", headers=AUTH).json()
    assert shown["signing_key_id"] == key_id(PUBLIC_KEY)
    proof = client.get("/v1/releases/rel-1/manifest", headers=AUTH).json()
    manifest, signature = proof["manifest"].encode("utf-8"), proof["signature"]
    assert proof["signing_key_id"] == key_id(PUBLIC_KEY)
    assert verify(manifest, PUBLIC_KEY, signature)
    assert json.loads(manifest)["release_id"] == "rel-1"
    assert hashlib.sha256(manifest).hexdigest() == shown["message_sha256"]
    forged = manifest.replace(b'"rel-1"', b'"rel-2"')
    assert not verify(forged, PUBLIC_KEY, signature)
    assert client.get("/v1/releases/nope/manifest", headers=AUTH).json()["code"] == "release_not_found"


def test_inbox_refuses_a_tampered_shard(client: TestClient, small_table: list[str]) -> None:
    honest = release_body(small_table, [1.0, 2.0, 3.0])
    other = release_body(small_table, [1.0, 2.0, 9.0])  # a valid shard, but not the one the manifest lists
    tampered = Message(honest.manifest, other.shards)
    response = post_release(client, tampered)  # the manifest is validly signed; the shard's digest differs
    assert response.status_code == 422
    assert response.json()["code"] == "digest_mismatch"
    assert shard_count(client) == 0
    assert client.get("/v1/releases/rel-1", headers=AUTH).status_code == 404  # not complete, not readable
    assert client.post("/v1/releases/rel-1/complete", headers=TRANSPORT_AUTH).json()["code"] == "shards_missing"
    assert post_release(client, honest).status_code == 200  # the honest shard completes it
    assert client.get("/v1/releases/rel-1/labels", headers=AUTH).json()["labels"] == [1.0, 2.0, 3.0]


def test_inbox_refuses_a_tampered_manifest(client: TestClient, small_table: list[str]) -> None:
    honest = release_body(small_table, [1.0, 2.0, 3.0])
    tampered = honest.with_manifest(feature_table="elsewhere")
    response = post_release(client, tampered, signature=sign(honest.manifest, SECRET))
    assert response.status_code == 401 and response.json()["code"] == "bad_signature"
    assert release_count(client) == 0
    # A shard is refused before its manifest: nothing is stored for an unknown release.
    r = client.put("/v1/releases/rel-1/shards/0", content=honest.shards[0], headers=TRANSPORT_AUTH)
    assert r.status_code == 404 and r.json()["code"] == "manifest_unknown"
    assert shard_count(client) == 0


@pytest.mark.parametrize(
    ("ids", "kwargs", "code"),
    [
        (["008", "007", "009"], {}, "invalid_message"),  # not sorted
        (["007", "007", "009"], {}, "invalid_message"),  # not unique
        (["007", "008", "009"], {"row_count": 4}, "invalid_message"),
    ],
)
def test_inbox_rejects_inconsistent_messages(
    client: TestClient, small_table: list[str], ids: list[str], kwargs: dict, code: str
) -> None:
    response = post_release(client, release_body(ids, [1.0, 2.0, 3.0, 4.0][: len(ids)], **kwargs))
    assert response.status_code == 422
    assert response.json()["code"] == code
    assert shard_count(client) == 0
    assert client.get("/v1/releases/rel-1", headers=AUTH).status_code == 404


@pytest.mark.parametrize("hint", [None, "not_uploaded_yet"])
def test_inbox_stores_a_release_before_any_table_and_a_training_binds_one(client: TestClient, hint) -> None:
    # A charged release must never be undeliverable: no table yet, or a hint naming none,
    # is the training's problem, not the message's.
    ids = ["007", "008", "009"]
    response = post_release(client, release_body(ids, [1.0, 2.0, 3.0], feature_table=hint))
    assert response.status_code == 201 and response.json()["status"] == "complete"
    assert release_count(client) == 1
    assert client.get("/v1/releases/rel-1", headers=AUTH).json()["feature_table"] == hint

    unbound = client.post("/v1/trainings", json={"release_id": "rel-1", "epochs": 1}, headers=AUTH)
    expected = "feature_table_required" if hint is None else "unknown_feature_table"
    assert unbound.status_code == 422 and unbound.json()["code"] == expected
    assert training_count(client) == 0

    uploaded = upload(client, "clicks", SMALL_CSV, categorical="zip")
    assert uploaded.status_code == 201
    bound = client.post(
        "/v1/trainings", json={"release_id": "rel-1", "epochs": 1, "feature_table_id": uploaded.json()["id"]},
        headers=AUTH,
    )
    assert bound.status_code == 202, bound.text
    with client.app.state.ctx.sessions() as session:
        assert session.get(store.Training, bound.json()["id"]).feature_table == "clicks"
    assert wait_for_training(client, bound.json()["id"])["status"] == "succeeded"


def test_a_release_with_ids_the_table_lacks_is_stored_and_refused_at_training(
    client: TestClient, small_table: list[str]
) -> None:
    labels = [11.111, 22.222, 33.333]
    assert post_release(client, release_body(["007", "008", "zzz"], labels)).status_code == 201
    response = client.post("/v1/trainings", json={"release_id": "rel-1", "epochs": 1}, headers=AUTH)
    assert response.status_code == 422 and response.json()["code"] == "unknown_ids"
    assert response.json()["details"] == [{"count": 1, "examples": ["zzz"]}]  # ids are public
    assert not any(str(v) in response.text for v in labels)  # labels never
    assert training_count(client) == 0


SIX_CSV = "id,age,city\n" + "".join(f"s{i},{30 + i},{'paris' if i % 2 else 'lyon'}\n" for i in range(6))


def test_a_release_over_the_join_check_rows_is_queued_unread_and_its_training_fails_unknown_ids(
    settings: Settings,
) -> None:
    """Above ``LABELDP_TRAINING_JOIN_CHECK_ROWS`` the request does not read the release: 202, and the training
    (its stage when streamed, the in-memory join else) fails with ``unknown_ids``, leaving no model and no stage;
    a release whose ids the table holds trains. At or below it (a release of several shards here), 422 as ever."""
    labels = [11.111, 22.222, 33.333, 44.444, 55.555, 66.666]
    for streaming in (True, False):
        small = settings.model_copy(update={"training_join_check_rows": 3, "training_streaming": streaming,
                                            "features_data_dir": settings.features_data_dir / str(streaming),
                                            "features_database_url": f"{settings.features_database_url}.{streaming}"})
        with TestClient(create_app(small)) as client:
            assert upload(client, "clicks", SMALL_CSV, categorical="zip").status_code == 201
            three = release_body(["007", "008", "zzz"], labels[:3], release_id="rel-3", shard_rows=1)
            assert post_release(client, three).status_code == 201
            refused = client.post("/v1/trainings", json={"release_id": "rel-3", "epochs": 1}, headers=AUTH)
            assert (refused.status_code, refused.json()["code"]) == (422, "unknown_ids")  # 3 rows: checked here
            assert refused.json()["details"] == [{"count": 1, "examples": ["zzz"]}]
            assert training_count(client) == 0
            four = release_body(["007", "008", "yyy", "zzz"], labels[:4], release_id="rel-4", shard_rows=2)
            assert post_release(client, four).status_code == 201
            queued = client.post("/v1/trainings", json={"release_id": "rel-4", "epochs": 1}, headers=AUTH)
            assert queued.status_code == 202, queued.text
            failed = wait_for_training(client, queued.json()["id"])
            assert failed["status"] == "failed" and failed.get("model_id") is None, failed
            assert failed["error"]["code"] == "unknown_ids", failed["error"]
            assert failed["error"]["details"][0]["count"] == 2, failed["error"]  # a count and a few ids, public
            assert sorted(failed["error"]["details"][0]["examples"]) == ["yyy", "zzz"]
            assert not any(str(v) in json.dumps(failed) for v in labels)  # labels never
            ctx = client.app.state.ctx
            with ctx.sessions() as session:
                assert session.scalar(select(func.count()).select_from(store.Model)) == 0
            assert ctx.store.list("stages") == [] and ctx.store.list("models") == []

            six = upload(client, "six", SIX_CSV)
            assert six.status_code == 201
            held = release_body([f"s{i}" for i in range(6)], labels, release_id="rel-6", feature_table="six",
                                shard_rows=4)
            assert post_release(client, held).status_code == 201
            trained = client.post("/v1/trainings", json={"release_id": "rel-6", "epochs": 1}, headers=AUTH)
            assert trained.status_code == 202, trained.text
            assert wait_for_training(client, trained.json()["id"])["status"] == "succeeded"


def test_inbox_rejects_non_messages(client: TestClient) -> None:
    response = post_release(client, b'{"release_id": "x"}')
    assert response.status_code == 422
    assert response.json()["code"] == "invalid_message"


# --------------------------------------------------------------------------- trainings and models


@pytest.fixture
def trained(client: TestClient) -> dict:
    """A 2000-row table, a release of lightly noised labels, and a finished 3-epoch training.

    The labels are not what the release's Laplace spec would produce, so the
    training asks for no debiasing (it would invert a law the labels do not follow).
    """
    csv, ids, y = synthetic_csv(2000)
    assert upload(client, "clicks", csv).status_code == 201
    labels = y + np.random.default_rng(1).normal(scale=0.1, size=len(y))
    assert post_release(client, release_body(ids, labels)).status_code == 201

    response = client.post(
        "/v1/trainings",
        json={"release_id": "rel-1", "epochs": 3, "batch_size": 64, "learning_rate": 0.01, "seed": 0, "debias": "none"},
        headers=AUTH,
    )
    assert response.status_code == 202
    training_id = response.json()["id"]
    assert response.json()["status"] == "queued"
    assert response.headers["location"] == f"/v1/trainings/{training_id}"
    progress = client.get(f"/v1/trainings/{training_id}", headers=AUTH).json()
    assert progress["progress"]["epochs"] == 3
    final = wait_for_training(client, training_id)
    return {"training": final, "csv": csv, "ids": ids, "labels": labels}


def test_training_end_to_end(client: TestClient, trained: dict) -> None:
    training = trained["training"]
    assert training["status"] == "succeeded", training["error"]
    progress = training["progress"]
    assert (progress["epoch"], progress["epochs"], progress["fraction"], progress["eta_seconds"]) == (3, 3, 1.0, 0.0)
    assert progress["elapsed_seconds"] > 0 and training["queue_position"] is None
    assert [h["epoch"] for h in training["history"]] == [1, 2, 3]
    assert all(h["val_loss"] is not None for h in training["history"])
    assert training["device"] == "cpu"

    card = client.get(f"/v1/models/{training['model_id']}", headers=AUTH).json()
    assert card["epsilon"] == 1.0
    assert card["mechanism"] == "laplace"
    assert card["mechanism_spec"]["scale"] == 40.0
    assert card["device"] == "cpu"
    assert card["release_id"] == "rel-1" and card["feature_table"] == "clicks"
    assert card["n_train"] + card["n_validation"] == 2000
    assert card["n_validation"] == 200
    selected = card["learning"]["selected_epoch"]
    assert card["metrics"]["val_loss"] == training["history"][selected - 1]["val_loss"]
    assert card["learning"]["debias"] == "none" and card["learning"]["select_epoch"] is True
    assert "Embedding" in card["architecture"]

    labels = trained["labels"]
    by_ids = client.post(
        f"/v1/models/{training['model_id']}/predict", json={"ids": trained["ids"]}, headers=AUTH
    ).json()["predictions"]
    assert len(by_ids) == 2000
    model_mse = float(np.mean((np.array(by_ids) - labels) ** 2))
    baseline_mse = float(np.var(labels))  # predicting the mean
    assert model_mse < 0.5 * baseline_mse

    rows = [
        {"x1": 0.5, "x2": 0.2, "city": "north"},
        {"x1": "1.0", "x2": None, "city": "atlantis"},  # null numeric -> mean, unseen category -> unknown index
        {"x1": None, "x2": None, "city": None},
    ]
    by_rows = client.post(
        f"/v1/models/{training['model_id']}/predict", json={"rows": rows}, headers=AUTH
    ).json()["predictions"]
    assert len(by_rows) == 3 and all(np.isfinite(by_rows))
    # The same rules as /predictions (a file): an absent feature, NaN or ±Infinity is refused, and
    # so is a value that makes the prediction itself infinite; never a silent number or a null.
    url = f"/v1/models/{training['model_id']}/predict"
    for bad, code in (
        ({}, "missing_columns"),
        ({"x1": 0.5, "city": "north"}, "missing_columns"),
        ({"x1": "NaN", "x2": 0.2, "city": "north"}, "invalid_feature_values"),
        ({"x1": "Infinity", "x2": 0.2, "city": "north"}, "invalid_feature_values"),
        ({"x1": 1e308, "x2": 1e308, "city": "north"}, "invalid_feature_values"),
    ):
        refused = client.post(url, json={"rows": [rows[0], bad]}, headers=AUTH)
        assert (refused.status_code, refused.json()["code"]) == (422, code), bad
    # rows of the table predicted by values agree with prediction by id
    first = {"x1": float(trained["csv"].splitlines()[1].split(",")[1])}
    cells = trained["csv"].splitlines()[1].split(",")
    first.update(x2=float(cells[2]), city=cells[3])
    same = client.post(f"/v1/models/{training['model_id']}/predict", json={"rows": [first]}, headers=AUTH).json()
    assert same["predictions"][0] == pytest.approx(by_ids[0], abs=1e-5)

    unknown = client.post(f"/v1/models/{training['model_id']}/predict", json={"ids": ["nobody"]}, headers=AUTH)
    assert unknown.status_code == 422 and unknown.json()["code"] == "unknown_ids"
    metrics = client.get("/metrics").text
    assert 'labeldp_trainings_total{status="succeeded"} 1.0' in metrics
    # Duration and throughput of the one training: rows of the training split times its 3 epochs.
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
    }
    assert samples[("labeldp_training_duration_seconds_count", (("status", "succeeded"),))] == 1
    assert samples[("labeldp_training_duration_seconds_sum", (("status", "succeeded"),))] > 0
    assert samples[("labeldp_training_rows_total", ())] == card["n_train"] * 3
    assert samples[("labeldp_training_rows_per_second", ())] > 0


def test_predict_rows_with_text_that_is_not_unicode_are_a_422(client: TestClient, trained: dict) -> None:
    # A lone surrogate ("\ud800" in JSON) as a category or a column name was a 500 (issue 24).
    url = f"/v1/models/{trained['training']['model_id']}/predict"
    for rows in ([{"x1": 0.5, "x2": 0.1, "city": "\ud800"}], [{"x1": 0.5, "x2": 0.1, "city": "a", "\ud800": 1}]):
        body = json.dumps({"rows": [{"x1": 0.1, "x2": 0.1, "city": "north"}, *rows]})  # ASCII: "\ud800" escaped
        answer = client.post(url, content=body, headers={**AUTH, "Content-Type": "application/json"})
        assert answer.status_code == 422, answer.text
        assert answer.json()["code"] == "invalid_rows" and answer.json()["details"][0]["row"] == 2


def test_training_request_validation(client: TestClient, small_table: list[str]) -> None:
    assert post_release(client, release_body(small_table, [1.0, 2.0, 3.0])).status_code == 201
    for bad in ({"epochs": 0}, {"epochs": 1001}, {"batch_size": 70000}, {"validation_fraction": 0.5}):
        response = client.post("/v1/trainings", json={"release_id": "rel-1", **bad}, headers=AUTH)
        assert response.status_code == 422, bad
        assert response.json()["code"] == "invalid_request"
    missing = client.post("/v1/trainings", json={"release_id": "nope"}, headers=AUTH)
    assert missing.status_code == 404 and missing.json()["code"] == "release_not_found"
    table = client.post("/v1/trainings", json={"release_id": "rel-1", "feature_table_id": "nope"}, headers=AUTH)
    assert table.status_code == 422 and table.json()["code"] == "unknown_feature_table"
    assert client.get("/v1/trainings/nope", headers=AUTH).json()["code"] == "training_not_found"
    assert client.get("/v1/models/nope", headers=AUTH).json()["code"] == "model_not_found"


def rr_on_bins_release(y: np.ndarray, epsilon: float, seed: int) -> tuple[object, np.ndarray]:
    """An honest RR-on-Bins release of ``y``: the spec and the privatized labels."""
    grid = np.linspace(-4.0, 8.0, 61)
    probs = np.histogram(np.clip(y, -4, 8), bins=np.linspace(-4.1, 8.1, 62))[0] + 1.0
    mech = RROnBins(epsilon).fit_to(Prior(grid, probs / probs.sum()))
    return mech.to_spec(), mech.privatize(y, np.random.default_rng(seed))


def test_learning_options_round_trip_to_the_model_card(client: TestClient) -> None:
    csv, ids, y = synthetic_csv(1500, seed=2)
    assert upload(client, "clicks", csv).status_code == 201
    spec, labels = rr_on_bins_release(y, 2.0, 3)
    assert post_release(client, release_body(ids, labels, mechanism=spec)).status_code == 201
    options = {
        "epochs": 4, "batch_size": 64, "learning_rate": 0.01, "seed": 1, "optimizer": "rmsprop",
        "schedule": "step", "step_epoch": 2, "step_factor": 0.5,
        "debias": "predictions", "shrinkage": "auto", "select_epoch": True,
    }
    response = client.post("/v1/trainings", json={"release_id": "rel-1", **options}, headers=AUTH)
    assert response.status_code == 202
    training = wait_for_training(client, response.json()["id"])
    assert training["status"] == "succeeded", training["error"]
    assert all("selection_loss" in h for h in training["history"])
    card = client.get(f"/v1/models/{training['model_id']}", headers=AUTH).json()
    assert card["training"] == {
        "optimizer": "rmsprop", "schedule": "step", "step_epoch": 2, "step_factor": 0.5,
        "learning_rate": 0.01, "batch_size": 64, "weight_decay": 1e-4,
    }
    learning = card["learning"]
    assert (learning["debias"], learning["shrinkage"], learning["select_epoch"]) == ("predictions", "auto", True)
    assert learning["label_law"] == "rr_on_bins" and learning["selection_criterion"] == "private"
    losses = [h["selection_loss"] for h in training["history"]]
    assert learning["estimates_by_epoch"] == pytest.approx(losses)
    assert learning["selected_epoch"] == int(np.argmin(losses)) + 1
    if learning["guard_weight"] == 1.0:  # the estimate is of what the model predicts: the selected epoch's, unguarded
        assert learning["selection_estimate"] == pytest.approx(min(losses))
    assert 0.0 <= learning["selected_shrinkage"] <= 1.0
    assert "debiased" in learning["selection_note"]
    # The guard's verdict, and why: the share of the model it keeps follows from the gain and detectability.
    assert isinstance(learning["mean_fallback"], bool) and learning["detectable_z"] > 0
    gain = learning["gain_over_mean"]
    share = evidence_weight(gain["gain"], gain["se"], learning["detectable_z"])
    assert learning["guard_weight"] == pytest.approx(share)
    assert learning["mean_fallback"] is (share == 0.0)

    predictions = client.post(f"/v1/models/{training['model_id']}/predict", json={"ids": ids}, headers=AUTH).json()
    predictions = np.asarray(predictions["predictions"])
    assert predictions.min() >= spec.outputs[0] - 1e-9 and predictions.max() <= spec.outputs[-1] + 1e-9
    assert np.mean((predictions - y) ** 2) < np.var(y)

    fixed = client.post(
        "/v1/trainings",
        json={
            "release_id": "rel-1", "epochs": 1, "seed": 1, "debias": "targets", "shrinkage": 0.5, "select_epoch": False,
        },
        headers=AUTH,
    )
    done = wait_for_training(client, fixed.json()["id"])
    card = client.get(f"/v1/models/{done['model_id']}", headers=AUTH).json()
    assert card["learning"]["debias"] == "targets" and card["learning"]["selected_shrinkage"] == 0.5
    assert card["learning"]["selected_epoch"] == 1 and card["training"]["optimizer"] == "adam"


def test_learning_options_are_validated(client: TestClient, small_table: list[str]) -> None:
    assert post_release(client, release_body(small_table, [1.0, 2.0, 3.0])).status_code == 201
    bad_values = (
        {"debias": "both"}, {"shrinkage": 1.5}, {"shrinkage": -0.1}, {"shrinkage": "0.5"}, {"shrinkage": True},
        {"select_epoch": "yes"}, {"optimizer": "sgd"}, {"schedule": "linear"}, {"step_epoch": 0},
        {"step_factor": 0}, {"step_factor": 2},
    )
    for bad in bad_values:
        response = client.post("/v1/trainings", json={"release_id": "rel-1", **bad}, headers=AUTH)
        assert response.status_code == 422, bad
        assert response.json()["code"] == "invalid_request", bad
    needs_validation = client.post(
        "/v1/trainings", json={"release_id": "rel-1", "validation_fraction": 0, "select_epoch": True}, headers=AUTH
    )
    assert needs_validation.status_code == 422 and needs_validation.json()["code"] == "validation_required"
    # without explicit learning fields, no validation split means plain training, as before
    body = {"release_id": "rel-1", "validation_fraction": 0, "epochs": 1}
    plain = client.post("/v1/trainings", json=body, headers=AUTH)
    assert plain.status_code == 202
    with client.app.state.ctx.sessions() as session:
        config = session.get(store.Training, plain.json()["id"]).config
    assert (config["debias"], config["select_epoch"]) == ("none", False)
    assert wait_for_training(client, plain.json()["id"])["status"] == "succeeded"


def test_startup_leaves_a_training_another_worker_holds_alone(settings: Settings) -> None:
    """Start-up used to mark every running training failed / interrupted, another replica's too
    (issue 23); now only an expired lease lets anyone touch it (features_party.leases)."""
    app = create_app(settings)
    with app.state.ctx.sessions.begin() as session:
        session.add(
            store.Training(
                training_id="t-elsewhere", release_id="r", feature_table="f", config={}, status="running",
                epoch=1, epochs=5, history=[], owner="other-host:1:ab", attempt=1,
                lease_expires_at=datetime.now(UTC) + timedelta(minutes=5),
            )
        )
    app.state.ctx.engine.dispose()
    with TestClient(create_app(settings)) as client:
        time.sleep(0.5)  # the in-process worker has looked for work
        body = client.get("/v1/trainings/t-elsewhere", headers=AUTH).json()
    assert (body["status"], body["error"], body["attempt"]) == ("running", None, 1)


def test_inbox_accepts_a_message_of_several_shards(client: TestClient) -> None:
    n = 12_000
    ids = [f"id{i:06d}" for i in range(n)]
    csv = "id,x\n" + "".join(f"{i},{k}\n" for k, i in enumerate(ids))
    assert upload(client, "clicks", csv).status_code == 201
    labels = np.round(np.linspace(-5, 5, n), 3)
    body = release_body(ids, labels, shard_rows=5_000)
    assert len(body.shards) == 3
    delivered = post_release(client, body)
    assert delivered.status_code == 201 and delivered.requests[1:] == ["shard 0", "shard 1", "shard 2", "complete"]
    got = client.get("/v1/releases/rel-1/labels", headers=AUTH).json()
    assert got["ids"] == ids and got["labels"] == labels.tolist()
    assert shard_count(client) == 3


def test_a_stored_feature_table_is_cut_into_row_groups_a_streamed_pass_can_hold(
    client: TestClient, settings: Settings
) -> None:
    """Streamed passes (the staging join) hold one row group of the stored table at a time
    (bench/results/staging_row_groups_1m.md), so tables are stored in groups of ROW_GROUP_ROWS rows."""
    import pyarrow.parquet as pq

    from features_party.feature_tables import ROW_GROUP_ROWS

    csv, _, _ = synthetic_csv(ROW_GROUP_ROWS + 10)
    r = upload(client, "big", csv)
    assert r.status_code == 201, r.text
    (stored,) = (Path(settings.features_data_dir) / "tables").glob("*.parquet")
    meta = pq.read_metadata(stored)
    assert meta.num_rows == ROW_GROUP_ROWS + 10
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [ROW_GROUP_ROWS, 10]
