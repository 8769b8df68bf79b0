"""Training workers: processes (or the API's own thread) that claim queued trainings and run them.

``labeldp worker features`` runs :func:`run_worker`; several may run, on several hosts,
against one catalogue and one data folder. Each loops: re-queue the trainings whose
worker died (:func:`features_party.leases.reap_expired`), claim the oldest queued one,
run it (:func:`features_party.training_run.run_claimed`), and wait ``LABELDP_TRAINING_POLL_SECONDS``
when there is nothing to do. The API runs the same loop in a thread when
``LABELDP_TRAINING_IN_PROCESS_WORKER`` is on (the default, for ``make demo``); a
deployment turns it off and runs workers (docs/architecture.md, "Training jobs").
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from features_party import checkpoints, inbox, leases, store, training_context, training_errors, training_run
from features_party.progress import ProgressBoard
from labeldp.learning.device import resolve_device
from labeldp.service.database import make_session_factory
from labeldp.service.job_loop import JobRunner, run_jobs
from labeldp.service.migrations import open_database
from labeldp.service.settings import Settings, open_object_store, require_webhook_secret

log = logging.getLogger("labeldp.features")

MIGRATIONS = "features_party.migrations"


class Worker:
    """One worker: one training at a time, claimed under this worker's lease."""

    def __init__(self, ctx: training_context.JobContext, max_attempts: int, poll_seconds: float) -> None:
        self.ctx, self.max_attempts, self.poll_seconds = ctx, max_attempts, poll_seconds
        self.lost_error = training_errors.stored_error(*leases.WORKER_LOST)

    def step(self, stop: threading.Event | None = None) -> bool:
        """Reap expired leases, then claim and run one training; False when none was queued."""
        leases.reap_expired(self.ctx.session_factory, self.max_attempts, self.lost_error)
        training_id = leases.claim(
            self.ctx.session_factory, self.ctx.owner, self.ctx.lease_seconds, device=resolve_device(self.ctx.device)
        )
        if training_id is None:
            return False
        training_run.run_claimed(self.ctx, training_id, stop)
        return True

    def sweep_checkpoints(self) -> list[str]:
        """Remove the checkpoints of trainings that are over (failed as worker_lost, or cancelled
        while queued after a re-queue: their last worker was not there to remove them)."""
        ids = checkpoints.stored(self.ctx.store)
        if not ids:
            return []
        with self.ctx.session_factory() as session:
            pending = set(session.scalars(
                select(store.Training.training_id).where(
                    store.Training.training_id.in_(ids),
                    store.Training.status.in_((store.QUEUED, store.RUNNING, store.CANCELLING)),
                )
            ))
        removed = [training_id for training_id in ids if training_id not in pending]
        for training_id in removed:
            checkpoints.remove(self.ctx.store, training_id)
        return removed

    def run(self, stop: threading.Event, wake: threading.Event | None = None) -> None:
        """Work until ``stop``; ``wake`` (set when this process queued a training) cuts the wait short."""
        run_jobs(lambda: self.step(stop), stop, poll_seconds=self.poll_seconds, log=log, name="training worker",
                 owner=self.ctx.owner, wake=wake, housekeeping=self.sweep_checkpoints)


class TrainingRunner(JobRunner):
    """The API's in-process worker, a thread started and stopped by the app's lifespan; with
    ``enabled`` False (``LABELDP_TRAINING_IN_PROCESS_WORKER=false``) it runs nothing and the
    trainings the API queues wait for ``labeldp worker features`` processes. Nothing is recovered
    at start: a training another process runs is that process's (features_party.leases); expired
    ones are re-queued by the loop. Shutdown stops after the running epoch; its training goes
    back to the queue for the next worker."""

    def __init__(self, ctx: training_context.JobContext, *, enabled: bool = True, max_attempts: int = 3,
                 poll_seconds: float = 1.0) -> None:
        self.ctx = ctx
        self.worker = Worker(ctx, max_attempts, poll_seconds)
        super().__init__(self.worker.run, enabled=enabled, thread_name="labeldp-training")

    @property
    def board(self) -> ProgressBoard:
        return self.ctx.board

    def submit(self, training_id: str) -> None:
        """A training was queued by this process: look now rather than at the next poll."""
        del training_id  # the queue is the table; any worker may take it
        self.wake()


def run_worker(settings: Settings, stop: threading.Event) -> None:
    """``labeldp worker features``: wait for the database (as long as it takes), then work until ``stop``;
    with ``LABELDP_INBOX_WEBHOOK_URL`` it also sends the inbox webhook's due deliveries."""
    require_webhook_secret(settings)
    try:
        engine = open_database(
            settings.features_database_url, MIGRATIONS, settings, wait_seconds=float("inf"), stop=stop
        )
    except Exception:
        if stop.is_set():
            return
        raise
    sessions: sessionmaker[Session] = make_session_factory(engine)
    settings.features_data_dir.mkdir(parents=True, exist_ok=True)
    inbox.bind_store(sessions, open_object_store(settings, settings.features_data_dir))
    from features_party.context import torchrun_hosts, webhook_sender  # the app's context imports this module

    ctx = training_context.job_context(settings, sessions, hosts=torchrun_hosts(settings))
    webhooks = webhook_sender(settings, sessions)  # a sender beside the APIs' (each claims what it sends)
    if webhooks is not None:
        webhooks.start()
    try:
        Worker(ctx, settings.training_max_attempts, settings.training_poll_seconds).run(stop)
    finally:
        if webhooks is not None:
            webhooks.stop()
        engine.dispose()
