"""The CUDA path, run for real where a GPU is lent: in-memory and streamed training, autocast, NCCL.

Every test here is marked ``gpu`` and skips only when torch sees no CUDA device, saying so
(``pytest -m gpu -rs`` lists the reason). On a GPU machine: ``pytest -m gpu tests/training``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from tests.training.data import write_table

from labeldp.learning.config import PLAIN, TrainingConfig
from labeldp.learning.device import resolve_device
from labeldp.learning.loader import RowGroupLoader
from labeldp.learning.persistence import TrainedRegressor
from labeldp.learning.regression import fit_regressor
from labeldp.learning.staging import StagedRelease
from labeldp.learning.streamed import fit_release_streamed

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine (torch sees none)"),
]

CONFIG = TrainingConfig(epochs=5, batch_size=128, seed=13, device="cuda", row_group_rows=512)


def mse(model: TrainedRegressor, features: pa.Table, y: np.ndarray) -> float:
    return float(np.mean((model.predict(features) - y) ** 2))


def test_auto_resolves_to_cuda_and_the_model_trains_there(tmp_path: Path) -> None:
    assert resolve_device("auto") == "cuda"
    _, y, features = write_table(tmp_path / "f.parquet", 4000)
    gpu = fit_regressor(features, y, CONFIG)
    cpu = fit_regressor(features, y, CONFIG.replace(device="cpu"))
    assert next(gpu.model_.parameters()).is_cuda and gpu.config_["device"] == "cuda"
    assert abs(mse(gpu, features, y) - mse(cpu, features, y)) <= 0.1 * mse(cpu, features, y) + 0.01


def test_streamed_loader_pins_memory_and_copies_to_the_device(tmp_path: Path) -> None:
    ids, y, _ = write_table(tmp_path / "f.parquet", 3000)
    model = fit_release_streamed(tmp_path / "f.parquet", "id", ids, y, None, CONFIG, tmp_path / "w", PLAIN)
    assert model.config_["device"] == "cuda" and model.config_["rows_per_second"] > 0
    staged = StagedRelease.open(tmp_path / "w" / "stage")
    loader = RowGroupLoader(staged.train_path, staged.preprocessor, 256, target_mean=0.0, target_std=1.0,
                            device="cuda")
    x, c, target = next(iter(loader.batches(1)))
    assert x.is_cuda and c.is_cuda and target.is_cuda


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_cuda_autocast_trains_close_to_fp32(tmp_path: Path, precision: str) -> None:
    _, y, features = write_table(tmp_path / "f.parquet", 4000)
    fp32 = fit_regressor(features, y, CONFIG)
    low = fit_regressor(features, y, CONFIG.replace(precision=precision))
    assert low.config_["precision"] == precision
    assert mse(low, features, y) <= 1.25 * mse(fp32, features, y) + 0.02


@pytest.mark.skipif(
    torch.cuda.device_count() < 2,
    reason=f"NCCL data parallelism needs two CUDA devices ({torch.cuda.device_count()} here)",
)
def test_two_gpu_torchrun_job_with_nccl(tmp_path: Path) -> None:
    ids, y, features = write_table(tmp_path / "f.parquet", 4000)
    one = fit_release_streamed(tmp_path / "f.parquet", "id", ids, y, None, CONFIG, tmp_path / "one", PLAIN)
    two = fit_release_streamed(tmp_path / "f.parquet", "id", ids, y, None, CONFIG, tmp_path / "two", PLAIN, workers=2)
    assert two.config_["workers"] == 2
    assert abs(mse(two, features, y) - mse(one, features, y)) <= 0.25 * mse(one, features, y)


def test_adam_is_the_fused_kernel_on_cuda() -> None:
    # Decision 0019: one launch for all parameters; CPU keeps the default kernels (its pinned bits).
    from labeldp.learning.loop import make_optimizer
    from labeldp.learning.networks import MLPRegressor

    model = MLPRegressor(2, [3])
    assert not make_optimizer(model, CONFIG).defaults["fused"]
    assert make_optimizer(model.to("cuda"), CONFIG).defaults["fused"] is True
