"""Who runs a training: claims, leases, heartbeats and the re-queue of a dead worker's job.

A training row is a job. A worker (``labeldp worker features``, or the API's in-process
one) claims the oldest queued row in one transaction and writes itself as its ``owner``
with a lease; it renews the lease every third of its length (:class:`LeaseKeeper`). A
worker that dies stops renewing: once the lease has expired, any worker's
:func:`reap_expired` puts the row back in the queue (it keeps its checkpoint, and the
next claim counts attempt + 1), or fails it cleanly after ``max_attempts`` claims. No
process ever fails a training whose lease is alive, so starting, stopping or killing an
API or a worker leaves the others' trainings alone (docs/architecture.md, "Training jobs").

Times are the workers' wall clocks (UTC): leases are tens of seconds, well above the skew
of hosts kept in time by NTP.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, func, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from features_party import store
from features_party.store import CANCELLED, CANCELLING, FAILED, QUEUED, RUNNING
from labeldp.service import leases as service_leases
from labeldp.service.leases import new_owner
from labeldp.service.timestamps import utcnow

log = logging.getLogger("labeldp.features")

__all__ = ["LeaseKeeper", "claim", "hand_back", "new_owner", "reap_expired", "renew"]

HELD = (RUNNING, CANCELLING)  # the states in which a worker owns the row
WORKER_LOST = ("worker_lost", "the training's worker stopped before it finished, too many times")


def _rowcount(result: Any) -> int:
    return cast(CursorResult[Any], result).rowcount


def claim(
    session_factory: sessionmaker[Session],
    owner: str,
    lease_seconds: float,
    *,
    device: str | None = None,
    training_id: str | None = None,
) -> str | None:
    """Take the oldest queued training (or ``training_id`` if it is queued) for ``owner``: its id, or None.

    PostgreSQL: ``SELECT … FOR UPDATE SKIP LOCKED`` picks a row no other claimer holds,
    then the update writes the owner and lease in the same transaction. SQLite: the
    transaction begins IMMEDIATE (one writer at a time) and the update is a
    compare-and-swap on (status queued, no owner), so a row is claimed once either way.
    """
    with session_factory.begin() as session:
        stmt = (
            select(store.Training.training_id)
            .where(store.Training.status == QUEUED)
            .order_by(store.Training.created_at, store.Training.training_id)
            .limit(1)
        )
        if training_id is not None:
            stmt = stmt.where(store.Training.training_id == training_id)
        if session.get_bind().dialect.name == "postgresql":
            stmt = stmt.with_for_update(skip_locked=True)
        chosen = session.scalar(stmt)
        if chosen is None:
            return None
        now = utcnow()
        values: dict[str, Any] = {
            "status": RUNNING, "owner": owner, "lease_expires_at": now + timedelta(seconds=lease_seconds),
            "heartbeat_at": now, "attempt": store.Training.attempt + 1,
            "started_at": func.coalesce(store.Training.started_at, now), "live": None,
        }
        if device is not None:
            values["device"] = device
        result = session.execute(
            update(store.Training)
            .where(store.Training.training_id == chosen, store.Training.status == QUEUED,
                   store.Training.owner.is_(None))
            .values(**values)
        )
        return chosen if _rowcount(result) == 1 else None


def renew(session_factory: sessionmaker[Session], training_id: str, owner: str, lease_seconds: float) -> bool:
    """Extend ``owner``'s lease; False when it no longer holds the training (lost, re-queued, over)."""
    now = utcnow()
    with session_factory.begin() as session:
        result = session.execute(
            update(store.Training)
            .where(store.Training.training_id == training_id, store.Training.owner == owner,
                   store.Training.status.in_(HELD))
            .values(lease_expires_at=now + timedelta(seconds=lease_seconds), heartbeat_at=now)
        )
        return _rowcount(result) == 1


def hand_back(session_factory: sessionmaker[Session], training_id: str, owner: str) -> bool:
    """A worker that stops cleanly returns its training to the queue (a cancel asked meanwhile
    finishes as cancelled). The claim it gives back is not counted against ``max_attempts``."""
    with session_factory.begin() as session:
        free = {"owner": None, "lease_expires_at": None, "live": None}
        mine = (store.Training.training_id == training_id, store.Training.owner == owner)
        cancelled = session.execute(
            update(store.Training).where(*mine, store.Training.status == CANCELLING)
            .values(status=CANCELLED, finished_at=utcnow(), **free)
        )
        if _rowcount(cancelled):
            return False
        result = session.execute(
            update(store.Training).where(*mine, store.Training.status == RUNNING)
            .values(status=QUEUED, attempt=store.Training.attempt - 1, **free)
        )
        return _rowcount(result) == 1


def reap_expired(session_factory: sessionmaker[Session], max_attempts: int, stored_error: str) -> list[str]:
    """Deal with trainings whose worker stopped renewing: re-queue them (they resume from their
    checkpoint), fail those that have had ``max_attempts`` claims, and finish the cancels they
    were carrying out. A row left running without a lease (by a process older than leases) counts
    as expired. Returns the ids put back in the queue. Each update is conditional on the expiry,
    so concurrent reapers and a late renewal cannot both win."""
    now = utcnow()
    expired = or_(store.Training.lease_expires_at.is_(None), store.Training.lease_expires_at < now)
    free = {"owner": None, "lease_expires_at": None, "live": None}
    with session_factory.begin() as session:
        session.execute(
            update(store.Training).where(store.Training.status == CANCELLING, expired)
            .values(status=CANCELLED, finished_at=now, **free)
        )
        failed = session.execute(
            update(store.Training)
            .where(store.Training.status == RUNNING, expired, store.Training.attempt >= max_attempts)
            .values(status=FAILED, error=stored_error, finished_at=now, **free)
        )
        requeue = session.scalars(
            select(store.Training.training_id).where(store.Training.status == RUNNING, expired)
        ).all()
        if requeue:
            session.execute(
                update(store.Training)
                .where(store.Training.training_id.in_(requeue), store.Training.status == RUNNING, expired)
                .values(status=QUEUED, **free)
            )
    if _rowcount(failed):
        log.warning("%d trainings failed: their workers died %d times", _rowcount(failed), max_attempts)
    for training_id in requeue:
        log.warning("training %s re-queued: its worker's lease expired", training_id)
    return list(requeue)


class LeaseKeeper(service_leases.LeaseKeeper):
    """Renews one training's lease every ``lease_seconds / 3`` in a thread; ``lost`` is set once the
    row is no longer this owner's (or renewals failed until the lease ran out): the job must stop."""

    def __init__(
        self, session_factory: sessionmaker[Session], training_id: str, owner: str, lease_seconds: float
    ) -> None:
        super().__init__(
            lambda: renew(session_factory, training_id, owner, lease_seconds), lease_seconds, f"training {training_id}"
        )
