"""Secrets that cannot be left at their defaults, several keys for rotation, and headers that never crash."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from labeldp.service.settings import InsecureSettings, Settings, require_secrets
from labeldp.signing import sign, verify
from labels_party.app import create_app


def _settings(tmp_path: Path, **kw: object) -> Settings:
    return Settings(
        labels_database_url=f"sqlite:///{tmp_path / 'l.db'}", labels_data_dir=tmp_path / "data", **kw  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("key", ["", " , ", "dev-labels-key", "change-me-advertiser-key", "short-key"])
def test_a_service_refuses_to_start_with_an_empty_dev_or_short_key(tmp_path: Path, key: str) -> None:
    with pytest.raises(InsecureSettings) as exc:
        create_app(_settings(tmp_path, labels_api_key=key))
    assert "LABELDP_LABELS_API_KEY" in str(exc.value)


def test_dev_keys_need_the_explicit_local_setting_and_empty_keys_never_pass(tmp_path: Path) -> None:
    require_secrets(_settings(tmp_path, allow_dev_secrets=True), "labels_api_key", "exchange_secret")
    with pytest.raises(InsecureSettings):
        require_secrets(_settings(tmp_path, allow_dev_secrets=True, labels_api_key=""), "labels_api_key")


def test_any_of_several_keys_is_accepted_and_odd_headers_are_401(tmp_path: Path) -> None:
    old, new = "old-key-0123456789abcdef", "new-key-0123456789abcdef"
    app = create_app(_settings(tmp_path, labels_api_key=f"{old}, {new}"))
    with TestClient(app) as client:
        for key in (old, new):
            assert client.get("/v1/label-sets/ls_x", headers={"Authorization": f"Bearer {key}"}).status_code == 404
        for header in ("Bearer wrong", "Bearer ", "Basic " + old, "Bearer \u00e9\u00e8-key", "Bearer " + old + ","):
            r = client.get("/v1/label-sets/ls_x", headers={"Authorization": header.encode("latin-1")})
            assert r.status_code == 401 and r.json()["code"] == "unauthorized", header


def test_signatures_verify_under_any_listed_secret_and_odd_headers_are_false() -> None:
    body = b'{"release_id": "r"}'
    assert verify(body, "first-secret-0001,second-secret-0002", sign(body, "second-secret-0002"))
    assert not verify(body, "first-secret-0001", sign(body, "second-secret-0002"))
    assert not verify(body, "first-secret-0001", "sha256=\u00e9\u00e8")
    assert not verify(body, "first-secret-0001", None)
