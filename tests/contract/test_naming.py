"""The naming scheme both services share (README "REST API", naming): kind-prefixed ``id``s,
``<kind>_id`` references, ``message_sha256``, timestamps with a UTC offset, one health body
and ``info.version`` = the package version."""

from __future__ import annotations

from datetime import datetime

from fastapi.testclient import TestClient
from tests.contract.conftest import FEATURES_AUTH, LABELS_AUTH, Parties

from labeldp import __version__


def _aware(value: str) -> bool:
    return datetime.fromisoformat(value).utcoffset() is not None


def test_health_and_version_are_the_same_shape_on_both(labels: TestClient, features: TestClient) -> None:
    for client, service in ((labels, "labels"), (features, "features")):
        assert client.get("/healthz").json() == {"status": "ok", "service": service, "version": __version__}
        assert client.get("/openapi.json").json()["info"]["version"] == __version__


def test_every_resource_carries_its_prefixed_id_references_and_aware_timestamps(parties: Parties) -> None:
    flow, labels = parties.flow, parties.labels
    assert flow.privacy_domain["id"].startswith("pd_")
    assert flow.label_set["id"].startswith("ls_")
    assert flow.label_set["privacy_domain_id"] == flow.privacy_domain["id"]
    assert flow.release["id"].startswith("rel_") and flow.release["label_set_id"] == flow.label_set["id"]
    assert flow.feature_table["id"].startswith("ft_") and flow.feature_table["name"] == "clicks"
    # The same release id on both sides, the same digest under the same name.
    assert flow.received["id"] == flow.release["id"]
    assert flow.received["message_sha256"] == flow.release["message_sha256"]
    assert flow.received["mechanism"] == flow.release["mechanism"] == "laplace"
    assert flow.training["id"].startswith("trn_") and flow.training["release_id"] == flow.release["id"]
    assert flow.model["id"].startswith("mdl_") and flow.model["id"] == flow.training["model_id"]
    assert flow.model["training_id"] == flow.training["id"] and flow.model["release_id"] == flow.release["id"]
    # SQLite hands timestamps back naive: every one the APIs show has its offset.
    stamps = [
        flow.privacy_domain["created_at"],
        flow.label_set["created_at"],
        flow.release["created_at"],
        flow.feature_table["created_at"],
        flow.received["created_at"],
        flow.received["received_at"],
        flow.training["created_at"],
        flow.training["started_at"],
        flow.training["finished_at"],
        flow.model["created_at"],
    ]
    assert all(_aware(s) for s in stamps), stamps
    for path in ("/v1/label-sets", "/v1/releases"):
        (item,) = labels.get(path, headers=LABELS_AUTH).json()["items"]
        assert _aware(item["created_at"]), path


def test_predict_row_errors_are_numbered_from_1(parties: Parties) -> None:
    flow, features = parties.flow, parties.features
    r = features.post(
        f"/v1/models/{flow.model['id']}/predict",
        json={"rows": [{"age": 30, "city": "paris"}, {"age": "old", "city": "lyon"}]},
        headers=FEATURES_AUTH,
    )
    assert r.status_code == 422 and r.json()["details"] == [{"row": 2, "column": "age"}]
