"""The audit log: every privacy-domain change, oldest first (admin scope, set by the app)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from labeldp.service.openapi import errors, ok
from labeldp.service.pagination import DEFAULT_LIMIT, MAX_LIMIT

from .. import audit, responses
from .deps import Context

router = APIRouter(prefix="/v1", tags=["audit"])


@router.get(
    "/audit-events",
    response_model=responses.AuditEventPage,
    summary="List audit events",
    description="The append-only log of privacy-domain changes, oldest first, a page at a time: who (a key id, "
    "never the key), with which scope, what changed. Needs an `admin` key.",
    responses={
        **ok(responses.EXAMPLE_AUDIT_PAGE, "a page"),
        **errors(401, 403, 422, 503, e422="invalid_cursor"),
    },
)
def list_audit_events(
    ctx: Context,
    limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
    cursor: str | None = Query(None, max_length=400),
    privacy_domain: str | None = Query(None, max_length=200, description="only the events of this domain"),
) -> dict[str, Any]:
    return audit.list_events(ctx, limit, cursor, privacy_domain)
