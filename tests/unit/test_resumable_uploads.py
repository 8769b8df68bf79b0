"""Resumable uploads: parts are objects of the shared store (moto's S3 server here), so a client that
died after some parts resumes on another replica with only the missing ones; completion validates
the joined parts exactly as one body."""

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

KEY = "resumable-labels-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}
IDS = [f"u{i:04d}" for i in range(40)]


@pytest.fixture
def replicas(tmp_path: Path, s3_server: S3Server) -> Iterator[tuple[TestClient, TestClient, object]]:
    """Two labels APIs on one catalogue and one S3 prefix, each with its own data folder."""
    from labels_party.app import create_app

    url = s3_server.url()
    opts = s3_server.options()
    clients = []
    for name in ("a", "b"):
        settings = both_parties(
            tmp_path / name, KEY, "resumable-features-key-0123456789", fixed_signing_key("resumable uploads"),
            storage_url=url,
            storage_s3_endpoint=s3_server.endpoint, storage_s3_region=opts["region"],
            storage_s3_access_key=opts["access_key"], storage_s3_secret_key=opts["secret_key"],
            upload_part_max_bytes=4096,
        ).model_copy(update={"labels_database_url": f"sqlite:///{tmp_path / 'labels.db'}"})
        clients.append(TestClient(create_app(settings)))
    with clients[0] as a, clients[1] as b:
        yield a, b, s3_server.store(url)


def _label_set(client: TestClient, ids: list[str] | None) -> str:
    body = {"name": "parts", "domain": {"low": 0, "high": 10}, **({"ids": ids} if ids else {})}
    r = client.post("/v1/label-sets", json=body, headers=AUTH)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _split(data: bytes, n: int) -> list[bytes]:
    step = -(-len(data) // n)
    return [data[k : k + step] for k in range(0, len(data), step)]


def test_a_client_that_died_resumes_on_another_replica_with_only_the_missing_parts(replicas) -> None:  # type: ignore[no-untyped-def]
    a, b, store = replicas
    ls = _label_set(a, IDS)
    sink = io.BytesIO()
    # the integrator's own column names (issue 26), kept from creation to completion on another replica
    pq.write_table(pa.table({"order_id": IDS[::-1], "value": [float(i % 10) for i in range(len(IDS))]}), sink)
    parts = _split(sink.getvalue(), 3)
    clash = {"target": "labels", "format": "parquet", "id_column": "value", "label_column": "Value"}
    refused = a.post(f"/v1/label-sets/{ls}/uploads", json=clash, headers=AUTH)
    assert refused.status_code == 422 and refused.json()["code"] == "invalid_column_declaration"
    created = a.post(f"/v1/label-sets/{ls}/uploads", headers=AUTH, json={
        "target": "labels", "format": "parquet", "id_column": "order_id", "label_column": "value"})
    assert created.status_code == 201, created.text
    up = created.json()["id"]
    for number in (1, 3):  # then the client dies
        r = a.put(f"/v1/uploads/{up}/parts/{number}", content=parts[number - 1], headers=AUTH)
        assert r.status_code == 200 and r.json()["size"] == len(parts[number - 1]), r.text
    seen = b.get(f"/v1/uploads/{up}", headers=AUTH).json()
    assert [p["number"] for p in seen["parts"]] == [1, 3] and seen["missing_below_highest"] == [2]
    early = b.post(f"/v1/uploads/{up}/complete", json={"parts": 3}, headers=AUTH)
    assert early.status_code == 422 and early.json()["code"] == "upload_parts_missing"
    assert early.json()["details"] == [{"part": 2}]
    assert b.get(f"/v1/label-sets/{ls}", headers=AUTH).json()["counts"]["labeled"] == 0
    assert b.put(f"/v1/uploads/{up}/parts/2", content=parts[1], headers=AUTH).status_code == 200
    done = b.post(f"/v1/uploads/{up}/complete", json={"parts": 3}, headers=AUTH)
    assert done.status_code == 200, done.text
    assert done.json()["labels"]["accepted_rows"] == len(IDS) and done.json()["label_set"] is None
    assert a.get(f"/v1/label-sets/{ls}", headers=AUTH).json()["counts"]["missing"] == 0
    after = a.get(f"/v1/uploads/{up}", headers=AUTH).json()
    assert after["state"] == "completed" and after["parts"] == []
    assert not [k for k in store.list("uploads") if "/part-" in k]
    again = a.post(f"/v1/uploads/{up}/complete", json={"parts": 3}, headers=AUTH)
    assert again.status_code == 409 and again.json()["code"] == "upload_completed"


def test_ids_in_csv_parts_are_validated_as_one_body_and_a_bad_part_can_be_replaced(replicas) -> None:  # type: ignore[no-untyped-def]
    a, b, _ = replicas
    ls = _label_set(a, None)
    rows = ["id", *IDS[:20], "u0000x", *IDS[20:], IDS[5]]  # a repeated id in the second part
    parts = _split("\n".join(rows).encode() + b"\n", 2)
    up = a.post(f"/v1/label-sets/{ls}/uploads", json={"target": "ids", "format": "csv"}, headers=AUTH).json()["id"]
    for number, data in enumerate(parts, 1):
        assert a.put(f"/v1/uploads/{up}/parts/{number}", content=data, headers=AUTH).status_code == 200
    bad = b.post(f"/v1/uploads/{up}/complete", json={"parts": 2}, headers=AUTH)
    assert bad.status_code == 422 and bad.json()["code"] == "duplicate_ids"
    assert bad.json()["details"] == [{"id": IDS[5]}]
    assert b.get(f"/v1/label-sets/{ls}", headers=AUTH).json()["counts"]["ids"] == 0
    fixed = "\n".join(["id", *IDS[:20], "u0000x", *IDS[20:]]).encode() + b"\n"
    head = fixed[: len(parts[0])]
    assert head == parts[0]
    assert b.put(f"/v1/uploads/{up}/parts/2", content=fixed[len(head):], headers=AUTH).status_code == 200
    done = b.post(f"/v1/uploads/{up}/complete", json={"parts": 2}, headers=AUTH)
    assert done.status_code == 200, done.text
    n = len(IDS) + 1
    assert done.json()["label_set"]["counts"] == {"ids": n, "labeled": 0, "missing": n}


def test_parts_are_bounded_numbered_and_belong_to_an_upload(replicas) -> None:  # type: ignore[no-untyped-def]
    a, _, store = replicas
    ls = _label_set(a, IDS)
    up = a.post(f"/v1/label-sets/{ls}/uploads", json={"target": "labels", "format": "csv"}, headers=AUTH).json()["id"]
    big = a.put(f"/v1/uploads/{up}/parts/1", content=b"x" * 4097, headers=AUTH)
    assert big.status_code == 413 and big.json()["code"] == "part_too_large"
    zero = a.put(f"/v1/uploads/{up}/parts/0", content=b"x", headers=AUTH)
    assert zero.status_code == 422
    unknown = a.put("/v1/uploads/up_" + "0" * 32 + "/parts/1", content=b"x", headers=AUTH)
    assert unknown.status_code == 404 and unknown.json()["code"] == "upload_not_found"
    assert a.get("/v1/uploads/../etc", headers=AUTH).status_code == 404
    missing_set = a.post("/v1/label-sets/ls_nope/uploads", json={"target": "ids", "format": "csv"}, headers=AUTH)
    assert missing_set.status_code == 404
    for parts in (10_001, 1955416537):  # found by schemathesis: a range of 2·10⁹ part numbers hung the API
        huge = a.post(f"/v1/uploads/{up}/complete", json={"parts": parts}, headers=AUTH)
        assert huge.status_code == 422, huge.text
    assert not [k for k in store.list("uploads") if "/part-" in k]


def test_uploads_past_their_retention_are_swept_with_their_parts(tmp_path: Path) -> None:
    import os
    import time

    from tests.ledger.test_ledger import make_ctx

    from labels_party.resumable import UploadCreate, create_upload, put_part
    from labels_party.sweep import sweep_orphans

    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path, upload_retention_seconds=3600)
    ls = _label_set_in(ctx)
    old, fresh = (create_upload(ctx, ls, UploadCreate(target="ids", format="csv")).id for _ in range(2))
    part = tmp_path / "part"
    part.write_bytes(b"id\na\n")
    for up in (old, fresh):
        put_part(ctx, up, 1, part, 5)
    stale = time.time() - 7200
    os.utime(ctx.data_dir / "uploads" / old / "session.json", (stale, stale))
    assert sweep_orphans(ctx, min_age_seconds=3600) == 2
    assert ctx.store.list("uploads") == [f"uploads/{fresh}/part-000001", f"uploads/{fresh}/session.json"]


def _label_set_in(ctx) -> str:  # type: ignore[no-untyped-def]
    from labels_party.label_sets import LabelSetCreate, create_label_set

    body = LabelSetCreate(name="s", domain={"low": 0, "high": 1})  # type: ignore[arg-type]
    return str(create_label_set(ctx, body, None).body["id"])
