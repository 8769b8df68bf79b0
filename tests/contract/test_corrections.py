"""Resources an integrator can correct (issue 26, item 3): uploads keep the file's own column
names, and feature tables and label sets can be deleted (a feature table replaced) by clear rules."""

from __future__ import annotations

from fastapi.testclient import TestClient
from tests.contract.conftest import FEATURES_AUTH, LABELS_AUTH


def _label_set(labels: TestClient, ids: list[str] | None = None) -> str:
    body = {"name": "own-names", "domain": {"low": 0, "high": 10}, **({"ids": ids} if ids else {})}
    r = labels.post("/v1/label-sets", json=body, headers=LABELS_AUTH)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_an_upload_is_read_under_the_columns_the_request_names(labels: TestClient) -> None:
    ls = _label_set(labels)
    csv = b"order_id,region\no2,eu\no1,us\n"
    r = labels.post(f"/v1/label-sets/{ls}/ids", params={"id_column": "order_id"}, content=csv,
                    headers={**LABELS_AUTH, "Content-Type": "text/csv"})
    assert r.status_code == 200 and r.json()["counts"]["ids"] == 2, r.text
    own = b"order_id,conversion_value\no1,3.5\no2,0\n"
    url = f"/v1/label-sets/{ls}/labels"
    csv_headers = {**LABELS_AUTH, "Content-Type": "text/csv"}
    refused = labels.post(url, params={"id_column": "order_id", "label_column": "value"}, content=own,
                          headers=csv_headers)
    assert refused.status_code == 422 and refused.json()["code"] == "unknown_column"
    assert refused.json()["details"] == [{"column": "value"}]
    assert labels.post(url, content=own, headers=csv_headers).json()["code"] == "invalid_csv"  # as before
    stored = labels.post(url, params={"id_column": "order_id", "label_column": "conversion_value"}, content=own,
                         headers=csv_headers)
    assert stored.status_code == 200 and stored.json()["labeled"] == 2, stored.text


def test_a_label_set_without_releases_is_deleted_over_http(labels: TestClient) -> None:
    ls = _label_set(labels, ["u1", "u2"])
    gone = labels.delete(f"/v1/label-sets/{ls}", headers=LABELS_AUTH)
    assert gone.status_code == 200 and gone.json() == {"id": ls, "deleted": True}
    assert labels.get(f"/v1/label-sets/{ls}", headers=LABELS_AUTH).json()["code"] == "label_set_not_found"
    assert labels.delete(f"/v1/label-sets/{ls}", headers=LABELS_AUTH).status_code == 404


def test_a_feature_table_is_replaced_then_deleted_over_http(features: TestClient) -> None:
    csv = {**FEATURES_AUTH, "Content-Type": "text/csv"}
    first = features.post("/v1/feature-tables", params={"name": "visits"}, content=b"id,x\nu1,1\n", headers=csv)
    assert first.status_code == 201, first.text
    replaced = features.put(f"/v1/feature-tables/{first.json()['id']}", params={"id_column": "user_id"},
                            content=b"user_id,x,city\nu1,2,p\nu2,3,q\n", headers=csv)
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["n_rows"] == 2 and replaced.json()["id"] != first.json()["id"]
    now = f"/v1/feature-tables/{replaced.json()['id']}"
    assert features.get(now, headers=FEATURES_AUTH).json() == replaced.json()
    unknown = features.put(now, params={"id_column": "order_id"},
                           content=b"user_id,x\nu1,2\n", headers=csv)
    assert unknown.status_code == 422 and unknown.json()["code"] == "missing_id_column"
    gone = features.delete(now, headers=FEATURES_AUTH)
    assert gone.json() == {"id": replaced.json()["id"], "deleted": True}
    assert features.get(now, headers=FEATURES_AUTH).status_code == 404
    assert features.put(now, content=b"id,x\nu1,1\n", headers=csv).status_code == 404
    assert features.get("/v1/feature-tables", params={"name": "visits"}, headers=FEATURES_AUTH).json()["items"] == []
