"""Settings of both parties in one temporary folder, for tests that build the apps in process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from labeldp.service.settings import Settings
from labeldp.signing import public_key_of


def fixed_signing_key(name: str) -> str:
    """A private signing key derived from ``name``: the same in every import of a test module (pytest may
    import a conftest twice, and a key generated at import would then differ between the two)."""
    import base64
    import hashlib

    return "ed25519-sk:" + base64.urlsafe_b64encode(hashlib.sha256(name.encode()).digest()).decode().rstrip("=")


TRANSPORT_KEY = "test-inbox-transport-Qm7rT2vX9kP4wZ8n"
"""The outbox's bearer key at the inbox in tests (LABELDP_INBOX_TRANSPORT_KEY): both parties hold it."""
TRANSPORT_AUTH = {"authorization": f"Bearer {TRANSPORT_KEY}"}


def both_parties(tmp_path: Path, labels_key: str, features_key: str, signing_key: str, **extra: Any) -> Settings:
    """SQLite catalogues and data folders under ``tmp_path``, the given keys, CPU training.

    ``signing_key`` is the labels party's Ed25519 private key; the features party trusts its
    public half.

    A labels key without a scope prefix gets both scopes (``admin+release:``), as the flows
    that create a privacy domain and then release need; tests of scopes pass their own entries.
    """
    if ":" not in labels_key:
        labels_key = f"admin+release:{labels_key}"
    return Settings(
        labels_database_url=f"sqlite:///{tmp_path / 'labels.db'}",
        labels_data_dir=tmp_path / "labels-data",
        labels_api_key=labels_key,
        features_database_url=f"sqlite:///{tmp_path / 'features.db'}",
        features_data_dir=tmp_path / "features-data",
        features_api_key=features_key,
        signing_key=signing_key,
        signing_public_keys=public_key_of(signing_key),
        device="cpu",
        **{"inbox_transport_key": TRANSPORT_KEY, **extra},
    )
