"""Upload parsing and row validation as plain functions (no HTTP): every format, chunked, vectorized."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from labeldp.errors import LabelDPError
from labels_party.uploads import Columns, LabelRules, media_type, parse_label_upload, read_batches, row_errors

REAL = LabelRules("real", 0.0, 10.0)
JSON, PARQUET, ARROW = "application/json", "application/vnd.apache.parquet", "application/vnd.apache.arrow.file"


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _parquet(tmp_path: Path, ids, labels) -> Path:  # type: ignore[no-untyped-def]
    p = tmp_path / "u.parquet"
    pq.write_table(pa.table({"id": ids, "label": labels}), p)
    return p


def _arrow(tmp_path: Path, ids, labels, stream: bool) -> Path:  # type: ignore[no-untyped-def]
    p = tmp_path / ("u.arrows" if stream else "u.arrow")
    table = pa.table({"ID": ids, "Label": labels})
    with open(p, "wb") as f:
        writer = ipc.new_stream(f, table.schema) if stream else ipc.new_file(f, table.schema)
        with writer:
            writer.write_table(table)
    return p


def _checked(upload, declared: list[str], labeled: list[bool] | None = None):  # type: ignore[no-untyped-def]
    set_ids = pa.array(sorted(declared), pa.string())
    return row_errors(upload, set_ids, np.array(labeled or [False] * len(declared)))


def test_csv_json_parquet_and_arrow_parse_to_the_same_columns(tmp_path: Path) -> None:
    bodies = [
        (_write(tmp_path, "u.csv", b"\xef\xbb\xbfId , LABEL\n a ,1.5\nb, 2\n"), "text/csv"),
        (_write(tmp_path, "u.json", b'{"rows": [{"id": "a", "label": 1.5}, {"id": "b", "label": 2}]}'),
         "application/json"),
        (_write(tmp_path, "v.json", b'{"ids": ["a", "b"], "labels": ["1.5", 2]}'), "application/json"),
        (_parquet(tmp_path, ["a", "b"], [1.5, 2.0]), "application/vnd.apache.parquet"),
        (_arrow(tmp_path, ["a", "b"], [1.5, 2], stream=True), "application/vnd.apache.arrow.stream"),
        (_arrow(tmp_path, ["a", "b"], [1.5, 2.0], stream=False), "application/vnd.apache.arrow.file"),
    ]
    for path, kind in bodies:
        upload = parse_label_upload(path, media_type(kind), REAL)
        positions, errors, n_bad = _checked(upload, ["a", "b"])
        assert (errors, n_bad) == ([], 0), kind
        assert upload.ids.to_pylist() == ["a", "b"] and upload.values.tolist() == [1.5, 2.0], kind
        assert positions.tolist() == [0, 1]


def test_a_large_csv_is_read_in_several_chunks_with_rows_numbered_across_them(tmp_path: Path) -> None:
    n = 400_000
    ids = [f"id{i:07d}" for i in range(n)]
    body = "id,label\n" + "".join(f"{i},{k % 7}\n" for k, i in enumerate(ids))
    path = _write(tmp_path, "big.csv", body.replace(f"{ids[-1]},{(n - 1) % 7}", f"{ids[-1]},x").encode())
    batches = list(read_batches(path, "text/csv", ("id", "label")))
    assert len(batches) > 1
    upload = parse_label_upload(path, "text/csv", REAL)
    _, errors, n_bad = _checked(upload, ids)
    assert n_bad == 1 and errors == [
        {"row": n, "id": ids[-1], "code": "not_a_number", "message": "label is missing or not a number"}
    ]


def test_unknown_media_type_and_broken_bodies_have_stable_codes(tmp_path: Path) -> None:
    with pytest.raises(LabelDPError) as err:
        media_type("text/plain")
    assert (err.value.status_code, err.value.code) == (415, "unsupported_media_type")
    cases = [
        ("application/vnd.apache.parquet", b"not parquet", "invalid_parquet"),
        ("application/vnd.apache.arrow.stream", b"not arrow", "invalid_arrow"),
        ("text/csv", b"id,value\na,1\n", "invalid_csv"),
        ("text/csv", b"", "invalid_csv"),
        ("text/csv", b"id,label\n\xff\xfe,1\n", "invalid_id"),  # the row is named (was invalid_csv)
        ("text/csv", b"id,label\na,\xff\xfe\n", "invalid_csv"),
        ("application/json", b"[" * 100_000, "invalid_json"),
        ("application/json", b'{"ids": ["a"], "labels": [1, 2]}', "invalid_json"),
    ]
    for kind, body, code in cases:
        with pytest.raises(LabelDPError) as err:
            parse_label_upload(_write(tmp_path, "b", body), kind, REAL)
        assert err.value.code == code, (kind, body[:20])


def test_a_csv_quoting_error_never_echoes_the_row(tmp_path: Path) -> None:
    with pytest.raises(LabelDPError) as err:
        parse_label_upload(_write(tmp_path, "q.csv", b'id,label\n"7,987654.321\n'), "text/csv", REAL)
    assert err.value.code == "invalid_csv" and "987654" not in err.value.message


def test_row_errors_name_row_id_and_code_but_never_the_value(tmp_path: Path) -> None:
    path = _write(tmp_path, "u.csv", b"id,label\na,12.345678\nb,-3\nc,2.5\nc,1\nd,nan\n,1\ne,1e400\nzz,1\n")
    upload = parse_label_upload(path, "text/csv", LabelRules("integer", 0, 10))
    _, errors, n_bad = _checked(upload, ["a", "b", "c", "d", "e"], [True, False, False, False, False])
    assert [(e["row"], e["id"], e["code"]) for e in errors] == [
        (1, "a", "already_labeled"),
        (2, "b", "out_of_domain"),
        (3, "c", "not_integer"),
        (4, "c", "duplicate_id"),
        (5, "d", "non_finite"),
        (6, None, "missing_id"),
        (7, "e", "non_finite"),
        (8, "zz", "unknown_id"),
    ]
    assert n_bad == 8
    assert "12.345678" not in json.dumps(errors) and "-3" not in json.dumps(errors)


def test_categorical_labels_are_class_names_stored_as_indices(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.json", b'{"ids": ["a", "b", "c"], "labels": ["cat", "dog", "cow"]}')
    upload = parse_label_upload(path, "application/json", LabelRules("categorical", 0, 1, ["cat", "dog"]))
    _, errors, _ = _checked(upload, ["a", "b", "c"])
    assert upload.values[:2].tolist() == [0.0, 1.0]
    assert [(e["id"], e["code"]) for e in errors] == [("c", "unknown_class")]


def test_json_booleans_nulls_and_huge_integers_are_not_numbers(tmp_path: Path) -> None:
    body = json.dumps({"ids": ["a", "b", "c", "d"], "labels": [True, None, 10**401, 3]}).encode()
    upload = parse_label_upload(_write(tmp_path, "j.json", body), "application/json", REAL)
    _, errors, n_bad = _checked(upload, ["a", "b", "c", "d"])
    assert [(e["id"], e["code"]) for e in errors] == [(i, "not_a_number") for i in ("a", "b", "c")]
    assert n_bad == 3 and upload.values[3] == 3.0


LONE_SURROGATE_UTF8 = b"\xed\xa0\x80"  # "\ud800" as CESU-8 bytes: not UTF-8
CATS = LabelRules("categorical", 0.0, 1.0, ["no", "yes"])


def _refused(path: Path, kind: str, rules: LabelRules = REAL) -> LabelDPError:
    with pytest.raises(LabelDPError) as err:
        parse_label_upload(path, media_type(kind), rules)
    assert err.value.status_code == 422
    return err.value


@pytest.mark.parametrize("fmt", ["json_rows", "json_columns", "csv", "parquet", "arrow"])
def test_an_id_that_is_not_unicode_is_a_422_naming_its_row(tmp_path: Path, fmt: str) -> None:
    # A lone surrogate gave a 500 (UnicodeEncodeError, ArrowInvalid) before: now invalid_id, row 2.
    bad = LONE_SURROGATE_UTF8
    if fmt == "json_rows":
        body = b'{"rows": [{"id": "a", "label": 1}, {"id": "\\ud800", "label": 7.25}]}'
        path, kind = _write(tmp_path, "u.json", body), JSON
    elif fmt == "json_columns":
        path, kind = _write(tmp_path, "u.json", b'{"ids": ["a", "x\\udfff"], "labels": [1, 7.25]}'), JSON
    elif fmt == "csv":
        path, kind = _write(tmp_path, "u.csv", b"id,label\na,1\n" + bad + b",7.25\n"), "text/csv"
    elif fmt == "parquet":
        path, kind = _parquet(tmp_path, pa.array([b"a", bad], pa.binary()), [1.0, 7.25]), PARQUET
    else:
        path, kind = _arrow(tmp_path, pa.array([b"a", bad], pa.binary()), [1.0, 7.25], stream=True), ARROW
    err = _refused(path, kind)
    assert err.code == "invalid_id" and err.details == [{"row": 2, "code": "invalid_id"}]
    assert "row 2" in err.message and "7.25" not in str(err.message) + str(err.details)


def test_the_row_of_a_bad_id_is_counted_across_chunks(tmp_path: Path) -> None:
    n = 500_000  # several CSV blocks (4 MiB) and Parquet batches (2¹⁸ rows)
    ids = [f"id{i:07d}".encode() for i in range(n)]
    ids[n - 2] = LONE_SURROGATE_UTF8
    csv_body = b"id,label\n" + b"".join(i + b",1\n" for i in ids)
    assert len(list(read_batches(_write(tmp_path, "big.csv", csv_body), "text/csv", ("id",)))) > 1
    for path, kind in (
        (tmp_path / "big.csv", "text/csv"),
        (_parquet(tmp_path, pa.array(ids, pa.binary()), np.ones(n)), PARQUET),
    ):
        assert _refused(path, kind).details == [{"row": n - 1, "code": "invalid_id"}], kind


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_a_label_that_is_not_unicode_is_a_422_that_never_echoes_it(tmp_path: Path, fmt: str) -> None:
    if fmt == "json":
        path, kind = _write(tmp_path, "u.json", b'{"ids": ["a", "b"], "labels": ["yes", "secret\\ud800"]}'), JSON
    else:
        path, kind = _parquet(tmp_path, ["a", "b"], pa.array([b"yes", b"secret" + LONE_SURROGATE_UTF8])), PARQUET
    err = _refused(path, kind, CATS)
    assert err.code == "invalid_labels" and err.details == [{"row": 2, "code": "invalid_labels"}]
    assert "secret" not in str(err.message) + str(err.details)


NESTED = {
    "struct": pa.array([{"x": 1}, {"x": 2}]),
    "list": pa.array([[1.0], [2.0]]),
    "map": pa.array([[("k", 1)], [("k", 2)]], pa.map_(pa.string(), pa.int64())),
    "timestamp": pa.array([0, 1], pa.timestamp("s")),
}


@pytest.mark.parametrize("which", ["id", "label"])
@pytest.mark.parametrize("typ", sorted(NESTED))
@pytest.mark.parametrize("kind", [PARQUET, ARROW])
def test_a_nested_or_unsupported_column_is_a_422_naming_the_column(
    tmp_path: Path, which: str, typ: str, kind: str
) -> None:
    ids: pa.Array = NESTED[typ] if which == "id" else pa.array(["a", "b"])
    labels: pa.Array = NESTED[typ] if which == "label" else pa.array([1.0, 2.0])
    path = _parquet(tmp_path, ids, labels) if kind == PARQUET else _arrow(tmp_path, ids, labels, stream=False)
    for rules in (REAL, CATS):
        err = _refused(path, kind, rules)
        assert err.code == "unsupported_column_type", (which, typ)
        column = which if kind == PARQUET else which.upper() if which == "id" else "Label"
        assert err.details[0]["column"] == column and repr(column) in err.message
    if which == "id":  # the ids-only upload reads the same column
        with pytest.raises(LabelDPError) as caught:
            list(read_batches(path, kind, ("id",)))
        assert caught.value.code == "unsupported_column_type"


@pytest.mark.parametrize(
    "ids",
    [
        pa.array(["a", "b"], pa.large_string()),
        pa.array(["a", "b"]).dictionary_encode(),
        pa.array([b"a", b"b"], pa.binary()),
        pa.array([b"a", b"b"], pa.large_binary()),
    ],
    ids=["large_string", "dictionary", "binary", "large_binary"],
)
def test_every_text_column_type_still_reads_as_string_ids(tmp_path: Path, ids: pa.Array) -> None:
    labels = [1.0, 2.0]
    for path, kind in ((_parquet(tmp_path, ids, labels), PARQUET), (_arrow(tmp_path, ids, labels, False), ARROW)):
        upload = parse_label_upload(path, kind, REAL)
        assert upload.ids.type == pa.string() and upload.ids.to_pylist() == ["a", "b"], kind
    upload = parse_label_upload(_parquet(tmp_path, pa.array([7, 8]), [1.0, 2.0]), PARQUET, REAL)
    assert upload.ids.to_pylist() == ["7", "8"]


def test_a_file_upload_is_read_as_its_format_query_value() -> None:
    """Issue 26: octet-stream bytes are read as `format` names them; no format, or one that
    contradicts the Content-Type, is a 415 before anything is read."""
    from labeldp.errors import UnsupportedMediaType
    from labeldp.service.openapi import UploadFormat, upload_media_type

    assert upload_media_type("application/octet-stream", UploadFormat.parquet) == "application/vnd.apache.parquet"
    assert upload_media_type("application/vnd.apache.arrow.stream", UploadFormat.arrow) == (
        "application/vnd.apache.arrow.stream"
    )
    assert upload_media_type("text/csv; charset=utf-8", None) == "text/csv; charset=utf-8"
    for content_type, fmt in (("application/octet-stream", None), ("text/csv", UploadFormat.parquet)):
        with pytest.raises(UnsupportedMediaType):
            upload_media_type(content_type, fmt)


def test_an_integrators_own_column_names_are_read_in_every_format(tmp_path: Path) -> None:
    names = Columns.of("Order_ID", "conversion_value")
    table = pa.table({"order_id": ["a", "b"], "other": [9, 9], "conversion_value": [1.5, 2.0]})
    pq.write_table(table, tmp_path / "own.parquet")
    with open(tmp_path / "own.arrow", "wb") as f, ipc.new_file(f, table.schema) as writer:
        writer.write_table(table)
    bodies = [
        (_write(tmp_path, "own.csv", b"order_id,other,conversion_value\na,9,1.5\nb,9,2\n"), "text/csv"),
        (_write(tmp_path, "own.json", b'{"rows": [{"Order_ID": "a", "conversion_value": 1.5},'
                                      b' {"Order_ID": "b", "conversion_value": 2}]}'), JSON),
        (tmp_path / "own.parquet", PARQUET),
        (tmp_path / "own.arrow", ARROW),
    ]
    for path, kind in bodies:
        upload = parse_label_upload(path, kind, REAL, names)
        assert upload.ids.to_pylist() == ["a", "b"] and upload.values.tolist() == [1.5, 2.0], kind
        if kind != JSON:  # (JSON rows without the keys are rows without an id: named by row_errors)
            with pytest.raises(LabelDPError) as default_names:  # without the mapping: refused as before
                parse_label_upload(path, kind, REAL)
            assert default_names.value.code in {"invalid_csv", "invalid_parquet", "invalid_arrow"}, kind
            ids = next(read_batches(path, kind, ("id",), Columns.of("order_id")))["id"]
            assert ids.to_pylist() in (["a", "b"], [b"a", b"b"]), kind


@pytest.mark.parametrize("kind", ["text/csv", JSON, PARQUET, ARROW])
def test_a_named_column_the_file_lacks_is_unknown_column(tmp_path: Path, kind: str) -> None:
    table = pa.table({"id": ["a"], "label": [1.0]})
    path = {
        "text/csv": lambda: _write(tmp_path, "u.csv", b"id,label\na,1\n"),
        JSON: lambda: _write(tmp_path, "u.json", b'{"rows": [{"id": "a", "label": 1}]}'),
        PARQUET: lambda: _parquet(tmp_path, ["a"], [1.0]),
        ARROW: lambda: _arrow(tmp_path, table.column("id"), table.column("label"), stream=False),
    }[kind]()
    with pytest.raises(LabelDPError) as refused:
        parse_label_upload(path, kind, REAL, Columns.of(label_column="conversion_value"))
    assert refused.value.code == "unknown_column" and refused.value.status_code == 422
    assert refused.value.details == [{"column": "conversion_value"}]


def test_column_names_that_clash_or_are_empty_are_refused() -> None:
    with pytest.raises(LabelDPError) as same:
        Columns.of("value", "VALUE")
    assert same.value.code == "invalid_column_declaration"
    with pytest.raises(LabelDPError) as blank:
        Columns.of("  ")
    assert blank.value.code == "invalid_request"
    assert Columns.of() == Columns("id", "label", named=False) and Columns.of("id").named
