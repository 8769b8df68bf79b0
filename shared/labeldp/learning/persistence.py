"""Trained models: prediction in label units or class names, and their model files.

A model file holds weights, the preprocessor and how the model was trained as plain
types, written atomically and read with ``weights_only=True`` (a file cannot run code).
"""

from __future__ import annotations

import io
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, BinaryIO, Self

import numpy as np
import pyarrow as pa
import torch

from labeldp.learning.debiasing import PostProcessing
from labeldp.learning.device import resolve_device
from labeldp.learning.networks import (
    MLP,
    PREDICT_CHUNK,
    MLPClassifier,
    MLPRegressor,
    classifier_head,
    describe_architecture,
)
from labeldp.learning.preprocessing import Preprocessor
from labeldp.learning.tasks import CLASSIFICATION, REGRESSION, Task

FORMAT_VERSION = 1


class TrainedMLP(ABC):
    """What both trained models share: the network, its preprocessor, how it was trained, persistence."""

    task: Task

    def __init__(
        self,
        model: MLP,
        preprocessor: Preprocessor,
        *,
        device: str,
        history: list[dict[str, Any]],
        n_train: int,
        n_validation: int,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.model_ = model
        self.preprocessor_ = preprocessor
        self.device_ = device
        self.history_ = history
        self.n_train_ = n_train
        self.n_validation_ = n_validation
        self.config_ = config or {}

    def _outputs(self, table: pa.Table) -> np.ndarray:
        """The network's raw outputs (float64), in chunks so large tables fit on the device."""
        numeric, categorical = self.preprocessor_.transform(table)
        device = next(self.model_.parameters()).device
        chunks = []
        self.model_.eval()
        with torch.no_grad():
            for start in range(0, table.num_rows, PREDICT_CHUNK):
                stop = start + PREDICT_CHUNK
                x = torch.from_numpy(numeric[start:stop]).to(device)
                c = torch.from_numpy(categorical[start:stop]).to(device)
                chunks.append(self.model_(x, c).double().cpu().numpy())
        return np.concatenate(chunks) if chunks else np.empty((0,))

    def _state(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "task": self.task,
            "state_dict": {k: v.detach().cpu() for k, v in self.model_.state_dict().items()},
            "preprocessor": self.preprocessor_.to_dict(),
            "device": self.device_,
            "history": self.history_,
            "n_train": self.n_train_,
            "n_validation": self.n_validation_,
            "config": self.config_,
        }

    def save(self, path: str | Path) -> None:
        """Atomic write of weights, preprocessor and metadata (plain types only)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        torch.save(self._state(), tmp)
        os.replace(tmp, path)

    def write(self, out: BinaryIO) -> None:
        """The model file's bytes into a writable stream (an object store's: the library knows no store)."""
        torch.save(self._state(), out)

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        self.write(buffer)
        return buffer.getvalue()

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu") -> Self:
        """Load with ``weights_only=True``: a model file cannot run code."""
        state = torch.load(Path(path), map_location="cpu", weights_only=True)
        if state.get("task", REGRESSION) != cls.task:
            raise ValueError(f"not a {cls.task} model file")
        return cls._from_state(state, device)

    @classmethod
    @abstractmethod
    def _from_state(cls, state: dict[str, Any], device: str) -> Self:
        """Rebuild the fitted model from a saved state."""

    @staticmethod
    def _common(state: dict[str, Any]) -> dict[str, Any]:
        return {
            "device": state["device"],
            "history": state["history"],
            "n_train": int(state["n_train"]),
            "n_validation": int(state["n_validation"]),
            "config": state.get("config"),
        }

    @staticmethod
    def _restore(model: MLP, state: dict[str, Any], device: str) -> MLP:
        model.load_state_dict(state["state_dict"])
        model.to(resolve_device(device))
        model.eval()
        return model



class TrainedRegressor(TrainedMLP):
    """A fitted regression model with its preprocessor; predicts in label units.

    ``postprocessing_`` (debiasing and shrinkage, :class:`PostProcessing`) is
    applied by :meth:`predict`; ``learning_`` is the :class:`LearningConfig` it was
    trained under and ``selection_`` what model selection chose (epoch, λ, the
    estimates), both ``None`` for :func:`fit_regressor`'s plain models.
    """

    task: Task = REGRESSION

    def __init__(
        self,
        model: MLP,
        preprocessor: Preprocessor,
        target_mean: float,
        target_std: float,
        *,
        postprocessing: PostProcessing | None = None,
        learning: dict[str, Any] | None = None,
        selection: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, preprocessor, **kwargs)
        self.target_mean_ = target_mean
        self.target_std_ = target_std
        self.postprocessing_ = postprocessing or PostProcessing()
        self.learning_ = learning
        self.selection_ = selection

    @property
    def architecture(self) -> str:
        return describe_architecture(len(self.preprocessor_.numeric_columns), self.preprocessor_.vocab_sizes)

    def network_outputs(self, table: pa.Table) -> np.ndarray:
        """The network's estimate in the units it was trained on (privatized or debiased labels)."""
        return self._outputs(table) * self.target_std_ + self.target_mean_

    def predict_parts(self, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """(plain, debiased) estimates per row, before shrinkage (equal without debiasing)."""
        return self.postprocessing_.parts(self.network_outputs(table))

    def predict(self, table: pa.Table) -> np.ndarray:
        """Predictions for the rows of ``table`` (missing columns count as missing values)."""
        return self.postprocessing_.apply(self.network_outputs(table))

    def _state(self) -> dict[str, Any]:
        return {
            **super()._state(),
            "target_mean": self.target_mean_,
            "target_std": self.target_std_,
            "postprocessing": self.postprocessing_.to_dict(),
            "learning": self.learning_,
            "selection": self.selection_,
        }

    @classmethod
    def _from_state(cls, state: dict[str, Any], device: str) -> TrainedRegressor:
        pre = Preprocessor.from_dict(state["preprocessor"])
        model = cls._restore(MLPRegressor(len(pre.numeric_columns), pre.vocab_sizes), state, device)
        return cls(
            model,
            pre,
            float(state["target_mean"]),
            float(state["target_std"]),
            postprocessing=PostProcessing.from_dict(state.get("postprocessing")),
            learning=state.get("learning"),
            selection=state.get("selection"),
            **cls._common(state),
        )



class TrainedClassifier(TrainedMLP):
    """A fitted classifier: ``predict_proba`` gives P(class | features), ``predict`` the most likely class name.

    With forward correction these are probabilities of the *true* class: the
    correction only changes how the privatized labels entered the loss.
    """

    task: Task = CLASSIFICATION

    def __init__(self, model: MLP, preprocessor: Preprocessor, classes: list[str], **kwargs: Any) -> None:
        super().__init__(model, preprocessor, **kwargs)
        self.classes_ = [str(c) for c in classes]

    @property
    def forward_correction(self) -> bool:
        return self.config_.get("transition_matrix") is not None

    @property
    def architecture(self) -> str:
        head = classifier_head(len(self.classes_), self.forward_correction)
        return describe_architecture(len(self.preprocessor_.numeric_columns), self.preprocessor_.vocab_sizes, head)

    def predict_proba(self, table: pa.Table) -> np.ndarray:
        """(n, K) float64 class probabilities; each row sums to 1 (softmax taken in float64)."""
        logits = self._outputs(table).reshape(table.num_rows, len(self.classes_))
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        return probs / probs.sum(axis=1, keepdims=True)

    def predict(self, table: pa.Table) -> np.ndarray:
        """The most likely class name per row (sklearn's convention: labels, not indices)."""
        return np.asarray(self.classes_, dtype=object)[self.predict_proba(table).argmax(axis=1)]

    def _state(self) -> dict[str, Any]:
        return {**super()._state(), "classes": list(self.classes_)}

    @classmethod
    def _from_state(cls, state: dict[str, Any], device: str) -> TrainedClassifier:
        pre = Preprocessor.from_dict(state["preprocessor"])
        classes = list(state["classes"])
        model = cls._restore(MLPClassifier(len(pre.numeric_columns), pre.vocab_sizes, len(classes)), state, device)
        return cls(model, pre, classes, **cls._common(state))



TrainedModel = TrainedRegressor | TrainedClassifier



def load_model(path: str | Path | bytes, device: str = "cpu") -> TrainedModel:
    """Either kind of model file (a path, or its bytes as an object store holds them), ``weights_only=True``
    (files from before classifiers are regressors)."""
    source: Any = io.BytesIO(path) if isinstance(path, bytes) else Path(path)
    state = torch.load(source, map_location="cpu", weights_only=True)
    kind = TrainedClassifier if state.get("task", REGRESSION) == CLASSIFICATION else TrainedRegressor
    return kind._from_state(state, device)
