"""The run of one training: what a worker executes once it has claimed a queued row.

A worker (:mod:`features_party.worker`: ``labeldp worker features``, or the API's
in-process one) claims a training under a lease (:mod:`features_party.leases`) and runs it
here, one at a time (a GPU or the CPU cores are the bottleneck, not concurrency): join the
release with its feature table, train (:mod:`features_party.training_fit`, in memory,
streamed or as a torchrun job), store the model and its card. Progress is written to the row
after every epoch and every ``LABELDP_TRAINING_PROGRESS_SECONDS`` per batch
(:mod:`features_party.progress`); a cancel stops it at the next batch boundary and leaves
no model; a training whose worker died resumes from its checkpoint
(:mod:`features_party.checkpoints`) on another (docs/architecture.md, "Training jobs").
Every write is conditional on the row still being this worker's and running.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import CursorResult, update
from sqlalchemy.orm import Session

from features_party import checkpoints, feature_tables, inbox, leases, store
from features_party.store import CANCELLED, CANCELLING, FAILED, QUEUED, RUNNING, SUCCEEDED
from features_party.training_context import JobContext
from features_party.training_errors import safe_details, safe_error, stored_error
from features_party.training_fit import classifier_targets, fit_for_release
from features_party.training_request import TrainingOrder
from labeldp.learning import streamed
from labeldp.learning.config import PLAIN, LearningConfig, TrainingConfig
from labeldp.learning.device import resolve_device
from labeldp.learning.loop import EpochReport
from labeldp.learning.persistence import TrainedModel
from labeldp.learning.tasks import CLASSIFICATION, LabelTask
from labeldp.service.timestamps import utcnow

log = logging.getLogger("labeldp.features")

MODELS_DIR = "models"


class TrainingInterrupted(Exception):
    """Raised between epochs when the worker stops: the training goes back to the queue."""


class TrainingCancelled(Exception):
    """Raised at a batch or epoch boundary once the training was asked to stop."""


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
        code, message = safe_error(exc)
        log.error("training %s failed at start: %s (%s)", training_id, code, type(exc).__name__)
        with ctx.session_factory.begin() as session:
            written = _write_held(session, ctx, training_id, status=FAILED,
                                  error=stored_error(code, message, safe_details(exc)),
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
        release_row = session.get(store.Release, release_id)
        table = session.get(store.FeatureTable, table_name) if table_name else None
        rows = max(release_row.row_count if release_row is not None else 0, table.n_rows if table is not None else 0)
    streaming = _streaming(ctx, rows)
    resume = None if _torchrun(ctx) else checkpoints.load(ctx.store, training_id)
    if resume is not None and resume.get("path") != _path_kind(streaming):
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
                release_id, table_name, attempt, streaming)


def _streaming(ctx: JobContext, rows: int) -> bool:
    """Whether a training whose release or feature table holds ``rows`` rows (the larger) streams: always with
    several workers, hosts or LABELDP_TRAINING_STREAMING; else above ``stream_above_rows`` (record 0036)."""
    return ctx.workers > 1 or ctx.streaming or ctx.hosts is not None or rows > ctx.stream_above_rows


def _torchrun(ctx: JobContext) -> bool:
    return ctx.workers > 1 or ctx.hosts is not None


def _path_kind(streaming: bool) -> str:
    """Which loop a training runs in (a checkpoint of one cannot resume the other)."""
    return "streamed" if streaming else "in_memory"


ReleaseData = streamed.ReleaseChunks | tuple[pa.Array, np.ndarray]
"""A release as a training reads it: shard by shard (streamed), or whole (in memory)."""


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
    streaming: bool

    def checkpoint(self, state: dict[str, Any]) -> None:
        checkpoints.save(
            self.ctx.store, self.training_id, {**state, "seed": self.config.seed, "path": _path_kind(self.streaming)}
        )

    def fit(self, release: ReleaseData, spec: Any, table_key: str, id_column: str, prior: Any = None) -> TrainedModel:
        """Train on the release joined with the feature table, read from the object store."""
        with self.ctx.store.open_input_file(table_key) as table_file:
            return self._fit(release, spec, table_file, id_column, prior)

    def _fit(
        self, release: ReleaseData, spec: Any, table_path: pa.NativeFile, id_column: str, prior: Any = None,
    ) -> TrainedModel:
        ctx, config, listener = self.ctx, self.config, self.listener
        task = LabelTask.of(spec)
        # A torchrun job checkpoints in its own work folder and restarts its group itself; a job
        # re-queued from it starts over (docs/architecture.md, "Training jobs").
        hooks: dict[str, Any] = {} if _torchrun(ctx) else {"checkpoint": self.checkpoint, "resume": self.resume}
        if isinstance(release, streamed.ReleaseChunks):  # streamed: the release read shard by shard
            stage_key = checkpoints.stage_key(self.training_id)
            if task.task != CLASSIFICATION:  # docs/architecture.md
                return streamed.fit_in_work_dir(
                    Path(ctx.data_dir), table_path, id_column, release, spec, config, self.learning, listener,
                    workers=ctx.workers, hosts=ctx.hosts, prior=prior, objects=ctx.store, stage_key=stage_key,
                    **hooks,
                )
            _, matrix = classifier_targets(task, np.empty(0), self.forward_correction)
            indices = release.map_labels(
                lambda labels: classifier_targets(task, labels, self.forward_correction)[0].astype(np.float64)
            )
            with streamed.scratch_dir(Path(ctx.data_dir)) as work_dir:
                return streamed.fit_classifier_chunks_streamed(
                    table_path, id_column, indices, task.n_classes, config, work_dir, listener,
                    classes=list(task.classes or ()), transition_matrix=matrix, workers=ctx.workers,
                    hosts=ctx.hosts, objects=ctx.store, stage_key=stage_key, **hooks,
                )
        ids, labels = release
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
                # Streamed: shard by shard as the stage reads it (never held whole); in memory: whole.
                data: ReleaseData = (streamed.ReleaseChunks(*inbox.release_chunks(release)) if self.streaming
                                 else inbox.release_columns(release))
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
            trained = self.fit(data, meta["mechanism_spec"], table_key, id_column, prior)
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
            code, message = safe_error(exc)
            log.error("training %s failed: %s: %s (%s)", training_id, code, message, type(exc).__name__)
            self._finish(FAILED, error=stored_error(code, message, safe_details(exc)))
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
