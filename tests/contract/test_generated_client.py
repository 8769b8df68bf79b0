"""A client generated from each contract works (issue 10, item 3: "worth generating a client from").

openapi-python-client generates a typed Python client from each service's /openapi.json;
the generator must warn about nothing (every operation generated), and the generated code
then drives the in-process apps: typed request bodies, typed answers, and the error
envelope parsed as ``ErrorBody`` for a documented error status. ``raise_on_unexpected_status``
makes any answer outside the contract an exception.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from fastapi.testclient import TestClient
from tests.contract.conftest import FEATURES_AUTH, LABELS_AUTH, features_app, labels_app
from tests.release_jobs import wait_release

# The generator knows JSON, multipart and octet-stream bodies; CSV, Parquet and Arrow IPC
# uploads are raw bytes to it, which is what they are.
CONFIG = {
    "content_type_overrides": {
        "text/csv": "application/octet-stream",
        "application/vnd.apache.parquet": "application/octet-stream",
        "application/vnd.apache.arrow.stream": "application/octet-stream",
    },
    "post_hooks": [],
}


def _generate(spec: dict, name: str, where: Path) -> ModuleType:
    (where / f"{name}.json").write_text(json.dumps(spec))
    (where / "config.json").write_text(json.dumps(CONFIG))
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "openapi-python-client"),
            "generate",
            "--path", str(where / f"{name}.json"),
            "--meta", "none",
            "--output-path", str(where / name),
            "--config", str(where / "config.json"),
        ],
        capture_output=True, text=True, timeout=300, cwd=where,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stdout + result.stderr, result.stdout + result.stderr
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))
    return importlib.import_module(name)


SPECS: dict[str, dict] = {}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModuleType]:
    where = tmp_path_factory.mktemp("generated")
    SPECS["labels_client"] = labels_app(where / "l").openapi()
    SPECS["features_client"] = features_app(where / "f").openapi()
    return {name: _generate(spec, name, where) for name, spec in SPECS.items()}


def _client(package: ModuleType, http: TestClient, auth: dict[str, str]):
    http.headers.update(auth)
    client = package.AuthenticatedClient(base_url=str(http.base_url), token="unused", raise_on_unexpected_status=True)
    client.set_httpx_client(http)  # the generated code speaks to the in-process app
    return client


def test_every_operation_of_both_contracts_is_generated(generated: dict[str, ModuleType]) -> None:
    for name, package in generated.items():
        spec_ids = {op["operationId"] for item in SPECS[name]["paths"].values() for op in item.values()}
        api = Path(package.__file__ or "").parent / "api"
        modules = {p.stem for p in api.glob("*/*.py") if p.stem != "__init__"}
        assert modules == spec_ids, (name, spec_ids ^ modules)


def test_the_generated_labels_client_drives_the_labels_party(
    generated: dict[str, ModuleType], labels: TestClient
) -> None:
    pkg = generated["labels_client"]
    models = importlib.import_module("labels_client.models")
    create_label_set = importlib.import_module("labels_client.api.label_sets.create_label_set")
    upload_labels = importlib.import_module("labels_client.api.label_sets.upload_labels")
    get_label_set = importlib.import_module("labels_client.api.label_sets.get_label_set")
    list_label_sets = importlib.import_module("labels_client.api.label_sets.list_label_sets")
    create_release = importlib.import_module("labels_client.api.releases.create_release")
    get_release = importlib.import_module("labels_client.api.releases.get_release")
    client = _client(pkg, labels, LABELS_AUTH)

    ids = [f"u{i}" for i in range(10)]
    created = create_label_set.sync(
        client=client,
        body=models.LabelSetCreate.from_dict({"name": "spend", "domain": {"low": 0, "high": 10}, "ids": ids}),
    )
    assert isinstance(created, models.LabelSet) and created.id.startswith("ls_")
    uploaded = upload_labels.sync(
        created.id, client=client, body=models.UploadLabelsJsonBody.from_dict({"ids": ids, "labels": [1.0] * 10})
    )
    assert isinstance(uploaded, models.LabelsUploaded) and uploaded.accepted_rows == 10
    release = create_release.sync(
        created.id, client=client, body=models.ReleaseCreate.from_dict({"mechanism": "laplace", "epsilon": 1})
    )
    assert isinstance(release, models.Release) and release.status.value == "queued"  # a job, accepted
    wait_release(labels, release.id, "pending", headers=LABELS_AUTH)  # the in-process worker charged it
    again = get_release.sync(release.id, client=client)
    assert isinstance(again, models.Release) and again.status.value == "pending" and len(again.message_sha256) == 64
    page = list_label_sets.sync(client=client)
    assert isinstance(page, models.LabelSetPage) and [i.id for i in page.items] == [created.id]
    missing = get_label_set.sync("ls_nope", client=client)
    assert isinstance(missing, models.ErrorBody) and missing.code == "label_set_not_found"
    assert get_label_set.sync(created.id, client=client).budget.spent_epsilon == 1.0


def test_the_generated_features_client_drives_the_features_party(
    generated: dict[str, ModuleType], features: TestClient
) -> None:
    pkg = generated["features_client"]
    types = importlib.import_module("features_client.types")
    models = importlib.import_module("features_client.models")
    upload = importlib.import_module("features_client.api.feature_tables.upload_feature_table")
    get_table = importlib.import_module("features_client.api.feature_tables.get_feature_table")
    start_training = importlib.import_module("features_client.api.trainings.start_training")
    client = _client(pkg, features, FEATURES_AUTH)

    csv = b"id,age,city\nu1,31,paris\nu2,45,lyon\n"
    table = upload.sync(client=client, name="clicks", body=types.File(payload=csv, mime_type="text/csv"))
    assert isinstance(table, models.FeatureTable) and table.id.startswith("ft_") and table.n_rows == 2
    assert get_table.sync("clicks", client=client).columns[0].kind.value == "numeric"
    refused = start_training.sync(client=client, body=models.TrainingRequest.from_dict({"release_id": "rel_nope"}))
    assert isinstance(refused, models.ErrorBody) and refused.code == "release_not_found"
    # The binary operations (a model file out, Parquet in and out) are generated and answer their envelope.
    download = importlib.import_module("features_client.api.models.download_model")
    predict_batch = importlib.import_module("features_client.api.models.predict_batch")
    missing = download.sync("mdl_nope", client=client)
    assert isinstance(missing, models.ErrorBody) and missing.code == "model_not_found"
    refused = predict_batch.sync(
        "mdl_nope", client=client, body=types.File(payload=b"PAR1", mime_type="application/vnd.apache.parquet")
    )
    assert isinstance(refused, models.ErrorBody) and refused.code == "model_not_found"
