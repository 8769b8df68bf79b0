"""The audit log covers the labels party's trust-relevant state changes (issue 24).

Label sets created and their labels deleted, releases queued, charged and failed (by the job or
by a lost worker), and the signing key an outbox starts with: each event names the key that acted
(a worker's events the key that queued the release), and none carries a raw label.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from tests.local_settings import both_parties, fixed_signing_key
from tests.release_jobs import JobFailed, settle

from labeldp.service.settings import parse_api_keys
from labeldp.signing import key_id, public_key_of
from labels_party import audit
from labels_party.release_worker import reap_expired
from labels_party.responses import AuditEvent
from labels_party.store import ReleaseRow

ADMIN_KEY = "audit-admin-key-Rw8mK3pQ6vZ1tY4x"
RELEASE_KEY = "audit-release-key-Jd5nB9cV2hL7sF0g"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
RELEASE = {"Authorization": f"Bearer {RELEASE_KEY}"}
RELEASE_KEY_ID = parse_api_keys(RELEASE_KEY)[0].key_id
IDS = [f"u{i:03d}" for i in range(40)]
LABELS = [4.2718281 + 0.0137 * i for i in range(40)]  # distinctive values to look for


def _settings(tmp_path: Path, signing: str = "audit") -> Any:
    return both_parties(
        tmp_path, f"admin:{ADMIN_KEY},release:{RELEASE_KEY}", "audit-features-key-Wq2mX7nC4vB9kT1z",
        fixed_signing_key(signing), release_in_process_worker=False,
    )


@pytest.fixture
def labels(tmp_path: Path) -> Iterator[TestClient]:
    from labels_party.app import create_app

    with TestClient(create_app(_settings(tmp_path))) as client:
        yield client


def _events(client: TestClient, **params: object) -> list[dict[str, Any]]:
    r = client.get("/v1/audit-events", params={"limit": 200, **params}, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert r.json()["next_cursor"] is None
    return r.json()["items"]  # type: ignore[no-any-return]


def _label_set(client: TestClient) -> str:
    domain = {"name": "conv", "id_source": "crm:audit", "epsilon": 10}
    made = client.post("/v1/privacy-domains", json=domain, headers=ADMIN)
    assert made.status_code == 201, made.text
    body = {"name": "spend", "domain": {"low": 0, "high": 10}, "ids": IDS, "privacy_domain": made.json()["id"]}
    r = client.post("/v1/label-sets", json=body, headers=RELEASE)
    assert r.status_code == 201, r.text
    ls = r.json()["id"]
    csv = "id,label\n" + "".join(f"{i},{v!r}\n" for i, v in zip(IDS, LABELS, strict=True))
    r = client.post(f"/v1/label-sets/{ls}/labels", content=csv, headers={**RELEASE, "content-type": "text/csv"})
    assert r.status_code == 200, r.text
    return str(ls)


def _release(client: TestClient, ls: str, epsilon: float = 0.5) -> str:
    r = client.post(f"/v1/label-sets/{ls}/releases", json={"mechanism": "laplace", "epsilon": epsilon},
                    headers=RELEASE)
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


def test_label_sets_and_releases_are_audited_under_the_acting_key_without_a_label(labels: TestClient) -> None:
    ctx = labels.app.state.ctx  # type: ignore[attr-defined]
    ls = _label_set(labels)
    charged = _release(labels, ls)
    settle(ctx, charged)
    lost = _release(labels, ls, 0.25)  # its worker "dies" twice over: failed by the reaper
    with ctx.sessions.begin() as s:
        s.execute(update(ReleaseRow).where(ReleaseRow.id == lost).values(status="running", job_lease_until=1.0,
                                                                           job_attempts=3, job_owner="gone:1:x"))
    assert reap_expired(ctx.sessions, max_attempts=3) == []
    refused = _release(labels, ls, 0.25)
    assert labels.delete(f"/v1/label-sets/{ls}/labels", headers=RELEASE).status_code == 200
    with pytest.raises(JobFailed):
        settle(ctx, refused)  # its labels were deleted after it was queued: failed, nothing charged

    by_subject = {s: [(e["action"], e["key_id"], e["scope"]) for e in _events(labels, subject_id=s)]
                  for s in (ls, charged, lost, refused)}
    release = (RELEASE_KEY_ID, "release")
    assert by_subject[ls] == [("label_set.created", *release), ("label_set.labels_deleted", *release)]
    assert by_subject[charged] == [("release.queued", *release), ("release.charged", *release)]
    assert by_subject[lost] == [("release.queued", *release), ("release.failed", *release)]
    assert by_subject[refused] == [("release.queued", *release), ("release.failed", *release)]

    events = _events(labels)
    assert {e["action"] for e in events} == set(audit.ACTIONS) - {"signing_key.in_use"}
    for event in events:
        AuditEvent.model_validate(event)
        assert event["privacy_domain"] == "conv"
    details = {(e["action"], e["subject_id"]): e["details"] for e in events}
    assert details["release.charged", charged]["epsilon_micro"] == 500_000
    assert details["release.failed", lost]["error_code"] == "worker_lost"
    assert details["release.failed", refused]["error_code"] == "labels_deleted"
    assert _events(labels, action="release.failed", privacy_domain=events[0]["privacy_domain_id"]) == [
        e for e in events if e["action"] == "release.failed"
    ]
    # No raw label in any event, in any rendering of it.
    text = labels.get("/v1/audit-events", params={"limit": 200}, headers=ADMIN).text
    for value in LABELS:
        for shown in (repr(value), f"{value:.6f}", f"{value:.4f}", json.dumps(value)):
            assert shown not in text, f"label {value} in the audit log"
    assert RELEASE_KEY not in text and ADMIN_KEY not in text


def test_the_outbox_logs_the_signing_key_it_starts_with_once_per_kid(tmp_path: Path) -> None:
    from labeldp.service.database import make_session_factory
    from labeldp.service.migrations import open_database
    from labels_party.outbox import run_outbox

    first, second = _settings(tmp_path, "audit-one"), _settings(tmp_path, "audit-two")
    run_outbox(first, once=True)
    run_outbox(first, once=True)  # a restart with the same key: nothing new
    run_outbox(second, once=True)  # a rotation
    engine = open_database(first.labels_database_url, "labels_party.migrations", first)
    try:
        page = audit.list_events(_Ctx(make_session_factory(engine)), 50, None, None,  # type: ignore[arg-type]
                                 action="signing_key.in_use").model_dump()
    finally:
        engine.dispose()
    kids = [key_id(public_key_of(s.signing_key)) for s in (first, second)]
    assert [(e["subject_id"], e["key_id"], e["details"]) for e in page["items"]] == [
        (kids[0], None, {"kid": kids[0], "previous_kid": None}),
        (kids[1], None, {"kid": kids[1], "previous_kid": kids[0]}),
    ]
    assert all("ed25519-sk" not in json.dumps(e) for e in page["items"])


class _Ctx:
    def __init__(self, sessions: Any) -> None:
        self.sessions = sessions
