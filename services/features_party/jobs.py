"""Training jobs: queue, run in the background, record progress, leave a model.

One worker thread per app trains one model at a time (a GPU or the CPU cores are
the bottleneck, not concurrency). Progress is written to the database after every
epoch so ``GET /v1/trainings/{id}`` shows it while the job runs. Error messages
stored on a failed training are written by this module, never copied from an
exception, so they can carry no label value or feature row.

The release's mechanism spec decides the task: a spec that declares ``classes``
makes the label column class indices and the job trains a classifier (optionally
with forward loss correction by the spec's transition matrix); otherwise a regressor.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field, StrictBool, StrictFloat, StrictInt
from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session, sessionmaker

from features_party import feature_tables, inbox, store, streamed
from features_party.classifier import fit_classifier
from features_party.config import DEFAULT_LEARNING, PLAIN, LearningConfig, TrainingConfig, TrainingOptions
from features_party.debiasing import label_law
from features_party.device import resolve_device
from features_party.loop import EpochReport
from features_party.persistence import TrainedModel
from features_party.regression import fit_private_regressor
from features_party.tasks import CLASSIFICATION, LabelTask, check_transition_matrix, to_class_indices
from labeldp.http_api import ApiError
from labeldp.idempotency import Claim, StoredResponse

log = logging.getLogger("labeldp.features")

QUEUED, RUNNING, SUCCEEDED, FAILED = "queued", "running", "succeeded", "failed"
MODELS_DIR = "models"
LEARNING_FIELDS = ("debias", "shrinkage", "select_epoch")


class TrainingRequest(TrainingOptions):
    """Body of ``POST /v1/trainings``: the training options (defaults: the benchmarked default
    configuration, :mod:`features_party.config`), what to train on, and how to learn from it."""

    release_id: str = Field(min_length=1, max_length=256)
    feature_table: str | None = Field(
        None, description="the feature table to join the release with; required when the release names none"
    )
    forward_correction: bool = Field(
        False,
        description="categorical releases whose spec carries a transition_matrix: train with the forward-"
        "corrected loss CE(log(softmax(f(x))·T), ŷ) (Patrini et al. 2017)",
    )
    debias: Literal["none", "targets", "predictions"] = Field(
        DEFAULT_LEARNING.debias,
        description="regression: use the release's transition law E[ŷ|y] to debias predictions or training targets",
    )
    shrinkage: Literal["auto"] | Annotated[StrictFloat | StrictInt, Field(ge=0, le=1)] = Field(
        DEFAULT_LEARNING.shrinkage,
        description="λ of λ·debiased + (1 − λ)·plain, or 'auto' (chosen on the privatized validation split)",
    )
    select_epoch: StrictBool = Field(
        DEFAULT_LEARNING.select_epoch,
        description="keep the epoch with the best private validation estimate instead of the last",
    )

    def learning(self) -> LearningConfig:
        return LearningConfig(debias=self.debias, shrinkage=self.shrinkage, select_epoch=self.select_epoch)


class TrainingInterrupted(Exception):
    """Raised between epochs when the service shuts down."""


def create_training(
    session_factory: sessionmaker[Session],
    data_dir: Path,
    request: TrainingRequest,
    claim: Claim | None = None,
) -> StoredResponse:
    """Bind the release to a feature table that holds every one of its ids, then queue a training row.

    Every check runs before anything is written. The training row and, with an
    ``Idempotency-Key``, the stored answer (``claim``) commit in one transaction, so a
    retry either finds both or neither.
    """
    with session_factory() as session:
        release = inbox.get_release(session, request.release_id)
        table_name = request.feature_table or release.feature_table
        if not table_name:
            raise ApiError(
                422, "feature_table_required", "the release names no feature table; send feature_table"
            )
        table_row = session.get(store.FeatureTable, table_name)
        if table_row is None:
            raise ApiError(422, "unknown_feature_table", f"no feature table {table_name!r} is held here")
        task = LabelTask.of(release.mechanism)
        if request.forward_correction:
            _check_forward_correction(task)
        learning = resolve_learning(request, task, release.mechanism)
        ids, _labels = inbox.release_columns(release)
        release_id = release.release_id
    del _labels
    check_join(data_dir, table_row, ids)

    training_id = uuid.uuid4().hex
    options = request.model_dump(exclude={"release_id", "feature_table", *LEARNING_FIELDS})
    response = StoredResponse(
        202,
        {"training_id": training_id, "status": QUEUED},
        {"Location": f"/v1/trainings/{training_id}"},
    )
    with session_factory.begin() as session:
        session.add(
            store.Training(
                training_id=training_id,
                release_id=release_id,
                feature_table=table_row.name,
                config={**options, **(learning.to_dict() if learning is not None else {})},
                status=QUEUED,
                epoch=0,
                epochs=request.epochs,
                history=[],
            )
        )
        if claim is not None:
            claim.complete(session, response)
    log.info("training %s queued for release %s on table %s", training_id, release_id, table_row.name)
    return response


def check_join(data_dir: Path, table_row: store.FeatureTable, ids: list[str]) -> None:
    """422 ``unknown_ids`` (a count and a few ids, which are public; never labels) unless the
    table holds every id of the release."""
    table_ids = feature_tables.read_table(data_dir, table_row, [table_row.id_column]).column(0)
    missing, examples = feature_tables.missing_ids(pa.array(ids, pa.string()), table_ids)
    if missing:
        raise feature_tables.unknown_ids_error(missing, examples)


def resolve_learning(request: TrainingRequest, task: LabelTask, spec: Any) -> LearningConfig | None:
    """The learning configuration a training will run with (None: classification), or 422.

    Fields the request leaves out fall back to what can run: without a validation
    split nothing is selected (and debiasing stays off unless asked for, at λ = 1),
    and a release whose mechanism has no known label law trains plainly. Fields the
    request sets explicitly are honoured or refused, never silently changed.
    """
    explicit = request.model_fields_set & set(LEARNING_FIELDS)
    if task.task == CLASSIFICATION:
        if explicit:
            message = "debias, shrinkage and select_epoch apply to regression releases"
            raise ApiError(422, "learning_unavailable", message)
        return None
    learning = request.learning()
    try:
        label_law(spec)
    except ValueError:
        asks_debias = "debias" in explicit and request.debias != "none"
        if asks_debias or ("select_epoch" in explicit and request.select_epoch):
            raise ApiError(
                422, "label_law_unavailable", "the release's mechanism states no label law to debias or select with"
            ) from None
        return PLAIN
    if request.validation_fraction == 0 and learning.needs_validation:
        debias = learning.debias if "debias" in explicit else "none"
        learning = LearningConfig(
            debias=debias,
            shrinkage=learning.shrinkage if "shrinkage" in explicit else (0.0 if debias == "none" else 1.0),
            select_epoch=learning.select_epoch if "select_epoch" in explicit else False,
        )
        if learning.needs_validation:
            raise ApiError(
                422, "validation_required", "select_epoch and shrinkage='auto' need validation_fraction > 0"
            )
    return learning


def _check_forward_correction(task: LabelTask) -> None:
    """Forward correction needs a categorical release whose spec states its transition matrix."""
    if task.task != CLASSIFICATION or task.transition_matrix is None:
        raise ApiError(
            422,
            "forward_correction_unavailable",
            "forward_correction needs a categorical release whose mechanism spec carries a transition_matrix",
        )
    try:
        check_transition_matrix(task.transition_matrix, task.n_classes)
    except ValueError:
        k = task.n_classes
        message = f"transition_matrix must be {k}x{k} and row-stochastic"
        raise ApiError(422, "invalid_transition_matrix", message) from None


def fit_for_release(
    task: LabelTask,
    features: pa.Table,
    labels: np.ndarray,
    config: TrainingConfig,
    on_epoch: Callable[[EpochReport], None] | None = None,
    *,
    forward_correction: bool = False,
    spec: Any = None,
    learning: LearningConfig = PLAIN,
) -> TrainedModel:
    """Train the model the release's labels call for: a regressor, or a classifier over its classes.

    Regressors learn as ``learning`` says from the release's mechanism ``spec``
    (:func:`fit_private_regressor`); the default is plain training on the labels.
    """
    if task.task != CLASSIFICATION:
        if forward_correction:
            _check_forward_correction(task)
        law = streamed.law_for(spec, learning)
        return fit_private_regressor(features, labels, law, config, learning, on_epoch)
    if task.n_classes < 2:
        raise ApiError(422, "invalid_classes", "a categorical release needs at least two distinct classes")
    try:
        indices = to_class_indices(labels, task.n_classes)
    except ValueError:
        message = f"labels of a categorical release must be class indices 0..{task.n_classes - 1}"
        raise ApiError(422, "invalid_class_labels", message) from None
    matrix = None
    if forward_correction:
        _check_forward_correction(task)
        matrix = task.transition_matrix
    return fit_classifier(
        features, indices, task.n_classes, config, on_epoch, classes=list(task.classes or ()), transition_matrix=matrix
    )


def get_training(session: Session, training_id: str) -> store.Training:
    row = session.get(store.Training, training_id)
    if row is None:
        raise ApiError(404, "training_not_found", "no such training")
    return row


def describe_training(row: store.Training) -> dict[str, Any]:
    return {
        "training_id": row.training_id,
        "status": row.status,
        "release_id": row.release_id,
        "feature_table": row.feature_table,
        "progress": {
            "epoch": row.epoch,
            "epochs": row.epochs,
            "fraction": row.epoch / row.epochs if row.epochs else 0.0,
        },
        "history": row.history or [],
        "model_id": row.model_id,
        "device": row.device,
        "error": row.error,
        "created_at": store.iso(row.created_at),
        "started_at": store.iso(row.started_at),
        "finished_at": store.iso(row.finished_at),
    }


def recover(session_factory: sessionmaker[Session]) -> list[str]:
    """After a restart: fail trainings a crash left running; return the queued ones to resubmit."""
    with session_factory.begin() as session:
        result = session.execute(
            update(store.Training)
            .where(store.Training.status == RUNNING)
            .values(status=FAILED, error="interrupted", finished_at=store.utcnow())
        )
        queued = session.scalars(
            select(store.Training.training_id)
            .where(store.Training.status == QUEUED)
            .order_by(store.Training.created_at)
        ).all()
    interrupted = cast(CursorResult[Any], result).rowcount
    if interrupted:
        log.warning("%d trainings were interrupted by a restart", interrupted)
    return list(queued)


@dataclass(frozen=True)
class JobContext:
    """What a job needs from the app, passed in rather than read from globals."""

    session_factory: sessionmaker[Session]
    data_dir: Path
    device: str = "auto"
    threads: int = 0
    workers: int = 1
    streaming: bool = False
    row_group_rows: int = 65_536
    buffer_row_groups: int = 4
    on_status: Callable[[str], None] | None = None

    def status_changed(self, status: str) -> None:
        if self.on_status is not None:
            self.on_status(status)


def run_training(ctx: JobContext, training_id: str, stop: threading.Event | None = None) -> None:
    """Run one queued training to success or failure; never raises."""
    device = resolve_device(ctx.device)
    with ctx.session_factory.begin() as session:
        row = session.get(store.Training, training_id)
        if row is None or row.status != QUEUED:
            return
        row.status, row.started_at, row.device = RUNNING, store.utcnow(), device
        options = dict(row.config)
        forward_correction = bool(options.pop("forward_correction", False))
        # Rows queued before learning options existed train as they were requested: plainly.
        learning = LearningConfig(
            debias=options.pop("debias", PLAIN.debias),
            shrinkage=options.pop("shrinkage", PLAIN.shrinkage),
            select_epoch=bool(options.pop("select_epoch", PLAIN.select_epoch)),
        )
        options.setdefault("schedule", "none")  # rows queued before schedules existed: a constant rate
        config = TrainingConfig(
            **options, device=device, threads=ctx.threads,
            row_group_rows=ctx.row_group_rows, buffer_row_groups=ctx.buffer_row_groups,
        )
        release_id, table_name = row.release_id, row.feature_table
    ctx.status_changed(RUNNING)
    log.info("training %s started on %s", training_id, device)
    history: list[dict[str, Any]] = []

    def on_epoch(report: EpochReport) -> None:
        history.append(report.as_history())
        with ctx.session_factory.begin() as s:
            s.execute(
                update(store.Training)
                .where(store.Training.training_id == training_id)
                .values(epoch=report.epoch, history=list(history))
            )
        if stop is not None and stop.is_set() and report.epoch < report.epochs:
            raise TrainingInterrupted()

    model_path: Path | None = None
    try:
        with ctx.session_factory() as session:
            release = inbox.get_release(session, release_id)
            ids, labels = inbox.release_columns(release)
            table_row = feature_tables.get_feature_table(session, table_name)
            meta = {
                "release_id": release.release_id,
                "label_set_id": release.label_set_id,
                "mechanism_name": release.mechanism_name,
                "mechanism_spec": release.mechanism,
                "total_epsilon_micro": release.total_epsilon_micro,
                "accounting": release.accounting,
                "feature_table": table_row.name,
            }
            task = LabelTask.of(release.mechanism)
            table_path, id_column = Path(ctx.data_dir) / table_row.path, table_row.id_column
        trained: TrainedModel
        if (ctx.workers > 1 or ctx.streaming) and task.task != CLASSIFICATION:  # docs/architecture.md
            trained = streamed.fit_in_work_dir(
                Path(ctx.data_dir), table_path, id_column, ids, labels, meta["mechanism_spec"], config,
                learning, on_epoch, workers=ctx.workers,
            )
        else:
            features = feature_tables.select_rows(pq.read_table(table_path), id_column, ids)
            trained = fit_for_release(
                task, features, labels, config, on_epoch,
                forward_correction=forward_correction, spec=meta["mechanism_spec"], learning=learning,
            )

        model_id = uuid.uuid4().hex
        relative = f"{MODELS_DIR}/{model_id}.pt"
        model_path = Path(ctx.data_dir) / relative
        trained.save(model_path)
        last = _selected_entry(trained)
        with ctx.session_factory.begin() as session:
            session.add(
                store.Model(
                    model_id=model_id,
                    training_id=training_id,
                    n_train=trained.n_train_,
                    n_validation=trained.n_validation_,
                    train_loss=last["train_loss"],
                    val_loss=last["val_loss"],
                    device=trained.device_,
                    epochs=config.epochs,
                    architecture=trained.architecture,
                    path=relative,
                    **meta,
                )
            )
            row = session.get(store.Training, training_id)
            if row is None:
                raise FileNotFoundError("the training row is gone")  # deleted while it ran: fail, keep no model
            row.status, row.model_id, row.finished_at = SUCCEEDED, model_id, store.utcnow()
            row.epoch, row.history = config.epochs, list(trained.history_)
    except Exception as exc:
        if model_path is not None:
            model_path.unlink(missing_ok=True)
        message = _safe_error(exc)
        log.error("training %s failed: %s (%s)", training_id, message, type(exc).__name__)
        with ctx.session_factory.begin() as session:
            row = session.get(store.Training, training_id)
            if row is not None:
                row.status, row.error, row.finished_at = FAILED, message, store.utcnow()
        ctx.status_changed(FAILED)
        return
    log.info("training %s succeeded: model %s, %d train rows", training_id, model_id, trained.n_train_)
    ctx.status_changed(SUCCEEDED)


def _selected_entry(trained: TrainedModel) -> dict[str, Any]:
    """The history entry of the epoch whose weights the model holds (the last one without selection)."""
    selection = getattr(trained, "selection_", None) or {}
    epoch = selection.get("selected_epoch")
    for entry in trained.history_:
        if entry["epoch"] == epoch:
            return entry
    return trained.history_[-1]


def _safe_error(exc: Exception) -> str:
    """A message written here, not an exception's text (which could quote data)."""
    if isinstance(exc, TrainingInterrupted):
        return "interrupted"
    if isinstance(exc, ApiError):
        return f"{exc.code}: {exc.message}"  # our own messages carry counts, not values
    if isinstance(exc, MemoryError):
        return "out of memory"
    name = type(exc).__name__
    if "OutOfMemory" in name:
        return "out of accelerator memory; try a smaller batch_size"
    if isinstance(exc, FileNotFoundError):
        return "stored feature table or model file is missing"
    return f"training failed ({name})"


class TrainingRunner:
    """The app's single background worker; started and stopped by the app's lifespan."""

    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        """Recover from a previous process, then start the worker and resubmit queued work."""
        queued = recover(self.ctx.session_factory)
        for training_id in queued:
            self.submit(training_id)

    def submit(self, training_id: str) -> None:
        with self._lock:
            if self._executor is None:
                self._stop.clear()
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="labeldp-training")
            self._executor.submit(self._run, training_id)

    def _run(self, training_id: str) -> None:
        try:
            run_training(self.ctx, training_id, self._stop)
        except Exception as exc:
            log.error("training %s could not be run: %s", training_id, type(exc).__name__)

    def shutdown(self, wait: bool = True) -> None:
        """Stop after the running epoch; queued trainings stay queued for the next start."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            self._stop.set()
            executor.shutdown(wait=wait, cancel_futures=True)
