"""Batch-level progress of the running training: where it is, how long it has run, when it ends.

The training loop reports every batch (:class:`labeldp.learning.loop.BatchListener`);
writing that to the database would cost a transaction per batch, so it lives here, in
memory, beside the worker that runs the training, and the worker copies it to the
training's row (``live``, :meth:`ProgressBoard.record`) every few seconds, so an API in
another process shows it too (:func:`stored_progress`; docs/architecture.md, "Progress and
events"). The database keeps what must survive the process: status, completed epochs,
history. A request to cancel made in this process is a flag here too, read at every batch
boundary; one made elsewhere is the row's ``cancelling`` status.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from features_party import responses, store
from labeldp.service.timestamps import as_utc


@dataclass
class LiveProgress:
    """One running training: completed epochs, batches done in the epoch now running."""

    epochs: int
    epoch: int = 0
    batch: int = 0
    batches: int | None = None  # per epoch; known once the first batch ran
    first_batch_at: float | None = None  # monotonic clock
    updated_at: float | None = None

    @property
    def done(self) -> int:
        return self.epoch * (self.batches or 0) + self.batch

    @property
    def total(self) -> int | None:
        return self.epochs * self.batches if self.batches else None

    def fraction(self) -> float:
        total = self.total
        if total:
            return min(1.0, self.done / total)
        return self.epoch / self.epochs if self.epochs else 0.0

    def eta_seconds(self, now: float) -> float | None:
        """Remaining batches at the rate measured since the first one (validation time included,
        as it recurs every epoch); None until two batches have run."""
        total = self.total
        if total is None or self.first_batch_at is None or self.done < 2:
            return None
        per_batch = (now - self.first_batch_at) / (self.done - 1)
        return max(0.0, per_batch * (total - self.done))


class ProgressBoard:
    """Live progress and cancel requests of the trainings this process runs (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[str, LiveProgress] = {}
        self._cancel: set[str] = set()

    def start(self, training_id: str, epochs: int) -> None:
        with self._lock:
            self._live[training_id] = LiveProgress(epochs=epochs)

    def batch(self, training_id: str, epoch: int, step: int, steps: int) -> None:
        """Batch ``step`` of ``steps`` of ``epoch`` (1-based) is done."""
        now = time.monotonic()
        with self._lock:
            live = self._live.get(training_id)
            if live is None:
                return
            live.epoch, live.batch, live.batches, live.updated_at = epoch - 1, step, steps, now
            if live.first_batch_at is None:
                live.first_batch_at = now

    def epoch(self, training_id: str, epoch: int) -> None:
        """Epoch ``epoch`` is over (its validation too)."""
        with self._lock:
            live = self._live.get(training_id)
            if live is not None:
                live.epoch, live.batch, live.updated_at = epoch, 0, time.monotonic()

    def finish(self, training_id: str) -> None:
        with self._lock:
            self._live.pop(training_id, None)
            self._cancel.discard(training_id)

    def get(self, training_id: str) -> LiveProgress | None:
        with self._lock:
            live = self._live.get(training_id)
            return replace(live) if live is not None else None

    def record(self, training_id: str) -> dict[str, Any] | None:
        """The live progress as the row keeps it: plain numbers, times on the wall clock (UTC
        seconds), so another process can rebuild it (:func:`stored_progress`)."""
        live = self.get(training_id)
        if live is None:
            return None
        offset = time.time() - time.monotonic()
        return {
            "epochs": live.epochs, "epoch": live.epoch, "batch": live.batch, "batches": live.batches,
            "first_batch_at": None if live.first_batch_at is None else live.first_batch_at + offset,
            "updated_at": None if live.updated_at is None else live.updated_at + offset,
        }

    def request_cancel(self, training_id: str) -> None:
        with self._lock:
            self._cancel.add(training_id)

    def cancel_requested(self, training_id: str) -> bool:
        with self._lock:
            return training_id in self._cancel

    def retry_after_seconds(self, default: int = 30, longest: int = 3600) -> int:
        """When a queue slot is likely to free: the running training's ETA, else ``default``."""
        now = time.monotonic()
        with self._lock:
            etas = [eta for live in self._live.values() if (eta := live.eta_seconds(now)) is not None]
        if not etas:
            return default
        return int(min(longest, max(1, round(min(etas)))))


def stored_progress(record: dict[str, Any] | None) -> LiveProgress | None:
    """The live progress a worker wrote to the row (:meth:`ProgressBoard.record`), on this
    process's monotonic clock so its ETA is computed as the worker's own would be."""
    if not record:
        return None
    offset = time.monotonic() - time.time()

    def mono(at: Any) -> float | None:
        return None if at is None else float(at) + offset

    return LiveProgress(
        epochs=int(record["epochs"]), epoch=int(record["epoch"]), batch=int(record["batch"]),
        batches=None if record["batches"] is None else int(record["batches"]),
        first_batch_at=mono(record.get("first_batch_at")), updated_at=mono(record.get("updated_at")),
    )


def describe_progress(
    row: store.Training, live: LiveProgress | None, now: datetime, *, succeeded: bool
) -> responses.Progress:
    """The ``progress`` body of a training: epochs from the database, batches and ETA from ``live``
    (only while this process runs it); elapsed wall time from the stored start and finish."""
    started, finished = as_utc(row.started_at), as_utc(row.finished_at)
    elapsed = None
    if started is not None:
        elapsed = max(0.0, ((finished or now) - started).total_seconds())
    if live is not None and not succeeded:
        return responses.Progress(
            epoch=max(row.epoch, live.epoch),
            epochs=row.epochs,
            batch=live.batch,
            batches=live.batches,
            fraction=live.fraction(),
            elapsed_seconds=elapsed,
            eta_seconds=live.eta_seconds(time.monotonic()),
        )
    return responses.Progress(
        epoch=row.epoch,
        epochs=row.epochs,
        batch=None,
        batches=None,
        fraction=1.0 if succeeded else (row.epoch / row.epochs if row.epochs else 0.0),
        elapsed_seconds=elapsed,
        eta_seconds=0.0 if succeeded else None,
    )
