"""Two labels-API replicas as on two hosts: one database, one S3-compatible store, separate local folders.

Before the object store each replica kept ids, labels and messages in its own folder, and a
label set created through one replica answered 500 (FileNotFoundError) on the other. Here a
label set created and labeled through replica A is released through replica B, and the
outbox (on B's host) delivers the message it reads from the shared store.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest
from tests.postgres_server import PostgresServer
from tests.s3_server import S3Server

from labeldp.synthetic import make_conversions
from labeldp_tools.local_stack import LocalStack

from .conftest import create_label_set, upload_csv, wait_for_status

pytestmark = pytest.mark.integration

SHARED = (
    "LABELDP_LABELS_DATABASE_URL", "LABELDP_LABELS_API_KEY", "LABELDP_FEATURES_API_KEY", "LABELDP_SIGNING_KEY",
    "LABELDP_SIGNING_PUBLIC_KEYS", "LABELDP_INBOX_TRANSPORT_KEY",
    "LABELDP_FEATURES_URL",
)


def replicas(tmp_path: Path, database_url: str, storage_env: dict[str, str]) -> tuple[LocalStack, LocalStack]:
    """Host A (labels API, features party) and host B (labels API, outbox): shared database, keys and store."""
    extra = {"LABELDP_LABELS_DATABASE_URL": database_url, **storage_env}
    a = LocalStack(tmp_path / "host-a", extra_env=extra)
    b = LocalStack(tmp_path / "host-b", extra_env=extra)
    for name in SHARED:
        b.env[name] = a.env[name]
    b.labels_key, b.features_key = a.labels_key, a.features_key
    b.signing_key, b.public_key = a.signing_key, a.public_key
    b.transport_key = a.transport_key
    return a, b


def local_objects(stack: LocalStack) -> list[Path]:
    """Ids, labels or messages a replica left in its own folder (none: they belong in the store)."""
    data = stack.workdir / "labels-data"
    return [p for sub in ("label_sets", "messages") for p in (data / sub).rglob("*") if p.is_file()]


def test_a_label_set_made_on_one_replica_is_released_on_another(
    tmp_path: Path, postgres_server: PostgresServer, s3_server: S3Server
) -> None:
    # PostgreSQL: what replicas on two hosts share (a SQLite file is one host's).
    database = postgres_server.create_database()
    url = s3_server.url()
    a, b = replicas(tmp_path, postgres_server.url(database), s3_server.env(url))
    data = make_conversions(300, seed=5)
    try:
        # Both hosts start at once (each start is seconds of imports and migrations); B's
        # migrations wait on A's in the database, as a second host's would.
        on_b = threading.Thread(target=b.start, args=("labels", "outbox"))
        on_b.start()
        try:
            a.start("labels", "features")
        finally:
            on_b.join()
        assert {"labels", "outbox"} <= set(b.processes) and b.processes["outbox"].poll() is None
        with a.labels_client() as on_a, b.labels_client() as on_b:
            ls = create_label_set(on_a, data.ids, budget=2.0, high=data.clip)
            r = upload_csv(on_a, ls["id"], list(zip(data.ids, map(float, data.labels))))
            assert r.status_code == 200, r.text
            seen = on_b.get(f"/v1/label-sets/{ls['id']}")
            assert seen.status_code == 200, seen.text
            assert seen.json()["counts"] == {"ids": 300, "labeled": 300, "missing": 0}
            r = on_b.post(f"/v1/label-sets/{ls['id']}/releases", json={"mechanism": "rr_on_bins", "epsilon": 1.0})
            assert r.status_code == 202, r.text
            release_id = r.json()["id"]
            delivered = wait_for_status(on_a, release_id, "delivered", timeout=60)
        with a.features_client() as f:
            received = f.get(f"/v1/releases/{release_id}").json()
        assert received["row_count"] == 300
        stored = s3_server.store(url).get_bytes(f"messages/{release_id}/manifest.json")
        assert hashlib.sha256(stored).hexdigest() == received["message_sha256"] == delivered["message_sha256"]
        assert local_objects(a) == [] and local_objects(b) == []
    finally:
        b.stop()
        a.stop()
        postgres_server.drop_database(database)
