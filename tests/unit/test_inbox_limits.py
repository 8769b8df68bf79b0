"""The inbox spools to disk and verifies before parsing, with its own size limit, apart from the API's."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
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
        features_api_key=API_KEY, signing_public_keys=PUBLIC_KEY, device="cpu", training_threads=1,
        max_body_bytes=2_000, inbox_max_body_bytes=200_000,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def test_a_signed_release_larger_than_the_api_limit_is_received(client: TestClient) -> None:
    ids = [f"id{i:05d}" for i in range(300)]
    body = release_body(ids, [1.0] * 300)
    assert 2_000 < len(body) < 200_000
    assert post_release(client, body).status_code == 201
    assert upload(client, "t", "id,x\n" + "a,1\n" * 1_000).status_code == 413  # the API keeps its own limit


def test_unsigned_bytes_are_refused_without_being_kept(client: TestClient, tmp_path: Path) -> None:
    body = b'{"release_id": "forged", "payload": "' + b"x" * 150_000 + b'"}'
    assert post_release(client, body, secret=UNTRUSTED).status_code == 401
    assert post_release(client, b"y" * 250_000).status_code == 413
    spool = tmp_path / "data" / "spool"
    assert not spool.exists() or not any(spool.iterdir())
    assert release_count(client) == 0
