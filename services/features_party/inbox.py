"""The release inbox: the one place privatized labels enter the features party.

A message is accepted only if it is signed by the labels party (Ed25519 over the
exact bytes, labeldp.signing), well formed and internally consistent (digest, row count, ids unique
and sorted). It is stored as the exact bytes that were signed. It is accepted
whether or not a feature table holds its ids yet: the labels party has already
charged the budget for it, so nothing that the publisher can fix later (a table not
uploaded yet, a misspelled name) may make it undeliverable. The message's
``feature_table`` is only a hint; the join is checked when a training binds the
release to a table (:func:`features_party.jobs.create_training`). Releases are deduplicated on
``release_id``: the sender retries with identical bytes, which is harmless; a
different body under a known id is a conflict. Nothing is stored on any error.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pa_compute
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from features_party import store
from labeldp.errors import Conflict, InvalidInput, LabelDPError, NotFound, Unauthorized
from labeldp.schema import LabelRelease, decode_columns, payload_digest
from labeldp.service.pagination import keyset_page
from labeldp.service.timestamps import iso
from labeldp.signing import verify, verify_file

# pyarrow-stubs type the compute kernels' results as `object`; their call sites are read untyped.
pc: Any = pa_compute

log = logging.getLogger("labeldp.features")

ACCEPTED = "accepted"
DUPLICATE = "duplicate"


@dataclass(frozen=True)
class InboxResult:
    release_id: str
    status: str  # accepted | duplicate
    message_sha256: str  # of the bytes received; a duplicate's bytes are the stored ones

    @property
    def http_status(self) -> int:
        return 201 if self.status == ACCEPTED else 200

    def body(self) -> dict[str, Any]:
        return {"id": self.release_id, "status": self.status, "message_sha256": self.message_sha256}


def _invalid(message: str) -> LabelDPError:
    return InvalidInput("invalid_message", message)


def parse_release(body: bytes) -> tuple[LabelRelease, pa.Array, np.ndarray]:
    """Parse and check a message's internal consistency; returns it with its columns.

    The checks run on the Arrow columns (vectorized): a 10⁷-row message never becomes
    10⁷ Python strings.
    """
    try:
        release = LabelRelease.model_validate_json(body)
    except ValidationError as exc:
        # Field locations only: pydantic's input echo could hold a label value.
        details = [{"loc": [str(p) for p in e.get("loc", ())], "type": e.get("type")} for e in exc.errors()]
        raise InvalidInput("invalid_message", "the message does not match the LabelRelease schema", details) from None
    try:
        ids, labels = decode_columns(release.payload)
        digest = payload_digest(ids, labels)
    except Exception:  # a malformed Arrow payload fails in many ways
        raise _invalid("the payload cannot be decoded into id and label columns") from None
    if digest != release.payload_digest:
        raise InvalidInput("digest_mismatch", "payload_digest does not match the payload")
    if len(ids) != release.row_count or len(labels) != len(ids):
        raise _invalid("row_count does not match the payload")
    if ids.null_count or (len(ids) and pc.min(pc.utf8_length(ids)).as_py() == 0):
        raise _invalid("ids must be non-empty strings")
    if len(ids) > 1 and not pc.all(pc.less(ids.slice(0, len(ids) - 1), ids.slice(1))).as_py():
        raise _invalid("ids must be unique and in sorted order")
    if not np.all(np.isfinite(labels)):
        raise _invalid("labels must be finite numbers")
    return release, ids, labels


def receive_release(
    session_factory: sessionmaker[Session],
    secret: str,
    body: bytes | Path,
    signature: str | None,
) -> InboxResult:
    """Verify, validate, deduplicate and store one message (or raise LabelDPError).

    ``body`` is the message bytes or the path of a file holding them (the route spools
    the request to disk and verifies the signature there before anything is parsed).
    """
    if isinstance(body, Path):
        if not verify_file(body, secret, signature):
            raise Unauthorized("bad_signature", "missing or wrong message signature")
        body = body.read_bytes()
    elif not verify(body, secret, signature):
        raise Unauthorized("bad_signature", "missing or wrong message signature")
    release, _ids, _labels = parse_release(body)
    sha = hashlib.sha256(body).hexdigest()

    with session_factory() as session:
        known = _dedupe(session, release.release_id, sha)
        if known is not None:
            return known
    # No join check here: a valid, signed release is stored whether or not its feature table
    # exists yet (it was charged; refusing it would spend budget on nothing). The table is
    # bound, and every id checked against it, when a training starts (jobs.create_training).
    row = store.Release(
        release_id=release.release_id,
        label_set_id=release.label_set_id,
        feature_table=release.feature_table,
        mechanism_name=release.mechanism.name,
        mechanism=release.mechanism.model_dump(mode="json"),
        prior=release.prior.model_dump(mode="json") if release.prior is not None else None,
        accounting=release.accounting.model_dump(mode="json"),
        total_epsilon_micro=release.accounting.total_epsilon_micro,
        row_count=release.row_count,
        created_at=release.created_at,
        body=body,
        body_sha256=sha,
    )
    try:
        with session_factory.begin() as session:
            known = _dedupe(session, release.release_id, sha)
            if known is not None:
                return known
            session.add(row)
    except IntegrityError:
        # A concurrent delivery of the same release won the insert.
        with session_factory() as session:
            known = _dedupe(session, release.release_id, sha)
        if known is None:
            raise
        return known
    log.info("release %s accepted: %d rows", release.release_id, release.row_count)
    return InboxResult(release.release_id, ACCEPTED, sha)


def _dedupe(session: Session, release_id: str, sha: str) -> InboxResult | None:
    existing = session.get(store.Release, release_id)
    if existing is None:
        return None
    if existing.body_sha256 == sha:
        log.info("release %s received again (duplicate)", release_id)
        return InboxResult(release_id, DUPLICATE, sha)
    raise Conflict("release_conflict", "a different message with this release_id was already received")


def get_release(session: Session, release_id: str) -> store.Release:
    row = session.get(store.Release, release_id)
    if row is None:
        raise NotFound("release_not_found", "no such release")
    return row


def describe_release(row: store.Release) -> dict[str, Any]:
    return {
        "id": row.release_id,
        "label_set_id": row.label_set_id,
        "feature_table": row.feature_table,
        "mechanism": row.mechanism_name,
        "mechanism_spec": row.mechanism,
        "prior": row.prior,
        "accounting": row.accounting,
        "row_count": row.row_count,
        "created_at": iso(row.created_at),
        "received_at": iso(row.received_at),
        "message_sha256": row.body_sha256,
    }


def list_releases(
    session: Session, limit: int, cursor: str | None, label_set_id: str | None = None
) -> dict[str, Any]:
    """A page of received releases, oldest received first; never loads a message body."""
    stmt = select(store.Release)
    if label_set_id is not None:
        stmt = stmt.where(store.Release.label_set_id == label_set_id)
    return keyset_page(
        session, stmt, store.Release.received_at, store.Release.release_id, limit, cursor, describe_release
    )


def release_columns(row: store.Release) -> tuple[pa.Array, np.ndarray]:
    """The privatized ids (an Arrow string array: a 10⁷-row release never becomes 10⁷ Python
    strings on its way to a training) and labels of a stored release, re-read from its exact bytes."""
    return decode_columns(LabelRelease.model_validate_json(row.body).payload)
