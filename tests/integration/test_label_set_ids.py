"""Label-set ids sent as a file (CSV, Parquet, JSON) instead of inline, and what that allows."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq

from .conftest import upload_csv


def _new_set(labels) -> str:  # type: ignore[no-untyped-def]
    r = labels.post("/v1/label-sets", json={"name": "by-file", "domain": {"low": 0, "high": 5}})  # the default domain
    assert r.status_code == 201, r.text
    assert r.json()["ids_ready"] is False and r.json()["counts"]["ids"] == 0
    return str(r.json()["id"])


def test_ids_uploaded_as_csv_parquet_or_json_give_the_same_label_set(stack) -> None:
    ids = ["b", "a", "c"]
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": ids}), sink)
    bodies = [
        ("text/csv", ("id\n" + "\n".join(ids) + "\n").encode()),
        ("application/vnd.apache.parquet", sink.getvalue()),
        ("application/json", b'{"ids": ["b", "a", "c"]}'),
    ]
    with stack.labels_client() as labels:
        for kind, body in bodies:
            ls = _new_set(labels)
            early = upload_csv(labels, ls, [("a", 1.0)])
            assert early.status_code == 409 and early.json()["code"] == "ids_missing"
            r = labels.post(f"/v1/label-sets/{ls}/ids", content=body, headers={"content-type": kind})
            assert r.status_code == 200, (kind, r.text)
            assert r.json()["counts"] == {"ids": 3, "labeled": 0, "missing": 3}
            again = labels.post(f"/v1/label-sets/{ls}/ids", content=body, headers={"content-type": kind})
            assert again.status_code == 409 and again.json()["code"] == "ids_already_set"
            assert upload_csv(labels, ls, [("a", 1.0), ("b", 2.0), ("c", 3.0)]).status_code == 200


def test_bad_id_files_are_refused_and_change_nothing(stack) -> None:
    with stack.labels_client() as labels:
        ls = _new_set(labels)
        cases = [
            ("text/csv", b"id\na\nb\na\n", 422, "duplicate_ids"),
            ("text/csv", b"name\na\n", 422, "invalid_csv"),
            ("text/csv", b"id\n" + b"x" * 200 + b"\n", 422, "invalid_ids"),
            ("application/json", b'{"ids": []}', 422, "invalid_ids"),
            ("text/plain", b"id\na\n", 415, "unsupported_media_type"),
        ]
        for kind, body, status, code in cases:
            r = labels.post(f"/v1/label-sets/{ls}/ids", content=body, headers={"content-type": kind})
            assert (r.status_code, r.json()["code"]) == (status, code), body[:30]
        assert labels.get(f"/v1/label-sets/{ls}").json()["counts"]["ids"] == 0
