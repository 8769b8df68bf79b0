"""Sub-collections that grow are cursor pages (issue 26): a set's releases, a training's history; and every
list route pages oldest first or, with ``order=desc``, newest first."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from tests.contract.conftest import FEATURES_AUTH, LABELS_AUTH, Parties

from features_party import store


def test_a_trainings_history_pages_over_http(features: TestClient) -> None:
    history = [{"epoch": e, "train_loss": 1.0 / e} for e in range(1, 6)]
    with features.app.state.ctx.sessions.begin() as s:
        s.add(store.Training(training_id="trn_paged", release_id="rel_x", feature_table="t", config={},
                             status=store.SUCCEEDED, epoch=5, epochs=5, history=history))
    seen, params = [], {"limit": 2}
    while True:
        page = features.get("/v1/trainings/trn_paged/history", params=params, headers=FEATURES_AUTH)
        assert page.status_code == 200, page.text
        seen += page.json()["items"]
        if page.json()["next_cursor"] is None:
            break
        params = {"limit": 2, "cursor": page.json()["next_cursor"]}
    assert seen == history
    bad = features.get("/v1/trainings/trn_paged/history", params={"cursor": "zz"}, headers=FEATURES_AUTH)
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_cursor"
    assert features.get("/v1/trainings/trn_nope/history", headers=FEATURES_AUTH).json()["code"] == "training_not_found"


def test_a_label_sets_releases_are_a_sub_collection(labels: TestClient) -> None:
    ls = labels.post("/v1/label-sets", json={"name": "s", "domain": {"low": 0, "high": 1}, "ids": ["a"]},
                     headers=LABELS_AUTH).json()["id"]
    page = labels.get(f"/v1/label-sets/{ls}/releases", headers=LABELS_AUTH)
    assert page.status_code == 200 and page.json() == {"items": [], "next_cursor": None}
    assert labels.get("/v1/label-sets/ls_nope/releases", headers=LABELS_AUTH).json()["code"] == "label_set_not_found"
    default = labels.get("/v1/privacy-domains", params={"name": "default"}, headers=LABELS_AUTH).json()["items"][0]
    by_domain = labels.get("/v1/releases", params={"privacy_domain": default["id"]}, headers=LABELS_AUTH)
    assert by_domain.status_code == 200 and by_domain.json()["items"] == []


def _list_routes(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every GET whose page is a cursor page: a list route."""
    return [
        (path, item["get"]) for path, item in spec["paths"].items()
        if "get" in item and any(p["name"] == "cursor" for p in item["get"].get("parameters", []))
    ]


def test_every_list_route_takes_order_asc_or_desc(labels: TestClient, features: TestClient) -> None:
    for client in (labels, features):
        spec = client.app.openapi()  # type: ignore[attr-defined]
        routes = _list_routes(spec)
        assert len(routes) >= 5
        for path, op in routes:
            order = {p["name"]: p for p in op["parameters"]}.get("order")
            assert order is not None and order["in"] == "query", path
            schema = order["schema"]
            assert schema.get("enum") == ["asc", "desc"] and schema.get("default") == "asc", (path, schema)


def _walk(client: TestClient, path: str, order: str, headers: dict[str, str]) -> list[str]:
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 1, "order": order}
    while True:
        page = client.get(path, params=params, headers=headers)
        assert page.status_code == 200, (path, page.text)
        seen += [item.get("id") or item.get("name") for item in page.json()["items"]]
        if page.json()["next_cursor"] is None:
            return seen
        params = {**params, "cursor": page.json()["next_cursor"]}


def test_every_list_route_of_the_flow_walks_newest_first_as_the_reverse_of_oldest_first(parties: Parties) -> None:
    """Over both parties after the whole flow, a page of one item at a time: ``order=desc`` gives every
    list route's items in the reverse of ``order=asc``; an asc cursor passed with desc is refused."""
    flow = parties.flow
    for client, headers in ((parties.labels, LABELS_AUTH), (parties.features, FEATURES_AUTH)):
        for path, _ in _list_routes(client.app.openapi()):  # type: ignore[attr-defined]
            path = path.replace("{label_set_id}", flow.label_set["id"]).replace("{training_id}", flow.training["id"])
            asc = _walk(client, path, "asc", headers)
            if path == "/v1/inbox/webhook-deliveries":  # no webhook in the flow: tests/unit/test_webhook_deliveries.py
                assert asc == [], path
                continue
            assert asc, path
            assert _walk(client, path, "desc", headers) == asc[::-1], path
            if len(asc) > 1:
                cursor = client.get(path, params={"limit": 1}, headers=headers).json()["next_cursor"]
                mixed = client.get(path, params={"limit": 1, "cursor": cursor, "order": "desc"}, headers=headers)
                assert mixed.status_code == 422 and mixed.json()["code"] == "invalid_cursor", path
    bad = parties.labels.get("/v1/label-sets", params={"order": "newest"}, headers=LABELS_AUTH)
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_request"
