"""Regression on features and (privatized) labels: plain functions, no HTTP, no database.

The service's training jobs and the demo's non-private baseline call the same
:func:`fit_regressor`, so a comparison between them differs only in the labels.
Targets are standardized internally for a well-conditioned optimization; every
loss that is reported (per epoch and in model cards) is MSE in label units.
"""

from __future__ import annotations

import math
import os
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch import nn

EMBEDDING_DIM = 8
HIDDEN = (128, 64)
PREDICT_CHUNK = 65_536
FORMAT_VERSION = 1


@dataclass
class TrainingConfig:
    epochs: int = 10
    batch_size: int = 512
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    validation_fraction: float = 0.1
    seed: int | None = None
    device: str = "auto"
    threads: int = 0


@dataclass(frozen=True)
class EpochReport:
    """What one finished epoch reports: losses are MSE in label units."""

    epoch: int
    epochs: int
    train_loss: float
    val_loss: float | None
    seconds: float


def resolve_device(requested: str) -> str:
    """``cuda`` when asked for (``auto`` or ``cuda``) and present, else ``cpu``."""
    requested = (requested or "auto").lower()
    if requested not in ("auto", "cpu", "cuda"):
        raise ValueError("device must be auto, cpu or cuda")
    if requested in ("auto", "cuda") and torch.cuda.is_available():
        return "cuda"
    return "cpu"


def _is_numeric(dtype: pa.DataType) -> bool:
    return pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_decimal(dtype)


@dataclass
class Preprocessor:
    """Standardizes numeric columns and indexes categorical ones (0 = unknown or missing).

    Fitted on training rows only, so validation rows never leak into the statistics.
    """

    numeric_columns: list[str] = field(default_factory=list)
    means: list[float] = field(default_factory=list)
    stds: list[float] = field(default_factory=list)
    categorical_columns: list[str] = field(default_factory=list)
    vocabularies: list[dict[str, int]] = field(default_factory=list)

    @classmethod
    def fit(cls, table: pa.Table) -> "Preprocessor":
        """Numeric Arrow columns are numeric features, all others categorical."""
        pre = cls()
        for name in table.column_names:
            column = table.column(name)
            if _is_numeric(column.type):
                values = _float_column(column)
                finite = values[np.isfinite(values)]
                mean = float(finite.mean()) if finite.size else 0.0
                std = float(finite.std()) if finite.size else 1.0
                pre.numeric_columns.append(name)
                pre.means.append(mean)
                pre.stds.append(std if std > 1e-12 else 1.0)
            else:
                distinct = pc.unique(column.cast(pa.string())).drop_null().to_pylist()
                pre.categorical_columns.append(name)
                pre.vocabularies.append({value: i + 1 for i, value in enumerate(sorted(distinct))})
        return pre

    def transform(self, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """(n, numeric) float32 standardized with missing -> mean, (n, categorical) int64.

        Columns absent from ``table`` count as missing in every row.
        """
        n = table.num_rows
        numeric = np.zeros((n, len(self.numeric_columns)), dtype=np.float32)
        for j, name in enumerate(self.numeric_columns):
            if name not in table.column_names:
                continue
            values = _float_column(table.column(name))
            values = np.where(np.isfinite(values), values, self.means[j])
            numeric[:, j] = (values - self.means[j]) / self.stds[j]
        categorical = np.zeros((n, len(self.categorical_columns)), dtype=np.int64)
        for j, name in enumerate(self.categorical_columns):
            if name not in table.column_names or not self.vocabularies[j]:
                continue
            vocab = sorted(self.vocabularies[j].items(), key=lambda kv: kv[1])
            value_set = pa.array([value for value, _ in vocab], pa.string())
            codes = np.asarray([index for _, index in vocab], dtype=np.int64)
            positions = pc.fill_null(pc.index_in(table.column(name).cast(pa.string()), value_set=value_set), -1)
            pos = np.asarray(positions.to_numpy(), dtype=np.int64)
            categorical[:, j] = np.where(pos >= 0, codes[np.clip(pos, 0, None)], 0)
        return numeric, categorical

    @property
    def vocab_sizes(self) -> list[int]:
        return [len(v) for v in self.vocabularies]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Preprocessor":
        return cls(**data)


def _float_column(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    values = column.cast(pa.float64())
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


class MLPRegressor(nn.Module):
    """Embeddings (8 per categorical column) + standardized numerics -> 128 -> 64 -> 1."""

    def __init__(self, n_numeric: int, vocab_sizes: list[int], embedding_dim: int = EMBEDDING_DIM) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(size + 1, embedding_dim) for size in vocab_sizes)
        width = n_numeric + embedding_dim * len(vocab_sizes)
        self.body = nn.Sequential(
            nn.Linear(width, HIDDEN[0]),
            nn.ReLU(),
            nn.Linear(HIDDEN[0], HIDDEN[1]),
            nn.ReLU(),
            nn.Linear(HIDDEN[1], 1),
        )

    def forward(self, numeric: torch.Tensor, categorical: torch.Tensor) -> torch.Tensor:
        parts = [numeric] + [emb(categorical[:, j]) for j, emb in enumerate(self.embeddings)]
        return self.body(torch.cat(parts, dim=1)).squeeze(1)


def describe_architecture(n_numeric: int, vocab_sizes: list[int]) -> str:
    return (
        f"MLP: {n_numeric} standardized numeric + {len(vocab_sizes)} categorical "
        f"(Embedding(vocab+1, {EMBEDDING_DIM}) each) -> Linear {HIDDEN[0]} -> ReLU -> "
        f"Linear {HIDDEN[1]} -> ReLU -> Linear 1; Adam, MSE"
    )


class TrainedRegressor:
    """A fitted model with its preprocessor; predicts in label units."""

    def __init__(
        self,
        model: MLPRegressor,
        preprocessor: Preprocessor,
        target_mean: float,
        target_std: float,
        *,
        device: str,
        history: list[dict[str, Any]],
        n_train: int,
        n_validation: int,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.model_ = model
        self.preprocessor_ = preprocessor
        self.target_mean_ = target_mean
        self.target_std_ = target_std
        self.device_ = device
        self.history_ = history
        self.n_train_ = n_train
        self.n_validation_ = n_validation
        self.config_ = config or {}

    @property
    def architecture(self) -> str:
        return describe_architecture(len(self.preprocessor_.numeric_columns), self.preprocessor_.vocab_sizes)

    def predict(self, table: pa.Table) -> np.ndarray:
        """Predictions for the rows of ``table`` (missing columns count as missing values)."""
        numeric, categorical = self.preprocessor_.transform(table)
        device = next(self.model_.parameters()).device
        out = np.empty(table.num_rows, dtype=np.float64)
        self.model_.eval()
        with torch.no_grad():
            for start in range(0, table.num_rows, PREDICT_CHUNK):
                stop = start + PREDICT_CHUNK
                x = torch.from_numpy(numeric[start:stop]).to(device)
                c = torch.from_numpy(categorical[start:stop]).to(device)
                out[start:stop] = self.model_(x, c).double().cpu().numpy()
        return out * self.target_std_ + self.target_mean_

    def save(self, path: str | Path) -> None:
        """Atomic write of weights, preprocessor and metadata (plain types only)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "format": FORMAT_VERSION,
            "state_dict": {k: v.detach().cpu() for k, v in self.model_.state_dict().items()},
            "preprocessor": self.preprocessor_.to_dict(),
            "target_mean": self.target_mean_,
            "target_std": self.target_std_,
            "device": self.device_,
            "history": self.history_,
            "n_train": self.n_train_,
            "n_validation": self.n_validation_,
            "config": self.config_,
        }
        tmp = path.with_name(path.name + ".tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu") -> "TrainedRegressor":
        """Load with ``weights_only=True``: a model file cannot run code."""
        state = torch.load(Path(path), map_location="cpu", weights_only=True)
        pre = Preprocessor.from_dict(state["preprocessor"])
        model = MLPRegressor(len(pre.numeric_columns), pre.vocab_sizes)
        model.load_state_dict(state["state_dict"])
        model.to(resolve_device(device))
        model.eval()
        return cls(
            model,
            pre,
            float(state["target_mean"]),
            float(state["target_std"]),
            device=state["device"],
            history=state["history"],
            n_train=int(state["n_train"]),
            n_validation=int(state["n_validation"]),
            config=state.get("config"),
        )


def _split(n: int, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if n < 1:
        raise ValueError("no rows to train on")
    n_val = int(math.floor(n * fraction))
    if fraction > 0 and n >= 2:
        n_val = min(max(n_val, 1), n - 1)
    order = rng.permutation(n)
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def fit_regressor(
    table: pa.Table,
    targets: np.ndarray,
    config: TrainingConfig,
    on_epoch: Callable[[EpochReport], None] | None = None,
) -> TrainedRegressor:
    """Train the MLP on ``table`` (feature columns only, rows aligned with ``targets``).

    A random ``validation_fraction`` of rows is held out; the preprocessor and the
    target scaling are fitted on the training rows. ``on_epoch`` runs after every
    epoch (it may raise to stop training).
    """
    targets = np.asarray(targets, dtype=np.float64)
    if targets.shape != (table.num_rows,):
        raise ValueError("targets must have one value per row")
    if not np.all(np.isfinite(targets)):
        raise ValueError("targets must be finite")
    if config.epochs < 1 or config.batch_size < 1:
        raise ValueError("epochs and batch_size must be positive")
    if not 0 <= config.validation_fraction < 1:
        raise ValueError("validation_fraction must be in [0, 1)")
    if config.threads > 0:
        torch.set_num_threads(config.threads)

    seed = config.seed if config.seed is not None else secrets.randbits(63)
    rng = np.random.default_rng(seed)
    device = resolve_device(config.device)
    train_idx, val_idx = _split(table.num_rows, config.validation_fraction, rng)

    train_table = table.take(pa.array(train_idx))
    pre = Preprocessor.fit(train_table)
    y_mean = float(targets[train_idx].mean())
    y_std = float(targets[train_idx].std())
    y_std = y_std if y_std > 1e-12 else 1.0
    scale2 = y_std * y_std

    def tensors(idx: np.ndarray, part: pa.Table | None = None) -> tuple[torch.Tensor, ...]:
        num, cat = pre.transform(part if part is not None else table.take(pa.array(idx)))
        y = ((targets[idx] - y_mean) / y_std).astype(np.float32)
        return (torch.from_numpy(num).to(device), torch.from_numpy(cat).to(device), torch.from_numpy(y).to(device))

    x_tr, c_tr, y_tr = tensors(train_idx, train_table)
    x_va, c_va, y_va = tensors(val_idx) if len(val_idx) else (None, None, None)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = MLPRegressor(len(pre.numeric_columns), pre.vocab_sizes).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    loss_fn = nn.MSELoss()
    shuffle = torch.Generator().manual_seed(seed)
    history: list[dict[str, Any]] = []
    n_train = len(train_idx)

    for epoch in range(1, config.epochs + 1):
        started = time.perf_counter()
        model.train()
        order = torch.randperm(n_train, generator=shuffle).to(device)
        total = torch.zeros((), dtype=torch.float64, device=device)
        for start in range(0, n_train, config.batch_size):
            batch = order[start : start + config.batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x_tr[batch], c_tr[batch]), y_tr[batch])
            loss.backward()
            optimizer.step()
            total += loss.detach().double() * len(batch)
        train_loss = float(total.item()) / n_train * scale2
        val_loss = _evaluate(model, x_va, c_va, y_va) * scale2 if x_va is not None else None
        report = EpochReport(epoch, config.epochs, train_loss, val_loss, time.perf_counter() - started)
        history.append({"epoch": epoch, "train_loss": train_loss, "val_loss": val_loss})
        if on_epoch is not None:
            on_epoch(report)

    model.eval()
    return TrainedRegressor(
        model,
        pre,
        y_mean,
        y_std,
        device=device,
        history=history,
        n_train=n_train,
        n_validation=len(val_idx),
        config={**asdict(config), "seed": seed},
    )


def _evaluate(model: MLPRegressor, x: torch.Tensor, c: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    total = 0.0
    with torch.no_grad():
        for start in range(0, len(y), PREDICT_CHUNK):
            stop = start + PREDICT_CHUNK
            err = model(x[start:stop], c[start:stop]) - y[start:stop]
            total += float((err.double() ** 2).sum().item())
    return total / len(y)
