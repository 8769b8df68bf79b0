"""Trained models: their cards (what a model is and what privacy it was trained under)
and predictions, by ids of the model's feature table or by explicit rows.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict
from sqlalchemy.orm import Session, sessionmaker

from features_party import feature_tables, store
from features_party.training import TrainedRegressor
from labeldp.http_api import ApiError

MAX_PREDICT_ROWS = 1_000_000


class PredictRequest(BaseModel):
    """Exactly one of ``ids`` (rows of the model's feature table) or ``rows`` (column -> value)."""

    model_config = ConfigDict(extra="forbid")

    ids: list[str] | None = None
    rows: list[dict[str, Any]] | None = None


def get_model(session: Session, model_id: str) -> store.Model:
    row = session.get(store.Model, model_id)
    if row is None:
        raise ApiError(404, "model_not_found", "no such model")
    return row


def model_card(row: store.Model) -> dict[str, Any]:
    """Everything needed to judge a model: its data, its privacy cost, its fit."""
    return {
        "model_id": row.model_id,
        "training_id": row.training_id,
        "release_id": row.release_id,
        "label_set_id": row.label_set_id,
        "feature_table": row.feature_table,
        "mechanism": row.mechanism_name,
        "mechanism_spec": row.mechanism_spec,
        "epsilon": row.total_epsilon_micro / 1_000_000,
        "accounting": row.accounting,
        "n_train": row.n_train,
        "n_validation": row.n_validation,
        "metrics": {"train_loss": row.train_loss, "val_loss": row.val_loss},
        "metrics_note": "MSE against privatized labels",
        "device": row.device,
        "epochs": row.epochs,
        "created_at": store.iso(row.created_at),
        "architecture": row.architecture,
    }


class ModelCache:
    """A small per-app LRU of loaded models (model files never change once written)."""

    def __init__(self, data_dir: Path, device: str = "cpu", size: int = 4) -> None:
        self.data_dir = Path(data_dir)
        self.device = device
        self.size = size
        self._models: OrderedDict[str, TrainedRegressor] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, row: store.Model) -> TrainedRegressor:
        with self._lock:
            if row.model_id in self._models:
                self._models.move_to_end(row.model_id)
                return self._models[row.model_id]
        model = TrainedRegressor.load(self.data_dir / row.path, device=self.device)
        with self._lock:
            self._models[row.model_id] = model
            while len(self._models) > self.size:
                self._models.popitem(last=False)
        return model


def rows_to_table(rows: list[dict[str, Any]], model: TrainedRegressor, allowed_extra: set[str]) -> pa.Table:
    """Explicit rows -> an Arrow table of the model's columns; absent values become nulls."""
    pre = model.preprocessor_
    known = set(pre.numeric_columns) | set(pre.categorical_columns) | allowed_extra
    unknown = sorted({key for row in rows for key in row} - known)
    if unknown:
        raise ApiError(
            422, "unknown_column", "rows name columns the model does not use", [{"column": c} for c in unknown[:20]]
        )
    arrays: dict[str, pa.Array] = {}
    for name in pre.numeric_columns:
        values = []
        for i, row in enumerate(rows):
            values.append(_number(row.get(name), name, i))
        arrays[name] = pa.array(values, pa.float64())
    for name in pre.categorical_columns:
        arrays[name] = pa.array([_category(row.get(name)) for row in rows], pa.string())
    return pa.table(arrays) if arrays else pa.table({"_": pa.nulls(len(rows))})


def _number(value: Any, column: str, index: int) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    # Location only: the value itself is not echoed back.
    raise ApiError(422, "invalid_rows", "a numeric column has a non-numeric value", [{"row": index, "column": column}])


def _category(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def predict(
    session_factory: sessionmaker[Session],
    data_dir: Path,
    cache: ModelCache,
    model_id: str,
    request: PredictRequest,
) -> list[float]:
    """Predictions in label units, one per requested id or row, in request order."""
    if (request.ids is None) == (request.rows is None):
        raise ApiError(422, "invalid_request", "give exactly one of ids or rows")
    n = len(request.ids if request.ids is not None else request.rows or [])
    if n > MAX_PREDICT_ROWS:
        raise ApiError(422, "too_many_rows", f"at most {MAX_PREDICT_ROWS} rows per request")
    with session_factory() as session:
        row = get_model(session, model_id)
        table_row = feature_tables.get_feature_table(session, row.feature_table)
    model = cache.get(row)
    if n == 0:
        return []
    if request.ids is not None:
        table = feature_tables.read_table(data_dir, table_row)
        features = feature_tables.select_rows(table, table_row.id_column, request.ids)
    else:
        features = rows_to_table(request.rows or [], model, {table_row.id_column})
    predictions: np.ndarray = model.predict(features)
    return predictions.tolist()
