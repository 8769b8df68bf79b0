"""The outbox sender: the only labels-party component that talks to the features party.

It pushes a stored message, exactly as charged, shard by shard (:mod:`labeldp.message_shards`):
the signed manifest, then each shard the inbox says it lacks (none for a duplicate), then
``complete``. It keeps nothing it reads back but a status class, the inbox's own code, and
the manifest's list of missing shard indices (only to choose what to send). Network errors and
5xx answers are retried with jittered exponential backoff (resending the same bytes is free
post-processing; a retry sends only the missing shards); a 4xx marks the release ``rejected``,
re-queued with ``POST /v1/releases/{id}/redeliver`` once fixed. A failed attempt is recorded as a
value of a fixed list (:mod:`.delivery_outcomes`), never receiver text (privacy invariant 1).

The sender survives its database: a locked or restarting database is logged by error type
only and waited out with jittered backoff. A release whose delivered status could not be
recorded keeps its lease and is pushed again when it ends; the inbox deduplicates.

Each attempt sends the release's outgoing request id (``X-Request-ID``), a fresh one made when
it was charged, and logs under it: the client's own request id never leaves the labels party.
Metrics (attempts, latency, the queue) go to a file the labels API serves: it listens on no port.
"""

from __future__ import annotations

import logging
import random
import ssl
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Literal

import httpx
from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from labeldp.errors import InvalidInput, PayloadTooLarge
from labeldp.message_shards import MANIFEST_NAME, parse_manifest, shard_key, write_message
from labeldp.schema import SIGNATURE_HEADER, LabelRelease, ReleaseMetadata, decode_columns
from labeldp.service.database import backoff_seconds, is_transient, make_session_factory, retry_transient
from labeldp.service.http_api import inbox_transport_keys
from labeldp.service.logs import REQUEST_ID_HEADER, bound_request_id
from labeldp.service.metrics import OUTBOX_METRICS_DIR, OutboxMetrics, OutboxMetricsFile, outbox_metrics
from labeldp.service.migrations import open_database
from labeldp.service.settings import (
    Settings,
    message_limits,
    open_object_store,
    require_files,
    require_secrets,
)
from labeldp.signing import key_id, public_key_of, sign
from labeldp.storage import ObjectStore

from . import audit
from .context import message_file, message_key, message_prefix
from .delivery_outcomes import REJECTING, DeliveryOutcome, classify_error, classify_response
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
        assert row.message_file is not None  # a pending release was charged with its message
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
    status, outcome = "pending", "network"
    error: DeliveryOutcome | None = None
    started = time.perf_counter()
    answered = True
    try:
        error = _transfer(sessions, client, settings, release_id, store, key, request_id)
    except PayloadTooLarge:
        # A stored message today's limits refuse (one written before shards, rewritten as shards
        # now): rejected with a clear state, re-queued by redeliver once the limits allow it.
        error = DeliveryOutcome.PAYLOAD_TOO_LARGE
    except InvalidInput:
        error = DeliveryOutcome.INVALID_MESSAGE
    except httpx.HTTPError as exc:
        error, answered = classify_error(exc), False
    if error is None:
        status = outcome = "delivered"
    elif error in REJECTING:
        status = outcome = "rejected"
    elif answered:
        outcome = "retry"
    if metrics is not None:
        metrics.attempts.labels(outcome).inc()
        metrics.attempt_seconds.labels(outcome).observe(time.perf_counter() - started)
    values: dict[str, object] = {
        "attempts": attempts,
        "status": status,
        "last_error": None if error is None else error.value,
        "lease_until": 0.0,
    }
    wait = 0.0
    if status == "delivered":
        values["delivered_at"] = datetime.now(UTC)
    elif status == "pending":
        wait = backoff_seconds(
            attempts, settings.outbox_initial_backoff_seconds, settings.outbox_max_backoff_seconds, rng
        )
        values["next_attempt_at"] = time.time() + wait
    with sessions.begin() as s:
        s.execute(update(ReleaseRow).where(ReleaseRow.id == release_id).values(**values))
    if error is None:
        log.info("release %s attempt %d -> delivered", release_id, attempts)
    else:
        log_failed_attempt(release_id, attempts, status, error, wait)
    return status


def log_failed_attempt(release_id: str, attempt: int, status: str, error: DeliveryOutcome, wait: float) -> None:
    """A failed attempt at WARNING (an operator acts on a release that does not arrive), with the error
    envelope ``{code, message, details}`` as a field: ``code`` one of the fixed outcomes, never the
    receiver's text."""
    then = "rejected: not retried until redelivered" if status == "rejected" else f"retried in {wait:.1f} s"
    log.warning(
        "release %s attempt %d -> %s (%s); %s", release_id, attempt, status, error.value, then,
        extra={"release_id": release_id, "attempt": attempt,
               "error": {"code": error.value, "message": f"delivery attempt {attempt} failed; {then}", "details": []}},
    )


def _transfer(
    sessions: sessionmaker[Session],
    client: httpx.Client,
    settings: Settings,
    release_id: str,
    store: ObjectStore,
    key: str,
    request_id: str,
) -> DeliveryOutcome | None:
    """One delivery: the signed manifest, then each shard the inbox still needs, then complete.

    Returns ``None`` once the inbox holds the whole message, else why not. The inbox's answer to
    the manifest is read only as a value of a fixed shape (``complete``, or the indices of the
    shards it lacks, each one of this message's): a resumed delivery sends only what is missing,
    so a transfer cut off at 90 % resends at most the shard that was in flight.
    """
    key = _sharded(sessions, settings, store, release_id, key)
    raw = store.get_bytes(key)  # the manifest: at most inbox_max_manifest_bytes (1 MiB)
    shard_count = len(parse_manifest(raw).shards)
    base = f"{settings.features_url.rstrip('/')}/v1/releases"
    headers = {REQUEST_ID_HEADER: request_id, **transport_headers(settings)}
    response = client.post(
        base,
        content=raw,
        headers={**headers, "content-type": "application/json",
                 SIGNATURE_HEADER: sign(raw, settings.signing_key)},
    )
    if response.status_code not in (200, 201):
        return classify_response(response)
    needed = _needed(response, shard_count)
    if needed is None:
        return DeliveryOutcome.UNEXPECTED_ANSWER
    if needed == "complete":
        return None  # a duplicate: the inbox holds it all, answered before any shard
    for index in needed:
        shard = shard_key(key, index)
        response = client.put(
            f"{base}/{release_id}/shards/{index}",
            content=_chunks(store, shard),
            headers={**headers, "content-type": "application/vnd.apache.parquet",
                     "content-length": str(store.size(shard))},
        )
        if response.status_code not in (200, 201):
            return classify_response(response)
        _renew_lease(sessions, release_id, settings)
    response = client.post(f"{base}/{release_id}/complete", headers=headers)
    if response.status_code != 200:
        return classify_response(response)
    return None


def _sharded(
    sessions: sessionmaker[Session], settings: Settings, store: ObjectStore, release_id: str, key: str
) -> str:
    """The key of the release's manifest. A message charged before shards (one ``<id>.json``
    body) is rewritten as shards once, the same metadata and rows (post-processing: nothing is
    charged), and its row names the new manifest; the sweep removes the old body."""
    if key.endswith("/" + MANIFEST_NAME):
        return key
    legacy = LabelRelease.model_validate_json(store.get_bytes(key))
    ids, labels = decode_columns(legacy.payload)
    fields = {name: getattr(legacy, name) for name in ReleaseMetadata.model_fields if name != "schema_version"}
    written = write_message(
        store, message_prefix(release_id), ReleaseMetadata(**fields), ids, labels, message_limits(settings)
    )
    with sessions.begin() as s:
        s.execute(update(ReleaseRow).where(ReleaseRow.id == release_id).values(
            message_file=message_file(written.manifest_key), message_bytes=written.total_bytes,
            message_sha256=written.manifest_sha256,
        ))
    log.info("release %s: its single-body message was rewritten as %d shards", release_id,
             len(written.manifest.shards))
    return written.manifest_key


def _needed(response: httpx.Response, shard_count: int) -> Literal["complete"] | list[int] | None:
    """The shards the inbox lacks, from its answer to the manifest; ``None`` if the answer is not one
    the contract allows. Nothing of it is stored or logged."""
    try:
        body = response.json()
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    missing = body.get("missing")
    if body.get("status") == "complete" and missing == []:
        return "complete"
    if body.get("status") != "receiving" or not isinstance(missing, list):
        return None
    if not all(type(i) is int and 0 <= i < shard_count for i in missing) or len(set(missing)) != len(missing):
        return None
    return sorted(missing)


def _renew_lease(sessions: sessionmaker[Session], release_id: str, settings: Settings) -> None:
    """Each shard sent extends the lease: a long delivery is not taken over by another sender."""
    until = time.time() + settings.outbox_timeout_seconds * 2
    with sessions.begin() as s:
        s.execute(update(ReleaseRow).where(ReleaseRow.id == release_id).values(lease_until=until))


def transport_headers(settings: Settings) -> dict[str, str]:
    """The credential the inbox checks from the headers before it spools a byte of the body."""
    keys = inbox_transport_keys(settings.inbox_transport_key)
    return {"authorization": f"Bearer {keys[0]}"} if keys else {}


def outbox_client(settings: Settings) -> httpx.Client:
    """The sender's HTTP client: the features party's server verified against
    ``outbox_tls_ca_file`` (else the system's CAs), and ``outbox_tls_certfile`` presented as the
    client certificate where the inbox asks for mutual TLS."""
    verify: ssl.SSLContext | bool = True
    require_files(settings, "outbox_tls_ca_file", "outbox_tls_certfile", "outbox_tls_keyfile")
    if settings.outbox_tls_ca_file or settings.outbox_tls_certfile:
        verify = ssl.create_default_context(cafile=settings.outbox_tls_ca_file or None)
        if settings.outbox_tls_certfile:
            verify.load_cert_chain(settings.outbox_tls_certfile, settings.outbox_tls_keyfile or None)
    return httpx.Client(timeout=settings.outbox_timeout_seconds, verify=verify)


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
    require_secrets(settings, "signing_key", "inbox_transport_key")
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
    kid = key_id(public_key_of(settings.signing_key))
    if retry_transient(lambda: audit.record_signing_key(sessions, kid)):
        log.info("outbox signs with key %s (a new kid: written to the audit log)", kid)
    log.info("outbox sending to %s", settings.features_url)
    metrics = outbox_metrics()
    metrics_file = OutboxMetricsFile(settings.labels_data_dir / OUTBOX_METRICS_DIR, metrics)
    metrics_file.remove_stale()
    store = open_object_store(settings, settings.labels_data_dir)
    try:
        with outbox_client(settings) as client:
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
