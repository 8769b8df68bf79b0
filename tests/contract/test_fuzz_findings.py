"""Regression tests for what schemathesis found (tests/integration/test_openapi_schemathesis.py).

Each case was a real answer outside the contract before its fix: a 500, or a status no
route documents.
"""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from httpx import Response
from tests.contract.conftest import FEATURES_AUTH, LABELS_AUTH


def test_a_csv_header_with_a_lone_carriage_return_is_a_422_not_a_500(labels: TestClient) -> None:
    # Found with seed 1: csv.Error ("new-line character seen in unquoted field") escaped as a 500.
    ls = labels.post(
        "/v1/label-sets", json={"name": "s", "domain": {"low": 0, "high": 10}, "ids": ["a", "b"]}, headers=LABELS_AUTH
    ).json()
    body = b"\r\xc3\x99\n\xc2\xbe{\xf2\x9c\xae\xab)&\n"
    r = labels.post(
        f"/v1/label-sets/{ls['id']}/labels", content=body, headers={**LABELS_AUTH, "content-type": "text/csv"}
    )
    assert r.status_code == 422 and r.json()["code"] == "invalid_csv", r.text
    assert labels.get(f"/v1/label-sets/{ls['id']}", headers=LABELS_AUTH).json()["counts"]["labeled"] == 0
    no_ids = labels.post(
        "/v1/label-sets", json={"name": "t", "domain": {"low": 0, "high": 10}}, headers=LABELS_AUTH
    ).json()
    r = labels.post(
        f"/v1/label-sets/{no_ids['id']}/ids", content=body, headers={**LABELS_AUTH, "content-type": "text/csv"}
    )
    assert r.status_code == 422 and r.json()["code"] == "invalid_csv", r.text


def test_a_body_that_is_not_utf8_json_is_the_documented_422(labels: TestClient, features: TestClient) -> None:
    # FastAPI answered 400 "There was an error parsing the body", a status no route documents.
    for client, path, auth in (
        (features, "/v1/trainings", FEATURES_AUTH),
        (features, "/v1/models/mdl_x/predict", FEATURES_AUTH),
        (labels, "/v1/label-sets", LABELS_AUTH),
        (labels, "/v1/privacy-domains", LABELS_AUTH),
    ):
        r = client.post(path, content=b"\xff\xfe{", headers={**auth, "content-type": "application/json"})
        assert r.status_code == 422, (path, r.status_code, r.text)
        assert r.json()["code"] == "invalid_request" and r.json()["details"][0]["loc"] == ["body"], r.text


def _label_sets(labels: TestClient) -> list[dict]:
    return labels.get("/v1/label-sets", headers=LABELS_AUTH).json()["items"]


def test_a_lone_surrogate_id_is_a_422_invalid_id_and_creates_nothing(labels: TestClient) -> None:
    # Measured in issue 24: "\ud800" in ids answered 500 internal_error (Arrow cannot encode it).
    body = b'{"name": "s", "domain": {"low": 0, "high": 10}, "ids": ["a", "b", "\\ud800"]}'
    r = labels.post("/v1/label-sets", content=body, headers={**LABELS_AUTH, "content-type": "application/json"})
    assert (r.status_code, r.json()["code"]) == (422, "invalid_id"), r.text
    assert r.json()["details"] == [{"row": 3, "code": "invalid_id"}]
    assert _label_sets(labels) == []
    ls = labels.post("/v1/label-sets", json={"name": "t", "domain": {"low": 0, "high": 10}}, headers=LABELS_AUTH)
    ls_id = ls.json()["id"]
    for content, kind in (
        (b'{"ids": ["a", "\\udc00b"]}', "application/json"),
        (b"id\na\n\xed\xa0\x80\n", "text/csv"),
    ):
        r = labels.post(f"/v1/label-sets/{ls_id}/ids", content=content, headers={**LABELS_AUTH, "content-type": kind})
        assert (r.status_code, r.json()["code"]) == (422, "invalid_id"), (kind, r.text)
        assert r.json()["details"] == [{"row": 2, "code": "invalid_id"}]
    got = labels.get(f"/v1/label-sets/{ls_id}", headers=LABELS_AUTH).json()
    assert got["ids_ready"] is False and got["counts"]["ids"] == 0
    body = b'{"name": "c", "label_type": "categorical", "classes": ["no", "\\ud800"]}'
    r = labels.post("/v1/label-sets", content=body, headers={**LABELS_AUTH, "content-type": "application/json"})
    assert (r.status_code, r.json()["code"]) == (422, "invalid_request"), r.text
    assert [s["name"] for s in _label_sets(labels)] == ["t"]


def test_a_nested_parquet_column_is_a_422_unsupported_column_type_and_stores_nothing(labels: TestClient) -> None:
    # Measured in issue 24: a struct/list column in an uploaded Parquet file answered 500.
    ls = labels.post(
        "/v1/label-sets", json={"name": "s", "domain": {"low": 0, "high": 10}, "ids": ["a", "b"]}, headers=LABELS_AUTH
    ).json()
    no_ids = labels.post("/v1/label-sets", json={"name": "t", "domain": {"low": 0, "high": 10}}, headers=LABELS_AUTH)
    parquet = {**LABELS_AUTH, "content-type": "application/vnd.apache.parquet"}
    for column, table in (
        ("label", pa.table({"id": ["a", "b"], "label": pa.array([{"v": 1.0}, {"v": 2.0}])})),
        ("id", pa.table({"id": pa.array([["a"], ["b"]]), "label": [1.0, 2.0]})),
    ):
        sink = io.BytesIO()
        pq.write_table(table, sink)
        r = labels.post(f"/v1/label-sets/{ls['id']}/labels", content=sink.getvalue(), headers=parquet)
        assert (r.status_code, r.json()["code"]) == (422, "unsupported_column_type"), r.text
        assert r.json()["details"][0]["column"] == column
        if column == "id":
            r = labels.post(f"/v1/label-sets/{no_ids.json()['id']}/ids", content=sink.getvalue(), headers=parquet)
            assert (r.status_code, r.json()["code"]) == (422, "unsupported_column_type"), r.text
    assert labels.get(f"/v1/label-sets/{ls['id']}", headers=LABELS_AUTH).json()["counts"]["labeled"] == 0
    assert labels.get(f"/v1/label-sets/{no_ids.json()['id']}", headers=LABELS_AUTH).json()["ids_ready"] is False


def _post(client: TestClient, path: str, body: dict) -> Response:
    """JSON with every non-ASCII character escaped, so a lone surrogate travels as "\\ud800"."""
    return client.post(path, content=json.dumps(body), headers={**LABELS_AUTH, "content-type": "application/json"})


@pytest.mark.parametrize("eps", [" 1 ", "1 ", "١", "１", "1\n", "\ud800"])
def test_epsilon_text_that_is_not_plain_ascii_is_a_422_and_creates_nothing(labels: TestClient, eps: str) -> None:
    # Measured in issue 24: " 1 " and "١" (Arabic-Indic one) were read as ε = 1.
    base = {"name": "s", "domain": {"low": 0, "high": 10}, "ids": ["a"]}
    r = _post(labels, "/v1/label-sets", {**base, "total_epsilon": eps})
    assert (r.status_code, r.json()["code"]) == (422, "invalid_epsilon"), r.text
    assert "plain ASCII decimal" in r.json()["message"]
    assert _label_sets(labels) == []
    r = _post(labels, "/v1/privacy-domains", {"name": "d", "id_source": "d", "epsilon": eps})
    assert (r.status_code, r.json()["code"]) == (422, "invalid_epsilon"), r.text
    assert labels.get("/v1/privacy-domains", params={"name": "d"}, headers=LABELS_AUTH).json()["items"] == []
    ok = labels.post(
        "/v1/label-sets",
        json={"name": "s", "domain": {"low": 0, "high": 10}, "ids": ["a"], "total_epsilon": "1"},
        headers=LABELS_AUTH,
    )
    assert ok.status_code == 201 and ok.json()["budget"]["total_micro"] == 1_000_000  # plain "1" still works
    ls = ok.json()["id"]
    assert labels.post(
        f"/v1/label-sets/{ls}/labels", json={"ids": ["a"], "labels": [1.0]}, headers=LABELS_AUTH
    ).status_code == 200
    r = _post(labels, f"/v1/label-sets/{ls}/releases", {"mechanism": "laplace", "epsilon": eps})
    assert (r.status_code, r.json()["code"]) == (422, "invalid_epsilon"), r.text
    got = labels.get(f"/v1/label-sets/{ls}", headers=LABELS_AUTH).json()
    assert got["budget"]["spent_micro"] == 0 and got["releases"] == []
