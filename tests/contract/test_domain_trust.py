"""Privacy domains as an administrator's decision (issue 24, item 1).

Measured: any labels-API key could create a privacy domain, and a new domain over the same ids
gave them a fresh budget. Keys now carry scopes; a domain owns a declared id source; every domain
change is in an append-only audit log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from tests.local_settings import both_parties, fixed_signing_key

from labeldp.service.settings import ApiKey, InsecureSettings, parse_api_keys

ADMIN_KEY = "trust-admin-key-Qx7vK2mP9wR4tY8z"
RELEASE_KEY = "trust-release-key-Hn3bV6cX1jL5sD0f"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
RELEASE = {"Authorization": f"Bearer {RELEASE_KEY}"}


@pytest.fixture
def labels(tmp_path: Path) -> Iterator[TestClient]:
    from labels_party.app import create_app

    settings = both_parties(
        tmp_path, f"admin:{ADMIN_KEY},release:{RELEASE_KEY}", "trust-features-key-Zp4kW8nB2qT6yH1c",
        fixed_signing_key("trust"),
    )
    with TestClient(create_app(settings)) as client:
        yield client


def _domain(client: TestClient, headers: dict[str, str], name: str, source: str, eps: float = 1.0):  # type: ignore[no-untyped-def]
    return client.post("/v1/privacy-domains", json={"name": name, "id_source": source, "epsilon": eps},
                       headers=headers)


def _events(client: TestClient, **params: object) -> list[dict]:  # type: ignore[type-arg]
    items: list[dict] = []  # type: ignore[type-arg]
    cursor = None
    while True:
        page = client.get("/v1/audit-events", params={**params, **({"cursor": cursor} if cursor else {})},
                          headers=ADMIN)
        assert page.status_code == 200, page.text
        items += page.json()["items"]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            return items


def test_a_release_key_cannot_create_a_privacy_domain(labels: TestClient) -> None:
    r = _domain(labels, RELEASE, "again", "crm:customer_id", 1000)
    assert (r.status_code, r.json()["code"]) == (403, "scope_required"), r.text
    assert labels.get("/v1/privacy-domains", params={"name": "again"}, headers=RELEASE).json()["items"] == []
    assert _events(labels) == []  # nothing written, not even an audit event
    assert labels.get("/v1/audit-events", headers=RELEASE).status_code == 403  # the log is the admin's
    # the admin key creates it; it cannot upload or release (that is the release key's scope)
    made = _domain(labels, ADMIN, "again", "crm:customer_id")
    assert made.status_code == 201, made.text
    body = {"name": "s", "domain": {"low": 0, "high": 1}, "ids": ["a"], "privacy_domain": made.json()["id"]}
    r = labels.post("/v1/label-sets", json=body, headers=ADMIN)
    assert (r.status_code, r.json()["code"]) == (403, "scope_required"), r.text
    assert labels.post("/v1/label-sets", json=body, headers=RELEASE).status_code == 201
    # every key reads a domain
    shown = labels.get(f"/v1/privacy-domains/{made.json()['id']}", headers=RELEASE)
    assert shown.json()["id_source"] == "crm:customer_id"


def test_two_domains_cannot_claim_one_id_source(labels: TestClient) -> None:
    first = _domain(labels, ADMIN, "conversions", "crm:customer_id", 2)
    assert first.status_code == 201, first.text
    for name, source in [("conversions-again", "crm:customer_id"), ("shouting", "CRM:Customer_ID ")]:
        r = _domain(labels, ADMIN, name, source, 50)
        assert (r.status_code, r.json()["code"]) == (409, "id_source_claimed"), r.text
        assert labels.get("/v1/privacy-domains", params={"name": name}, headers=ADMIN).json()["items"] == []
    assert [e["privacy_domain"] for e in _events(labels)] == ["conversions"]
    assert _domain(labels, ADMIN, "orders", "shop:order_id").status_code == 201  # another source is fine
    r = _domain(labels, ADMIN, "spaces", "crm customer")
    assert (r.status_code, r.json()["code"]) == (422, "invalid_id_source"), r.text


def test_the_audit_log_lists_every_domain_change_and_is_append_only(labels: TestClient) -> None:
    from labels_party.audit import AuditLogIsAppendOnly
    from labels_party.store import AuditEventRow

    names = ["a", "b", "c"]
    for name in names:
        assert _domain(labels, ADMIN, name, f"src:{name}").status_code == 201
    # the default domain, made by the service on first use, is logged too (no key)
    assert labels.post("/v1/label-sets", json={"name": "s", "domain": {"low": 0, "high": 1}, "ids": ["x"]},
                       headers=RELEASE).status_code == 201
    events = _events(labels, limit=2, action="privacy_domain.created")  # two pages
    assert [e["privacy_domain"] for e in events] == [*names, "default"]
    default = events[3]["privacy_domain_id"]
    assert [e["action"] for e in _events(labels, privacy_domain=default)] == [
        "privacy_domain.created", "label_set.created"
    ]
    admin_id = ApiKey(ADMIN_KEY, frozenset()).key_id
    for event in events[:3]:
        assert (event["action"], event["key_id"], event["scope"]) == ("privacy_domain.created", admin_id, "admin")
        assert event["details"]["id_source"] == f"src:{event['privacy_domain']}"
        assert ADMIN_KEY not in str(event)
    assert (events[3]["key_id"], events[3]["scope"]) == (None, None)
    assert _events(labels, privacy_domain=events[1]["privacy_domain_id"]) == [events[1]]

    sessions = labels.app.state.ctx.sessions
    with pytest.raises(AuditLogIsAppendOnly), sessions.begin() as s:
        s.scalars(select(AuditEventRow)).first().details_json = "{}"  # type: ignore[union-attr]
    with pytest.raises(AuditLogIsAppendOnly), sessions.begin() as s:
        s.delete(s.scalars(select(AuditEventRow)).first())
    assert _events(labels, action="privacy_domain.created") == events  # unchanged


def test_key_entries_carry_scopes_and_a_plain_key_only_releases() -> None:
    keys = parse_api_keys("admin:k1, release:k2,admin+release:k3,k4:with:colons-0123,K5")
    assert [(k.key, sorted(k.scopes)) for k in keys] == [
        ("k1", ["admin"]), ("k2", ["release"]), ("k3", ["admin", "release"]), ("k4:with:colons-0123", ["release"]),
        ("K5", ["release"]),
    ]
    with pytest.raises(InsecureSettings, match="unknown API key scope"):
        parse_api_keys("admn:k1")


def test_privacy_domains_are_listed_a_page_at_a_time_to_every_key(labels: TestClient) -> None:
    """Issue 26 item 3: domains could be read by name only. The list pages them oldest first
    (labeldp.service.pagination), each body the one GET by id answers; any key reads it."""
    for i in range(3):
        assert _domain(labels, ADMIN, f"d{i}", f"src:{i}", eps=1.0 + i).status_code == 201
    names: list[str] = []
    cursor = None
    while True:
        page = labels.get("/v1/privacy-domains", params={"limit": 2, **({"cursor": cursor} if cursor else {})},
                          headers=RELEASE)
        assert page.status_code == 200, page.text
        assert len(page.json()["items"]) <= 2
        for item in page.json()["items"]:
            assert item == labels.get(f"/v1/privacy-domains/{item['id']}", headers=RELEASE).json()
            names.append(item["name"])
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert [n for n in names if n != "default"] == ["d0", "d1", "d2"] and len(set(names)) == len(names), names
    assert labels.get("/v1/privacy-domains", params={"cursor": "nope"}, headers=ADMIN).json()["code"] == (
        "invalid_cursor"
    )
    assert labels.get("/v1/privacy-domains").status_code == 401
