"""The audit log: every trust-relevant change of the labels party, oldest first (admin scope, set by the app)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from labeldp.service.openapi import errors, ok
from labeldp.service.pagination import DEFAULT_LIMIT, MAX_LIMIT, OrderQuery

from .. import audit, responses
from .deps import Context

router = APIRouter(prefix="/v1", tags=["audit"])


@router.get(
    "/audit-events",
    response_model=responses.AuditEventPage,
    summary="List audit events",
    description="The append-only log of the labels party's trust-relevant changes, oldest first "
    "(`order=desc`: newest first), a page at a time: privacy domains created, label sets created and their "
    "labels deleted, releases queued, charged and failed, the signing key an outbox starts with. Who (a key id, "
    "never the key; a worker's events carry the key that queued the release), with which scope, about what "
    "(`subject_id`), what changed (public facts, never a label). Needs an `admin` key.",
    responses={
        **ok(responses.EXAMPLE_AUDIT_PAGE, "a page"),
        **errors(401, 403, 404, 422, 503, e404="privacy_domain_not_found", e422="invalid_cursor"),
    },
)
def list_audit_events(
    ctx: Context,
    limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
    cursor: str | None = Query(None, max_length=400),
    order: OrderQuery = "asc",
    privacy_domain: str | None = Query(None, max_length=200, description="only the events of this domain: its id "
                                  "(`pd_…`; anything else, a name included, is 404 `privacy_domain_not_found`)"),
    subject_id: str | None = Query(None, max_length=40, description="only the events about this label set, "
                                   "release or signing key id"),
    action: Annotated[audit.Action | None, Query(description="only the events of this action")] = None,
) -> responses.AuditEventPage:
    return audit.list_events(ctx, limit, cursor, privacy_domain, subject_id, action, order)
