"""The append-only audit log of privacy-domain changes.

Every change to a privacy domain (its creation, the ``default`` domain's included) adds one
:class:`AuditEventRow` in the same transaction as the change, naming the key that made it (its
``key_id``, a hash prefix: never the key) and the scope that allowed it. Rows are never updated
or deleted: a session that tries fails at flush (:func:`_refuse_changes`), and no route or
function here does either. ``GET /v1/audit-events`` lists them, oldest first (admin scope).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from sqlalchemy import event, select
from sqlalchemy.orm import Session

from labeldp.errors import Conflict
from labeldp.service.pagination import keyset_page
from labeldp.service.settings import ApiKey
from labeldp.service.timestamps import iso

from .context import LabelsContext
from .store import AuditEventRow

DOMAIN_CREATED = "privacy_domain.created"
ACTIONS = (DOMAIN_CREATED,)


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
    key: ApiKey | None,
    scope: str | None,
    domain_id: str | None,
    domain: str | None,
    details: dict[str, Any],
) -> AuditEventRow:
    """Add one event to ``s`` (the change's own transaction: both commit or neither)."""
    row = AuditEventRow(
        id=new_event_id(), action=action, privacy_domain_id=domain_id, privacy_domain=domain,
        key_id=key.key_id if key is not None else None, scope=scope,
        details_json=json.dumps(details, sort_keys=True, separators=(",", ":")),
    )
    s.add(row)
    return row


def describe(row: AuditEventRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "action": row.action,
        "privacy_domain_id": row.privacy_domain_id,
        "privacy_domain": row.privacy_domain,
        "key_id": row.key_id,
        "scope": row.scope,
        "details": json.loads(row.details_json),
        "created_at": iso(row.created_at),
    }


def list_events(ctx: LabelsContext, limit: int, cursor: str | None, domain: str | None) -> dict[str, Any]:
    stmt = select(AuditEventRow)
    if domain is not None:
        stmt = stmt.where(AuditEventRow.privacy_domain == domain)
    with ctx.sessions() as s:
        return keyset_page(s, stmt, AuditEventRow.created_at, AuditEventRow.id, limit, cursor, describe)
