"""The features party's data in its object store, a local folder or S3 (moto's server): feature tables
(CSV, Parquet, Arrow; uploaded or named by an allowed object URL), checkpoints, models and exports."""

from __future__ import annotations

import io
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
import torch
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker
from tests.inbox_messages import Message, deliver, write
from tests.local_settings import TRANSPORT_KEY, fixed_signing_key
from tests.s3_server import S3Server

from features_party import checkpoints, feature_tables, store
from features_party.app import create_app
from features_party.feature_tables import local_source
from labeldp.errors import InvalidInput
from labeldp.schema import EpsilonPart, LaplaceSpec, PrivacyAccounting, ReleaseMetadata
from labeldp.service.database import make_session_factory
from labeldp.service.migrations import open_database
from labeldp.service.settings import Settings
from labeldp.signing import public_key_of
from labeldp.specs.base import LabelDomainSpec
from labeldp.storage import ObjectStore

API_KEY = "test-features-key"
SIGNING_KEY = fixed_signing_key("feature-store")
AUTH = {"Authorization": f"Bearer {API_KEY}"}
N = 300


@pytest.fixture(params=["local", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The ``LABELDP_STORAGE_*`` settings of a store: a local folder apart from the data dir, or S3."""
    if request.param == "local":
        return {"storage_url": (tmp_path / "objects").as_uri()}
    server: S3Server = request.getfixturevalue("s3_server")
    return {
        "storage_url": server.url(), "storage_s3_endpoint": server.endpoint,
        **{f"storage_s3_{k}": v for k, v in server.options().items() if k in ("region", "access_key", "secret_key")},
    }


def _settings(tmp_path: Path, storage: dict[str, str], **extra: object) -> Settings:
    return Settings(
        features_database_url=f"sqlite:///{tmp_path / 'features.db'}", features_data_dir=tmp_path / "data",
        features_api_key=API_KEY, inbox_transport_key=TRANSPORT_KEY, signing_public_keys=public_key_of(SIGNING_KEY),
        device="cpu", training_threads=1,
        **storage, **extra,  # type: ignore[arg-type]
    )


def _table(n: int = N, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "id": [f"u{i:05d}" for i in range(n)],
        "x1": rng.normal(size=n),
        "city": rng.choice(["north", "south", "east"], size=n).tolist(),
    })


def _encoded(table: pa.Table, fmt: str) -> bytes:
    sink = io.BytesIO()
    if fmt == "csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, sink)
    elif fmt == "parquet":
        pq.write_table(table, sink, row_group_size=100)  # several row groups: read a batch at a time
    elif fmt == "arrow-file":
        with ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=64)
    else:
        with ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=64)
    return sink.getvalue()


TYPES = {"csv": "text/csv", "parquet": "application/vnd.apache.parquet",
         "arrow-file": "application/vnd.apache.arrow.file", "arrow-stream": "application/vnd.apache.arrow.stream"}


@pytest.mark.parametrize("fmt", list(TYPES))
def test_each_format_is_stored_as_the_same_parquet_object_in_the_store(
    tmp_path: Path, storage: dict[str, str], fmt: str
) -> None:
    settings = _settings(tmp_path, storage)
    table = _table()
    with TestClient(create_app(settings)) as client:
        # by content type, and as bytes whose format is sniffed
        for name, content_type in (("typed", TYPES[fmt]), ("sniffed", "application/octet-stream")):
            r = client.post("/v1/feature-tables", params={"name": name}, content=_encoded(table, fmt),
                            headers={**AUTH, "content-type": content_type})
            assert r.status_code == 201, r.text
            assert r.json()["n_rows"] == N
            assert r.json()["columns"] == [{"name": "x1", "kind": "numeric"}, {"name": "city", "kind": "categorical"}]
        objects: ObjectStore = client.app.state.ctx.store
        with client.app.state.ctx.sessions() as session:
            row = feature_tables.get_feature_table(session, "typed")
        assert objects.url == settings.storage_url and len(objects.list("tables")) == 2
        stored = feature_tables.read_table(objects, row)
    assert stored.column("id").to_pylist() == table.column("id").to_pylist()
    np.testing.assert_allclose(stored.column("x1").to_numpy(), table.column("x1").to_numpy(), rtol=1e-9)
    assert not (tmp_path / "data" / "tables").exists()  # in the store, not the data dir
    assert not list((tmp_path / "data" / "spool").glob("*"))  # the spooled body and scratch removed


def _sessions(tmp_path: Path) -> sessionmaker[Session]:
    settings = Settings(features_database_url=f"sqlite:///{tmp_path / 'f.db'}")
    return make_session_factory(open_database(settings.features_database_url, "features_party.migrations", settings))


def test_ids_repeated_in_different_batches_and_partitions_are_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    """Duplicates are counted per id-hash partition (bounded memory), across every batch of the source."""
    table = _table(3000)
    ids = table.column("id").to_pylist()
    ids[2999], ids[5] = ids[0], ids[1]  # far apart: different batches of the source
    path = tmp_path / "t.parquet"
    pq.write_table(table.set_column(0, "id", pa.array(ids)), path, row_group_size=500)
    objects = ObjectStore.from_url(str(tmp_path / "objects"))
    with pytest.raises(InvalidInput) as refused:
        feature_tables.create_feature_table(
            _sessions(tmp_path), objects, tmp_path / "scratch", "dupes", local_source(path), partition_rows=256,
        )
    assert refused.value.code == "duplicate_ids" and refused.value.details[0]["count"] == 2
    assert sorted(refused.value.details[0]["examples"]) == ["u00000", "u00001"]
    assert objects.list() == [] and not list((tmp_path / "scratch").glob("*"))


def test_a_nested_parquet_column_is_a_422_that_stores_nothing(tmp_path: Path, storage: dict[str, str]) -> None:
    table = pa.table({"id": ["a", "b"], "tags": [[1], [2, 3]]})
    with TestClient(create_app(_settings(tmp_path, storage))) as client:
        r = client.post("/v1/feature-tables", params={"name": "nested"}, content=_encoded(table, "parquet"),
                        headers={**AUTH, "content-type": TYPES["parquet"]})
        assert r.status_code == 422 and r.json()["code"] == "unsupported_column_type", r.text
        r = client.post("/v1/feature-tables", params={"name": "bad"}, content=b"PAR1 not really",
                        headers={**AUTH, "content-type": "application/octet-stream"})
        assert r.status_code == 422 and r.json()["code"] == "invalid_parquet", r.text
        assert client.app.state.ctx.store.list() == []


def test_a_table_named_by_an_allowed_url_is_read_and_any_other_url_is_refused(
    tmp_path: Path, storage: dict[str, str], request: pytest.FixtureRequest
) -> None:
    """LABELDP_FEATURE_SOURCES lists the prefixes the service may read; everything else is a stable 422."""
    if storage["storage_url"].startswith("s3://"):
        server: S3Server = request.getfixturevalue("s3_server")
        allowed = server.url()
        source = server.store(allowed)
    else:
        allowed = (tmp_path / "incoming").as_uri()
        source = ObjectStore.from_url(allowed)
    source.put_bytes("daily/features.parquet", _encoded(_table(), "parquet"))
    source.put_bytes("daily/features.csv", _encoded(_table(), "csv"))
    settings = _settings(tmp_path, storage, feature_sources=f"{allowed}/daily,file:///nowhere")
    with TestClient(create_app(settings)) as client:
        def register(name: str, url: str) -> tuple[int, str]:
            r = client.post("/v1/feature-tables", params={"name": name, "source": url}, headers=AUTH)
            return r.status_code, r.json().get("code", "")

        assert register("by_ref", f"{allowed}/daily/features.parquet")[0] == 201
        assert register("by_ref_csv", f"{allowed}/daily/features.csv")[0] == 201
        refused = {
            "outside": f"{allowed}/other/features.parquet",
            "escape": f"{allowed}/daily/../other/features.parquet",
            "prefix_only": f"{allowed}/daily/",
            "lookalike": f"{allowed}/daily-x/features.parquet",
        }
        for name, url in refused.items():
            assert register(name, url) == (422, "feature_source_not_allowed"), name
        assert register("missing", f"{allowed}/daily/none.parquet") == (422, "feature_source_not_found")
        r = client.post("/v1/feature-tables", params={"name": "both", "source": f"{allowed}/daily/features.csv"},
                        content=b"id\n1\n", headers={**AUTH, "content-type": "text/csv"})
        assert r.status_code == 422 and r.json()["code"] == "invalid_request"
        (got,) = client.get("/v1/feature-tables", params={"name": "by_ref"}, headers=AUTH).json()["items"]
        assert got["n_rows"] == N
        assert len(client.app.state.ctx.store.list("tables")) == 2  # copied into the service's own store


def test_checkpoints_are_objects_of_the_store(tmp_path: Path, storage: dict[str, str]) -> None:
    objects = ObjectStore.from_url(storage["storage_url"], **{
        {"storage_s3_endpoint": "endpoint_override", "storage_s3_region": "region",
         "storage_s3_access_key": "access_key", "storage_s3_secret_key": "secret_key"}[k]: v
        for k, v in storage.items() if k != "storage_url"
    })
    checkpoints.save(objects, "trn_a", {"epoch": 1, "model": {"w": torch.ones(2)}})
    checkpoints.save(objects, "trn_a", {"epoch": 2, "model": {"w": torch.zeros(2)}})  # replaces, whole
    checkpoints.save(objects, "trn_b", {"epoch": 1})
    loaded = checkpoints.load(objects, "trn_a")
    assert loaded is not None and loaded["epoch"] == 2 and torch.equal(loaded["model"]["w"], torch.zeros(2))
    assert checkpoints.stored(objects) == ["trn_a", "trn_b"]
    objects.put_bytes("checkpoints/trn_c.pt", b"half a file")
    assert checkpoints.load(objects, "trn_c") is None and checkpoints.load(objects, "none") is None
    checkpoints.remove(objects, "trn_a")
    assert checkpoints.load(objects, "trn_a") is None and checkpoints.stored(objects) == ["trn_b", "trn_c"]


def _release(ids: list[str], labels: np.ndarray) -> Message:
    metadata = ReleaseMetadata(
        release_id="rel-1", label_set_id="ls-1", feature_table="clicks", created_at=datetime(2024, 1, 1, tzinfo=UTC),
        mechanism=LaplaceSpec(epsilon=1.0, domain=LabelDomainSpec(low=-20, high=20), step=0.001, scale=40.0),
        accounting=PrivacyAccounting(parts=[EpsilonPart(name="randomizer", epsilon_micro=1_000_000)],
                                     total_epsilon_micro=1_000_000),
        row_count=len(ids),
    )
    return write(metadata, ids, labels)


def test_a_model_and_its_export_live_in_the_store_not_the_data_dir(tmp_path: Path, storage: dict[str, str]) -> None:
    table = _table()
    labels = 2 * table.column("x1").to_numpy()
    with TestClient(create_app(_settings(tmp_path, storage))) as client:
        r = client.post("/v1/feature-tables", params={"name": "clicks"}, content=_encoded(table, "parquet"),
                        headers={**AUTH, "content-type": TYPES["parquet"]})
        assert r.status_code == 201, r.text
        r = deliver(client, _release(table.column("id").to_pylist(), labels), SIGNING_KEY)
        assert r.status_code in (200, 201), r.json()
        r = client.post("/v1/trainings", json={"release_id": "rel-1", "epochs": 2}, headers=AUTH)
        assert r.status_code == 202, r.text
        training_id = r.json()["id"]
        deadline = time.monotonic() + 60
        while (got := client.get(f"/v1/trainings/{training_id}", headers=AUTH).json())["status"] not in (
            "succeeded", "failed"
        ):
            assert time.monotonic() < deadline, "training did not finish"
            time.sleep(0.05)
        assert got["status"] == "succeeded", got["error"]
        objects: ObjectStore = client.app.state.ctx.store
        model_id = got["model_id"]
        with client.app.state.ctx.sessions() as session:
            assert session.get(store.Model, model_id).path == f"models/{model_id}.pt"
        assert objects.exists(f"models/{model_id}.pt")
        assert checkpoints.stored(objects) == []  # removed once the training succeeded
        r = client.post(f"/v1/models/{model_id}/predict", json={"ids": ["u00001"]}, headers=AUTH)
        assert r.status_code == 200 and len(r.json()["predictions"]) == 1, r.text
        r = client.get(f"/v1/models/{model_id}/export", params={"format": "onnx"}, headers=AUTH)
        assert r.status_code == 200, r.text
        assert r.content == objects.get_bytes(f"exports/{model_id}.onnx")
        assert int(r.headers["content-length"]) == len(r.content)
    data = tmp_path / "data"
    assert not (data / "models").exists() and not (data / "exports").exists() and not (data / "checkpoints").exists()


def test_the_join_check_streams_the_table_through_one_hash_of_the_release_ids(
    tmp_path: Path, s3_server: S3Server
) -> None:
    """``missing_from_table`` (POST /v1/trainings' check): a table of three row groups' batches, on disk and in S3,
    read through one anti join; a count of the release rows whose id the table lacks and five of them in release
    order, or nothing when it holds them all."""
    n = 2 * feature_tables.ROW_GROUP_ROWS + 5
    ids = pa.array([f"t{i:07d}" for i in range(n)])
    body = io.BytesIO()
    pq.write_table(pa.table({"key": ids, "x": np.zeros(n)}), body, row_group_size=feature_tables.ROW_GROUP_ROWS)
    lacking = [f"z{i}" for i in range(7)]
    release = pa.chunked_array([ids.slice(n - 3, 3), pa.array(lacking[:4]), ids.slice(0, 2), pa.array(lacking[4:]),
                                pa.array(["z0"])])  # z0 twice: rows are counted
    for objects in (ObjectStore.from_url((tmp_path / "objects").as_uri()), s3_server.store()):
        objects.put_bytes("tables/t.parquet", body.getvalue())
        row = store.FeatureTable(name="t", path="tables/t.parquet", id_column="key")
        assert feature_tables.missing_from_table(objects, row, release) == (8, lacking[:5])
        assert feature_tables.missing_from_table(objects, row, pa.chunked_array([ids.slice(n - 9), ids[:1]])) == (0, [])
