"""The append-only audit log of the labels party's trust-relevant state changes.

Each change adds one :class:`AuditEventRow` in the same transaction as the change, naming the key
that made it (its ``key_id``, a hash prefix: never the key) and the scope that allowed it, and
the resource it is about (``subject_id``): a privacy domain created (the ``default`` domain's
included, by the service itself), a label set created or its raw labels deleted, a release
queued, charged or failed (the worker's events carry the key that queued the release), and the
message-signing key the outbox starts with when its kid differs from the last one logged (a
rotation). Details are public facts only — names, ids, budgets, ε, counts, codes — never a label.
Rows are never updated or deleted: a session that tries fails at flush (:func:`_refuse_changes`),
and no route or function here does either. ``GET /v1/audit-events`` lists them, oldest first
(admin scope).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal, get_args

from sqlalchemy import event, select
from sqlalchemy.orm import Session, sessionmaker

from labeldp.errors import Conflict
from labeldp.service.pagination import ASC, Order, keyset_page
from labeldp.service.settings import ApiKey
from labeldp.service.timestamps import iso

from . import responses
from .context import LabelsContext
from .store import AuditEventRow, LabelSetRow, PrivacyDomainRow

DOMAIN_CREATED = "privacy_domain.created"
LABEL_SET_CREATED = "label_set.created"
LABELS_DELETED = "label_set.labels_deleted"
RELEASE_QUEUED = "release.queued"
RELEASE_CHARGED = "release.charged"
RELEASE_FAILED = "release.failed"
SIGNING_KEY_IN_USE = "signing_key.in_use"
Action = Literal[
    "privacy_domain.created", "label_set.created", "label_set.labels_deleted", "release.queued", "release.charged",
    "release.failed", "signing_key.in_use",
]
ACTIONS: tuple[str, ...] = get_args(Action)


class AuditLogIsAppendOnly(Conflict):
    """Raised at flush when a session would update or delete an audit event."""


@event.listens_for(Session, "before_flush")
def _refuse_changes(session: Session, _context: object, _instances: object) -> None:
    for row in (*session.dirty, *session.deleted):
        if isinstance(row, AuditEventRow) and (row in session.deleted or session.is_modified(row)):
            raise AuditLogIsAppendOnly("audit_log_append_only", "audit events are never changed or deleted")


def new_event_id() -> str:
    """``aud_`` + the time in ns + random bits: ids of one instant still sort in the order written."""
    return f"aud_{time.time_ns():016x}{uuid.uuid4().hex[:12]}"


def record(
    s: Session,
    action: str,
    *,
    key: ApiKey | str | None,
    scope: str | None,
    domain_id: str | None,
    domain: str | None,
    details: dict[str, Any],
    subject_id: str | None = None,
) -> AuditEventRow:
    """Add one event to ``s`` (the change's own transaction: both commit or neither). ``key`` is
    the caller's key, or the ``key_id`` of the request the change descends from."""
    row = AuditEventRow(
        id=new_event_id(), action=action, privacy_domain_id=domain_id, privacy_domain=domain,
        key_id=key.key_id if isinstance(key, ApiKey) else key, scope=scope, subject_id=subject_id,
        details_json=json.dumps(details, sort_keys=True, separators=(",", ":")),
    )
    s.add(row)
    return row


def domain_of_label_set(s: Session, label_set_id: str) -> tuple[str | None, str | None]:
    """The (id, name) of a label set's privacy domain, for its events."""
    found = s.execute(
        select(PrivacyDomainRow.id, PrivacyDomainRow.name)
        .join(LabelSetRow, LabelSetRow.privacy_domain_id == PrivacyDomainRow.id)
        .where(LabelSetRow.id == label_set_id)
    ).first()
    return (found[0], found[1]) if found is not None else (None, None)


def record_release(s: Session, action: str, release_id: str, label_set_id: str, details: dict[str, Any]) -> None:
    """An event of a release job the worker moved (charged, failed): under the key that queued it."""
    queued = s.execute(
        select(AuditEventRow.key_id, AuditEventRow.scope)
        .where(AuditEventRow.subject_id == release_id, AuditEventRow.action == RELEASE_QUEUED)
        .limit(1)
    ).first()
    domain_id, domain = domain_of_label_set(s, label_set_id)
    record(
        s, action, key=queued[0] if queued else None, scope=queued[1] if queued else None, domain_id=domain_id,
        domain=domain, subject_id=release_id, details={"label_set_id": label_set_id, **details},
    )


def record_signing_key(sessions: sessionmaker[Session], kid: str) -> bool:
    """Log the signing key a starting outbox signs with, if it is not the one logged last (a
    rotation, or the first start): its kid and the previous kid, never key material."""
    with sessions.begin() as s:
        last = s.scalar(
            select(AuditEventRow.subject_id)
            .where(AuditEventRow.action == SIGNING_KEY_IN_USE)
            .order_by(AuditEventRow.created_at.desc(), AuditEventRow.id.desc())
            .limit(1)
        )
        if last == kid:
            return False
        record(s, SIGNING_KEY_IN_USE, key=None, scope=None, domain_id=None, domain=None, subject_id=kid,
               details={"kid": kid, "previous_kid": last})
    return True


def describe(row: AuditEventRow) -> responses.AuditEvent:
    return responses.AuditEvent(
        id=row.id,
        action=row.action,
        privacy_domain_id=row.privacy_domain_id,
        privacy_domain=row.privacy_domain,
        key_id=row.key_id,
        scope=row.scope,
        subject_id=row.subject_id,
        details=json.loads(row.details_json),
        created_at=iso(row.created_at),
    )


def list_events(
    ctx: LabelsContext, limit: int, cursor: str | None, domain: str | None, subject_id: str | None = None,
    action: str | None = None, order: Order = ASC,
) -> responses.AuditEventPage:
    stmt = select(AuditEventRow)
    if domain is not None:  # the domain's id only (404 privacy_domain_not_found otherwise, a name included)
        from .privacy_domains import find_domain  # privacy_domains records its events here

        with ctx.sessions() as s:
            stmt = stmt.where(AuditEventRow.privacy_domain_id == find_domain(s, domain).id)
    if subject_id is not None:
        stmt = stmt.where(AuditEventRow.subject_id == subject_id)
    if action is not None:
        stmt = stmt.where(AuditEventRow.action == action)
    with ctx.sessions() as s:
        return responses.AuditEventPage(
            **keyset_page(s, stmt, AuditEventRow.created_at, AuditEventRow.id, limit, cursor, describe, order)
        )
