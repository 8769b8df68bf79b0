"""A client generated from each contract works (issue 10, item 3: "worth generating a client from").

openapi-python-client generates a typed Python client from each service's /openapi.json;
the generator must warn about nothing (every operation generated), and the generated code
then drives the in-process apps: typed request bodies, typed answers, and the error
envelope parsed as ``ErrorBody`` for a documented error status. ``raise_on_unexpected_status``
makes any answer outside the contract an exception.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from fastapi.testclient import TestClient
from tests.contract.conftest import FEATURES_AUTH, LABELS_AUTH, features_app, labels_app
from tests.release_jobs import wait_release


def _generate(spec: dict, name: str, where: Path) -> ModuleType:
    """openapi-python-client with its DEFAULT config (no --config: no content-type overrides,
    its ruff post-hooks run), as an integrator would run it on /openapi.json."""
    (where / f"{name}.json").write_text(json.dumps(spec))
    bin_dir = Path(sys.executable).parent
    result = subprocess.run(
        [
            str(bin_dir / "openapi-python-client"),
            "generate",
            "--path", str(where / f"{name}.json"),
            "--meta", "none",
            "--output-path", str(where / name),
        ],
        capture_output=True, text=True, timeout=300, cwd=where,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"},
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "warning" not in out.lower() and "error" not in out.lower(), out
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
    assert get_table.sync(table.id, client=client).columns[0].kind.value == "numeric"  # by its id
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


def _table_bytes(columns: dict[str, list], kind: str) -> bytes:
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    table, sink = pa.table(columns), io.BytesIO()
    if kind == "parquet":
        pq.write_table(table, sink)
    else:
        with ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    return sink.getvalue()


def test_the_whole_flow_runs_through_both_generated_clients_in_every_upload_format(
    generated: dict[str, ModuleType], labels: TestClient, features: TestClient
) -> None:
    """Issue 26 item 1: ids as Parquet, labels as Arrow, CSV and JSON, a feature table as CSV, a
    release delivered, a training, a Parquet prediction: every call a generated function."""
    import pyarrow.parquet as pq
    from tests.contract.flow import IDS, LABELS, TABLE_CSV

    from labels_party import outbox

    def op(package: str, path: str) -> ModuleType:
        return importlib.import_module(f"{package}.api.{path}")

    lm = importlib.import_module("labels_client.models")
    fm = importlib.import_module("features_client.models")
    ltypes = importlib.import_module("labels_client.types")
    ftypes = importlib.import_module("features_client.types")
    lc = _client(generated["labels_client"], labels, LABELS_AUTH)
    fc = _client(generated["features_client"], features, FEATURES_AUTH)
    fmt = lm.UploadFormat

    domain = op("labels_client", "privacy_domains.create_privacy_domain").sync(
        client=lc, body=lm.PrivacyDomainCreate.from_dict(
            {"name": "conversions", "id_source": "crm:customer_id", "epsilon": 10, "delta": 1e-6})
    )
    assert isinstance(domain, lm.PrivacyDomain), domain
    read = op("labels_client", "privacy_domains.get_privacy_domain").sync(domain.id, client=lc)  # by its id
    assert isinstance(read, lm.PrivacyDomain) and read.name == "conversions", read
    created = op("labels_client", "label_sets.create_label_set").sync(
        client=lc, body=lm.LabelSetCreate.from_dict(
            {"name": "spend", "domain": {"low": 0, "high": 10}, "privacy_domain": domain.id})
    )
    assert isinstance(created, lm.LabelSet), created
    ids = op("labels_client", "label_sets.upload_ids").sync(
        created.id, client=lc, format_=fmt.PARQUET,
        body=ltypes.File(payload=io.BytesIO(_table_bytes({"id": IDS}, "parquet"))),
    )
    assert isinstance(ids, lm.LabelSet) and ids.ids_ready and ids.counts.ids == len(IDS), ids
    upload = op("labels_client", "label_sets.upload_labels")
    csv = "id,label\n" + "".join(f"{u},{y}\n" for u, y in zip(IDS, LABELS, strict=True))
    bodies = {
        "csv": (ltypes.File(payload=io.BytesIO(csv.encode())), fmt.CSV),
        "json": (lm.UploadLabelsJsonBody.from_dict({"ids": IDS, "labels": LABELS}), None),
        "parquet": (ltypes.File(payload=io.BytesIO(_table_bytes({"id": IDS, "label": LABELS}, "parquet"))),
                    fmt.PARQUET),
    }
    for name, (body, kind) in bodies.items():  # each format read for what it is, nothing stored
        checked = upload.sync(created.id, client=lc, body=body, validate_only=True,
                              **({"format_": kind} if kind else {}))
        assert isinstance(checked, lm.LabelsUploaded) and checked.accepted_rows == len(IDS), (name, checked)
    arrow = _table_bytes({"id": IDS, "label": LABELS}, "arrow")
    stored = upload.sync(created.id, client=lc, format_=fmt.ARROW, body=ltypes.File(payload=io.BytesIO(arrow)))
    assert isinstance(stored, lm.LabelsUploaded) and stored.accepted_rows == len(IDS), stored
    wrong = upload.sync(created.id, client=lc, format_=fmt.PARQUET, body=ltypes.File(payload=io.BytesIO(arrow)))
    assert isinstance(wrong, lm.ErrorBody) and wrong.code == "invalid_parquet", wrong  # read as named
    release = op("labels_client", "releases.create_release").sync(
        created.id, client=lc,
        body=lm.ReleaseCreate.from_dict({"mechanism": "laplace", "epsilon": 1, "feature_table": "clicks"}),
    )
    assert isinstance(release, lm.Release), release

    table = op("features_client", "feature_tables.upload_feature_table").sync(
        client=fc, name="clicks", body=ftypes.File(payload=io.BytesIO(TABLE_CSV.encode()))
    )
    assert isinstance(table, fm.FeatureTable) and table.n_rows == len(IDS), table
    wait_release(labels, release.id, "pending", headers=LABELS_AUTH)  # the release job charged it
    ctx = labels.app.state.ctx  # type: ignore[attr-defined]
    settings = ctx.settings.model_copy(update={"features_url": str(features.base_url)})
    assert outbox.deliver_one(ctx.sessions, features, settings, release.id, random.Random(0)) == "delivered"
    labels_file = op("features_client", "releases.download_release_labels").sync(release.id, client=fc)
    assert isinstance(labels_file, ftypes.File), labels_file  # Parquet by default, read as bytes
    assert pq.read_table(io.BytesIO(labels_file.payload.read())).column("id").to_pylist() == sorted(IDS)
    training = op("features_client", "trainings.start_training").sync(
        client=fc, body=fm.TrainingRequest.from_dict(
            {"release_id": release.id, "feature_table_id": table.id, "epochs": 1, "batch_size": 16})
    )
    assert isinstance(training, fm.TrainingQueued), training
    deadline = time.monotonic() + 120
    get_training = op("features_client", "trainings.get_training")
    while (done := get_training.sync(training.id, client=fc)).status not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, done
        time.sleep(0.05)
    assert isinstance(done, fm.Training) and done.status == "succeeded", done
    predictions = op("features_client", "models.predict_batch").sync(
        done.model_id, client=fc, feature_table_id=table.id,
        body=ftypes.File(payload=io.BytesIO(_table_bytes({"id": IDS[:5]}, "parquet"))),
    )
    assert isinstance(predictions, ftypes.File), predictions
    read = pq.read_table(io.BytesIO(predictions.payload.read()))
    assert read.column("id").to_pylist() == IDS[:5] and read.num_rows == 5
    model_file = op("features_client", "models.download_model").sync(done.model_id, client=fc)
    assert isinstance(model_file, ftypes.File) and model_file.payload.read()


def test_no_generated_upload_takes_a_str_body(generated: dict[str, ModuleType]) -> None:
    """A CSV body typed ``str`` crashed the generated code (``str`` has no ``payload``): every
    file body is ``File`` bytes."""
    import inspect

    for name, package in generated.items():
        api = Path(package.__file__ or "").parent / "api"
        for module in api.glob("*/*.py"):
            if module.stem == "__init__":
                continue
            sync = importlib.import_module(f"{name}.api.{module.parent.name}.{module.stem}").sync_detailed
            body = inspect.signature(sync).parameters.get("body")
            assert body is None or "str" not in str(body.annotation).replace("Unset", "").split("|"), module
