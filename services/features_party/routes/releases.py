"""Releases: the inbox that receives the labels party's signed messages, and the reads of
what it stored (metadata, privatized labels, lists).

Two routers: the inbox is authenticated by the message signature (``inbox_router``), the reads by
the publisher's API key (``router``).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Query, Request, Response, Security
from fastapi.concurrency import run_in_threadpool

from features_party import inbox, responses
from labeldp.errors import LabelDPError, Unavailable
from labeldp.schema import SIGNATURE_HEADER
from labeldp.service.openapi import SIGNATURE, errors, ok, request_body
from labeldp.service.pagination import DEFAULT_LIMIT
from labeldp.service.spool import spool_body

from .deps import Context, Cursor, Limit

log = logging.getLogger("labeldp.features")

inbox_router = APIRouter(tags=["releases"])
router = APIRouter(prefix="/v1", tags=["releases"])

_RELEASE = {"release_id": "$response.body#/id"}
_MESSAGE = {"type": "object", "description": "a LabelRelease message"}


@inbox_router.post(
    "/v1/releases",
    status_code=201,
    response_model=responses.InboxReceipt,
    summary="Receive a release message (the inbox)",
    description="For the labels party's outbox only: the body is spooled to disk, its Ed25519 signature "
    "checked over the file with the advertiser's public keys (by kid), then the schema, the digest and the "
    "ids; every valid, signed release is stored once (201), a resend of the same bytes is a duplicate (200).",
    dependencies=[Security(SIGNATURE)],
    responses={
        **ok(responses.EXAMPLE_RECEIPT, "stored", 201, None,
             {"get_release": _RELEASE, "get_release_labels": _RELEASE}),
        **ok({**responses.EXAMPLE_RECEIPT, "status": "duplicate"}, "already stored", model=responses.InboxReceipt),
        **errors(401, 409, 413, 422, 503, e401="bad_signature", e409="release_conflict", e422="invalid_message"),
    },
    openapi_extra=request_body(
        {"application/json": (_MESSAGE, {"release_id": responses.REL})},
        "the exact message bytes the labels party wrote, signed in `X-Labeldp-Signature`",
    ),
)
async def receive(request: Request, ctx: Context, response: Response) -> dict[str, Any]:
    # Unauthenticated bytes never sit in memory: the body goes to disk, the signature is
    # checked over the file, and only a signed message is parsed; a bounded number at once.
    if ctx.inbox_slots.locked():
        ctx.inbox_messages.labels(result="inbox_busy").inc()
        raise Unavailable("inbox_busy", "the inbox is receiving other messages", headers={"Retry-After": "2"})
    async with ctx.inbox_slots:
        body = await spool_body(request, ctx.data_dir / "spool")
        signature = request.headers.get(SIGNATURE_HEADER)
        try:
            result = await run_in_threadpool(
                inbox.receive_release, ctx.sessions, ctx.settings.signing_public_keys, body.path, signature
            )
        except LabelDPError as exc:
            ctx.inbox_messages.labels(result=exc.code).inc()
            log.info("release message rejected: %s", exc.code)
            raise
        finally:
            body.discard()
    ctx.inbox_messages.labels(result=result.status).inc()
    response.status_code = result.http_status
    return result.body()


@router.get(
    "/releases/{release_id}",
    response_model=responses.ReceivedRelease,
    summary="Read a received release",
    description="The message's metadata: mechanism, prior, accounting, rows, digest.",
    responses={
        **ok(responses.EXAMPLE_RELEASE, "the release"),
        **errors(401, 404, 422, 503, e404="release_not_found"),
    },
)
def get_release(release_id: str, ctx: Context) -> dict[str, Any]:
    with ctx.sessions() as session:
        return inbox.describe_release(inbox.get_release(session, release_id))


@router.get(
    "/releases/{release_id}/labels",
    response_model=responses.ReleaseLabels,
    summary="Read a release's privatized labels",
    description="Every id once, sorted, with its privatized label (re-read from the exact signed bytes).",
    responses={
        **ok(responses.EXAMPLE_LABELS, "the columns"),
        **errors(401, 404, 422, 503, e404="release_not_found"),
    },
)
def get_release_labels(release_id: str, ctx: Context) -> responses.ReleaseLabels:
    with ctx.sessions() as session:
        ids, labels = inbox.release_columns(inbox.get_release(session, release_id))
    return responses.ReleaseLabels(ids=ids.to_pylist(), labels=labels.tolist())


@router.get(
    "/releases",
    response_model=responses.ReceivedReleasePage,
    summary="List received releases",
    description="Oldest received first, optionally of one label set; never loads a message body.",
    responses={
        **ok(responses.EXAMPLE_RELEASE_PAGE, "a page"),
        **errors(401, 422, 503, e422="invalid_cursor"),
    },
)
def list_releases(
    ctx: Context,
    label_set_id: str | None = Query(None, max_length=256),
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> dict[str, Any]:
    with ctx.sessions() as session:
        return inbox.list_releases(session, limit, cursor, label_set_id)
