"""One way to refer to a resource (issue 26, item 3): its id everywhere, names as a filter on list routes.

A privacy domain is read by its ``pd_`` id (its name is still accepted in the id's place, for the
integrators who wrote code against names), a label set names its domain by id, the releases and
audit filters take the id, a feature table is read, replaced and deleted by its ``ft_`` id (a
replaced table has a new one; the old id is then 404), and a name never takes an id's shape.
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
    assert labels.get("/v1/privacy-domains/shop", headers=LABELS_AUTH).json() == domain  # compatibility
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
    for ref in (domain["id"], "shop"):
        events = labels.get("/v1/audit-events", params={"privacy_domain": ref}, headers=LABELS_AUTH).json()["items"]
        assert {e["action"] for e in events} == {"privacy_domain.created", "label_set.created"}, ref
        assert all(e["privacy_domain_id"] == domain["id"] for e in events)
        page = labels.get("/v1/releases", params={"privacy_domain": ref}, headers=LABELS_AUTH)
        assert page.status_code == 200 and page.json()["items"] == []


def test_a_feature_table_is_read_replaced_and_deleted_by_its_id(features: TestClient) -> None:
    def upload(method: str, path: str, **params: str) -> dict:
        r = features.request(method, path, params=params, content=CSV,
                             headers={**FEATURES_AUTH, "content-type": "text/csv"})
        assert r.status_code in (200, 201), r.text
        return r.json()

    table = upload("POST", "/v1/feature-tables", name="visits")
    assert table["id"].startswith("ft_") and table["name"] == "visits"
    assert features.get(f"/v1/feature-tables/{table['id']}", headers=FEATURES_AUTH).json() == table
    assert features.get("/v1/feature-tables/visits", headers=FEATURES_AUTH).json() == table  # compatibility
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
    assert features.get("/v1/feature-tables/visits", headers=FEATURES_AUTH).status_code == 404


def test_a_training_names_its_feature_table_by_id(parties: Parties) -> None:
    """The flow's training was queued with ``feature_table_id`` (tests/contract/flow.py); an id that names
    no table, or both the id and the deprecated ``feature_table``, are refused before anything is queued."""
    flow, features = parties.flow, parties.features
    assert flow.training["status"] == "succeeded" and flow.training["feature_table"] == "clicks"
    # responses carry both: the name and the id of the content it was queued on, on the training and its card
    assert flow.training["feature_table_id"] == flow.model["feature_table_id"] == flow.feature_table["id"]
    before = features.get("/v1/trainings", headers=FEATURES_AUTH).json()["items"]
    nowhere = {"release_id": flow.release["id"], "feature_table_id": "ft_" + "0" * 32}
    unknown = features.post("/v1/trainings", json=nowhere, headers=FEATURES_AUTH)
    assert unknown.status_code == 422 and unknown.json()["code"] == "unknown_feature_table"
    both = features.post("/v1/trainings", json={"release_id": flow.release["id"], "feature_table": "clicks",
                                                "feature_table_id": flow.feature_table["id"]}, headers=FEATURES_AUTH)
    assert both.status_code == 422 and both.json()["code"] == "invalid_request"
    assert features.get("/v1/trainings", headers=FEATURES_AUTH).json()["items"] == before
    spec = features.app.openapi()  # type: ignore[attr-defined]
    fields = spec["components"]["schemas"]["TrainingRequest"]["properties"]
    assert fields["feature_table"].get("deprecated") is True and "feature_table_id" in fields
