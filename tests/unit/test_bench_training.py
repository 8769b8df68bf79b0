"""The training bench's phases (bench/bench_training.py): what a ``step`` prefix times is what it says.

The growth table's 10⁸ row times loader + step over a prefix of the epoch (``--step-rows``); its
rows/s is only honest if the prefix is exactly the steps it names and the whole epoch otherwise.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from bench import bench_training as bench

N = 6_000
BATCH = 256


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny table staged by the ``stage`` phase (in this process)."""
    root = tmp_path_factory.mktemp("bench_training")
    data = root / "data.parquet"
    bench.write_data(data, N, labels=bench.labels_of(data))
    threads = torch.get_num_threads()
    try:
        staged = bench.run_mode("stage", data, 1, root / "work", BATCH, stage_dir=root / "stage")
    finally:
        torch.set_num_threads(threads)
    assert staged["rows"] == N and staged["n_train"] == N - N // 10
    return root / "stage"


def phase(mode: str, stage: Path, step_rows: int = 0) -> dict[str, object]:
    threads = torch.get_num_threads()
    try:
        return bench.run_mode(mode, Path("unused"), 1, stage.parent / "work", BATCH, stage_dir=stage,
                              step_rows=step_rows)
    finally:
        torch.set_num_threads(threads)


def test_a_step_prefix_is_the_whole_steps_that_hold_its_rows(stage: Path) -> None:
    result = phase("step", stage, step_rows=1_000)
    assert result["steps"] == math.ceil(1_000 / BATCH)
    assert result["rows"] == result["steps"] * BATCH
    assert result["prefix"] is True
    assert bench.rows_timed({**result, "epochs": 1}) == f"1,024 (prefix of {N - N // 10:,})"


def test_without_a_prefix_step_and_loaded_go_over_the_whole_epoch(stage: Path) -> None:
    n_train = N - N // 10
    step = phase("step", stage)
    assert step["prefix"] is False and step["rows"] == n_train and step["steps"] == math.ceil(n_train / BATCH)
    loaded = phase("loaded", stage)
    assert loaded["rows"] == n_train and loaded["batches"] == math.ceil(n_train / BATCH)
    assert bench.rows_timed({**step, "epochs": 1}) == f"{n_train:,}"
