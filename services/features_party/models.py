"""Trained models: their cards (what a model is and what privacy it was trained under)
and predictions, by ids of the model's feature table or by explicit rows.

A model is a regressor or, for a release whose mechanism declares ``classes``, a
classifier; the card and the prediction response say which.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from features_party import feature_tables, responses, store
from labeldp.errors import InvalidInput, NotFound
from labeldp.learning.batch_predict import PredictionError, check_feature_values, predict_columns
from labeldp.learning.persistence import TrainedClassifier, TrainedModel, load_model
from labeldp.learning.tasks import CLASSIFICATION, LabelTask
from labeldp.parquet_batches import check_unicode, is_unicode
from labeldp.service.pagination import ASC, Order, after, check_limit, next_cursor, ordered
from labeldp.service.timestamps import iso
from labeldp.storage import ObjectStore

MAX_PREDICT_ROWS = 1_000_000


class PredictRequest(BaseModel):
    """Exactly one of ``ids`` (rows of the model's feature table) or ``rows`` (column -> value)."""

    model_config = ConfigDict(extra="forbid")

    ids: list[str] | None = None
    rows: list[dict[str, Any]] | None = None


def get_model(session: Session, model_id: str) -> store.Model:
    row = session.get(store.Model, model_id)
    if row is None:
        raise NotFound("model_not_found", "no such model")
    return row


TRAINING_FIELDS = ("optimizer", "schedule", "step_epoch", "step_factor", "learning_rate", "batch_size", "weight_decay")


def learning_card(training: store.Training | None, model: TrainedModel | None) -> dict[str, Any] | None:
    """A regressor's learning configuration and what private model selection chose.

    The configuration comes from the training row, the choices (epoch, λ, the
    selection estimate) from the model file, which ``predict`` applies.
    """
    config = (training.config or {}) if training is not None else {}
    selection = getattr(model, "selection_", None) or {}
    post = getattr(model, "postprocessing_", None)
    if "debias" not in config and not selection:
        return None
    epochs = selection.get("epochs") or []
    return {
        "debias": config.get("debias"),
        "shrinkage": config.get("shrinkage"),
        "select_epoch": config.get("select_epoch"),
        "selected_epoch": selection.get("selected_epoch"),
        "selected_shrinkage": post.shrinkage if post is not None else None,
        "private_mean": post.anchor if post is not None else None,
        "selected_model_weight": post.model_weight if post is not None and post.anchor is not None else None,
        "mean_fallback": selection.get("mean_fallback"),
        "guard_weight": selection.get("guard_weight"),
        "gain_over_mean": selection.get("gain_over_mean"),
        "detectable_z": selection.get("detectable_z"),
        "selection_estimate": selection.get("estimate"),
        "selection_criterion": selection.get("criterion"),
        "selection_note": selection.get("note"),
        "label_law": post.law.name if post is not None else None,
        "estimates_by_epoch": [e.get("estimate") for e in epochs],
    }


def model_card(
    row: store.Model, training: store.Training | None = None, model: TrainedModel | None = None
) -> responses.ModelCard:
    """Everything needed to judge a model: its task, its data, its privacy cost, its fit.

    The task and classes follow from the release's mechanism spec (as training chose
    them); classification accuracies come from the training's last history entry.
    ``model`` (the loaded file, optional) adds what model selection chose.
    """
    task = LabelTask.of(row.mechanism_spec)
    metrics: dict[str, Any] = {"train_loss": row.train_loss, "val_loss": row.val_loss}
    note = (
        "train_loss/val_loss: MSE against privatized labels (at the selected epoch, when one was selected), "
        "noise included; true_label: the validation rows' MSE and R² on the true-label scale (the mechanism's "
        "known noise variance removed from the debiased privatized labels' error: unbiased for additive noise), "
        "each with its standard error, beside baseline_mse, the MSE of predicting the private mean; the "
        "validation rows also chose the epoch and shrinkage, so it is slightly optimistic"
    )
    if task.task != CLASSIFICATION:
        metrics["true_label"] = (getattr(model, "selection_", None) or {}).get("true_scale")
    if task.task == CLASSIFICATION:
        last = (training.history or [{}])[-1] if training is not None else {}
        metrics["train_accuracy"] = last.get("train_accuracy")
        metrics["val_accuracy"] = last.get("val_accuracy")
        corrected = bool(training is not None and (training.config or {}).get("forward_correction"))
        note = (
            "cross-entropy (nats) of the privatized labels"
            + (" under softmax(f)·T (forward correction)" if corrected else "")
            + "; accuracy of the predicted class against privatized labels"
        )
    return responses.ModelCard(
        task=task.task,
        classes=list(task.classes) if task.classes is not None else None,
        id=row.model_id,
        training_id=row.training_id,
        release_id=row.release_id,
        label_set_id=row.label_set_id,
        feature_table=row.feature_table,
        feature_table_id=training.feature_table_id if training is not None else None,
        mechanism=row.mechanism_name,
        mechanism_spec=row.mechanism_spec,
        epsilon=row.total_epsilon_micro / 1_000_000,
        accounting=row.accounting,
        n_train=row.n_train,
        n_validation=row.n_validation,
        metrics=metrics,
        metrics_note=note,
        device=row.device,
        epochs=row.epochs,
        created_at=iso(row.created_at),
        architecture=row.architecture,
        training={k: (training.config or {}).get(k) for k in TRAINING_FIELDS} if training is not None else None,
        learning=learning_card(training, model) if task.task != CLASSIFICATION else None,
        runtime=runtime_card(model),
    )


def list_models(
    session: Session, limit: int, cursor: str | None, release_id: str | None = None, order: Order = ASC
) -> responses.ModelPage:
    """A page of model cards in creation ``order``. Cards come from the catalogue alone: what model
    selection chose lives in each model file and is on ``GET /v1/models/{id}``."""
    limit = check_limit(limit)
    stmt = select(store.Model, store.Training).outerjoin(
        store.Training, store.Training.training_id == store.Model.training_id
    )
    if release_id is not None:
        stmt = stmt.where(store.Model.release_id == release_id)
    where = after(store.Model.created_at, store.Model.model_id, cursor, order)
    if where is not None:
        stmt = stmt.where(where)
    stmt = stmt.order_by(*ordered(store.Model.created_at, store.Model.model_id, order))
    rows = session.execute(stmt.limit(limit + 1)).all()
    last = rows[limit - 1][0] if len(rows) > limit else None
    return responses.ModelPage(
        items=[model_card(model, training) for model, training in rows[:limit]],
        next_cursor=next_cursor(last, store.Model.created_at, store.Model.model_id, order),
    )


RUNTIME_FIELDS = ("device", "precision", "workers", "rows_per_second")


def runtime_card(model: TrainedModel | None) -> responses.Runtime | None:
    """Where and how fast the model trained (device, precision, workers, training rows/s), from its file.

    Models saved before these were recorded report ``None`` for each.
    """
    if model is None:
        return None
    return responses.Runtime(**{k: model.config_.get(k) for k in RUNTIME_FIELDS})


class ModelCache:
    """A small per-app LRU of loaded models (model objects never change once written)."""

    def __init__(self, objects: ObjectStore, device: str = "cpu", size: int = 4) -> None:
        self.objects = objects
        self.device = device
        self.size = size
        self._models: OrderedDict[str, TrainedModel] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, row: store.Model) -> TrainedModel:
        with self._lock:
            if row.model_id in self._models:
                self._models.move_to_end(row.model_id)
                return self._models[row.model_id]
        model = load_model(self.objects.get_bytes(row.path), device=self.device)
        with self._lock:
            self._models[row.model_id] = model
            while len(self._models) > self.size:
                self._models.popitem(last=False)
        return model


def rows_to_table(rows: list[dict[str, Any]], model: TrainedModel, allowed_extra: set[str]) -> pa.Table:
    """Explicit rows -> an Arrow table of the model's columns; every row names every feature (null: missing)."""
    pre = model.preprocessor_
    known = set(pre.numeric_columns) | set(pre.categorical_columns) | allowed_extra
    for i, row in enumerate(rows):  # JSON's "\ud800" decodes to a str that UTF-8 (and Arrow) cannot hold
        if not all(is_unicode(key) for key in row):
            raise InvalidInput("invalid_rows", "a column name is not valid Unicode text", [{"row": i + 1}])
    unknown = sorted({key for row in rows for key in row} - known)
    if unknown:
        raise InvalidInput(
            "unknown_column", "rows name columns the model does not use", [{"column": c} for c in unknown[:20]]
        )
    needed = [*pre.numeric_columns, *pre.categorical_columns]
    lacking = [{"row": i + 1, "column": c} for i, row in enumerate(rows) for c in needed if c not in row]
    if lacking:  # as /predictions refuses a file without the column; a null value is a missing value
        raise InvalidInput(
            "missing_columns", f"{len(lacking)} values of the model's features are absent from the rows "
            "(send null for a missing value)", lacking[:50]
        )
    arrays: dict[str, pa.Array] = {}
    for name in pre.numeric_columns:
        values = []
        for i, row in enumerate(rows):
            values.append(_number(row.get(name), name, i + 1))  # rows numbered from 1, as uploads
        arrays[name] = pa.array(values, pa.float64())
    for name in pre.categorical_columns:
        texts = [_category(row.get(name)) for row in rows]
        check_unicode(texts, code="invalid_rows", what=f"value of column {name!r}")
        arrays[name] = pa.array(texts, pa.string())
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
    raise InvalidInput("invalid_rows", "a numeric column has a non-numeric value", [{"row": index, "column": column}])


def _category(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def predict(
    session_factory: sessionmaker[Session],
    objects: ObjectStore,
    cache: ModelCache,
    model_id: str,
    request: PredictRequest,
) -> responses.Predictions:
    """One prediction per requested id or row, in request order.

    Regressor: ``predictions`` in label units, ``probabilities`` and ``classes`` left unset (the
    route excludes unset fields). Classifier: ``predictions`` as class names, ``probabilities``
    (one per class) and ``classes`` (names in index order).
    """
    if (request.ids is None) == (request.rows is None):
        raise InvalidInput("invalid_request", "give exactly one of ids or rows")
    n = len(request.ids if request.ids is not None else request.rows or [])
    if n > MAX_PREDICT_ROWS:
        raise InvalidInput("too_many_rows", f"at most {MAX_PREDICT_ROWS} rows per request")
    with session_factory() as session:
        row = get_model(session, model_id)
        table_row = feature_tables.get_feature_table(session, row.feature_table)
    model = cache.get(row)
    if n == 0:
        return _response(model, rows_to_table([], model, set()))
    if request.ids is not None:
        table = feature_tables.read_table(objects, table_row)
        features = feature_tables.select_rows(table, table_row.id_column, request.ids)
    else:
        features = rows_to_table(request.rows or [], model, {table_row.id_column})
    return _response(model, features)


def _response(model: TrainedModel, features: pa.Table) -> responses.Predictions:
    """The answer for ``features``; NaN, infinities and unpredictable values refused as by /predictions."""
    try:
        if not isinstance(model, TrainedClassifier):
            return responses.Predictions(predictions=predict_columns(model, features)["prediction"].to_pylist())
        check_feature_values(model, features)
    except PredictionError as exc:
        raise InvalidInput(exc.code, str(exc), exc.details) from None
    if isinstance(model, TrainedClassifier):
        probabilities = model.predict_proba(features)
        names = [model.classes_[i] for i in probabilities.argmax(axis=1)]
        return responses.Predictions(
            predictions=names, probabilities=probabilities.tolist(), classes=list(model.classes_)
        )
    return responses.Predictions(predictions=model.predict(features).tolist())
