"""The release inbox: the one place privatized labels enter the features party.

A message arrives as a signed manifest and its shards (:mod:`labeldp.message_shards`):

1. **manifest** (:func:`receive_manifest`): Ed25519 signature over its exact bytes (at most 1 MiB),
   schema and consistency, then dedupe on ``release_id`` before any shard; a new one is ``receiving``.
2. **shard** (:func:`receive_shard`): spooled; size, sha256 and rows checked against the manifest,
   stored as an object named by a ``release_shards`` row. Memory: about one shard.
3. **complete** (:func:`complete_release`): with every shard held the release is readable.

A release is accepted whether or not a feature table holds its ids yet (it was charged; the join
is checked when a training binds a table). Nothing is stored on any error, and no database value
is larger than the manifest. Arrivals are announced as ``release.received``/``release.completed``
events (:func:`inbox_event`, :class:`InboxFeed`; ``GET /v1/inbox/events`` and the webhook of
:mod:`labeldp.service.webhooks`): public catalogue facts only, never a row, nothing sent back.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, object_session, sessionmaker

from features_party import responses, store
from labeldp.errors import Conflict, InvalidInput, NotFound, Unauthorized
from labeldp.message_shards import (
    ReleaseManifest,
    check_digest,
    decode_shard,
    iter_columns,
    parse_manifest,
    read_columns,
)
from labeldp.schema import LabelRelease, decode_columns
from labeldp.service.pagination import ASC, Order, keyset_page
from labeldp.service.timestamps import iso
from labeldp.signing import header_key_id, verify
from labeldp.storage import ObjectStore

log = logging.getLogger("labeldp.features")

ACCEPTED = "accepted"
DUPLICATE = "duplicate"
STORED = "stored"
SHARD_PREFIX: Final = "releases"
STORE_INFO: Final = "labeldp.object_store"
"""The key under which a session factory's sessions carry the features party's object store."""


@dataclass(frozen=True)
class ManifestAnswer:
    """The inbox's answer to a manifest: ``complete`` (nothing to send) or the shards it lacks."""

    release_id: str
    new: bool
    status: str  # receiving | complete
    message_sha256: str
    missing: list[int] = field(default_factory=list)
    event: dict[str, Any] | None = None
    """The inbox event this call caused (a manifest stored, a release completed), else None."""

    @property
    def http_status(self) -> int:
        return 201 if self.new else 200

    def body(self) -> responses.InboxReceipt:
        return responses.InboxReceipt(id=self.release_id, status=self.status, missing=self.missing,
                                      message_sha256=self.message_sha256)


def bind_store(sessions: sessionmaker[Session], object_store: ObjectStore) -> None:
    """Let :func:`release_columns` find the shards of a row loaded through ``sessions``."""
    sessions.configure(info={STORE_INFO: object_store})


EventHook = Callable[[Session, dict[str, Any]], object]
"""Called with the transaction that causes an inbox event and the event: the webhook's delivery row
(labeldp.service.webhooks.enqueue) commits with the fact it announces, or not at all."""


def receive_manifest(
    session_factory: sessionmaker[Session], secret: str, raw: bytes, signature: str | None,
    on_event: EventHook | None = None,
) -> ManifestAnswer:
    """Verify, validate and deduplicate a manifest; store a new one (or raise LabelDPError)."""
    if not verify(raw, secret, signature):
        raise Unauthorized("bad_signature", "missing or wrong message signature")
    manifest = parse_manifest(raw)
    sha = hashlib.sha256(raw).hexdigest()
    with session_factory() as session:
        known = _dedupe(session, manifest.release_id, sha)
    if known is not None:
        return known
    # No join check here: a valid, signed release is stored whether or not its feature table
    # exists yet (it was charged; refusing it would spend budget on nothing). The table is
    # bound, and every id checked against it, when a training starts (trainings.create_training).
    row = store.Release(
        release_id=manifest.release_id,
        label_set_id=manifest.label_set_id,
        feature_table=manifest.feature_table,
        mechanism_name=manifest.mechanism.name,
        mechanism=manifest.mechanism.model_dump(mode="json"),
        prior=manifest.prior.model_dump(mode="json") if manifest.prior is not None else None,
        accounting=manifest.accounting.model_dump(mode="json"),
        total_epsilon_micro=manifest.accounting.total_epsilon_micro,
        row_count=manifest.row_count,
        created_at=manifest.created_at,
        status=store.RELEASE_RECEIVING,
        manifest=raw,
        signature=signature,
        shard_count=len(manifest.shards),
        body_sha256=sha,
    )
    try:
        with session_factory.begin() as session:
            known = _dedupe(session, manifest.release_id, sha)
            if known is not None:
                return known
            session.add(row)
            session.flush()
            event = inbox_event(RELEASE_RECEIVED, row)
            if on_event is not None:
                on_event(session, event)
    except IntegrityError:
        # A concurrent delivery of the same release won the insert.
        with session_factory() as session:
            known = _dedupe(session, manifest.release_id, sha)
        if known is None:
            raise
        return known
    log.info("release %s: manifest accepted (%d rows in %d shards)", manifest.release_id, manifest.row_count,
             len(manifest.shards))
    return ManifestAnswer(manifest.release_id, True, store.RELEASE_RECEIVING, sha, list(range(len(manifest.shards))),
                          event)


def _dedupe(session: Session, release_id: str, sha: str) -> ManifestAnswer | None:
    existing = session.get(store.Release, release_id)
    if existing is None:
        return None
    if existing.body_sha256 != sha:
        raise Conflict("release_conflict", "a different message with this release_id was already received")
    if existing.status == store.RELEASE_COMPLETE:
        log.info("release %s received again (duplicate)", release_id)
        return ManifestAnswer(release_id, False, store.RELEASE_COMPLETE, sha)
    held = set(session.scalars(
        select(store.ReleaseShard.shard_index).where(store.ReleaseShard.release_id == release_id)
    ))
    missing = [i for i in range(existing.shard_count) if i not in held]
    log.info("release %s: delivery resumed, %d of %d shards missing", release_id, len(missing), existing.shard_count)
    return ManifestAnswer(release_id, False, store.RELEASE_RECEIVING, sha, missing)


def _receiving(session: Session, release_id: str) -> tuple[store.Release, ReleaseManifest]:
    row = session.get(store.Release, release_id)
    if row is None or row.manifest is None:
        raise NotFound("manifest_unknown", "no manifest of this release was received; send it first")
    return row, parse_manifest(row.manifest)


def receive_shard(
    session_factory: sessionmaker[Session], object_store: ObjectStore, release_id: str, index: int,
    path: Path, sha256: str, size: int,
) -> str:
    """Verify one spooled shard against its manifest and store it; ``stored`` or ``duplicate``."""
    with session_factory() as session:
        row, manifest = _receiving(session, release_id)
        if row.status == store.RELEASE_COMPLETE or session.get(store.ReleaseShard, (release_id, index)) is not None:
            return DUPLICATE
    if not 0 <= index < len(manifest.shards):
        raise InvalidInput("invalid_message", f"the manifest lists {len(manifest.shards)} shards")
    entry = manifest.shards[index]
    check_digest(entry, sha256, size)
    decode_shard(str(path), entry)  # the rows' checks: one shard in memory, then dropped
    key = f"{SHARD_PREFIX}/{release_id}/{entry.index:06d}-{entry.sha256}.parquet"
    object_store.put_file(key, path)  # the same bytes whoever writes it: a race is harmless
    try:
        with session_factory.begin() as session:
            session.add(store.ReleaseShard(
                release_id=release_id, shard_index=index, object_key=key, sha256=entry.sha256,
                rows=entry.rows, size=entry.bytes,
            ))
    except IntegrityError:
        return DUPLICATE  # a concurrent delivery stored it first
    return STORED


def complete_release(
    session_factory: sessionmaker[Session], release_id: str, on_event: EventHook | None = None
) -> ManifestAnswer:
    """Mark a release complete once every shard is held (409 ``shards_missing`` before)."""
    with session_factory.begin() as session:
        row = session.get(store.Release, release_id)
        if row is None or row.manifest is None:
            raise NotFound("manifest_unknown", "no manifest of this release was received; send it first")
        if row.status != store.RELEASE_COMPLETE:
            held = session.scalar(
                select(func.count()).select_from(store.ReleaseShard).where(store.ReleaseShard.release_id == release_id)
            )
            if held != row.shard_count:
                raise Conflict("shards_missing", f"{row.shard_count - (held or 0)} shards are still missing")
            row.status = store.RELEASE_COMPLETE
            row.completed_at = datetime.now(UTC)
            log.info("release %s accepted: %d rows", release_id, row.row_count)
            event = inbox_event(RELEASE_COMPLETED, row)
            if on_event is not None:
                on_event(session, event)
            return ManifestAnswer(release_id, False, store.RELEASE_COMPLETE, row.body_sha256, event=event)
        return ManifestAnswer(release_id, False, store.RELEASE_COMPLETE, row.body_sha256)


def get_release(session: Session, release_id: str) -> store.Release:
    """A complete release (one still receiving shards is not found yet)."""
    row = session.get(store.Release, release_id)
    if row is None or row.status != store.RELEASE_COMPLETE:
        raise NotFound("release_not_found", "no such release")
    return row


def describe_release(row: store.Release) -> responses.ReceivedRelease:
    return responses.ReceivedRelease(
        id=row.release_id,
        label_set_id=row.label_set_id,
        feature_table=row.feature_table,
        mechanism=row.mechanism_name,
        mechanism_spec=row.mechanism,
        prior=row.prior,
        accounting=row.accounting,
        row_count=row.row_count,
        created_at=iso(row.created_at),
        received_at=iso(row.received_at),
        message_sha256=row.body_sha256,
        signing_key_id=header_key_id(row.signature),
    )


def signed_manifest(row: store.Release) -> tuple[bytes, str]:
    """The manifest's exact bytes and the signature they arrived with: proof of what was sent."""
    if row.manifest is None or row.signature is None:
        raise NotFound("manifest_not_kept", "this release was received before manifests were kept with their signature")
    return row.manifest, row.signature


def list_releases(
    session: Session, limit: int, cursor: str | None, label_set_id: str | None = None, order: Order = ASC
) -> responses.ReceivedReleasePage:
    """A page of complete releases in ``order`` of receipt; never loads a message."""
    stmt = select(store.Release).where(store.Release.status == store.RELEASE_COMPLETE)
    if label_set_id is not None:
        stmt = stmt.where(store.Release.label_set_id == label_set_id)
    return responses.ReceivedReleasePage(**keyset_page(
        session, stmt, store.Release.received_at, store.Release.release_id, limit, cursor, describe_release, order
    ))


def release_columns(row: store.Release, object_store: ObjectStore | None = None) -> tuple[pa.Array, np.ndarray]:
    """The privatized ids (an Arrow string array: a 10⁷-row release never becomes 10⁷ Python
    strings on its way to a training) and labels of a complete release, read from its shards
    (each digest checked again), or from the exact body of a release received whole before shards.

    ``object_store``: by default the one bound to the session that loaded ``row`` (:func:`bind_store`).
    """
    shards = _shards(row, object_store)
    if shards is None:
        return _body_columns(row)
    return read_columns(*shards)


def release_chunks(
    row: store.Release, object_store: ObjectStore | None = None
) -> tuple[int, Iterator[tuple[pa.Array, np.ndarray]]]:
    """A complete release's row count and its (ids, labels) shard by shard, as :func:`release_columns` reads
    them (each digest checked before its shard is read) but never joined: a streamed training stages it
    one shard at a time. Where the shards lie is looked up now (with ``row``'s session); the shards are
    read as the iterator is consumed, which may be after the session closed. A release received whole
    before shards is one chunk."""
    shards = _shards(row, object_store)
    if shards is None:
        ids, labels = _body_columns(row)
        return len(ids), iter([(ids, labels)])
    manifest = shards[2]
    return sum(entry.rows for entry in manifest.shards), iter_columns(*shards)


def _body_columns(row: store.Release) -> tuple[pa.Array, np.ndarray]:
    if row.body is None:
        raise NotFound("release_not_found", "the release holds no message")
    return decode_columns(LabelRelease.model_validate_json(row.body).payload)


def _shards(
    row: store.Release, object_store: ObjectStore | None
) -> tuple[ObjectStore, str, ReleaseManifest, list[str]] | None:
    """Where a release's shards lie (store, manifest key, manifest, each shard's key), or None for a
    release received whole before shards."""
    if row.manifest is None:
        return None
    session = object_session(row)
    if object_store is None and session is not None:
        object_store = session.info.get(STORE_INFO)
    if object_store is None:
        raise RuntimeError("no object store is bound to the session that loaded this release (inbox.bind_store)")
    manifest = parse_manifest(row.manifest)
    if session is None:
        raise RuntimeError("the release row is detached from its session")
    keys: dict[int, str] = dict(session.execute(
            select(store.ReleaseShard.shard_index, store.ReleaseShard.object_key)
            .where(store.ReleaseShard.release_id == row.release_id)
        ).all())
    return object_store, "", manifest, [keys[i] for i in range(len(manifest.shards))]


LABEL_FILE_TYPES: Final = {
    "parquet": "application/vnd.apache.parquet",
    "arrow": "application/vnd.apache.arrow.stream",
    "csv": "text/csv",
}
"""The file formats of a release's privatized labels and their media types (``?format=``)."""


def write_labels_file(ids: pa.Array, labels: np.ndarray, fmt: str, path: Path) -> None:
    """The release's columns ``id`` (text) and ``label`` (its privatized value: a number, or a class name)
    as one file: Parquet, an Arrow IPC stream or CSV with a header. 10⁶ rows are some MB of Parquet,
    not a 34 MB JSON body, and every row is the JSON answer's row, in the same (sorted) order."""
    if fmt not in LABEL_FILE_TYPES:
        raise InvalidInput("invalid_format", f"format must be one of {', '.join(LABEL_FILE_TYPES)}")
    table = pa.table({"id": ids.cast(pa.string()), "label": pa.array(labels)})
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, path)
    elif fmt == "arrow":
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    else:
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, path)


RELEASE_RECEIVED: Final = "release.received"
RELEASE_COMPLETED: Final = "release.completed"
FEED_SLACK: Final = timedelta(seconds=5)
"""How far back each poll of the inbox feed looks past the newest event it has seen: a row stamped
before another but committed after it is still found (its event id is remembered, never sent twice)."""


def inbox_event(kind: str, row: store.Release) -> dict[str, Any]:
    """The event of ``kind`` about ``row``: its id is the same for every delivery of it (the webhook's
    retries, every stream), so receivers deduplicate on it."""
    at = row.received_at if kind == RELEASE_RECEIVED else row.completed_at
    return {
        "id": "evt_" + hashlib.sha256(f"{kind}\n{row.release_id}".encode()).hexdigest()[:24],
        "type": kind,
        "created_at": iso(at or datetime.now(UTC)),
        "data": {
            "release_id": row.release_id,
            "label_set_id": row.label_set_id,
            "status": store.RELEASE_COMPLETE if kind == RELEASE_COMPLETED else store.RELEASE_RECEIVING,
            "mechanism": row.mechanism_name,
            "total_epsilon_micro": row.total_epsilon_micro,
            "row_count": row.row_count,
            "shard_count": row.shard_count,
            "message_sha256": row.body_sha256,
            "signing_key_id": header_key_id(row.signature),
        },
    }


class InboxFeed:
    """One stream's view of the inbox: each :meth:`poll` returns the events since the last, oldest first.

    It starts at "now" (what arrived before is in ``GET /v1/releases``), reads only rows stamped
    within :data:`FEED_SLACK` of the newest event seen, and remembers the ids it sent in that window.
    """

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        self.watermark: datetime | None = None
        self.sent: dict[str, datetime] = {}
        self._started = False

    def poll(self) -> list[tuple[str, dict[str, Any]]]:
        with self.sessions() as s:
            stmt = select(store.Release)
            if self.watermark is not None:
                since = self.watermark - FEED_SLACK
                stmt = stmt.where((store.Release.received_at >= since) | (store.Release.completed_at >= since))
            elif not self._started:
                newest = s.execute(
                    select(func.max(store.Release.received_at), func.max(store.Release.completed_at))
                ).one()
                stamps = [t for t in newest if t is not None]
                if stamps:
                    self.watermark = max(stamps)
                    since = self.watermark - FEED_SLACK
                    stmt = stmt.where((store.Release.received_at >= since) | (store.Release.completed_at >= since))
            found: list[tuple[datetime, str, store.Release]] = []
            for row in s.scalars(stmt):
                found.append((row.received_at, RELEASE_RECEIVED, row))
                if row.completed_at is not None:
                    found.append((row.completed_at, RELEASE_COMPLETED, row))
            events: list[tuple[datetime, dict[str, Any]]] = []
            for at, kind, row in sorted(found, key=lambda f: (f[0], f[1] == RELEASE_COMPLETED, f[2].release_id)):
                if self.watermark is not None and at < self.watermark - FEED_SLACK:
                    continue
                event = inbox_event(kind, row)
                if event["id"] in self.sent:
                    continue
                self.sent[event["id"]] = at
                if self._started:  # the first poll only marks what was there before the stream
                    events.append((at, event))
            if found:
                newest_at = max(f[0] for f in found)
                self.watermark = newest_at if self.watermark is None else max(self.watermark, newest_at)
        self._started = True
        if self.watermark is not None:
            floor = self.watermark - FEED_SLACK
            self.sent = {k: t for k, t in self.sent.items() if t >= floor}
        return [(event["type"], event) for _, event in events]
