"""The inbox spools shards to disk and verifies before parsing, with its own size limits (a shard, a
manifest) apart from the API's; no database value outgrows the manifest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from tests.local_settings import TRANSPORT_AUTH, TRANSPORT_KEY
from tests.unit.test_features_app import (
    API_KEY,
    PUBLIC_KEY,
    UNTRUSTED,
    post_release,
    release_body,
    release_count,
    upload,
)

from features_party.app import create_app
from labeldp.service.settings import Settings


@pytest.fixture
def client(tmp_path: Path):  # type: ignore[no-untyped-def]
    settings = Settings(
        features_database_url=f"sqlite:///{tmp_path / 'f.db'}", features_data_dir=tmp_path / "data",
        features_api_key=API_KEY, inbox_transport_key=TRANSPORT_KEY, signing_public_keys=PUBLIC_KEY, device="cpu",
        training_threads=1,
        max_body_bytes=2_000, inbox_max_body_bytes=200_000, inbox_max_manifest_bytes=20_000,
        feature_table_max_body_bytes=2_000,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def test_a_signed_release_larger_than_the_api_limit_is_received(client: TestClient) -> None:
    ids = [f"id{i:05d}" for i in range(3_000)]
    body = release_body(ids, [1.0] * 3_000)
    assert len(body.manifest) < 20_000 and 2_000 < len(body.shards[0]) < 200_000
    assert post_release(client, body).status_code == 201
    assert upload(client, "t", "id,x\n" + "a,1\n" * 1_000).status_code == 413  # the API keeps its own limit


def test_unsigned_bytes_are_refused_without_being_kept(client: TestClient, tmp_path: Path) -> None:
    body = b'{"release_id": "forged", "payload": "' + b"x" * 15_000 + b'"}'
    assert post_release(client, body, secret=UNTRUSTED).status_code == 401
    assert post_release(client, b"y" * 25_000).status_code == 413  # over the manifest limit
    unknown = client.put("/v1/releases/forged/shards/0", content=b"z" * 150_000, headers=TRANSPORT_AUTH)
    assert unknown.json()["code"] == "manifest_unknown"
    assert client.put("/v1/releases/forged/shards/0", content=b"z" * 250_000, headers=TRANSPORT_AUTH).status_code == 413
    spool = tmp_path / "data" / "spool"
    assert not spool.exists() or not any(spool.iterdir())
    assert release_count(client) == 0


def test_no_database_value_outgrows_the_manifest(client: TestClient, tmp_path: Path) -> None:
    """A message of ~1 MB lands as shards in the store; the database keeps the manifest and shard keys."""
    n = 60_000
    rng = np.random.default_rng(0)
    ids = sorted({rng.bytes(8).hex() for _ in range(n)})
    body = release_body(ids, rng.normal(size=len(ids)), shard_rows=8_000)
    assert sum(map(len, body.shards)) > 1_000_000 and len(body.shards) > 2
    assert post_release(client, body).status_code == 201
    engine = client.app.state.ctx.engine
    with engine.connect() as db:
        for table in ("releases", "release_shards"):
            for row in db.execute(text(f"SELECT * FROM {table}")):
                assert max(len(str(v)) if not isinstance(v, bytes) else len(v) for v in row) <= 20_000
    assert len(list((tmp_path / "data" / "releases" / "rel-1").iterdir())) == len(body.shards)
    got = client.get("/v1/releases/rel-1/labels", headers={"Authorization": f"Bearer {API_KEY}"}).json()
    assert got["ids"] == ids
