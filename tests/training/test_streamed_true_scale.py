"""The model card's true-label error (issue 26, item 5) for streamed and torchrun trainings.

The in-memory path states it on its validation rows (features_party's ``true_label_error``); a
streamed or torchrun training states the same numbers from its stage, read once a row group at a
time (labeldp.learning.true_scale.staged_true_scale_error). Each is checked against the in-memory
formula on the same rows with the same model. Planted once, each turned the streamed card red: the
stage's validation labels read in reverse order, and the private mean taken from the debiased
targets' moments as if they were the privatized labels'.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
from tests.training.data import write_table

from labeldp.learning.config import DEFAULT_LEARNING, LearningConfig, TrainingConfig
from labeldp.learning.debiasing import label_law, private_mean
from labeldp.learning.loop import make_plan
from labeldp.learning.persistence import TrainedRegressor
from labeldp.learning.streamed import fit_release_streamed
from labeldp.learning.true_scale import noise_variance, true_scale_error
from labeldp.schema import LaplaceSpec
from labeldp.specs.base import LabelDomainSpec

N = 1200
SPEC = LaplaceSpec(epsilon=4, domain=LabelDomainSpec(low=-12, high=12), step=0.01, scale=6).model_dump(mode="json")
CONFIG = TrainingConfig(epochs=2, batch_size=64, seed=7, device="cpu", threads=1, row_group_rows=100)
TARGETS = LearningConfig(debias="targets", shrinkage=1.0, select_epoch=False)  # no anchor: the private mean


def _expected(model: TrainedRegressor, features: pa.Table, labels: np.ndarray) -> dict[str, float]:
    """The in-memory formula on the training's validation rows, the whole arrays at once."""
    plan = make_plan(N, CONFIG)
    law = label_law(SPEC)
    anchor = model.postprocessing_.anchor
    if anchor is None:
        anchor = private_mean(labels[plan.train_idx], law)
    predictions = model.predict(features.take(pa.array(plan.val_idx)))
    out = true_scale_error(predictions, labels[plan.val_idx], law, noise_variance(SPEC, law), float(anchor))
    return {**out, "private_mean": float(anchor)}


def _check(model: TrainedRegressor, expected: dict[str, float]) -> None:
    assert model.selection_ is not None
    got = model.selection_["true_scale"]
    assert set(got) == set(expected)
    assert got["n_test"] == expected["n_test"] == model.n_validation_ > 100
    for key, value in expected.items():  # the same sums in the stage's row order: equal to rounding
        assert np.isclose(got[key], value, rtol=1e-9, atol=0), (key, got[key], value)
    assert got["test_mse_se"] > 0 and got["test_r2"] is not None


def test_streamed_and_torchrun_cards_state_the_in_memory_true_label_error(tmp_path: Path) -> None:
    ids, y, features = write_table(tmp_path / "f.parquet", N)
    labels = np.round(np.clip(y, -12, 12) + np.random.default_rng(3).laplace(scale=6, size=N), 2)
    streamed = fit_release_streamed(tmp_path / "f.parquet", "id", ids, labels, SPEC, CONFIG, tmp_path / "s", TARGETS)
    assert streamed.postprocessing_.anchor is None
    _check(streamed, _expected(streamed, features, labels))
    torchrun = fit_release_streamed(
        tmp_path / "f.parquet", "id", ids, labels, SPEC, CONFIG, tmp_path / "t", DEFAULT_LEARNING, workers=2
    )
    assert torchrun.postprocessing_.anchor is not None
    _check(torchrun, _expected(torchrun, features, labels))
