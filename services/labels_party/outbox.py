"""The outbox sender: the only labels-party component that talks to the features party.

It pushes stored message bytes, exactly as charged, and keeps nothing it reads back but
a status class and, where it is one of the inbox's own codes, that code. Network errors
and 5xx answers are retried with exponential backoff and jitter (resending identical
bytes is post-processing: free); a 4xx answer marks the release ``rejected``, to be
re-queued with ``POST /v1/releases/{id}/redeliver`` once the cause is fixed. What it
records about a failed attempt is a value of a fixed list (:mod:`.delivery_outcomes`),
never text the receiver chose: nothing flows back (privacy invariant 1).

The sender survives its database: a locked, stopped or restarting database (at start or
in the loop) is logged by error type only, waited out with jittered backoff, and the loop
carries on. A release whose delivered status could not be recorded keeps its lease and is
pushed again when the lease ends; the inbox deduplicates on the release id.

Each attempt sends the release's outgoing request id (``X-Request-ID``), a fresh one made
when the release was charged (the labels API logs which client request it came from), and
logs under it: the client's own request id never leaves the labels party. The sender's
metrics (attempts, their latency, the queue) go to a file the labels API serves
(:mod:`labeldp.service.metrics`): it listens on no port.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from labeldp.schema import SIGNATURE_HEADER
from labeldp.service.database import backoff_seconds, is_transient, make_session_factory, retry_transient
from labeldp.service.http_api import inbox_transport_keys
from labeldp.service.logs import REQUEST_ID_HEADER, bound_request_id
from labeldp.service.metrics import OUTBOX_METRICS_DIR, OutboxMetrics, OutboxMetricsFile, outbox_metrics
from labeldp.service.migrations import open_database
from labeldp.service.settings import Settings, open_object_store, require_secrets
from labeldp.signing import sign_stream, signing_secret
from labeldp.storage import ObjectStore

from .context import message_key
from .delivery_outcomes import RETRYABLE_4XX, DeliveryOutcome, classify_error, classify_response
from .store import ReleaseRow

log = logging.getLogger("labeldp.outbox")

OUTBOX_PASS_RELEASES = 10
"""Releases one pass pushes (each claimed just before it is sent) before the queue metrics are measured."""


def claim_due(sessions: sessionmaker[Session], lease_seconds: float, limit: int = 1) -> list[str]:
    """Lease up to ``limit`` due releases to this sender: no other sender pushes them meanwhile.

    The lease is taken by compare-and-set: the UPDATE repeats the "due and not leased"
    condition, so of two senders that read the same row only the one whose UPDATE matched
    holds it (PostgreSQL re-checks the condition on the row a concurrent UPDATE committed;
    SQLite runs one writer at a time). On PostgreSQL the read also skips rows another sender
    is claiming (``FOR UPDATE SKIP LOCKED``) instead of waiting for it. The sender claims one
    release at a time (``deliver_due``): a sender killed mid-pass holds at most the one it was
    sending, until its lease ends.
    """
    now = time.time()
    due = (
        ReleaseRow.status == "pending",
        ReleaseRow.next_attempt_at <= now,
        or_(ReleaseRow.lease_until <= now, ReleaseRow.lease_until.is_(None)),
    )
    with sessions.begin() as s:
        query = select(ReleaseRow.id).where(*due).order_by(ReleaseRow.created_at).limit(limit)
        if s.get_bind().dialect.name == "postgresql":
            query = query.with_for_update(skip_locked=True)
        ids = s.scalars(query).all()
        if not ids:
            return []
        claimed = s.scalars(
            update(ReleaseRow)
            .where(ReleaseRow.id.in_(ids), *due)
            .values(lease_until=now + lease_seconds)
            .returning(ReleaseRow.id)
        ).all()
    order = {release_id: k for k, release_id in enumerate(ids)}
    return sorted(claimed, key=order.__getitem__)


def deliver_one(
    sessions: sessionmaker[Session],
    client: httpx.Client,
    settings: Settings,
    release_id: str,
    rng: random.Random,
    metrics: OutboxMetrics | None = None,
    store: ObjectStore | None = None,
) -> str:
    """Push one release (its message read from ``store``, by default the settings' store); returns its new status."""
    store = store or open_object_store(settings, settings.labels_data_dir)
    with sessions() as s:
        row = s.get(ReleaseRow, release_id)
        if row is None or row.status != "pending":
            return row.status if row else "missing"
        key = message_key(row.message_file)
        attempts = row.attempts + 1
        request_id = row.request_id
    with bound_request_id(request_id) as rid:
        return _attempt(sessions, client, settings, release_id, attempts, store, key, rid, rng, metrics)


def _attempt(
    sessions: sessionmaker[Session],
    client: httpx.Client,
    settings: Settings,
    release_id: str,
    attempts: int,
    store: ObjectStore,
    key: str,
    request_id: str,
    rng: random.Random,
    metrics: OutboxMetrics | None,
) -> str:
    # The exact bytes charged (the object never changes once a row names it), signed and sent
    # a chunk at a time: the sender's memory does not grow with the release.
    with store.open_input_stream(key) as f:
        signature = sign_stream(f, signing_secret(settings.exchange_secret))
    headers = {
        "content-type": "application/json",
        "content-length": str(store.size(key)),
        SIGNATURE_HEADER: signature,
        REQUEST_ID_HEADER: request_id,
        **transport_headers(settings),
    }
    status, outcome = "pending", "network"
    error: DeliveryOutcome | None = None
    started = time.perf_counter()
    try:
        response = client.post(
            f"{settings.features_url.rstrip('/')}/v1/releases", content=_chunks(store, key), headers=headers
        )
        if response.status_code in (200, 201):
            status = outcome = "delivered"
        elif 400 <= response.status_code < 500 and response.status_code not in RETRYABLE_4XX:
            status = outcome = "rejected"
            error = classify_response(response)
        else:
            outcome = "retry"
            error = classify_response(response)
    except httpx.HTTPError as exc:
        error = classify_error(exc)
    if metrics is not None:
        metrics.attempts.labels(outcome).inc()
        metrics.attempt_seconds.labels(outcome).observe(time.perf_counter() - started)
    values: dict[str, object] = {
        "attempts": attempts,
        "status": status,
        "last_error": None if error is None else error.value,
        "lease_until": 0.0,
    }
    if status == "delivered":
        values["delivered_at"] = datetime.now(UTC)
    elif status == "pending":
        wait = backoff_seconds(
            attempts, settings.outbox_initial_backoff_seconds, settings.outbox_max_backoff_seconds, rng
        )
        values["next_attempt_at"] = time.time() + wait
    with sessions.begin() as s:
        s.execute(update(ReleaseRow).where(ReleaseRow.id == release_id).values(**values))
    log.info("release %s attempt %d -> %s%s", release_id, attempts, status, f" ({error.value})" if error else "")
    return status


def transport_headers(settings: Settings) -> dict[str, str]:
    """The credential the inbox checks from the headers before it spools a byte of the body."""
    key = inbox_transport_keys(settings.inbox_transport_key, settings.exchange_secret)[0]
    return {"authorization": f"Bearer {key}"}


def _chunks(store: ObjectStore, key: str, size: int = 1 << 20) -> Iterator[bytes]:
    with store.open_input_stream(key) as f:
        yield from iter(lambda: bytes(f.read(size)), b"")


def quiet_http_client_logs() -> None:
    """httpx logs every answer's status line at INFO, reason phrase included: text the receiver
    chose. The sender logs its own line per attempt (a value of the outcome list) instead."""
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)


def run_outbox(settings: Settings, stop: threading.Event | None = None, once: bool = False) -> None:
    """Deliver until ``stop`` is set (or after one pass when ``once``); never exits on a database error."""
    require_secrets(settings, "exchange_secret")
    quiet_http_client_logs()
    stop = stop or threading.Event()
    try:
        engine = open_database(
            settings.labels_database_url, "labels_party.migrations", settings, wait_seconds=float("inf"), stop=stop
        )
    except Exception:
        if stop.is_set():
            return
        raise
    sessions = make_session_factory(engine)
    rng = random.Random()
    log.info("outbox sending to %s", settings.features_url)
    metrics = outbox_metrics()
    metrics_file = OutboxMetricsFile(settings.labels_data_dir / OUTBOX_METRICS_DIR, metrics)
    metrics_file.remove_stale()
    store = open_object_store(settings, settings.labels_data_dir)
    try:
        with httpx.Client(timeout=settings.outbox_timeout_seconds) as client:
            _loop(sessions, client, settings, rng, metrics, metrics_file, stop, once, store)
    finally:
        metrics_file.remove()
        engine.dispose()


def _loop(
    sessions: sessionmaker[Session],
    client: httpx.Client,
    settings: Settings,
    rng: random.Random,
    metrics: OutboxMetrics,
    metrics_file: OutboxMetricsFile,
    stop: threading.Event,
    once: bool,
    store: ObjectStore | None = None,
) -> None:
    failures = 0
    while not stop.is_set():
        try:
            due = deliver_due(sessions, client, settings, rng, metrics, metrics_file, store)
            if due or metrics_file.due():
                measure_queue(sessions, metrics)
            failures = 0
        except Exception as exc:
            failures += 1
            metrics.pass_failures.labels(type(exc).__name__).inc()
            wait = backoff_seconds(
                failures, settings.outbox_initial_backoff_seconds, settings.outbox_max_backoff_seconds, rng
            )
            # The error type only: a driver's message may quote statement parameters.
            level = logging.WARNING if is_transient(exc) else logging.ERROR
            log.log(level, "outbox pass failed (%s); retrying in %.1f s", type(exc).__name__, wait)
            metrics_file.write()  # the heartbeat goes on while the database is away
            if once:
                break
            stop.wait(wait)
            continue
        if due or metrics_file.due():
            metrics_file.write()
        if once:
            break
        if not due:
            stop.wait(settings.outbox_poll_seconds)


def measure_queue(sessions: sessionmaker[Session], metrics: OutboxMetrics) -> None:
    """Releases by status, and the depth and age of the delivery queue (one grouped query)."""
    with sessions() as s:
        rows = s.execute(
            select(ReleaseRow.status, func.count(), func.min(ReleaseRow.created_at)).group_by(ReleaseRow.status)
        ).all()
    metrics.releases.clear()
    pending, oldest = 0, None
    for status, count, first in rows:
        metrics.releases.labels(status).set(count)
        if status == "pending":
            pending, oldest = int(count), first
    metrics.queue_depth.set(pending)
    if oldest is not None and oldest.tzinfo is None:
        oldest = oldest.replace(tzinfo=UTC)  # SQLite returns naive UTC times
    age = (datetime.now(UTC) - oldest).total_seconds() if oldest is not None else 0.0
    metrics.oldest_pending_seconds.set(max(age, 0.0))


def deliver_due(
    sessions: sessionmaker[Session],
    client: httpx.Client,
    settings: Settings,
    rng: random.Random,
    metrics: OutboxMetrics | None = None,
    heartbeat: OutboxMetricsFile | None = None,
    store: ObjectStore | None = None,
) -> list[str]:
    """One pass: lease a due release (retrying a lock briefly), push it, and the next, up to
    :data:`OUTBOX_PASS_RELEASES`; returns the ids leased.

    A database error ends the pass (the caller backs off); any other error is confined to
    its release, which is tried again when its lease ends. ``heartbeat`` is rewritten between
    releases, so a pass of long deliveries does not read as a dead sender.
    """
    lease = settings.outbox_timeout_seconds * 2
    due: list[str] = []
    while len(due) < OUTBOX_PASS_RELEASES:
        claimed = retry_transient(lambda: claim_due(sessions, lease_seconds=lease))
        if not claimed:
            break
        release_id = claimed[0]
        due.append(release_id)
        if store is None:
            store = open_object_store(settings, settings.labels_data_dir)
        try:
            deliver_one(sessions, client, settings, release_id, rng, metrics, store)
        except Exception as exc:
            if is_transient(exc):
                raise
            log.error("release %s: delivery failed (%s); retried when its lease ends", release_id, type(exc).__name__)
        if heartbeat is not None and heartbeat.due():
            heartbeat.write()
    return due
