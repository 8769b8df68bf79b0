"""Settings of both parties in one temporary folder, for tests that build the apps in process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from labeldp.service.settings import Settings


def both_parties(tmp_path: Path, labels_key: str, features_key: str, exchange_secret: str, **extra: Any) -> Settings:
    """SQLite catalogues and data folders under ``tmp_path``, the given secrets, CPU training.

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
        exchange_secret=exchange_secret,
        device="cpu",
        **extra,
    )
