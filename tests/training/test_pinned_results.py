"""Seed-fixed trainings give the very same bits: one digest per training path, pinned.

Each digest covers the trained parameters, the predictions on the features, the epoch
history, the run's recorded options (timing excluded) and, for a private regressor, its
selection. They were recorded on the code before the epoch loop was shared (issue 25) so
a refactor of the loop or of how options travel shows here as a changed digest. CPU, one
torch thread: the digests hold for this torch build on x86-64; another build or CPU may
round differently and must re-record them (``PINNED_PRINT=1`` prints the new values).
Planted once: summing each step's losses in float32 before the float64 total changed
the history of every path.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from tests.training.data import write_table

from labeldp.learning.classifier import fit_classifier
from labeldp.learning.config import DEFAULT_LEARNING, PLAIN, LearningConfig, TrainingConfig
from labeldp.learning.persistence import TrainedModel
from labeldp.learning.regression import fit_private_regressor, fit_regressor
from labeldp.learning.streamed import fit_classifier_streamed, fit_release_streamed
from labeldp.schema import LaplaceSpec
from labeldp.specs.base import LabelDomainSpec

N = 600
SPEC = LaplaceSpec(epsilon=4, domain=LabelDomainSpec(low=-12, high=12), step=0.01, scale=6).model_dump(mode="json")
CONFIG = TrainingConfig(
    epochs=4, batch_size=64, seed=17, device="cpu", threads=1, row_group_rows=90, schedule="cosine",
    validation_fraction=0.2,
)
MATRIX = [[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]

PINNED = {
    "plain_in_memory": "8fabc8b500969acc194649c4cbdfe9200667213288211edea0d6a28139cf2944",
    "private_in_memory": "eb73cb81acaae85e110a7e3c1f5cf21240aee186c6a028a7a1c9498279a469d9",
    "private_in_memory_resumed": "534c0bcd264ba4284db074d7ee8b9f1f3fb55a14df0fa988cf8c8ebff09921db",
    "private_streamed": "14e5ad3defd4a648679a03ca67d8316fe40883e82ae80f365c608edc81276bf4",
    "private_streamed_resumed": "cd90e33af5c021d55c417b57e62b8815f9e4acc30cb94b21e7e8a45c3dc2389c",
    "classifier_in_memory": "4b87aa971ff1b663e5af379456c7cde40068f4794844e695196e4b86af031e8b",
    "classifier_in_memory_resumed": "7c643e22f69ffc6174122474d0eea497dec18d54952c65eda2ece3cea04a63ce",
    "classifier_streamed": "2446722ea77922e66facbdc862ef026ce0080bb83db504f2e523db67e411b2ad",
    "classifier_streamed_fp16": "da06dccfd1a33739e53388e50d6b046e10a72e651dc75c88a84e59185d58ac32",
    "private_torchrun_2": "f9fa32e455480b188c75ca8324abea15d24d0314b11bb2a1fe0ebc7f80ae140f",
}


def _hash(h: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        h.update(str((value.dtype, tuple(value.shape))).encode())
        h.update(value.detach().cpu().contiguous().numpy().tobytes())
    elif isinstance(value, np.ndarray):
        h.update(str((value.dtype, value.shape)).encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            h.update(repr(key).encode())
            _hash(h, value[key])
    elif isinstance(value, (list, tuple)):
        h.update(b"[")
        for item in value:
            _hash(h, item)
        h.update(b"]")
    elif isinstance(value, float):
        h.update(value.hex().encode())
    else:
        h.update(repr(value).encode())


def digest(model: TrainedModel, features: pa.Table) -> str:
    h = hashlib.sha256()
    _hash(h, model.model_.state_dict())
    if hasattr(model, "predict_proba"):
        _hash(h, np.asarray(model.predict_proba(features)))
    else:
        _hash(h, np.asarray(model.predict(features)))
    _hash(h, model.history_)
    config = {k: v for k, v in model.config_.items() if k not in {"rows_per_second"}}
    _hash(h, config)
    selection = getattr(model, "selection_", None)
    if selection is not None:
        _hash(h, json.loads(json.dumps(selection, default=str)))
    return h.hexdigest()


def privatized(y: np.ndarray) -> np.ndarray:
    noise = np.random.default_rng(9).laplace(scale=6, size=len(y))
    return np.round(np.clip(y, -12, 12) + noise, 2)


def class_indices(y: np.ndarray) -> np.ndarray:
    return np.digitize(y, [-1.0, 2.0]).astype(np.float64)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Array, np.ndarray, pa.Table]:
    folder = tmp_path_factory.mktemp("pinned")
    ids, y, features = write_table(folder / "f.parquet", N)
    return folder / "f.parquet", ids, y, features


def _check(name: str, model: TrainedModel, features: pa.Table) -> str:
    value = digest(model, features)
    if os.environ.get("PINNED_PRINT"):
        print(f'\n    "{name}": "{value}",')
        return value
    assert value == PINNED[name], name
    return value


def test_in_memory_regression_is_pinned(data: tuple[Path, pa.Array, np.ndarray, pa.Table]) -> None:
    _, _, y, features = data
    _check("plain_in_memory", fit_regressor(features, y, CONFIG), features)
    labels = privatized(y)
    model = fit_private_regressor(features, labels, SPEC, CONFIG, DEFAULT_LEARNING)
    _check("private_in_memory", model, features)
    saved: list[dict[str, Any]] = []
    fit_private_regressor(features, labels, SPEC, CONFIG, DEFAULT_LEARNING, checkpoint=saved.append)
    resumed = fit_private_regressor(features, labels, SPEC, CONFIG, DEFAULT_LEARNING, resume=saved[1])
    _check("private_in_memory_resumed", resumed, features)


def test_streamed_regression_is_pinned(data: tuple[Path, pa.Array, np.ndarray, pa.Table], tmp_path: Path) -> None:
    path, ids, y, features = data
    labels = privatized(y)
    learning = LearningConfig(debias="targets", shrinkage="auto", select_epoch=True)
    model = fit_release_streamed(path, "id", ids, labels, SPEC, CONFIG, tmp_path / "a", learning)
    _check("private_streamed", model, features)
    saved: list[dict[str, Any]] = []
    fit_release_streamed(path, "id", ids, labels, SPEC, CONFIG, tmp_path / "b", learning, checkpoint=saved.append)
    resumed = fit_release_streamed(path, "id", ids, labels, SPEC, CONFIG, tmp_path / "c", learning, resume=saved[1])
    _check("private_streamed_resumed", resumed, features)


def test_classifiers_are_pinned(data: tuple[Path, pa.Array, np.ndarray, pa.Table], tmp_path: Path) -> None:
    path, ids, y, features = data
    classes = class_indices(y)
    names = ["low", "mid", "high"]
    model = fit_classifier(features, classes, 3, CONFIG, classes=names, transition_matrix=MATRIX)
    _check("classifier_in_memory", model, features)
    saved: list[dict[str, Any]] = []
    fit_classifier(features, classes, 3, CONFIG, classes=names, checkpoint=saved.append)
    resumed = fit_classifier(features, classes, 3, CONFIG, classes=names, resume=saved[2])
    _check("classifier_in_memory_resumed", resumed, features)
    streamed = fit_classifier_streamed(path, "id", ids, classes, 3, CONFIG, tmp_path / "a", classes=names,
                                       transition_matrix=MATRIX)
    _check("classifier_streamed", streamed, features)
    half = fit_classifier_streamed(path, "id", ids, classes, 3, CONFIG.replace(precision="fp16"), tmp_path / "b")
    _check("classifier_streamed_fp16", half, features)


def test_torchrun_regression_is_pinned(data: tuple[Path, pa.Array, np.ndarray, pa.Table], tmp_path: Path) -> None:
    path, ids, y, features = data
    model = fit_release_streamed(path, "id", ids, privatized(y), SPEC, CONFIG, tmp_path, PLAIN, workers=2)
    _check("private_torchrun_2", model, features)
