"""The outbox delivers a message shard by shard: a cut-off delivery resumes with only the shards the
inbox lacks, and a duplicate is answered on its manifest, before any shard (issue 22, item 4).

Both apps in-process; the outbox talks to the features app through its ASGI interface, as in
tests/contract/flow.py. The one fault injected is a connection that dies on a given request,
which a test cannot cause otherwise at an exact point of the transfer.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from tests.contract.conftest import FEATURES_AUTH, LABELS_AUTH, contract_settings
from tests.release_jobs import wait_release
from tests.s3_server import ACCESS_KEY, SECRET_KEY, S3Server

from features_party.app import create_app as features_app
from labeldp.message_shards import parse_manifest, read_columns
from labeldp.schema import LabelRelease, ReleaseMetadata, encode_payload, payload_digest
from labeldp.service.settings import Settings
from labels_party import outbox
from labels_party.app import create_app as labels_app
from labels_party.context import message_key
from labels_party.store import ReleaseRow

N, SHARD_ROWS = 100, 10
IDS = [f"u{i:03d}" for i in range(N)]


@pytest.fixture
def parties(tmp_path: Path) -> Iterator[tuple[TestClient, TestClient]]:
    labels_settings = contract_settings(tmp_path / "labels").model_copy(update={"message_shard_rows": SHARD_ROWS})
    with TestClient(labels_app(labels_settings)) as labels, \
            TestClient(features_app(contract_settings(tmp_path / "features"))) as features:
        yield labels, features


def _release(labels: TestClient) -> str:
    ls = labels.post(
        "/v1/label-sets", json={"name": "s", "domain": {"low": 0, "high": 10}, "ids": IDS}, headers=LABELS_AUTH
    ).json()
    up = labels.post(f"/v1/label-sets/{ls['id']}/labels", json={"ids": IDS, "labels": [3.0] * N}, headers=LABELS_AUTH)
    assert up.status_code == 200, up.text
    rel = labels.post(f"/v1/label-sets/{ls['id']}/releases", json={"mechanism": "laplace", "epsilon": 1},
                      headers=LABELS_AUTH)
    assert rel.status_code == 202, rel.text
    return str(wait_release(labels, rel.json()["id"], headers=LABELS_AUTH)["id"])


class Wire:
    """Records every request the outbox makes; the connection dies on request number ``cut`` (1-based)."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.cut: int | None = None

    def __call__(self, request: httpx.Request) -> None:
        path = request.url.path
        if path == "/v1/releases":
            self.seen.append("manifest")
        elif "/shards/" in path:
            self.seen.append("shards/" + path.rsplit("/", 1)[1])
        else:
            self.seen.append(path.rsplit("/", 1)[1])
        if self.cut is not None and len(self.seen) == self.cut:
            raise httpx.ConnectError("the connection died", request=request)


def _deliver(labels: TestClient, features: TestClient, release_id: str) -> str:
    ctx = labels.app.state.ctx  # type: ignore[attr-defined]
    settings = ctx.settings.model_copy(update={"features_url": str(features.base_url)})
    return outbox.deliver_one(ctx.sessions, features, settings, release_id, random.Random(0))


def test_a_delivery_cut_off_at_90_percent_resends_only_the_rest(parties: tuple[TestClient, TestClient]) -> None:
    labels, features = parties
    release_id = _release(labels)
    wire = Wire()
    features.event_hooks["request"] = [wire]
    shards = [f"shards/{i}" for i in range(N // SHARD_ROWS)]

    wire.cut = 1 + 10  # the manifest, 9 shards through, the 10th dies on the wire
    assert _deliver(labels, features, release_id) == "pending"
    assert wire.seen == ["manifest", *shards]
    assert labels.get(f"/v1/releases/{release_id}", headers=LABELS_AUTH).json()["last_error"] == "connection_error"
    assert features.get(f"/v1/releases/{release_id}", headers=FEATURES_AUTH).status_code == 404  # not complete

    wire.seen, wire.cut = [], None
    assert _deliver(labels, features, release_id) == "delivered"
    assert wire.seen == ["manifest", shards[-1], "complete"]  # one shard resent: the one cut off
    got = features.get(f"/v1/releases/{release_id}/labels", headers=FEATURES_AUTH).json()
    assert got["ids"] == IDS and len(got["labels"]) == N

    # Sent again (as after a lost "delivered" write): answered on the manifest, no shard, at once.
    with labels.app.state.ctx.sessions.begin() as s:  # type: ignore[attr-defined]
        s.execute(update(ReleaseRow).where(ReleaseRow.id == release_id).values(status="pending"))
    wire.seen = []
    started = time.perf_counter()
    assert _deliver(labels, features, release_id) == "delivered"
    assert wire.seen == ["manifest"] and time.perf_counter() - started < 1.0


def test_a_release_over_the_published_limits_is_refused_before_its_charge(tmp_path: Path) -> None:
    limits = {"message_shard_rows": 1, "inbox_max_manifest_bytes": 4_000}
    settings = contract_settings(tmp_path).model_copy(update=limits)
    with TestClient(labels_app(settings)) as labels:
        ls = labels.post(
            "/v1/label-sets", json={"name": "s", "domain": {"low": 0, "high": 10}, "ids": IDS}, headers=LABELS_AUTH
        ).json()
        labels.post(f"/v1/label-sets/{ls['id']}/labels", json={"ids": IDS, "labels": [3.0] * N}, headers=LABELS_AUTH)
        r = labels.post(f"/v1/label-sets/{ls['id']}/releases", json={"mechanism": "laplace", "epsilon": 1},
                        headers=LABELS_AUTH)
        assert r.status_code == 202, r.text  # a job: the worker writes the message, and refuses it
        failed = wait_release(labels, r.json()["id"], "failed", headers=LABELS_AUTH)
        assert failed["error"]["code"] == "message_too_large"  # 100 shards: a 20 kB manifest
        after = labels.get(f"/v1/label-sets/{ls['id']}", headers=LABELS_AUTH).json()
        assert after["budget"]["spent_micro"] == 0
        store = labels.app.state.ctx.store  # type: ignore[attr-defined]
        assert store.list("messages") == []


def test_a_message_charged_before_shards_is_sent_as_shards(parties: tuple[TestClient, TestClient]) -> None:
    """A release charged before this change, still pending: its single body is rewritten as shards once
    (same metadata and rows) and delivered; its row then names the manifest."""
    labels, features = parties
    release_id = _release(labels)
    ctx = labels.app.state.ctx  # type: ignore[attr-defined]
    manifest_key = message_key(f"{release_id}/manifest.json")
    manifest = parse_manifest(ctx.store.get_bytes(manifest_key))
    ids, values = read_columns(ctx.store, manifest_key, manifest)
    fields = {name: getattr(manifest, name) for name in ReleaseMetadata.model_fields if name != "schema_version"}
    legacy = LabelRelease(**fields, payload_digest=payload_digest(ids, values),
                          payload=encode_payload(ids.to_pylist(), values))
    for key in ctx.store.list(f"messages/{release_id}"):
        ctx.store.delete(key)
    ctx.store.put_bytes(message_key(f"{release_id}.json"), legacy.model_dump_json().encode())
    with ctx.sessions.begin() as s:
        s.execute(update(ReleaseRow).where(ReleaseRow.id == release_id).values(message_file=f"{release_id}.json"))

    assert _deliver(labels, features, release_id) == "delivered"
    got = features.get(f"/v1/releases/{release_id}/labels", headers=FEATURES_AUTH).json()
    assert got["ids"] == IDS and got["labels"] == values.tolist()
    with ctx.sessions() as s:
        assert s.get(ReleaseRow, release_id).message_file == f"{release_id}/manifest.json"


def test_the_inbox_keeps_shards_on_s3(tmp_path: Path, s3_server: S3Server) -> None:
    """Both parties on one S3-compatible server (each its own prefix): the message goes shard by shard
    and the inbox's shards are objects there, none in its local folder."""
    def on_s3(settings: Settings, url: str) -> Settings:
        return settings.model_copy(update={
            "storage_url": url, "storage_s3_endpoint": s3_server.endpoint, "storage_s3_region": "us-east-1",
            "storage_s3_access_key": ACCESS_KEY, "storage_s3_secret_key": SECRET_KEY,
        })

    labels_url, features_url = s3_server.url(), s3_server.url()
    labels_settings = contract_settings(tmp_path / "labels").model_copy(update={"message_shard_rows": 40})
    with TestClient(labels_app(on_s3(labels_settings, labels_url))) as labels, \
            TestClient(features_app(on_s3(contract_settings(tmp_path / "features"), features_url))) as features:
        release_id = _release(labels)
        assert _deliver(labels, features, release_id) == "delivered"
        got = features.get(f"/v1/releases/{release_id}/labels", headers=FEATURES_AUTH).json()
        assert got["ids"] == IDS
    shards = s3_server.store(features_url).list(f"releases/{release_id}")
    assert len(shards) == 3  # 100 rows in shards of 40
    assert not (tmp_path / "features" / "features-data" / "releases").exists()
