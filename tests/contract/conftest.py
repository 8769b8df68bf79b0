"""Both services' apps in-process, each on its own fresh SQLite database and data folder.

The contract tests read each app's OpenAPI document and call its routes through the
ASGI interface: the same app object uvicorn serves, without a socket.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from tests.local_settings import both_parties, fixed_signing_key

from labeldp.service.settings import Settings

if TYPE_CHECKING:
    from tests.contract.flow import Flow

LABELS_KEY = "contract-labels-key-0123456789"
FEATURES_KEY = "contract-features-key-0123456789"
SIGNING_KEY = fixed_signing_key("contract tests")  # the advertiser's: the outbox signs, the inbox verifies
LABELS_AUTH = {"Authorization": f"Bearer {LABELS_KEY}"}
FEATURES_AUTH = {"Authorization": f"Bearer {FEATURES_KEY}"}


def contract_settings(tmp_path: Path) -> Settings:
    return both_parties(tmp_path, LABELS_KEY, FEATURES_KEY, SIGNING_KEY, training_threads=1)


def labels_app(tmp_path: Path) -> FastAPI:
    from labels_party.app import create_app

    return create_app(contract_settings(tmp_path))


def features_app(tmp_path: Path) -> FastAPI:
    from features_party.app import create_app

    return create_app(contract_settings(tmp_path))


@pytest.fixture
def labels(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(labels_app(tmp_path)) as client:
        yield client


@pytest.fixture
def features(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(features_app(tmp_path)) as client:
        yield client


@dataclass
class Parties:
    labels: TestClient
    features: TestClient
    flow: Flow


@pytest.fixture(scope="session")
def parties(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Parties]:
    """Both apps after one whole flow (tests/contract/flow.py), shared: the flow trains a model."""
    from tests.contract.flow import run_flow

    tmp = tmp_path_factory.mktemp("parties")
    with TestClient(labels_app(tmp / "labels")) as labels, TestClient(features_app(tmp / "features")) as features:
        yield Parties(labels, features, run_flow(labels, features))
