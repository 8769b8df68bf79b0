"""Models used elsewhere over HTTP: ``GET /v1/models/{id}/export`` and ``POST /v1/models/{id}/predictions``.

On the model the contract flow trained through both apps (tests/contract/flow.py): the
downloaded ONNX file, run by ONNX Runtime, and the TorchScript file agree with PyTorch to
1e-5 and carry the sidecar that turns their output into ``predict``'s answer; Parquet
predictions equal the JSON route's; bad inputs get 4xx with stable codes and leave nothing.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from fastapi.testclient import TestClient
from tests.contract.conftest import FEATURES_AUTH, Parties, contract_settings
from tests.contract.flow import IDS

from labeldp.learning.onnx_graph import feeds
from labeldp.learning.persistence import TrainedRegressor, load_model
from labeldp.learning.preprocessing import Preprocessor

PARQUET = {**FEATURES_AUTH, "content-type": "application/vnd.apache.parquet"}


def _parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def _data_dir(parties: Parties) -> Path:
    return Path(parties.features.app.state.ctx.data_dir)  # type: ignore[attr-defined]


def _model(parties: Parties) -> TrainedRegressor:
    from features_party import models

    ctx = parties.features.app.state.ctx  # type: ignore[attr-defined]
    with ctx.sessions() as session:
        path = ctx.data_dir / models.get_model(session, parties.flow.model["id"]).path
    model = load_model(path)
    assert isinstance(model, TrainedRegressor)
    return model


def _table_rows(ids: list[str]) -> pa.Table:
    """The flow's feature rows of ``ids`` (as tests/contract/flow.py wrote them)."""
    index = [IDS.index(i) for i in ids]
    return pa.table({"age": pa.array([20.0 + i % 30 for i in index]),
                     "city": pa.array(["paris" if i % 2 else "lyon" for i in index])})


def _json_predictions(parties: Parties, ids: list[str]) -> np.ndarray:
    r = parties.features.post(f"/v1/models/{parties.flow.model['id']}/predict", json={"ids": ids},
                              headers=FEATURES_AUTH)
    assert r.status_code == 200, r.text
    return np.asarray(r.json()["predictions"])


def test_onnx_download_runs_in_onnx_runtime_as_pytorch_predicts(parties: Parties) -> None:
    model_id = parties.flow.model["id"]
    r = parties.features.get(f"/v1/models/{model_id}/export", params={"format": "onnx"}, headers=FEATURES_AUTH)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/octet-stream"
    assert f'filename="{model_id}.onnx"' in r.headers["content-disposition"]
    session = ort.InferenceSession(r.content, providers=["CPUExecutionProvider"])
    side = json.loads(session.get_modelmeta().custom_metadata_map["labeldp"])
    features = _table_rows(IDS)
    model = _model(parties)
    assert side["preprocessor"] == model.preprocessor_.to_dict()
    # the graph alone, fed the raw columns, answers what the service predicts for those ids
    (out,) = session.run(None, feeds(model, features))
    assert np.allclose(out, _json_predictions(parties, IDS), rtol=1e-5, atol=1e-5)


def test_torchscript_download_predicts_as_pytorch(parties: Parties) -> None:
    model_id = parties.flow.model["id"]
    r = parties.features.get(f"/v1/models/{model_id}/export?format=torchscript", headers=FEATURES_AUTH)
    assert r.status_code == 200, r.text
    assert f'filename="{model_id}.torchscript.pt"' in r.headers["content-disposition"]
    extra = {"labeldp.json": ""}
    scripted = torch.jit.load(io.BytesIO(r.content), _extra_files=extra)
    side = json.loads(extra["labeldp.json"])
    numeric, categorical = Preprocessor.from_dict(side["preprocessor"]).transform(_table_rows(IDS))
    out = scripted(torch.from_numpy(numeric), torch.from_numpy(categorical)).detach().double().numpy()
    assert np.allclose(out, _model(parties).network_outputs(_table_rows(IDS)), rtol=1e-5, atol=1e-5)


def test_export_refusals_have_stable_codes(parties: Parties, monkeypatch: pytest.MonkeyPatch) -> None:
    features, model_id = parties.features, parties.flow.model["id"]
    r = features.get(f"/v1/models/{model_id}/export?format=pmml", headers=FEATURES_AUTH)
    assert r.status_code == 422 and r.json()["code"] == "invalid_request"
    assert r.json()["details"][0]["loc"] == ["query", "format"]
    r = features.get("/v1/models/mdl_nope/export", headers=FEATURES_AUTH)
    assert r.status_code == 404 and r.json()["code"] == "model_not_found"
    assert features.get(f"/v1/models/{model_id}/export").status_code == 401

    exports = _data_dir(parties) / "exports"
    shutil.rmtree(exports, ignore_errors=True)  # nothing cached: the export runs now
    # A fault the exporter raises on a network it cannot trace (none of ours does): mocked.
    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError("cannot trace")

    monkeypatch.setattr(torch.onnx, "export", refuse)
    r = features.get(f"/v1/models/{model_id}/export", headers=FEATURES_AUTH)
    assert r.status_code == 422 and r.json()["code"] == "model_not_exportable", r.text
    assert not list(exports.glob("*"))  # no half-written export is cached
    monkeypatch.undo()

    model_file = next((_data_dir(parties) / "models").glob(f"{model_id}.pt"))
    moved = model_file.with_name("moved.pt")
    model_file.rename(moved)
    try:
        r = features.get(f"/v1/models/{model_id}/export?format=torchscript", headers=FEATURES_AUTH)
        assert r.status_code == 409 and r.json()["code"] == "model_unavailable", r.text
    finally:
        moved.rename(model_file)
    assert features.get(f"/v1/models/{model_id}/export", headers=FEATURES_AUTH).status_code == 200


def test_parquet_predictions_by_ids_and_by_feature_rows_equal_the_json_route(parties: Parties) -> None:
    features, model_id = parties.features, parties.flow.model["id"]
    wanted = IDS[::-3]  # out of table order
    r = features.post(
        f"/v1/models/{model_id}/predictions", params={"feature_table_id": parties.flow.feature_table["id"]},
        content=_parquet(pa.table({"id": wanted})), headers=PARQUET,
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/vnd.apache.parquet"
    assert f'filename="predictions-{model_id}.parquet"' in r.headers["content-disposition"]
    out = pq.read_table(io.BytesIO(r.content))
    assert out.column_names == ["id", "prediction"] and out.column("id").to_pylist() == wanted
    assert np.allclose(out.column("prediction").to_numpy(), _json_predictions(parties, wanted))

    rows = _table_rows(wanted).add_column(0, "key", pa.array(wanted))
    r = features.post(f"/v1/models/{model_id}/predictions?id_column=key", content=_parquet(rows), headers=PARQUET)
    assert r.status_code == 200, r.text
    out = pq.read_table(io.BytesIO(r.content))
    assert out.column_names == ["key", "prediction"]
    assert np.allclose(out.column("prediction").to_numpy(), _json_predictions(parties, wanted))
    assert not list((_data_dir(parties) / "spool").glob("*"))  # upload and answer removed once sent


def test_parquet_prediction_refusals_have_stable_codes_and_name_no_ids(parties: Parties) -> None:
    features, model_id = parties.features, parties.flow.model["id"]
    table_id = parties.flow.feature_table["id"]
    url = f"/v1/models/{model_id}/predictions"

    def post(body: bytes, headers: dict[str, str] = PARQUET, **params: str) -> tuple[int, dict]:
        r = features.post(url, params=params, content=body, headers=headers)
        return r.status_code, r.json()

    status, body = post(_parquet(pa.table({"id": ["u001", "secret-a", "secret-b"]})), feature_table_id=table_id)
    assert (status, body["code"]) == (422, "unknown_ids") and body["details"] == [{"count": 2}]
    assert "secret" not in json.dumps(body)
    status, body = post(b"PAR1 not a parquet file", feature_table_id=table_id)
    assert (status, body["code"]) == (422, "invalid_parquet")
    status, body = post(_parquet(pa.table({"age": [31.0]})))
    assert (status, body["code"]) == (422, "missing_columns") and body["details"] == [{"column": "city"}]
    status, body = post(_parquet(pa.table({"age": ["seventy"], "city": ["paris"]})))
    assert (status, body["code"]) == (422, "invalid_feature_values") and "seventy" not in json.dumps(body)
    status, body = post(_parquet(pa.table({"user": ["u001"]})), feature_table_id=table_id)
    assert (status, body["code"]) == (422, "missing_id_column")
    status, body = post(_parquet(pa.table({"id": ["u001"]})), feature_table_id="ft_" + "0" * 32)
    assert (status, body["code"]) == (404, "feature_table_not_found")
    status, body = post(b"id\nu001\n", {**FEATURES_AUTH, "content-type": "text/csv"})
    assert (status, body["code"]) == (415, "unsupported_media_type")
    r = features.post("/v1/models/mdl_nope/predictions", content=b"x", headers=PARQUET)
    assert r.status_code == 404 and r.json()["code"] == "model_not_found"
    assert not list((_data_dir(parties) / "spool").glob("*"))  # nothing stays behind


def test_the_prediction_upload_limit_is_its_own_setting(tmp_path: Path) -> None:
    from features_party.app import create_app

    settings = contract_settings(tmp_path).model_copy(update={"prediction_max_body_bytes": 100})
    with TestClient(create_app(settings)) as client:
        r = client.post("/v1/models/mdl_x/predictions", content=b"x" * 101, headers=PARQUET)
        assert r.status_code == 413 and r.json()["code"] == "payload_too_large"
        r = client.post("/v1/models/mdl_x/predictions", content=b"x" * 100, headers=PARQUET)
        assert r.status_code == 404  # within the limit: on to the route
        r = client.post("/v1/models/mdl_x/predict", json={"ids": ["u" * 200]}, headers=FEATURES_AUTH)
        assert r.status_code == 404  # other routes keep LABELDP_MAX_BODY_BYTES
