"""Release workers: processes (or the API's own thread) that claim queued release jobs and run them.

A release row is a job until it is charged (docs/architecture.md, "Release jobs"). A worker
(``labeldp worker labels``, or the API's in-process one with
``LABELDP_RELEASE_IN_PROCESS_WORKER``, the embedded default) loops:

1. :func:`reap_expired`: a ``running`` job whose lease ran out belongs to a dead worker. Its
   work never committed (the charge is the job's last transaction, conditional on its owner),
   so it goes back to the queue, or — after ``LABELDP_RELEASE_MAX_ATTEMPTS`` claims — fails
   with ``worker_lost``; nothing was charged either way.
2. :func:`claim` the oldest queued job: ``SELECT … FOR UPDATE SKIP LOCKED`` on PostgreSQL, a
   compare-and-swap under SQLite's ``BEGIN IMMEDIATE``; the row gets this worker as owner, a
   lease and attempt + 1.
3. Run it (:func:`labels_party.releases.run_job`) while a
   :class:`labeldp.service.leases.LeaseKeeper` renews the lease. A release that cannot be made
   (budget, labels, mechanism) fails with the error's stable code; a transient fault (database,
   store, ledger contention) hands the job back to the queue.
4. When idle, now and then, :func:`remove_expired_messages` deletes the message objects of
   releases delivered more than ``LABELDP_MESSAGE_RETENTION_SECONDS`` ago (the rows stay, with
   their digests), and :func:`labels_party.sweep.sweep_orphans` the objects no row names.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session, sessionmaker

from labeldp.errors import LabelDPError, Unavailable
from labeldp.service.database import is_transient, make_session_factory
from labeldp.service.job_loop import JobRunner, run_jobs
from labeldp.service.leases import LeaseKeeper, new_owner
from labeldp.service.migrations import open_database
from labeldp.service.settings import Settings

from . import audit
from .context import LabelsContext, message_key
from .releases import FAILED, QUEUED, RUNNING, LeaseLost, run_job
from .store import ReleaseRow
from .sweep import sweep_orphans

log = logging.getLogger("labeldp.labels.worker")

MIGRATIONS = "labels_party.migrations"
WORKER_LOST = ("worker_lost", "the release's worker stopped before it was charged, too many times; nothing was "
               "charged")
INTERNAL = "release_failed"


def _rowcount(result: Any) -> int:
    return cast(CursorResult[Any], result).rowcount


def claim(sessions: sessionmaker[Session], owner: str, lease_seconds: float) -> str | None:
    """Take the oldest queued release job for ``owner``: its id, or None when none is queued."""
    with sessions.begin() as s:
        stmt = (
            select(ReleaseRow.id)
            .where(ReleaseRow.status == QUEUED)
            .order_by(ReleaseRow.created_at, ReleaseRow.id)
            .limit(1)
        )
        if s.get_bind().dialect.name == "postgresql":
            stmt = stmt.with_for_update(skip_locked=True)
        chosen = s.scalar(stmt)
        if chosen is None:
            return None
        result = s.execute(
            update(ReleaseRow)
            .where(ReleaseRow.id == chosen, ReleaseRow.status == QUEUED)
            .values(status=RUNNING, job_owner=owner, job_lease_until=time.time() + lease_seconds,
                    job_attempts=ReleaseRow.job_attempts + 1)
        )
        return chosen if _rowcount(result) == 1 else None


def renew(sessions: sessionmaker[Session], release_id: str, owner: str, lease_seconds: float) -> bool:
    """Extend ``owner``'s lease; False once the job is no longer its (charged, failed, taken over)."""
    with sessions.begin() as s:
        result = s.execute(
            update(ReleaseRow)
            .where(ReleaseRow.id == release_id, ReleaseRow.job_owner == owner, ReleaseRow.status == RUNNING)
            .values(job_lease_until=time.time() + lease_seconds)
        )
        return _rowcount(result) == 1


def _finish(sessions: sessionmaker[Session], release_id: str, owner: str, **values: Any) -> bool:
    with sessions.begin() as s:
        done = s.execute(
            update(ReleaseRow)
            .where(ReleaseRow.id == release_id, ReleaseRow.job_owner == owner, ReleaseRow.status == RUNNING)
            .values(job_owner=None, job_lease_until=0.0, **values)
            .returning(ReleaseRow.label_set_id)
        ).all()
        if done and values.get("status") == FAILED:
            audit.record_release(s, audit.RELEASE_FAILED, release_id, done[0][0], {"error_code": values["error_code"]})
        return len(done) == 1


def fail(sessions: sessionmaker[Session], release_id: str, owner: str, code: str, message: str) -> bool:
    """End ``owner``'s job without a charge; the code is stable, the message written by our code.
    The failure is an audit event (its code only) in the same transaction."""
    return _finish(sessions, release_id, owner, status=FAILED, error_code=code[:64], error_message=message[:300])


def hand_back(sessions: sessionmaker[Session], release_id: str, owner: str) -> bool:
    """Return ``owner``'s job to the queue (a transient fault, or this worker stops)."""
    return _finish(sessions, release_id, owner, status=QUEUED)


def reap_expired(sessions: sessionmaker[Session], max_attempts: int) -> list[str]:
    """Re-queue the running jobs whose lease expired, failing those claimed ``max_attempts`` times.

    Each update is conditional on the expiry, so concurrent reapers and a late renewal cannot
    both win; a job whose lease is alive is never touched. Returns the ids put back in the queue.
    """
    now = time.time()
    expired = (ReleaseRow.status == RUNNING, ReleaseRow.job_lease_until < now)
    with sessions.begin() as s:
        failed = s.execute(
            update(ReleaseRow)
            .where(*expired, ReleaseRow.job_attempts >= max_attempts)
            .values(status=FAILED, job_owner=None, job_lease_until=0.0, error_code=WORKER_LOST[0],
                    error_message=WORKER_LOST[1])
            .returning(ReleaseRow.id, ReleaseRow.label_set_id)
        ).all()
        for release_id, label_set_id in failed:
            audit.record_release(s, audit.RELEASE_FAILED, release_id, label_set_id, {"error_code": WORKER_LOST[0]})
        requeue = list(s.scalars(select(ReleaseRow.id).where(*expired)))
        if requeue:
            s.execute(
                update(ReleaseRow)
                .where(ReleaseRow.id.in_(requeue), *expired)
                .values(status=QUEUED, job_owner=None, job_lease_until=0.0)
            )
    if failed:
        log.warning("%d release jobs failed: their workers died %d times", len(failed), max_attempts)
    for release_id in requeue:
        log.warning("release %s re-queued: its worker's lease expired", release_id)
    return requeue


def remove_expired_messages(ctx: LabelsContext, retention_seconds: float) -> int:
    """Delete the message objects of releases delivered more than ``retention_seconds`` ago; their
    rows stay (digest, size, accounting) with ``message_removed_at`` set. Returns how many."""
    cutoff = datetime.now(UTC) - timedelta(seconds=retention_seconds)
    with ctx.sessions() as s:
        due = s.execute(
            select(ReleaseRow.id, ReleaseRow.message_file).where(
                ReleaseRow.status == "delivered",
                ReleaseRow.delivered_at < cutoff,
                ReleaseRow.message_removed_at.is_(None),
                ReleaseRow.message_file.is_not(None),
            )
        ).all()
    removed = 0
    for release_id, message_file in due:
        manifest = message_key(str(message_file))
        folder = manifest.rsplit("/", 1)[0] + "/"  # the attempt's shards and its manifest, manifest last
        with contextlib.suppress(LabelDPError):  # already gone (another worker's sweep)
            for key in sorted(ctx.store.list(folder), key=lambda k: k == manifest):
                ctx.store.delete(key)
        with ctx.sessions.begin() as s:
            done = s.execute(
                update(ReleaseRow)
                .where(ReleaseRow.id == release_id, ReleaseRow.message_removed_at.is_(None))
                .values(message_removed_at=datetime.now(UTC))
            )
            removed += _rowcount(done)
    if removed:
        log.info("removed the messages of %d releases delivered before the retention period", removed)
    return removed


class ReleaseWorker:
    """One worker: one release job at a time, claimed under this worker's lease."""

    def __init__(self, ctx: LabelsContext, owner: str | None = None) -> None:
        self.ctx = ctx
        self.owner = owner or new_owner()
        self.lease_seconds = ctx.settings.release_lease_seconds

    def step(self) -> bool:
        """Reap expired leases, then claim and run one job; False when none was queued."""
        reap_expired(self.ctx.sessions, self.ctx.settings.release_max_attempts)
        release_id = claim(self.ctx.sessions, self.owner, self.lease_seconds)
        if release_id is None:
            return False
        self.run_claimed(release_id)
        return True

    def run_claimed(self, release_id: str) -> None:
        """Run a job this worker claimed, to its charge or its clean end."""
        sessions = self.ctx.sessions

        def keep() -> bool:
            return renew(sessions, release_id, self.owner, self.lease_seconds)

        started = time.perf_counter()
        with LeaseKeeper(keep, self.lease_seconds, f"release {release_id}") as keeper:
            try:
                run_job(self.ctx, release_id, self.owner, keeper.lost.is_set)
                log.info("release %s: job done in %.1f s", release_id, time.perf_counter() - started)
            except LeaseLost:
                log.warning("release %s: lease lost; its new owner runs it", release_id)
            except Unavailable as exc:
                log.warning("release %s: %s; back in the queue", release_id, exc.code)
                hand_back(sessions, release_id, self.owner)
            except LabelDPError as exc:
                log.info("release %s failed: %s", release_id, exc.code)
                fail(sessions, release_id, self.owner, exc.code, exc.message)
            except Exception as exc:
                if is_transient(exc):  # the database is away: the job waits for a worker that reaches it
                    log.warning("release %s: %s; back in the queue", release_id, type(exc).__name__)
                    with contextlib.suppress(Exception):
                        hand_back(sessions, release_id, self.owner)
                    raise
                log.exception("release %s: the job failed", release_id)
                fail(sessions, release_id, self.owner, INTERNAL,
                     f"the release could not be computed ({type(exc).__name__}); nothing was charged")

    def sweep(self) -> None:
        """Expired messages, then objects no row names (old enough not to be another worker's)."""
        settings = self.ctx.settings
        remove_expired_messages(self.ctx, settings.message_retention_seconds)
        sweep_orphans(self.ctx, min_age_seconds=max(3600.0, 2 * settings.idempotency_lease_seconds,
                                                    2 * settings.release_lease_seconds))

    def run(self, stop: threading.Event, wake: threading.Event | None = None) -> None:
        """Work until ``stop``; ``wake`` (set when this process queued a job) cuts the wait short."""
        run_jobs(self.step, stop, poll_seconds=self.ctx.settings.release_poll_seconds, log=log,
                 name="release worker", owner=self.owner, wake=wake, housekeeping=self.sweep)


class ReleaseRunner(JobRunner):
    """The labels API's in-process release worker, a thread the app's lifespan starts and stops;
    off (``LABELDP_RELEASE_IN_PROCESS_WORKER=false``), the API's jobs wait for ``labeldp worker labels``."""

    def __init__(self, ctx: LabelsContext) -> None:
        self.ctx = ctx
        self.worker = ReleaseWorker(ctx)
        super().__init__(self.worker.run, enabled=ctx.settings.release_in_process_worker,
                         thread_name="labeldp-release", wake=ctx.jobs_queued)


def run_worker(settings: Settings, stop: threading.Event) -> None:
    """``labeldp worker labels``: wait for the database (as long as it takes), then work until ``stop``."""
    try:
        engine = open_database(settings.labels_database_url, MIGRATIONS, settings, wait_seconds=float("inf"),
                               stop=stop)
    except Exception:
        if stop.is_set():
            return
        raise
    settings.labels_data_dir.mkdir(parents=True, exist_ok=True)
    ctx = LabelsContext(make_session_factory(engine), settings.labels_data_dir, settings)
    try:
        ReleaseWorker(ctx).run(stop)
    finally:
        engine.dispose()
