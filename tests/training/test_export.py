"""Models used elsewhere: ONNX Runtime and TorchScript agree with PyTorch; batch prediction over Parquet."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from tests.training.data import write_table

from labeldp.learning.batch_predict import PredictionError, UnknownIds, predict_parquet
from labeldp.learning.classifier import fit_classifier
from labeldp.learning.config import DEFAULT_LEARNING, TrainingConfig
from labeldp.learning.debiasing import LabelLaw, MonotoneLaw, PostProcessing
from labeldp.learning.export import export_onnx, export_torchscript
from labeldp.learning.onnx_graph import feeds, full_graph
from labeldp.learning.persistence import TrainedModel, TrainedRegressor
from labeldp.learning.regression import fit_private_regressor
from labeldp.schema import LaplaceSpec
from labeldp.specs.base import LabelDomainSpec

CONFIG = TrainingConfig(epochs=3, batch_size=64, seed=2, device="cpu")
SPEC = LaplaceSpec(epsilon=4, domain=LabelDomainSpec(low=-12, high=12), step=0.01, scale=6)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Array, np.ndarray, pa.Table]:
    path = tmp_path_factory.mktemp("export") / "f.parquet"
    ids, y, features = write_table(path, 1500, extra=40)
    return path, ids, y, features


@pytest.fixture(scope="module")
def regressor(data: tuple[Path, pa.Array, np.ndarray, pa.Table]) -> TrainedRegressor:
    _, _, y, features = data
    return fit_private_regressor(features, np.clip(y, -12, 12), SPEC.model_dump(mode="json"), CONFIG, DEFAULT_LEARNING)


def inputs(model: TrainedModel, features: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    return model.preprocessor_.transform(features)


def test_onnx_runtime_predicts_what_the_service_predicts(tmp_path: Path, data, regressor: TrainedRegressor) -> None:
    """The graph is the whole prediction: raw columns in (missing values and unseen categories
    included), the service's answer out, with no code of ours around it (issue 26, item 2)."""
    _, _, _, features = data
    path = export_onnx(regressor, tmp_path / "m.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    pre = regressor.preprocessor_
    assert [i.name for i in session.get_inputs()] == [*pre.numeric_columns, *pre.categorical_columns]
    (onnx_out,) = session.run(None, feeds(regressor, features))
    assert onnx_out.shape == (features.num_rows,) and onnx_out.dtype == np.float64
    assert np.allclose(onnx_out, regressor.predict(features), rtol=1e-5, atol=1e-5)
    # missing numeric values (null, NaN) and an unseen or missing category, as the service reads them
    rows = features.slice(0, 6)
    numeric, category = pre.numeric_columns[0], pre.categorical_columns[0]
    holes = rows.set_column(rows.column_names.index(numeric), numeric,
                            pa.array([None, float("nan"), 1.0, None, 2.0, 3.0], pa.float64()))
    holes = holes.set_column(holes.column_names.index(category), category,
                             pa.array(["never-seen", None, "", None, "never-seen", None], pa.string()))
    (out,) = session.run(None, feeds(regressor, holes))
    assert np.allclose(out, regressor.predict(holes), rtol=1e-5, atol=1e-5)
    side = json.loads((tmp_path / "m.json").read_text())
    assert side["preprocessor"] == regressor.preprocessor_.to_dict()


@pytest.mark.parametrize(
    "post",
    [
        PostProcessing(),
        PostProcessing("predictions", 0.4, LabelLaw("laplace", 0.8, 0.3, -12.0, 12.0), anchor=0.5, model_weight=0.7),
        PostProcessing("targets", 1.0, LabelLaw("rr", 0.6, -0.2, -12.0, 12.0)),
        PostProcessing("predictions", 1.0, MonotoneLaw("staircase", 0.8, 0.0, -2.0, 2.0,
                                                       values=(-2.0, -1.0, 0.0, 1.0, 2.0),
                                                       means=(-1.5, -0.9, 0.0, 0.8, 1.1))),
    ],
    ids=["none", "predictions-anchor", "targets", "monotone"],
)
def test_every_post_processing_is_in_the_graph(tmp_path: Path, data, regressor: TrainedRegressor,
                                               post: PostProcessing) -> None:
    _, _, _, features = data
    original = regressor.postprocessing_
    try:
        regressor.postprocessing_ = post
        session = ort.InferenceSession(full_graph(regressor).SerializeToString(), providers=["CPUExecutionProvider"])
        (out,) = session.run(None, feeds(regressor, features))
        assert np.allclose(out, regressor.predict(features), rtol=1e-5, atol=1e-5)
    finally:
        regressor.postprocessing_ = original


def test_torchscript_predicts_what_pytorch_predicts(tmp_path: Path, data, regressor: TrainedRegressor) -> None:
    _, _, _, features = data
    path = export_torchscript(regressor, tmp_path / "m.torchscript.pt")
    loaded = torch.jit.load(str(path))
    numeric, categorical = inputs(regressor, features)
    out = loaded(torch.from_numpy(numeric), torch.from_numpy(categorical)).detach().double().numpy()
    assert np.allclose(out, regressor.network_outputs(features), rtol=1e-6, atol=1e-6)


def test_onnx_classifier_logits_give_the_same_probabilities(tmp_path: Path, data) -> None:
    _, _, y, features = data
    classes = np.digitize(y, [-1.0, 1.0]).astype(np.float64)
    model = fit_classifier(features, classes, 3, CONFIG, classes=["low", "mid", "high"])
    path = export_onnx(model, tmp_path / "c.onnx")
    logits, probs = ort.InferenceSession(str(path)).run(["logits", "probabilities"], feeds(model, features))
    assert logits.shape == probs.shape == (features.num_rows, 3)
    assert np.allclose(probs, model.predict_proba(features), atol=1e-5)
    assert json.loads((tmp_path / "c.json").read_text())["classes"] == ["low", "mid", "high"]


def test_batch_prediction_over_ids_and_over_feature_rows(tmp_path: Path, data, regressor: TrainedRegressor) -> None:
    table_path, ids, _, features = data
    wanted = pa.table({"id": ids.take(pa.array(np.arange(1499, -1, -3)))})  # out of table order
    pq.write_table(wanted, tmp_path / "ids.parquet")
    rows = predict_parquet(regressor, tmp_path / "ids.parquet", tmp_path / "out.parquet",
                           feature_table=table_path, batch_rows=97)
    out = pq.read_table(tmp_path / "out.parquet")
    positions = np.arange(1499, -1, -3)
    assert rows == out.num_rows == len(positions) and out.column_names == ["id", "prediction"]
    assert out.column("id").to_pylist() == wanted.column("id").to_pylist()
    assert np.allclose(out.column("prediction").to_numpy(), regressor.predict(features.take(pa.array(positions))))

    pq.write_table(features, tmp_path / "rows.parquet")
    predict_parquet(regressor, tmp_path / "rows.parquet", tmp_path / "rows_out.parquet", batch_rows=500)
    rows_out = pq.read_table(tmp_path / "rows_out.parquet")
    assert rows_out.column_names == ["prediction"]
    assert np.allclose(rows_out.column("prediction").to_numpy(), regressor.predict(features))


def test_batch_prediction_refuses_unknown_ids_and_leaves_no_file(tmp_path: Path, data, regressor) -> None:
    table_path = data[0]
    pq.write_table(pa.table({"id": pa.array(["id0000001", "nobody"])}), tmp_path / "ids.parquet")
    with pytest.raises(UnknownIds, match="1 ids"):
        predict_parquet(regressor, tmp_path / "ids.parquet", tmp_path / "out.parquet", feature_table=table_path)
    assert not list(tmp_path.glob("out.parquet*"))


def test_batch_prediction_refuses_nan_and_infinity_as_the_json_route_does(tmp_path: Path, data, regressor) -> None:
    """NaN, ±infinity and values that make the prediction infinite are refused in a file as in
    /predict's JSON rows (invalid_feature_values); a null is a missing value, imputed."""
    features = data[3].slice(0, 4)
    numeric = regressor.preprocessor_.numeric_columns[0]
    column = features.column(numeric).to_numpy().astype(float)
    for bad in (np.nan, np.inf, -np.inf, 1e308):
        values = column.copy()
        values[2] = bad
        if bad == 1e308:
            values[:] = bad
        table = features.set_column(features.column_names.index(numeric), numeric, pa.array(values))
        pq.write_table(table, tmp_path / "bad.parquet")
        with pytest.raises(PredictionError) as refused:
            predict_parquet(regressor, tmp_path / "bad.parquet", tmp_path / "out.parquet", id_column=None)
        assert refused.value.code == "invalid_feature_values", bad
        assert not list(tmp_path.glob("out.parquet*"))
    nulls = features.set_column(features.column_names.index(numeric), numeric, pa.nulls(4, pa.float64()))
    pq.write_table(nulls, tmp_path / "nulls.parquet")
    assert predict_parquet(regressor, tmp_path / "nulls.parquet", tmp_path / "out.parquet", id_column=None) == 4


def test_labeldp_export_and_predict_commands_end_to_end(tmp_path: Path, data, regressor: TrainedRegressor) -> None:
    """``labeldp export`` / ``labeldp predict`` as a user runs them (real processes), and the
    ``python -m`` aliases; the exported ONNX file and its embedded sidecar reproduce ``predict``."""
    table_path, ids, _, features = data
    regressor.save(tmp_path / "model.pt")
    pq.write_table(pa.table({"id": ids.slice(0, 10)}), tmp_path / "ids.parquet")
    labeldp = [sys.executable, "-m", "labeldp_tools.cli"]
    done = subprocess.run([*labeldp, "export", str(tmp_path / "model.pt"), str(tmp_path / "out" / "m"),
                           "--format", "onnx"], check=True, capture_output=True, text=True)
    assert json.loads(done.stdout) == {"onnx": str(tmp_path / "out" / "m.onnx"),
                                       "sidecar": str(tmp_path / "out" / "m.json")}
    assert not (tmp_path / "out" / "m.torchscript.pt").exists()
    session = ort.InferenceSession(str(tmp_path / "out" / "m.onnx"))
    embedded = json.loads(session.get_modelmeta().custom_metadata_map["labeldp"])
    assert embedded == json.loads((tmp_path / "out" / "m.json").read_text())
    (out,) = session.run(None, feeds(regressor, features))
    assert np.allclose(out, regressor.predict(features), rtol=1e-5, atol=1e-5)

    done = subprocess.run([*labeldp, "predict", str(tmp_path / "model.pt"), str(tmp_path / "ids.parquet"),
                           str(tmp_path / "p.parquet"), "--feature-table", str(table_path)],
                          check=True, capture_output=True, text=True)
    assert json.loads(done.stdout) == {"rows": 10, "output": str(tmp_path / "p.parquet")}
    predicted = pq.read_table(tmp_path / "p.parquet").column("prediction").to_numpy()
    assert np.allclose(predicted, regressor.predict(features.slice(0, 10)))

    subprocess.run([sys.executable, "-m", "labeldp.learning.export", str(tmp_path / "model.pt"),
                    str(tmp_path / "alias" / "m")], check=True, capture_output=True)
    assert (tmp_path / "alias" / "m.onnx").exists() and (tmp_path / "alias" / "m.torchscript.pt").exists()
    subprocess.run([sys.executable, "-m", "labeldp.learning.batch_predict", str(tmp_path / "model.pt"),
                    str(tmp_path / "ids.parquet"), str(tmp_path / "q.parquet"), "--feature-table", str(table_path)],
                   check=True, capture_output=True)
    assert pq.read_table(tmp_path / "q.parquet").equals(pq.read_table(tmp_path / "p.parquet"))


def test_labeldp_model_commands_refuse_bad_input_with_one_line_and_status_2(
    tmp_path: Path, data, regressor: TrainedRegressor, capsys: pytest.CaptureFixture[str]
) -> None:
    from labeldp_tools.cli import main

    table_path, _, _, features = data
    model = tmp_path / "model.pt"
    regressor.save(model)

    def run(*argv: str) -> tuple[int, str]:
        status = main(list(argv))
        return status, capsys.readouterr().err.strip()

    assert run("export", str(tmp_path / "none.pt"), str(tmp_path / "m")) == (
        2, f"labeldp: error: model_file_not_found: {tmp_path / 'none.pt'}: no such model file")
    (tmp_path / "foreign.pt").write_bytes(b"not a model")
    status, err = run("export", str(tmp_path / "foreign.pt"), str(tmp_path / "m"))
    assert status == 2 and err.startswith("labeldp: error: invalid_model_file:")
    with pytest.raises(SystemExit) as exited:  # argparse's own usage error
        main(["export", str(model), str(tmp_path / "m"), "--format", "pmml"])
    assert exited.value.code == 2 and "invalid choice: 'pmml'" in capsys.readouterr().err
    assert not list(tmp_path.glob("m.*"))

    pq.write_table(pa.table({"id": ["id0000001", "secret-one", "secret-two"]}), tmp_path / "ids.parquet")
    status, err = run("predict", str(model), str(tmp_path / "ids.parquet"), str(tmp_path / "o.parquet"),
                      "--feature-table", str(table_path))
    assert (status, err) == (2, "labeldp: error: unknown_ids: 2 ids of the input are not in the feature table")
    status, err = run("predict", str(model), str(tmp_path / "nothing.parquet"), str(tmp_path / "o.parquet"))
    assert status == 2 and err.startswith("labeldp: error: file_not_found:")
    (tmp_path / "bad.parquet").write_bytes(b"id,x\n1,2\n")
    status, err = run("predict", str(model), str(tmp_path / "bad.parquet"), str(tmp_path / "o.parquet"))
    assert (status, err) == (2, "labeldp: error: invalid_parquet: the input is not a Parquet file")
    pq.write_table(features.drop_columns(["group"]), tmp_path / "rows.parquet")
    status, err = run("predict", str(model), str(tmp_path / "rows.parquet"), str(tmp_path / "o.parquet"))
    assert (status, err) == (2, "labeldp: error: missing_columns: the input lacks 1 feature columns of the model")
    assert not list(tmp_path.glob("o.parquet*"))  # a refused input leaves no output
