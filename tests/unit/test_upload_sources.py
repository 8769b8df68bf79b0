"""Uploads by reference: the service reads an allowed object URL (moto's S3 server or a local
folder) through pyarrow.fs, a batch at a time; a URL outside LABELDP_UPLOAD_SOURCES is refused
with a stable code and writes nothing."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from tests.local_settings import both_parties, fixed_signing_key
from tests.s3_server import S3Server

from labeldp.errors import InvalidInput
from labels_party.sources import open_source

KEY = "sources-labels-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}


def _settings(tmp_path: Path, sources: str, s3: S3Server | None = None, storage: str = ""):  # type: ignore[no-untyped-def]
    extra = {} if s3 is None else {
        "storage_url": storage, "storage_s3_endpoint": s3.endpoint, "storage_s3_region": "us-east-1",
        "storage_s3_access_key": s3.options()["access_key"], "storage_s3_secret_key": s3.options()["secret_key"],
    }
    return both_parties(tmp_path, KEY, "sources-features-key-0123456789ab", fixed_signing_key("upload sources"),
                        upload_sources=sources, **extra)


@pytest.mark.parametrize(
    ("allowed", "url", "code"),
    [
        ("", "file:///srv/exports/ids.parquet", "upload_source_not_allowed"),
        ("file:///srv/exports/", "file:///srv/other/ids.parquet", "upload_source_not_allowed"),
        ("file:///srv/exports", "file:///srv/exports-evil/ids.parquet", "upload_source_not_allowed"),
        ("file:///srv/exports/", "file:///srv/exports/../secrets/ids.parquet", "upload_source_invalid"),
        ("file:///srv/exports/", "file:///srv/exports/%2e%2e/x.csv", "upload_source_invalid"),
        ("s3://bucket/exports/", "s3://other-bucket/exports/ids.csv", "upload_source_not_allowed"),
        ("s3://bucket/exports/", "file:///bucket/exports/ids.csv", "upload_source_not_allowed"),
        ("s3://bucket/exports/", "http://bucket/exports/ids.csv", "upload_source_invalid"),
        ("file:///srv/", "file://evil-host/srv/ids.csv", "upload_source_invalid"),
    ],
)
def test_urls_outside_the_allow_list_are_refused_before_any_read(
    tmp_path: Path, allowed: str, url: str, code: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        open_source(_settings(tmp_path, allowed), url)
    assert refused.value.code == code and refused.value.status_code == 422
    assert "exports" not in refused.value.message  # neither the URL nor the allowed prefixes are echoed


@pytest.fixture
def labels(tmp_path: Path, s3_server: S3Server) -> Iterator[tuple[TestClient, S3Server, str, Path]]:
    """A labels app (objects in its folder: a ledger on moto costs a request per bucket) allowed to read
    one prefix of the S3 server and one local folder."""
    from labels_party.app import create_app

    exports = tmp_path / "exports"
    exports.mkdir()
    allowed_s3 = s3_server.url() + "/exports/"
    sources = f"{allowed_s3},{exports.as_uri()}/"
    app = create_app(_settings(tmp_path, sources, s3_server))
    with TestClient(app) as client:
        yield client, s3_server, allowed_s3, exports


def _new_set(client: TestClient) -> str:
    r = client.post("/v1/label-sets", json={"name": "by-ref", "domain": {"low": 0, "high": 10}}, headers=AUTH)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_ids_from_a_folder_and_labels_from_s3_are_read_by_reference(labels) -> None:  # type: ignore[no-untyped-def]
    client, s3, allowed_s3, exports = labels
    n = 20_000
    ids = [f"user-{i:07d}" for i in range(n)][::-1]
    pq.write_table(pa.table({"id": ids}), exports / "ids.parquet", row_group_size=5_000)
    csv = "id,label\n" + "".join(f"{i},{k % 11}\n" for k, i in enumerate(ids))
    bucket_store = s3.store(allowed_s3.rstrip("/"))
    bucket_store.put_bytes("labels.csv", csv.encode())
    ls = _new_set(client)
    r = client.post(f"/v1/label-sets/{ls}/ids/from-url", headers=AUTH,
                    json={"url": (exports / "ids.parquet").as_uri(), "format": "parquet"})
    assert r.status_code == 200, r.text
    assert r.json()["counts"] == {"ids": n, "labeled": 0, "missing": n}
    r = client.post(f"/v1/label-sets/{ls}/labels/from-url", headers=AUTH,
                    json={"url": allowed_s3 + "labels.csv", "format": "csv"})
    assert r.status_code == 200, r.text
    assert (r.json()["accepted_rows"], r.json()["missing"]) == (n, 0)
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": ["nobody"], "label": [1.0]}), sink)
    bucket_store.put_bytes("bad.parquet", sink.getvalue())
    bad = client.post(f"/v1/label-sets/{ls}/labels/from-url?validate_only=true", headers=AUTH,
                      json={"url": allowed_s3 + "bad.parquet", "format": "parquet"})
    assert bad.status_code == 422 and bad.json()["details"][0]["code"] == "unknown_id", bad.text


def test_a_url_outside_the_allow_list_writes_nothing(labels, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    client, s3, allowed_s3, _ = labels
    outside = tmp_path / "outside"
    outside.mkdir()
    pq.write_table(pa.table({"id": ["a", "b"]}), outside / "ids.parquet")
    other = s3.store()
    other.put_bytes("ids.csv", b"id\na\nb\n")
    ls = _new_set(client)
    store = client.app.state.ctx.store  # type: ignore[attr-defined]
    before = store.list()
    for url in ((outside / "ids.parquet").as_uri(), other.url + "/ids.csv", allowed_s3 + "../x/ids.csv"):
        r = client.post(f"/v1/label-sets/{ls}/ids/from-url", headers=AUTH, json={"url": url, "format": "csv"})
        refused = ("upload_source_not_allowed", "upload_source_invalid")
        assert r.status_code == 422 and r.json()["code"] in refused, r.text
    missing = client.post(f"/v1/label-sets/{ls}/ids/from-url", headers=AUTH,
                          json={"url": allowed_s3 + "absent.csv", "format": "csv"})
    assert missing.status_code == 404 and missing.json()["code"] == "upload_source_not_found"
    json_ref = client.post(f"/v1/label-sets/{ls}/ids/from-url", headers=AUTH,
                           json={"url": allowed_s3 + "x.json", "format": "json"})
    assert json_ref.status_code == 422
    assert client.get(f"/v1/label-sets/{ls}", headers=AUTH).json()["counts"]["ids"] == 0
    assert store.list() == before


def test_a_remote_object_is_read_a_batch_at_a_time(tmp_path: Path, s3_server: S3Server) -> None:
    """Arrow IPC batches come one at a time from S3 (Parquet in batches of 2¹⁸ rows), never the whole object."""
    import pyarrow.ipc as ipc

    from labels_party.uploads import read_batches

    prefix = s3_server.url()
    store = s3_server.store(prefix)
    table = pa.table({"id": [f"u{i:05d}" for i in range(3000)], "label": [1.0] * 3000})
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=1000)
    store.put_bytes("x.parquet", sink.getvalue())
    sink = io.BytesIO()
    with ipc.new_file(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=1000):
            writer.write_batch(batch)
    store.put_bytes("x.arrow", sink.getvalue())
    settings = _settings(tmp_path, prefix + "/", s3_server)
    kinds = {"x.parquet": "application/vnd.apache.parquet", "x.arrow": "application/vnd.apache.arrow.file"}
    for name, kind in kinds.items():
        batches = list(read_batches(open_source(settings, f"{prefix}/{name}"), kind, ("id", "label")))
        if name == "x.arrow":
            assert [len(b["id"]) for b in batches] == [1000, 1000, 1000]
        assert pa.concat_arrays([b["id"] for b in batches]).to_pylist() == table.column("id").to_pylist()
