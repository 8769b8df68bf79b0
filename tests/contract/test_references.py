"""One way to refer to a resource (issue 26, item 3): its id everywhere, names as a filter on list routes.

A privacy domain is read by its ``pd_`` id, a label set names its domain by id, the releases and
audit filters take the id, a feature table is read, replaced and deleted by its ``ft_`` id (a
replaced table has a new one; the old id is then 404), a training names its table by
``feature_table_id``, and a name never takes an id's shape. A name where an id is expected is
refused (``privacy_domain_not_found`` / ``feature_table_not_found`` / ``unknown_feature_table``,
saying how to find the id) and changes nothing.
"""

from __future__ import annotations

from fastapi.testclient import TestClient
from tests.contract.conftest import FEATURES_AUTH, LABELS_AUTH, Parties

CSV = b"id,age\nu1,30\nu2,41\n"


def test_a_privacy_domain_is_referred_to_by_its_id_everywhere(labels: TestClient) -> None:
    created = labels.post("/v1/privacy-domains", json={"name": "shop", "id_source": "crm:shop", "epsilon": 2},
                          headers=LABELS_AUTH)
    assert created.status_code == 201, created.text
    domain = created.json()
    assert domain["id"].startswith("pd_") and created.headers["location"] == f"/v1/privacy-domains/{domain['id']}"
    by_id = labels.get(f"/v1/privacy-domains/{domain['id']}", headers=LABELS_AUTH)
    assert by_id.status_code == 200 and by_id.json() == domain
    missing = labels.get("/v1/privacy-domains/pd_" + "0" * 32, headers=LABELS_AUTH)
    assert missing.status_code == 404 and missing.json()["code"] == "privacy_domain_not_found"
    hist = labels.get(f"/v1/privacy-domains/{domain['id']}/spent-histogram", headers=LABELS_AUTH).json()
    assert hist["privacy_domain_id"] == domain["id"] and hist["privacy_domain"] == "shop"
    shaped = labels.post("/v1/privacy-domains", json={"name": "pd_" + "a" * 32, "id_source": "x:y", "epsilon": 1},
                         headers=LABELS_AUTH)
    assert shaped.status_code == 422 and shaped.json()["code"] == "invalid_name"

    made = labels.post("/v1/label-sets", json={"name": "basket", "domain": {"low": 0, "high": 1}, "ids": ["a", "b"],
                                               "privacy_domain": domain["id"]}, headers=LABELS_AUTH)
    assert made.status_code == 201, made.text
    assert made.json()["privacy_domain_id"] == domain["id"] and made.json()["privacy_domain"] == "shop"
    labels.post("/v1/label-sets", json={"name": "other", "domain": {"low": 0, "high": 1}, "ids": ["c"]},
                headers=LABELS_AUTH)

    named = labels.get("/v1/privacy-domains", params={"name": "shop"}, headers=LABELS_AUTH).json()["items"]
    assert [d["id"] for d in named] == [domain["id"]]
    sets = labels.get("/v1/label-sets", params={"name": "basket"}, headers=LABELS_AUTH).json()["items"]
    assert [s["id"] for s in sets] == [made.json()["id"]]
    assert labels.get("/v1/label-sets", params={"name": "nope"}, headers=LABELS_AUTH).json()["items"] == []
    events = labels.get("/v1/audit-events", params={"privacy_domain": domain["id"]}, headers=LABELS_AUTH).json()
    assert {e["action"] for e in events["items"]} == {"privacy_domain.created", "label_set.created"}
    assert all(e["privacy_domain_id"] == domain["id"] for e in events["items"])
    page = labels.get("/v1/releases", params={"privacy_domain": domain["id"]}, headers=LABELS_AUTH)
    assert page.status_code == 200 and page.json()["items"] == []


def _refused_name(response, resource: str, code: str, status: int = 404) -> None:  # type: ignore[no-untyped-def]
    """A name where an id is expected: the stable code, and a message that says how to find the id."""
    assert (response.status_code, response.json()["code"]) == (status, code), response.text
    assert f"GET /v1/{resource}?name=" in response.json()["message"], response.text


def test_a_domain_name_where_its_id_is_expected_is_refused_and_changes_nothing(labels: TestClient) -> None:
    created = labels.post("/v1/privacy-domains", json={"name": "named", "id_source": "crm:named", "epsilon": 2},
                          headers=LABELS_AUTH)
    assert created.status_code == 201, created.text
    domain_id = created.json()["id"]
    sets_before = labels.get("/v1/label-sets", headers=LABELS_AUTH).json()
    events_before = labels.get("/v1/audit-events", headers=LABELS_AUTH).json()
    for path in ("/v1/privacy-domains/named", "/v1/privacy-domains/named/spent-histogram"):
        _refused_name(labels.get(path, headers=LABELS_AUTH), "privacy-domains", "privacy_domain_not_found")
    for route in ("/v1/releases", "/v1/audit-events"):
        refused = labels.get(route, params={"privacy_domain": "named"}, headers=LABELS_AUTH)
        _refused_name(refused, "privacy-domains", "privacy_domain_not_found")
    body = {"name": "by-name", "domain": {"low": 0, "high": 1}, "ids": ["a"], "privacy_domain": "named"}
    _refused_name(labels.post("/v1/label-sets", json=body, headers=LABELS_AUTH), "privacy-domains",
                  "privacy_domain_not_found")
    assert labels.get("/v1/label-sets", headers=LABELS_AUTH).json() == sets_before  # nothing created
    assert labels.get("/v1/audit-events", headers=LABELS_AUTH).json() == events_before  # nothing logged
    # the id works everywhere the name was refused
    assert labels.get(f"/v1/privacy-domains/{domain_id}", headers=LABELS_AUTH).json() == created.json()
    assert labels.get(f"/v1/privacy-domains/{domain_id}/spent-histogram", headers=LABELS_AUTH).status_code == 200
    made = labels.post("/v1/label-sets", json={**body, "privacy_domain": domain_id}, headers=LABELS_AUTH)
    assert made.status_code == 201 and made.json()["privacy_domain_id"] == domain_id, made.text
    for route in ("/v1/releases", "/v1/audit-events"):
        assert labels.get(route, params={"privacy_domain": domain_id}, headers=LABELS_AUTH).status_code == 200
    # a set that names no domain still charges the default one, by its id
    plain = labels.post("/v1/label-sets", json={"name": "plain", "domain": {"low": 0, "high": 1}, "ids": ["b"]},
                        headers=LABELS_AUTH)
    assert plain.status_code == 201 and plain.json()["privacy_domain"] == "default", plain.text
    assert plain.json()["privacy_domain_id"].startswith("pd_")


def test_a_feature_table_is_read_replaced_and_deleted_by_its_id(features: TestClient) -> None:
    def upload(method: str, path: str, **params: str) -> dict:
        r = features.request(method, path, params=params, content=CSV,
                             headers={**FEATURES_AUTH, "content-type": "text/csv"})
        assert r.status_code in (200, 201), r.text
        return r.json()

    table = upload("POST", "/v1/feature-tables", name="visits")
    assert table["id"].startswith("ft_") and table["name"] == "visits"
    assert features.get(f"/v1/feature-tables/{table['id']}", headers=FEATURES_AUTH).json() == table
    named = features.get("/v1/feature-tables/visits", headers=FEATURES_AUTH)
    _refused_name(named, "feature-tables", "feature_table_not_found")
    refused_put = features.put("/v1/feature-tables/visits", content=b"id,age\nu9,1\n",
                               headers={**FEATURES_AUTH, "content-type": "text/csv"})
    _refused_name(refused_put, "feature-tables", "feature_table_not_found")
    _refused_name(features.delete("/v1/feature-tables/visits", headers=FEATURES_AUTH), "feature-tables",
                  "feature_table_not_found")
    assert features.get(f"/v1/feature-tables/{table['id']}", headers=FEATURES_AUTH).json() == table  # unchanged
    listed = features.get("/v1/feature-tables", params={"name": "visits"}, headers=FEATURES_AUTH).json()["items"]
    assert [t["id"] for t in listed] == [table["id"]]
    shaped = features.post("/v1/feature-tables", params={"name": "ft_" + "b" * 32}, content=CSV,
                           headers={**FEATURES_AUTH, "content-type": "text/csv"})
    assert shaped.status_code == 422 and shaped.json()["code"] == "invalid_table_name"

    replaced = upload("PUT", f"/v1/feature-tables/{table['id']}")
    assert replaced["name"] == "visits" and replaced["id"] != table["id"]
    gone = features.get(f"/v1/feature-tables/{table['id']}", headers=FEATURES_AUTH)
    assert gone.status_code == 404 and gone.json()["code"] == "feature_table_not_found"  # an id names one content
    stale = features.delete(f"/v1/feature-tables/{table['id']}", headers=FEATURES_AUTH)
    assert stale.status_code == 404
    assert features.delete(f"/v1/feature-tables/{replaced['id']}", headers=FEATURES_AUTH).status_code == 200
    assert features.get("/v1/feature-tables", params={"name": "visits"}, headers=FEATURES_AUTH).json()["items"] == []


def test_a_training_names_its_feature_table_by_id(parties: Parties) -> None:
    """The flow's training was queued with ``feature_table_id`` (tests/contract/flow.py); an id that names
    no table, a name in its place, or the removed ``feature_table`` field are refused before anything is queued."""
    flow, features = parties.flow, parties.features
    assert flow.training["status"] == "succeeded" and flow.training["feature_table"] == "clicks"
    # responses carry both: the name and the id of the content it was queued on, on the training and its card
    assert flow.training["feature_table_id"] == flow.model["feature_table_id"] == flow.feature_table["id"]
    before = features.get("/v1/trainings", headers=FEATURES_AUTH).json()["items"]
    nowhere = {"release_id": flow.release["id"], "feature_table_id": "ft_" + "0" * 32}
    unknown = features.post("/v1/trainings", json=nowhere, headers=FEATURES_AUTH)
    _refused_name(unknown, "feature-tables", "unknown_feature_table", 422)
    by_name = features.post("/v1/trainings", json={**nowhere, "feature_table_id": "clicks"}, headers=FEATURES_AUTH)
    _refused_name(by_name, "feature-tables", "unknown_feature_table", 422)
    old_field = features.post("/v1/trainings", json={"release_id": flow.release["id"], "feature_table": "clicks"},
                              headers=FEATURES_AUTH)
    assert old_field.status_code == 422 and old_field.json()["code"] == "invalid_request"
    assert features.get("/v1/trainings", headers=FEATURES_AUTH).json()["items"] == before
    spec = features.app.openapi()  # type: ignore[attr-defined]
    fields = spec["components"]["schemas"]["TrainingRequest"]["properties"]
    assert "feature_table" not in fields and "feature_table_id" in fields
