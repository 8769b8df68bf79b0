"""Signed webhooks with durable deliveries: a party tells its own systems that something happened.

An event is one JSON body POSTed to a target URL, signed with HMAC-SHA256 over ``<timestamp>.<body>``
(the timestamp in its own header, so a receiver can refuse a replayed old delivery): headers
:data:`SIGNATURE_HEADER` (``v1=<hex>``), :data:`TIMESTAMP_HEADER` (Unix seconds) and :data:`ID_HEADER`
(the event's id, the same on every attempt). :func:`verify_webhook` is what a receiver runs.

Each delivery is a row of :func:`webhook_deliveries_table` in the service's catalogue, written by
:func:`enqueue` in the same transaction as the fact it announces, so a restart loses nothing.
:class:`WebhookSender` threads (any number, in any processes) :func:`claim_due` rows — a lease taken
by compare-and-set, ``FOR UPDATE SKIP LOCKED`` on PostgreSQL — so no two send one event at once;
each failed attempt (no answer, a timeout, not 2xx) waits a jittered, doubling backoff, and after
``max_attempts`` the row is ``failed`` (re-queued by :func:`retry_failed`). Delivery is at least
once and in no guaranteed order: a sender killed after the POST and before recording it sends
again, so receivers deduplicate on the event id. Only an answer's status is read, recorded as a
fixed outcome (never the receiver's text).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import random
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final, cast

import httpx
from sqlalchemy import (
    Column,
    CursorResult,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    delete,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session, sessionmaker

from labeldp.service.job_loop import JobRunner, run_jobs
from labeldp.service.leases import new_owner
from labeldp.service.pagination import ASC, Order, after, check_limit, next_cursor, ordered
from labeldp.service.timestamps import iso, utcnow

log = logging.getLogger("labeldp.webhooks")

SIGNATURE_HEADER = "X-Labeldp-Webhook-Signature"
TIMESTAMP_HEADER = "X-Labeldp-Webhook-Timestamp"
ID_HEADER = "X-Labeldp-Webhook-Id"
SIGNATURE_VERSION = "v1"
TOLERANCE_SECONDS = 300

PENDING: Final = "pending"
DELIVERED: Final = "delivered"
FAILED: Final = "failed"
STATES: Final = (PENDING, DELIVERED, FAILED)

DEFAULT_MAX_ATTEMPTS: Final = 24
DEFAULT_INITIAL_BACKOFF_SECONDS: Final = 5.0
DEFAULT_MAX_BACKOFF_SECONDS: Final = 3600.0
DELIVERED_RETENTION: Final = timedelta(days=7)
"""A delivered row is kept this long, then pruned; failed rows stay.
Decided in docs/decisions/0026-webhook-deliveries.md."""


def webhook_signature(secret: str, timestamp: str, body: bytes) -> str:
    """``v1=`` and the hex HMAC-SHA256 of ``<timestamp>.<body>`` under ``secret``."""
    mac = hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return f"{SIGNATURE_VERSION}={mac.hexdigest()}"


def verify_webhook(
    secret: str, body: bytes, headers: Mapping[str, str], tolerance: float = TOLERANCE_SECONDS,
    now: float | None = None,
) -> bool:
    """A receiver's check: the signature header matches the body and timestamp under ``secret``,
    and the timestamp is within ``tolerance`` seconds of ``now`` (constant-time comparison)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    timestamp = lowered.get(TIMESTAMP_HEADER.lower(), "")
    given = lowered.get(SIGNATURE_HEADER.lower(), "")
    if not timestamp.isdigit() or not given:
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > tolerance:
        return False
    return hmac.compare_digest(given.encode(), webhook_signature(secret, timestamp, body).encode())


def webhook_deliveries_table(metadata: MetaData) -> Table:
    """The ``webhook_deliveries`` table, added to a service's metadata: one row per (event, target)."""
    table = Table(
        "webhook_deliveries",
        metadata,
        Column("id", String(40), primary_key=True, comment="whd_ and a digest of event id and target"),
        Column("event_id", String(64), nullable=False),
        Column("event_type", String(64), nullable=False),
        Column("target", String(2048), nullable=False, comment="the URL it is POSTed to"),
        Column("body", Text, nullable=False, comment="the exact JSON bytes signed and sent"),
        Column("state", String(16), nullable=False, comment="pending, delivered or failed"),
        Column("attempts", Integer, nullable=False),
        Column("next_attempt_at", Float, nullable=False, comment="unix time of the next attempt (pending)"),
        Column("lease_until", Float, nullable=True, comment="unix time until which a sender holds the row"),
        Column("owner", String(128), nullable=True, comment="the sender holding the lease"),
        Column("last_outcome", String(40), nullable=True, comment="status class or error type, never the answer"),
        Column("created_at", DateTime(timezone=True), nullable=False),
        Column("finished_at", DateTime(timezone=True), nullable=True),
    )
    Index("ix_webhook_deliveries_due", table.c.state, table.c.next_attempt_at)
    return table


def delivery_id(event_id: str, target: str) -> str:
    return "whd_" + hashlib.sha256(f"{event_id}\n{target}".encode()).hexdigest()[:32]


def event_body(event: Mapping[str, Any]) -> str:
    return json.dumps(event, separators=(",", ":"), sort_keys=True)


def enqueue(session: Session, table: Table, target: str, event: Mapping[str, Any]) -> bool:
    """Add ``event`` (``{"id", "type", "created_at", "data"}``) for ``target`` in the caller's
    transaction, due now; False when that event is already there for that target."""
    row_id = delivery_id(str(event["id"]), target)
    if session.scalar(select(table.c.id).where(table.c.id == row_id)) is not None:
        return False
    session.execute(insert(table).values(
        id=row_id, event_id=str(event["id"]), event_type=str(event.get("type", ""))[:64], target=target,
        body=event_body(event), state=PENDING, attempts=0, next_attempt_at=time.time(), created_at=utcnow(),
    ))
    return True


def _due(table: Table, target: str, now: float) -> tuple[Any, ...]:
    return (
        table.c.target == target, table.c.state == PENDING, table.c.next_attempt_at <= now,
        or_(table.c.lease_until.is_(None), table.c.lease_until <= now),
    )


def claim_due(
    sessions: sessionmaker[Session], table: Table, target: str, owner: str, lease_seconds: float, limit: int = 1
) -> list[str]:
    """Lease up to ``limit`` due deliveries to ``target`` for ``owner``: their ids, oldest first.

    The UPDATE repeats the "due and not leased" condition (compare-and-set), so of two senders that
    read the same row only one holds it (PostgreSQL re-checks the condition on a row a concurrent
    UPDATE committed; SQLite runs one writer at a time). On PostgreSQL the read skips rows another
    sender is claiming (``FOR UPDATE SKIP LOCKED``) instead of waiting for them.
    """
    now = time.time()
    with sessions.begin() as s:
        query = select(table.c.id).where(*_due(table, target, now)).order_by(table.c.next_attempt_at).limit(limit)
        if s.get_bind().dialect.name == "postgresql":
            query = query.with_for_update(skip_locked=True)
        ids = list(s.scalars(query).all())
        if not ids:
            return []
        claimed = set(s.scalars(
            update(table).where(table.c.id.in_(ids), *_due(table, target, now))
            .values(lease_until=now + lease_seconds, owner=owner).returning(table.c.id)
        ).all())
    return [i for i in ids if i in claimed]


def retry_failed(sessions: sessionmaker[Session], table: Table, row_id: str) -> bool:
    """Put a ``failed`` delivery back in the queue, due now, with its attempts counted from zero."""
    with sessions.begin() as s:
        result = s.execute(
            update(table).where(table.c.id == row_id, table.c.state == FAILED)
            .values(state=PENDING, attempts=0, next_attempt_at=time.time(), lease_until=None, owner=None,
                    finished_at=None)
        )
        return cast(CursorResult[Any], result).rowcount == 1


def describe_delivery(row: Any) -> dict[str, Any]:
    """A delivery as the API shows it: its state and attempts, never the receiver's answer."""
    pending = row.state == PENDING
    return {
        "id": row.id, "event_id": row.event_id, "event_type": row.event_type, "target": row.target,
        "state": row.state, "attempts": row.attempts, "last_outcome": row.last_outcome,
        "next_attempt_at": iso(datetime.fromtimestamp(row.next_attempt_at, UTC)) if pending else None,
        "created_at": iso(row.created_at), "finished_at": iso(row.finished_at),
    }


def list_deliveries(
    session: Session, table: Table, limit: int, cursor: str | None, state: str | None = None, order: Order = ASC
) -> dict[str, Any]:
    """One page of deliveries in (created, id) ``order`` (optionally of one ``state``), as
    ``{"items", "next_cursor"}``."""
    limit = check_limit(limit)
    stmt = select(table)
    if state is not None:
        stmt = stmt.where(table.c.state == state)
    where = after(table.c.created_at, table.c.id, cursor, order)
    if where is not None:
        stmt = stmt.where(where)
    rows = session.execute(stmt.order_by(*ordered(table.c.created_at, table.c.id, order)).limit(limit + 1)).all()
    last = rows[limit - 1] if len(rows) > limit else None
    return {
        "items": [describe_delivery(row) for row in rows[:limit]],
        "next_cursor": next_cursor(last, table.c.created_at, table.c.id, order),
    }


def backoff_seconds(attempt: int, initial: float, cap: float, rng: random.Random) -> float:
    """The wait after failed attempt ``attempt`` (1-based): ``initial`` doubling, capped, times 0.5–1."""
    return min(cap, initial * 2 ** min(attempt - 1, 60)) * (0.5 + rng.random() / 2)


class WebhookSender:
    """A background sender of one target's deliveries from the catalogue (see the module's docstring).

    Any number of senders (threads, API processes, workers) may run over one catalogue and target:
    each claims rows before sending them. :meth:`wake` makes it look at once (this process just
    queued an event); otherwise it polls every ``poll_seconds``.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        table: Table,
        url: str,
        secret: str,
        *,
        timeout: float = 5.0,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        initial_backoff: float = DEFAULT_INITIAL_BACKOFF_SECONDS,
        max_backoff: float = DEFAULT_MAX_BACKOFF_SECONDS,
        poll_seconds: float = 2.0,
    ) -> None:
        self.sessions, self.table, self.url, self.secret = sessions, table, url, secret
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.poll_seconds = poll_seconds
        self.lease_seconds = 2 * timeout + 10  # an attempt ends within its timeout; then the row is written
        self.owner = new_owner()
        self._runner = JobRunner(self._run, enabled=True, thread_name="labeldp-webhooks")
        self._rng = random.Random()
        self._pruned_at = 0.0
        self.delivered = 0

    def enqueue(self, session: Session, event: Mapping[str, Any]) -> bool:
        """:func:`enqueue` for this sender's target, in the caller's transaction."""
        return enqueue(session, self.table, self.url, event)

    def wake(self) -> None:
        self._runner.wake()

    def start(self) -> None:
        self._runner.start()

    def stop(self, timeout: float | None = None) -> None:
        self._runner.shutdown(timeout=self.timeout + 5 if timeout is None else timeout)

    def _run(self, stop: threading.Event, wake: threading.Event) -> None:
        with httpx.Client(timeout=self.timeout, follow_redirects=False) as client:
            run_jobs(lambda: self.deliver_one(client), stop, poll_seconds=self.poll_seconds, log=log,
                     name="webhook sender", owner=self.owner, wake=wake)

    def deliver_one(self, client: httpx.Client) -> bool:
        """Claim and attempt one due delivery; False when none is due (the hourly prune first)."""
        self._prune()
        claimed = claim_due(self.sessions, self.table, self.url, self.owner, self.lease_seconds)
        if not claimed:
            return False
        self._attempt(client, claimed[0])
        return True

    def _attempt(self, client: httpx.Client, row_id: str) -> None:
        t = self.table
        with self.sessions() as s:
            row = s.execute(select(t.c.event_id, t.c.body, t.c.attempts).where(t.c.id == row_id)).one()
        body = row.body.encode()
        timestamp = str(int(time.time()))
        headers = {
            "content-type": "application/json",
            ID_HEADER: row.event_id,
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: webhook_signature(self.secret, timestamp, body),
        }
        ok = False
        try:
            status = client.post(self.url, content=body, headers=headers).status_code
            outcome = f"status {status // 100}xx"
            ok = 200 <= status < 300
        except httpx.HTTPError as exc:
            outcome = type(exc).__name__[:40]  # never the receiver's text
        attempts = row.attempts + 1
        mine = (t.c.id == row_id, t.c.owner == self.owner, t.c.state == PENDING)
        values: dict[str, Any] = {"attempts": attempts, "last_outcome": outcome, "lease_until": None, "owner": None}
        if ok:
            values.update(state=DELIVERED, finished_at=utcnow())
            self.delivered += 1
        elif attempts >= self.max_attempts:
            values.update(state=FAILED, finished_at=utcnow())
            log.error("webhook event %s failed after %d attempts (%s)", row.event_id, attempts, outcome)
        else:
            wait = backoff_seconds(attempts, self.initial_backoff, self.max_backoff, self._rng)
            values["next_attempt_at"] = time.time() + wait
            log.warning("webhook event %s attempt %d failed (%s); retrying in %.1f s", row.event_id, attempts,
                        outcome, wait)
        with self.sessions.begin() as s:
            s.execute(update(t).where(*mine).values(**values))

    def _prune(self) -> None:
        if time.monotonic() - self._pruned_at < 3600 and self._pruned_at:
            return
        self._pruned_at = time.monotonic()
        t = self.table
        with self.sessions.begin() as s:
            s.execute(delete(t).where(t.c.state == DELIVERED, t.c.finished_at < utcnow() - DELIVERED_RETENTION))
