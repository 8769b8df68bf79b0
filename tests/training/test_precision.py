"""Mixed precision on the CPU: bf16/fp16 autocast trains, fp32 is untouched, the model records it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tests.training.data import write_table

from features_party.training_request import TrainingRequest
from labeldp.learning.config import PLAIN, TrainingConfig
from labeldp.learning.precision import MixedPrecision
from labeldp.learning.regression import fit_private_regressor, fit_regressor

CONFIG = TrainingConfig(epochs=4, batch_size=64, seed=8, device="cpu")


def test_fp32_adds_no_autocast_and_no_scaler() -> None:
    amp = MixedPrecision("fp32", "cpu")
    assert amp.dtype is None and amp.scaler is None
    with amp.autocast():
        assert not torch.is_autocast_enabled("cpu")
    with MixedPrecision("bf16", "cpu").autocast():
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_learns_about_as_well_as_fp32(tmp_path, precision: str) -> None:
    _, y, features = write_table(tmp_path / "f.parquet", 2000)
    fp32 = fit_regressor(features, y, CONFIG)
    low = fit_regressor(features, y, CONFIG.replace(precision=precision))
    mse32 = float(np.mean((fp32.predict(features) - y) ** 2))
    mse_low = float(np.mean((low.predict(features) - y) ** 2))
    assert mse_low < 1.25 * mse32 + 0.02, (mse32, mse_low)
    assert not np.array_equal(low.predict(features), fp32.predict(features))  # autocast really ran
    assert low.config_["precision"] == precision and low.config_["device"] == "cpu"
    assert low.config_["rows_per_second"] > 0


def test_precision_is_a_training_option_refused_when_unknown() -> None:
    assert TrainingRequest(release_id="r").precision == "fp32"
    assert TrainingRequest(release_id="r", precision="bf16").precision == "bf16"
    with pytest.raises(ValueError):
        TrainingRequest(release_id="r", precision="fp8")  # type: ignore[arg-type]


def test_model_file_keeps_device_precision_and_throughput(tmp_path) -> None:
    _, y, features = write_table(tmp_path / "f.parquet", 500)
    model = fit_private_regressor(features, y, None, CONFIG.replace(precision="bf16"), PLAIN)
    model.save(tmp_path / "m.pt")
    loaded = type(model).load(tmp_path / "m.pt")
    assert {k: loaded.config_[k] for k in ("device", "precision", "workers")} == {
        "device": "cpu", "precision": "bf16", "workers": 1,
    }
    assert loaded.config_["rows_per_second"] == model.config_["rows_per_second"] > 0
