"""Regression tests for what schemathesis found (tests/integration/test_openapi_schemathesis.py).

Each case was a real answer outside the contract before its fix: a 500, or a status no
route documents.
"""

from __future__ import annotations

from fastapi.testclient import TestClient
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
