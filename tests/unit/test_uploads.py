"""Upload parsing and row validation as plain functions (no HTTP)."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labeldp.http_api import ApiError
from labels_party.uploads import parse_upload, validate_rows


def _parquet(ids, labels) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": ids, "label": labels}), sink)
    return sink.getvalue()


def test_csv_json_and_parquet_parse_to_the_same_rows():
    csv_rows = parse_upload(b"id,label\na,1.5\nb,2\n", "text/csv")
    json_rows = parse_upload(b'{"rows": [{"id": "a", "label": 1.5}, {"id": "b", "label": 2}]}', "application/json")
    pq_rows = parse_upload(_parquet(["a", "b"], [1.5, 2.0]), "application/vnd.apache.parquet")
    declared = {"a": False, "b": False}
    for rows in (csv_rows, json_rows, pq_rows):
        accepted, errors = validate_rows(rows, declared=declared, label_type="real", low=0, high=10)
        assert errors == [] and accepted == [("a", 1.5), ("b", 2.0)]


def test_unknown_media_type_and_broken_bodies_have_stable_codes():
    with pytest.raises(ApiError) as err:
        parse_upload(b"x", "text/plain")
    assert (err.value.status_code, err.value.code) == (415, "unsupported_media_type")
    with pytest.raises(ApiError) as err:
        parse_upload(b"not parquet", "application/vnd.apache.parquet")
    assert err.value.code == "invalid_parquet"
    with pytest.raises(ApiError) as err:
        parse_upload(b"id,value\na,1\n", "text/csv")
    assert err.value.code == "invalid_csv"


def test_row_errors_name_row_id_and_code_but_never_the_value():
    rows = parse_upload(b"id,label\na,12.345678\nb,-3\nc,2.5\nc,1\n", "text/csv")
    _, errors = validate_rows(rows, declared={"a": True, "b": False, "c": False}, label_type="integer", low=0, high=10)
    assert [(e["row"], e["id"], e["code"]) for e in errors] == [
        (1, "a", "already_labeled"),
        (2, "b", "out_of_domain"),
        (3, "c", "not_integer"),
        (4, "c", "duplicate_id"),
    ]
    assert "12.345678" not in repr(errors) and "-3" not in repr(errors)


def test_categorical_labels_are_class_names_stored_as_indices():
    rows = parse_upload(b'{"ids": ["a", "b", "c"], "labels": ["cat", "dog", "cow"]}', "application/json")
    accepted, errors = validate_rows(
        rows, declared=dict.fromkeys("abc", False), label_type="categorical", low=0, high=1, classes=["cat", "dog"]
    )
    assert accepted == [("a", 0.0), ("b", 1.0)]
    assert [(e["id"], e["code"]) for e in errors] == [("c", "unknown_class")]
