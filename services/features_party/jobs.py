"""Training jobs: queue, run by a worker, record progress, leave a model, or be cancelled.

The queue is the trainings table: any API process queues a row, and a worker
(:mod:`features_party.worker`: ``labeldp worker features``, or the API's in-process one)
claims it under a lease (:mod:`features_party.leases`) and runs it here, one training
at a time per worker (a GPU or the CPU cores are the bottleneck, not concurrency). The
queue is bounded (``LABELDP_TRAINING_QUEUE_MAX`` queued rows; more get 429
``training_queue_full`` and create nothing). Progress is written to the row after every
epoch and every ``LABELDP_TRAINING_PROGRESS_SECONDS`` per batch
(:mod:`features_party.progress`), so ``GET /v1/trainings/{id}`` and its event stream on
any API process show it while the job runs. A queued training is cancelled at once; a
running one stops at the next batch boundary once its worker sees the cancel, and leaves
no model; a training whose worker died resumes from its checkpoint
(:mod:`features_party.checkpoints`) on another (docs/architecture.md, "Training jobs",
"Progress and events"). Error messages on a failed training are written here, never
copied from an exception, so they carry no label value or feature row.

The release's mechanism spec decides the task: a spec that declares ``classes``
makes the label column class indices and the job trains a classifier (optionally
with forward loss correction by the spec's transition matrix); otherwise a regressor.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import ConfigDict, Field
from sqlalchemy import CursorResult, and_, func, or_, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from features_party import checkpoints, feature_tables, inbox, leases, store
from features_party.progress import ProgressBoard, describe_progress, stored_progress
from features_party.store import CANCELLED, CANCELLING, FAILED, QUEUED, RUNNING, SUCCEEDED, TRAINING_STATUSES
from labeldp.errors import Busy, Conflict, InvalidInput, LabelDPError, NotFound
from labeldp.learning import streamed
from labeldp.learning.classifier import fit_classifier
from labeldp.learning.config import PLAIN, LearningConfig, TrainingConfig, TrainingOptions
from labeldp.learning.debiasing import private_mean
from labeldp.learning.device import resolve_device
from labeldp.learning.distributed import Hosts
from labeldp.learning.loop import EpochReport, _split
from labeldp.learning.persistence import TrainedModel, TrainedRegressor
from labeldp.learning.regression import fit_private_regressor
from labeldp.learning.tasks import CLASSIFICATION, LabelTask, check_transition_matrix, to_class_indices
from labeldp.learning.true_scale import noise_variance, true_scale_error
from labeldp.service.events import Snapshot
from labeldp.service.idempotency import Claim, StoredResponse
from labeldp.service.pagination import keyset_page, list_page
from labeldp.service.settings import Settings, open_object_store
from labeldp.service.timestamps import iso, utcnow
from labeldp.storage import ObjectStore

log = logging.getLogger("labeldp.features")

STATUSES = TRAINING_STATUSES
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})
QUEUE_LOCK = 0x6C616264  # PostgreSQL advisory lock serializing the queue bound's count-then-insert
MODELS_DIR = "models"
class _TrainingTarget(TrainingOptions):
    """The training options and what to train on (the request's fields before the learning ones)."""

    release_id: str = Field(min_length=1, max_length=256)
    feature_table: str | None = Field(
        None, description="the feature table to join the release with; required when the release names none"
    )
    forward_correction: bool = Field(
        False,
        description="categorical releases whose rows follow one transition matrix T (the mechanism's law): "
        "train with the forward-corrected loss CE(log(softmax(f(x))·T), ŷ) (Patrini et al. 2017)",
    )


class TrainingRequest(LearningConfig, _TrainingTarget):
    """Body of ``POST /v1/trainings``: the training options (defaults: the benchmarked default
    configuration, :mod:`labeldp.learning.config`), what to train on, and how to learn from it."""

    model_config = ConfigDict(extra="forbid", frozen=False)

    def learning(self) -> LearningConfig:
        return LearningConfig(**self.to_dict())


@dataclass(frozen=True)
class TrainingOrder:
    """A training's options as its row keeps them (the trainings table's JSON ``config``): the one
    conversion between the request's models and the stored form, both ways.

    Stored flat, as the request named them: the :class:`TrainingOptions`, ``forward_correction``
    and, for regressions, the resolved :class:`LearningConfig` fields (classifications store none).
    Rows queued before learning options existed train as they were requested: plainly; rows queued
    before schedules existed keep a constant rate.
    """

    options: TrainingOptions
    forward_correction: bool = False
    learning: LearningConfig | None = None  # None: a classification (or a row from before learning options)

    @classmethod
    def of_request(cls, request: TrainingRequest, learning: LearningConfig | None) -> TrainingOrder:
        return cls(TrainingOptions(**request.options()), request.forward_correction, learning)

    def stored(self) -> dict[str, Any]:
        learning = self.learning.to_dict() if self.learning is not None else {}
        return {**self.options.options(), "forward_correction": self.forward_correction, **learning}

    @classmethod
    def of_stored(cls, config: dict[str, Any]) -> TrainingOrder:
        values = dict(config)
        forward_correction = bool(values.pop("forward_correction", False))
        learned = {name: values.pop(name) for name in LearningConfig.model_fields if name in values}
        learning = LearningConfig(**{**PLAIN.to_dict(), **learned}) if learned else None
        values.setdefault("schedule", "none")
        return cls(TrainingOptions(**values), forward_correction, learning)


class TrainingInterrupted(Exception):
    """Raised between epochs when the worker stops: the training goes back to the queue."""


class TrainingCancelled(Exception):
    """Raised at a batch or epoch boundary once the training was asked to stop."""


def create_training(
    session_factory: sessionmaker[Session],
    objects: ObjectStore,
    request: TrainingRequest,
    claim: Claim | None = None,
    *,
    queue_max: int | None = None,
    retry_after: Callable[[], int] | None = None,
) -> StoredResponse:
    """Bind the release to a feature table that holds every one of its ids, then queue a training row.

    Every check runs before anything is written. The training row and, with an
    ``Idempotency-Key``, the stored answer (``claim``) commit in one transaction, so a
    retry either finds both or neither. With ``queue_max``, a full queue is a 429
    ``training_queue_full`` (checked first, and again in that transaction).
    """
    with session_factory() as session:
        _check_queue(session, queue_max, retry_after)
        release = inbox.get_release(session, request.release_id)
        table_name = request.feature_table or release.feature_table
        if not table_name:
            raise InvalidInput(
                "feature_table_required", "the release names no feature table; send feature_table"
            )
        table_row = session.get(store.FeatureTable, table_name)
        if table_row is None:
            raise InvalidInput("unknown_feature_table", f"no feature table {table_name!r} is held here")
        task = LabelTask.of(release.mechanism)
        if request.forward_correction:
            _check_forward_correction(task)
        learning = resolve_learning(request, task, release.mechanism)
        ids, _labels = inbox.release_columns(release)
        release_id = release.release_id
    del _labels
    check_join(objects, table_row, ids)

    training_id = "trn_" + uuid.uuid4().hex
    response = StoredResponse(
        202,
        {"id": training_id, "status": QUEUED},
        {"Location": f"/v1/trainings/{training_id}"},
    )
    with session_factory.begin() as session:
        _check_queue(session, queue_max, retry_after, lock=True)
        _check_table_unchanged(session, table_row)
        session.add(
            store.Training(
                training_id=training_id,
                release_id=release_id,
                feature_table=table_row.name,
                config=TrainingOrder.of_request(request, learning).stored(),
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


def _check_table_unchanged(session: Session, checked: store.FeatureTable) -> None:
    """The table the join was checked against is still the table of that name, locked until the training's
    row commits: a delete or replace (``feature_tables._lock_unused``) then sees the training and refuses."""
    row = session.execute(
        select(store.FeatureTable).where(store.FeatureTable.name == checked.name).with_for_update()
    ).scalar_one_or_none()
    if row is None:
        raise InvalidInput("unknown_feature_table", f"no feature table {checked.name!r} is held here")
    if row.path != checked.path:
        raise Conflict("feature_table_replaced", "the feature table was replaced while the training was checked; "
                       "retry")


def _check_queue(
    session: Session, queue_max: int | None, retry_after: Callable[[], int] | None, lock: bool = False
) -> None:
    """429 ``training_queue_full`` with ``Retry-After`` when ``queue_max`` trainings wait already.

    ``lock``: hold the queue while counting, so two requests cannot both take the last
    slot (SQLite's transactions already begin IMMEDIATE; PostgreSQL takes an advisory lock).
    """
    if queue_max is None:
        return
    bind = session.get_bind()
    if lock and bind.dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": QUEUE_LOCK})
    queued = session.scalar(select(func.count()).select_from(store.Training).where(store.Training.status == QUEUED))
    if (queued or 0) >= queue_max:
        seconds = retry_after() if retry_after is not None else 30
        raise Busy(
            "training_queue_full",
            f"{queued} trainings are queued (at most {queue_max}); retry later or cancel one",
            details=[{"queued": queued, "queue_max": queue_max}],
            headers={"Retry-After": str(seconds)},
        )


def check_join(objects: ObjectStore, table_row: store.FeatureTable, ids: pa.Array) -> None:
    """422 ``unknown_ids`` (a count and a few ids, which are public; never labels) unless the
    table holds every id of the release. The table's ids are read a row group at a time; only
    a join that fails reads them whole, to name a few missing ids."""
    if feature_tables.holds_every_id(objects, table_row, ids):
        return
    table_ids = feature_tables.read_table(objects, table_row, [table_row.id_column]).column(0)
    missing, examples = feature_tables.missing_ids(ids, table_ids)
    if missing:
        raise feature_tables.unknown_ids_error(missing, examples)


def resolve_learning(request: TrainingRequest, task: LabelTask, spec: Any) -> LearningConfig | None:
    """The learning configuration a training will run with (None: classification), or 422.

    Fields the request leaves out fall back to what can run: without a validation
    split nothing is selected (and debiasing stays off unless asked for, at λ = 1).
    Every mechanism of the registry states its label law; a spec whose law cannot be
    rebuilt is refused (422), never trained plainly in its place. Fields the request
    sets explicitly are honoured or refused, never silently changed.
    """
    explicit = request.model_fields_set & set(LearningConfig.model_fields)
    if task.task == CLASSIFICATION:
        if explicit:
            message = "debias, shrinkage and select_epoch apply to regression releases"
            raise InvalidInput("learning_unavailable", message)
        return None
    learning = request.learning()
    streamed.law_for(spec)
    if request.validation_fraction == 0 and learning.needs_validation:
        debias = learning.debias if "debias" in explicit else "none"
        learning = LearningConfig(
            debias=debias,
            shrinkage=learning.shrinkage if "shrinkage" in explicit else (0.0 if debias == "none" else 1.0),
            select_epoch=learning.select_epoch if "select_epoch" in explicit else False,
        )
        if learning.needs_validation:
            raise InvalidInput(
                "validation_required", "select_epoch and shrinkage='auto' need validation_fraction > 0"
            )
    return learning


def _check_forward_correction(task: LabelTask) -> None:
    """Forward correction needs a categorical release whose spec states its transition matrix."""
    if task.task != CLASSIFICATION or task.transition_matrix is None:
        raise InvalidInput(
            "forward_correction_unavailable",
            "forward_correction needs a categorical release whose rows all follow one transition matrix "
            "(not a split prior's two stages)",
        )
    try:
        check_transition_matrix(task.transition_matrix, task.n_classes)
    except ValueError:
        k = task.n_classes
        message = f"transition_matrix must be {k}x{k} and row-stochastic"
        raise InvalidInput("invalid_transition_matrix", message) from None


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
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    resume: dict[str, Any] | None = None,
    prior: Any = None,
) -> TrainedModel:
    """Train the model the release's labels call for: a regressor, or a classifier over its classes.

    Regressors learn as ``learning`` says from the release's mechanism ``spec``
    (:func:`fit_private_regressor`); the default is plain training on the labels.
    ``checkpoint``/``resume``: after every epoch, and where to continue from (a training job).
    ``prior``: the release's DP prior (JSON), whose mean sharpens the regressor's private mean.
    """
    if task.task != CLASSIFICATION:
        if forward_correction:
            _check_forward_correction(task)
        trained = fit_private_regressor(
            features, labels, streamed.law_for(spec), config, learning, on_epoch, checkpoint=checkpoint, resume=resume,
            prior=prior,
        )
        try:
            estimate = true_label_error(trained, features, labels, spec)
        except Exception as exc:  # a card's estimate never fails the training it describes
            log.warning("true-label error estimate skipped: %s", type(exc).__name__)
            estimate = None
        if estimate is not None and isinstance(trained, TrainedRegressor):
            trained.selection_ = {**(trained.selection_ or {}), "true_scale": estimate}
        return trained
    indices, matrix = classifier_targets(task, labels, forward_correction)
    return fit_classifier(
        features, indices, task.n_classes, config, on_epoch, classes=list(task.classes or ()), transition_matrix=matrix,
        checkpoint=checkpoint, resume=resume,
    )


def true_label_error(
    trained: TrainedModel, features: pa.Table, labels: np.ndarray, spec: Any
) -> dict[str, Any] | None:
    """The model card's error on the TRUE-label scale (labeldp.learning.true_scale), on the
    validation rows: their predictions against their debiased privatized labels, less the
    mechanism's known noise variance, beside the private-mean baseline. Post-processing of the
    release (no ε); None without validation rows or for a law with no regression form.
    """
    config = getattr(trained, "config_", None) or {}
    fraction, seed = config.get("validation_fraction") or 0.0, config.get("seed")
    post = getattr(trained, "postprocessing_", None)
    if spec is None or seed is None or fraction <= 0 or post is None:
        return None
    try:
        law = streamed.law_for(spec)  # the law the model was trained and post-processed under
        variance = noise_variance(spec, law)
    except (ValueError, LookupError):
        return None
    train_idx, val_idx = _split(len(labels), float(fraction), np.random.default_rng(int(seed)))
    if val_idx.size < 2 or features.num_rows != len(labels):
        return None
    labels = np.asarray(labels, dtype=np.float64)
    anchor = post.anchor if post.anchor is not None else private_mean(labels[train_idx], law)
    predictions = trained.predict(features.take(pa.array(val_idx)))
    out = true_scale_error(predictions, labels[val_idx], law, variance, float(anchor))
    return {**out, "private_mean": float(anchor)}


def classifier_targets(task: LabelTask, labels: np.ndarray, forward_correction: bool) -> tuple[np.ndarray, Any]:
    """A categorical release's labels as class indices, and its transition matrix when the training
    asks for forward correction; 422 with a stable code when the release cannot train a classifier."""
    if task.n_classes < 2:
        raise InvalidInput("invalid_classes", "a categorical release needs at least two distinct classes")
    try:
        indices = to_class_indices(labels, task.n_classes)
    except ValueError:
        message = f"labels of a categorical release must be class indices 0..{task.n_classes - 1}"
        raise InvalidInput("invalid_class_labels", message) from None
    matrix = None
    if forward_correction:
        _check_forward_correction(task)
        matrix = task.transition_matrix
    return indices, matrix


def get_training(session: Session, training_id: str) -> store.Training:
    row = session.get(store.Training, training_id)
    if row is None:
        raise NotFound("training_not_found", "no such training")
    return row


def describe_training(row: store.Training) -> dict[str, Any]:
    return {
        "id": row.training_id,
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
        "attempt": row.attempt or 0,
        "error": error_body(row.error),
        "created_at": iso(row.created_at),
        "started_at": iso(row.started_at),
        "finished_at": iso(row.finished_at),
    }


def training_status(session: Session, row: store.Training, board: ProgressBoard | None) -> dict[str, Any]:
    """``GET /v1/trainings/{id}``: the stored training with batch-level progress, elapsed time and
    ETA while this process runs it, and its place in the queue while it waits."""
    body = describe_training(row)
    live = None
    if row.status in (RUNNING, CANCELLING):  # this process's own board, else what the worker wrote
        live = (board.get(row.training_id) if board is not None else None) or stored_progress(row.live)
    body["progress"] = describe_progress(row, live, utcnow(), succeeded=row.status == SUCCEEDED)
    body["queue_position"] = queue_position(session, row)
    return body


def queue_position(session: Session, row: store.Training) -> int | None:
    """1 for the next training to run; None once it left the queue. Workers claim trainings in
    creation order (:func:`features_party.leases.claim`)."""
    if row.status != QUEUED:
        return None
    earlier = session.scalar(
        select(func.count())
        .select_from(store.Training)
        .where(store.Training.status == QUEUED)
        .where(
            or_(
                store.Training.created_at < row.created_at,
                and_(store.Training.created_at == row.created_at, store.Training.training_id < row.training_id),
            )
        )
    )
    return int(earlier or 0) + 1


def training_snapshot(session_factory: sessionmaker[Session], board: ProgressBoard, training_id: str) -> Snapshot:
    """One poll of a training's event stream: its status without the epoch history (the last
    entry is ``last_epoch``); it changes with the status, the batch and the queue position."""
    with session_factory() as session:
        body = training_status(session, get_training(session, training_id), board)
    history = body.pop("history")
    body["last_epoch"] = history[-1] if history else None
    progress = body["progress"]
    key = (body["status"], progress["epoch"], progress["batch"], body["queue_position"])
    return Snapshot(body, body["status"] in TERMINAL, key)


def training_history(session: Session, training_id: str, limit: int, cursor: str | None) -> dict[str, Any]:
    """A page of a training's per-epoch history, first epoch first (the history only grows at its end)."""
    return list_page(list(get_training(session, training_id).history or []), limit, cursor)


def list_trainings(
    session: Session,
    limit: int,
    cursor: str | None,
    status: str | None = None,
    release_id: str | None = None,
    board: ProgressBoard | None = None,
) -> dict[str, Any]:
    """A page of trainings, oldest first (``status``/``release_id`` filter), each as
    ``GET /v1/trainings/{id}`` shows it (the contract's ``Training``)."""
    if status is not None and status not in STATUSES:
        raise InvalidInput("invalid_status", f"status must be one of {', '.join(STATUSES)}")
    stmt = select(store.Training)
    if status is not None:
        stmt = stmt.where(store.Training.status == status)
    if release_id is not None:
        stmt = stmt.where(store.Training.release_id == release_id)
    return keyset_page(
        session, stmt, store.Training.created_at, store.Training.training_id, limit, cursor,
        lambda row: training_status(session, row, board),
    )


def cancel_training(
    session_factory: sessionmaker[Session], board: ProgressBoard, training_id: str
) -> tuple[int, dict[str, Any]]:
    """Cancel a training: a queued one at once (200, ``cancelled``), a running one at its next
    batch boundary (202, ``cancelling``); one already over is a 409 ``training_finished``.

    Each transition is a compare-and-set on the status, so a cancel racing the worker's start
    or finish either wins or sees the state it lost to, never both.
    """
    with session_factory.begin() as session:
        get_training(session, training_id)
        if _move(session, training_id, QUEUED, status=CANCELLED, finished_at=utcnow()):
            code = 200
        elif _move(session, training_id, RUNNING, status=CANCELLING):
            code = 202
        else:
            row = get_training(session, training_id)
            session.refresh(row)
            if row.status != CANCELLING:
                raise Conflict(
                    "training_finished", f"the training is {row.status}", details=[{"status": row.status}]
                )
            code = 202  # asked already: the same answer
        # The answer is the state this request committed: read before the worker is told, which
        # may finish the cancel at its next batch, milliseconds later (202 is always `cancelling`).
        row = get_training(session, training_id)
        session.refresh(row)
        body = training_status(session, row, board)
    if code == 202:
        board.request_cancel(training_id)
    log.info("training %s: cancel requested (%s)", training_id, "cancelled" if code == 200 else "at next batch")
    return code, body


def _move(session: Session, training_id: str, current: str, **values: Any) -> bool:
    """Compare-and-set on a training's status: apply ``values`` only if it is ``current``."""
    result = session.execute(
        update(store.Training)
        .where(store.Training.training_id == training_id, store.Training.status == current)
        .values(**values)
    )
    return cast(CursorResult[Any], result).rowcount == 1


@dataclass(frozen=True)
class JobContext:
    """What a job needs from the process that runs it (an API's in-process worker or
    ``labeldp worker features``), passed in rather than read from globals."""

    session_factory: sessionmaker[Session]
    data_dir: Path
    """This process's own folder: scratch only (a streaming training's work folder)."""
    device: str = "auto"
    threads: int = 0
    on_trained: Callable[[int], None] | None = None  # rows × epochs of a training about to succeed (metrics)
    workers: int = 1
    streaming: bool = False
    row_group_rows: int = 65_536
    buffer_row_groups: int = 4
    join_partition_rows: int = 1 << 18
    hosts: Hosts | None = None  # a torchrun job across hosts (LABELDP_TORCHRUN_RDZV_ENDPOINT)
    on_status: Callable[[str], None] | None = None
    board: ProgressBoard = field(default_factory=ProgressBoard)
    owner: str = field(default_factory=leases.new_owner)  # this worker, as the rows it claims name it
    lease_seconds: float = 30.0
    progress_seconds: float = 1.0  # how often batch progress is written and a cross-process cancel read
    objects: ObjectStore | None = None
    """The store every API and worker shares (feature tables, checkpoints, models); None: ``data_dir`` as one."""

    def __post_init__(self) -> None:
        if self.objects is None:
            object.__setattr__(self, "objects", ObjectStore.from_url(str(self.data_dir)))

    @property
    def store(self) -> ObjectStore:
        assert self.objects is not None  # set by __post_init__
        return self.objects

    def status_changed(self, status: str) -> None:
        if self.on_status is not None:
            self.on_status(status)


def job_context(
    settings: Settings,
    session_factory: sessionmaker[Session],
    on_status: Callable[[str], None] | None = None,
    on_trained: Callable[[int], None] | None = None,
    hosts: Hosts | None = None,
) -> JobContext:
    """The job context the settings describe (one definition for the API and the worker process);
    ``hosts``: :func:`features_party.context.torchrun_hosts` of the settings."""
    data_dir = Path(settings.features_data_dir)
    return JobContext(
        session_factory=session_factory,
        data_dir=data_dir,
        objects=open_object_store(settings, data_dir),
        device=settings.device,
        threads=settings.training_threads,
        workers=settings.training_workers,
        streaming=settings.training_streaming,
        row_group_rows=settings.training_row_group_rows,
        buffer_row_groups=settings.training_buffer_row_groups,
        join_partition_rows=settings.training_join_partition_rows,
        on_status=on_status,
        on_trained=on_trained,
        hosts=hosts,
        lease_seconds=settings.training_lease_seconds,
        progress_seconds=settings.training_progress_seconds,
    )


class LeaseLost(Exception):
    """The training is no longer this worker's (its lease expired and another took it): stop, write nothing."""


class _Listener:
    """The loop's callbacks for one training (:class:`labeldp.learning.loop.BatchListener`).

    Every batch moves the live progress and stops the training if it was cancelled here,
    or if the lease was lost. Every ``progress_seconds`` the batch progress is written to
    the row, which is also where a cancel asked through another process is seen; every
    epoch writes the history. Each write is conditional on the row still being this
    worker's and running."""

    def __init__(
        self, ctx: JobContext, training_id: str, stop: threading.Event | None, lost: threading.Event | None = None,
        history: list[dict[str, Any]] | None = None,
    ) -> None:
        self.ctx, self.training_id, self.stop, self.lost = ctx, training_id, stop, lost
        self.history: list[dict[str, Any]] = list(history or [])
        self._next_write = 0.0

    def on_batch(self, epoch: int, step: int, steps: int) -> None:
        self.ctx.board.batch(self.training_id, epoch, step, steps)
        if self.ctx.board.cancel_requested(self.training_id):
            raise TrainingCancelled()
        if self.lost is not None and self.lost.is_set():
            raise LeaseLost()
        now = time.monotonic()
        if now >= self._next_write:
            self._next_write = now + self.ctx.progress_seconds
            try:
                with self.ctx.session_factory.begin() as s:
                    written = _write_held(s, self.ctx, self.training_id, live=self.ctx.board.record(self.training_id))
                    if not written:
                        _not_held(s, self.ctx, self.training_id)
            except (TrainingCancelled, LeaseLost, FileNotFoundError):
                raise
            except Exception as exc:  # progress is best effort: a database hiccup must not fail the training
                log.warning("training %s: progress not written (%s)", self.training_id, type(exc).__name__)

    def __call__(self, report: EpochReport) -> None:
        self.history.append(report.as_history())
        with self.ctx.session_factory.begin() as s:
            written = _write_held(s, self.ctx, self.training_id, epoch=report.epoch, history=list(self.history))
            if not written:
                _not_held(s, self.ctx, self.training_id)
        self.ctx.board.epoch(self.training_id, report.epoch)
        if self.stop is not None and self.stop.is_set() and report.epoch < report.epochs:
            raise TrainingInterrupted()


def _write_held(session: Session, ctx: JobContext, training_id: str, **values: Any) -> bool:
    """Update the row only while it is running and this worker's."""
    result = session.execute(
        update(store.Training)
        .where(store.Training.training_id == training_id, store.Training.status == RUNNING,
               store.Training.owner == ctx.owner)
        .values(**values)
    )
    return cast(CursorResult[Any], result).rowcount == 1


def _not_held(session: Session, ctx: JobContext, training_id: str) -> None:
    """Why a conditional write found nothing: raise TrainingCancelled (asked to stop, from any
    process), LeaseLost (another worker's now, or re-queued), or FileNotFoundError (deleted)."""
    row = session.get(store.Training, training_id)
    if row is None:
        raise FileNotFoundError("the training row is gone")
    session.refresh(row)
    if row.owner == ctx.owner and row.status == CANCELLING:
        raise TrainingCancelled()
    raise LeaseLost()


def run_training(ctx: JobContext, training_id: str, stop: threading.Event | None = None) -> None:
    """Claim this queued training and run it (see :func:`run_claimed`); nothing if it is not queued."""
    if leases.claim(ctx.session_factory, ctx.owner, ctx.lease_seconds, device=resolve_device(ctx.device),
                    training_id=training_id) is None:
        return  # gone, cancelled while queued, or taken by another worker
    run_claimed(ctx, training_id, stop)


def run_claimed(ctx: JobContext, training_id: str, stop: threading.Event | None = None) -> None:
    """Run a training this worker has claimed to success, failure or cancellation, renewing its
    lease meanwhile; resume after its last checkpoint when an earlier attempt left one. Never raises.

    When ``stop`` is set it stops after the epoch it is in (whose checkpoint is written) and
    hands the training back to the queue; another worker, or this one after a restart,
    resumes it."""
    try:
        job = _prepare(ctx, training_id, stop)
    except Exception as exc:  # a row this version cannot run (its options): fail it, never leave it held
        code, message = _safe_error(exc)
        log.error("training %s failed at start: %s (%s)", training_id, code, type(exc).__name__)
        with ctx.session_factory.begin() as session:
            written = _write_held(session, ctx, training_id, status=FAILED, error=stored_error(code, message),
                                  finished_at=utcnow(), lease_expires_at=None, live=None)
        if written:
            ctx.status_changed(FAILED)
        return
    if job is None:
        return
    ctx.status_changed(RUNNING)
    done = int(job.resume["epoch"]) if job.resume is not None else 0
    log.info("training %s started on %s by %s (attempt %d%s)", training_id, job.config.device, ctx.owner,
             job.attempt, f", resuming after epoch {done}" if done else "")
    ctx.board.start(training_id, job.config.epochs)
    if done:
        ctx.board.epoch(training_id, done)
    with leases.LeaseKeeper(ctx.session_factory, training_id, ctx.owner, ctx.lease_seconds) as keeper:
        job.listener.lost = keeper.lost
        try:
            job.train_and_record()
        finally:
            ctx.board.finish(training_id)


def _prepare(ctx: JobContext, training_id: str, stop: threading.Event | None) -> _Job | None:
    """The claimed row as a job: its options, its checkpoint if an earlier attempt left one."""
    device = resolve_device(ctx.device)
    with ctx.session_factory() as session:
        row = session.get(store.Training, training_id)
        if row is None or row.owner != ctx.owner:
            return None
        order = TrainingOrder.of_stored(row.config)
        attempt = row.attempt
        release_id, table_name = row.release_id, row.feature_table
    resume = None if _torchrun(ctx) else checkpoints.load(ctx.store, training_id)
    if resume is not None and resume.get("path") != _path_kind(ctx):
        resume = None  # written by a worker configured for the other training path: start over
    # The seed is fixed here, so a resumed attempt draws the same split and data order.
    seed = resume["seed"] if resume is not None else order.options.seed
    config = TrainingConfig(
        **{**order.options.options(), "seed": seed if seed is not None else secrets.randbits(63)},
        device=device, threads=ctx.threads,
        row_group_rows=ctx.row_group_rows, buffer_row_groups=ctx.buffer_row_groups,
        join_partition_rows=ctx.join_partition_rows,
    )
    listener = _Listener(ctx, training_id, stop, None, resume["history"] if resume is not None else None)
    return _Job(ctx, training_id, listener, config, order.forward_correction, order.learning or PLAIN, resume,
                release_id, table_name, attempt)


def _streaming(ctx: JobContext) -> bool:
    return ctx.workers > 1 or ctx.streaming or ctx.hosts is not None


def _torchrun(ctx: JobContext) -> bool:
    return ctx.workers > 1 or ctx.hosts is not None


def _path_kind(ctx: JobContext) -> str:
    """Which loop a training runs in (a checkpoint of one cannot resume the other)."""
    return "streamed" if _streaming(ctx) else "in_memory"


@dataclass
class _Job:
    """One claimed training: train on the release and record the model, or record why not."""

    ctx: JobContext
    training_id: str
    listener: _Listener
    config: TrainingConfig
    forward_correction: bool
    learning: LearningConfig
    resume: dict[str, Any] | None
    release_id: str
    table_name: str
    attempt: int

    def checkpoint(self, state: dict[str, Any]) -> None:
        checkpoints.save(
            self.ctx.store, self.training_id, {**state, "seed": self.config.seed, "path": _path_kind(self.ctx)}
        )

    def fit(
        self, ids: pa.Array, labels: np.ndarray, spec: Any, table_key: str, id_column: str, prior: Any = None
    ) -> TrainedModel:
        """Train on the release joined with the feature table, read from the object store."""
        with self.ctx.store.open_input_file(table_key) as table_file:
            return self._fit(ids, labels, spec, table_file, id_column, prior)

    def _fit(
        self, ids: pa.Array, labels: np.ndarray, spec: Any, table_path: pa.NativeFile, id_column: str,
        prior: Any = None,
    ) -> TrainedModel:
        ctx, config, listener = self.ctx, self.config, self.listener
        task = LabelTask.of(spec)
        # A torchrun job checkpoints in its own work folder and restarts its group itself; a job
        # re-queued from it starts over (docs/architecture.md, "Training jobs").
        hooks: dict[str, Any] = {} if _torchrun(ctx) else {"checkpoint": self.checkpoint, "resume": self.resume}
        if _streaming(ctx) and task.task != CLASSIFICATION:  # docs/architecture.md
            return streamed.fit_in_work_dir(
                Path(ctx.data_dir), table_path, id_column, ids, labels, spec, config,
                self.learning, listener, workers=ctx.workers, hosts=ctx.hosts, prior=prior, objects=ctx.store,
                stage_key=checkpoints.stage_key(self.training_id), **hooks,
            )
        if _streaming(ctx):  # a classifier, streamed
            indices, matrix = classifier_targets(task, labels, self.forward_correction)
            with streamed.scratch_dir(Path(ctx.data_dir)) as work_dir:
                return streamed.fit_classifier_streamed(
                    table_path, id_column, pa.array(ids, pa.string()), indices.astype(np.float64), task.n_classes,
                    config, work_dir, listener, classes=list(task.classes or ()), transition_matrix=matrix,
                    workers=ctx.workers, hosts=ctx.hosts, objects=ctx.store,
                    stage_key=checkpoints.stage_key(self.training_id), **hooks,
                )
        features = feature_tables.select_rows(pq.read_table(table_path), id_column, ids)
        return fit_for_release(
            task, features, labels, config, listener, forward_correction=self.forward_correction,
            spec=spec, learning=self.learning, prior=prior, **hooks,
        )

    def train_and_record(self) -> None:
        ctx, training_id, listener, config = self.ctx, self.training_id, self.listener, self.config
        release_id, table_name = self.release_id, self.table_name
        model_key: str | None = None
        try:
            with ctx.session_factory() as session:
                release = inbox.get_release(session, release_id)
                ids, labels = inbox.release_columns(release)
                table_row = feature_tables.get_feature_table(session, table_name)
                table_key, id_column = table_row.path, table_row.id_column
                meta = {
                    "release_id": release.release_id,
                    "label_set_id": release.label_set_id,
                    "mechanism_name": release.mechanism_name,
                    "mechanism_spec": release.mechanism,
                    "total_epsilon_micro": release.total_epsilon_micro,
                    "accounting": release.accounting,
                    "feature_table": table_row.name,
                }
                prior = release.prior
            if ctx.board.cancel_requested(training_id):
                raise TrainingCancelled()
            trained = self.fit(ids, labels, meta["mechanism_spec"], table_key, id_column, prior)
            model_id = "mdl_" + uuid.uuid4().hex
            relative = f"{MODELS_DIR}/{model_id}.pt"
            with ctx.store.open_output_stream(relative) as out:
                trained.write(out)
            model_key = relative
            last = _selected_entry(trained)
            with ctx.session_factory.begin() as session:
                # Succeed only from running and held: a cancel that came after the last batch still wins.
                finished = _write_held(
                    session, ctx, training_id, status=SUCCEEDED, model_id=model_id, finished_at=utcnow(),
                    epoch=config.epochs, history=list(trained.history_), lease_expires_at=None, live=None,
                )
                if not finished:
                    _not_held(session, ctx, training_id)
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
        except TrainingCancelled:
            self._discard(model_key)
            self._finish(CANCELLED)
            log.info("training %s cancelled at epoch %d", training_id, len(listener.history))
            return
        except TrainingInterrupted:
            if model_key is not None:
                ctx.store.delete(model_key)
            handed = leases.hand_back(ctx.session_factory, training_id, ctx.owner)
            log.info("training %s %s: this worker is stopping", training_id,
                     "handed back to the queue" if handed else "not handed back")
            ctx.status_changed(QUEUED if handed else CANCELLED)
            return
        except LeaseLost:
            if model_key is not None:
                ctx.store.delete(model_key)
            log.warning("training %s stopped: %s no longer holds it", training_id, ctx.owner)
            return
        except Exception as exc:
            self._discard(model_key)
            code, message = _safe_error(exc)
            log.error("training %s failed: %s: %s (%s)", training_id, code, message, type(exc).__name__)
            self._finish(FAILED, error=stored_error(code, message))
            return
        checkpoints.remove(ctx.store, training_id)
        log.info("training %s succeeded: model %s, %d train rows", training_id, model_id, trained.n_train_)
        if ctx.on_trained is not None:
            ctx.on_trained(trained.n_train_ * len(trained.history_))
        ctx.status_changed(SUCCEEDED)

    def _discard(self, model_key: str | None) -> None:
        if model_key is not None:
            self.ctx.store.delete(model_key)
        checkpoints.remove(self.ctx.store, self.training_id)

    def _finish(self, status: str, **values: Any) -> None:
        """Cancelled or failed, if the row is still this worker's."""
        with self.ctx.session_factory.begin() as session:
            result = session.execute(
                update(store.Training)
                .where(store.Training.training_id == self.training_id, store.Training.owner == self.ctx.owner,
                       store.Training.status.in_((RUNNING, CANCELLING)))
                .values(status=status, finished_at=utcnow(), lease_expires_at=None, live=None, **values)
            )
        if cast(CursorResult[Any], result).rowcount == 1:
            self.ctx.status_changed(status)



def _selected_entry(trained: TrainedModel) -> dict[str, Any]:
    """The history entry of the epoch whose weights the model holds (the last one without selection)."""
    selection = getattr(trained, "selection_", None) or {}
    epoch = selection.get("selected_epoch")
    for entry in trained.history_:
        if entry["epoch"] == epoch:
            return entry
    return trained.history_[-1]


def _safe_error(exc: Exception) -> tuple[str, str]:
    """(code, message) written here, not an exception's text (which could quote data)."""
    if isinstance(exc, LabelDPError):
        return exc.code, exc.message  # our own messages carry counts, not values
    if isinstance(exc, MemoryError):
        return "out_of_memory", "out of memory"
    name = type(exc).__name__
    if "OutOfMemory" in name:
        return "out_of_accelerator_memory", "out of accelerator memory; try a smaller batch_size"
    if isinstance(exc, FileNotFoundError):
        return "file_missing", "stored feature table or model file is missing"
    return "training_failed", f"training failed ({name})"


def stored_error(code: str, message: str) -> str:
    """How a failed training's error is kept in its row (one text column)."""
    return json.dumps({"code": code, "message": message})


def error_body(stored: str | None) -> dict[str, Any] | None:
    """A failed training's ``error``: the same envelope as every HTTP error (README, "REST API"),
    so a client branches on ``code`` whether a request or a training failed."""
    if stored is None:
        return None
    record = json.loads(stored)
    return {"code": record["code"], "message": record["message"], "details": []}
