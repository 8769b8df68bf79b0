"""The inbox: the labels party's outbox delivers a release's message here, manifest first, then
shard by shard (features_party.inbox). Authenticated by the manifest's signature, never by the
publisher's API key: a shard is taken only if its digest is one the signed manifest lists."""

from __future__ import annotations

import logging
from typing import Any, Literal

from fastapi import APIRouter, Path, Query, Request, Response, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from sqlalchemy import select

from features_party import inbox, responses, store
from labeldp.errors import Conflict, LabelDPError, NotFound, Unavailable
from labeldp.schema import SIGNATURE_HEADER
from labeldp.service import webhooks
from labeldp.service.events import (
    EVENT_STREAM,
    STREAM_HEADERS,
    EventStreamResponse,
    feed_stream,
    shutdown_flag,
)
from labeldp.service.openapi import BINARY, OCTET_STREAM, SIGNATURE, errors, event_stream_ok, ok, request_body
from labeldp.service.pagination import DEFAULT_LIMIT, OrderQuery
from labeldp.service.spool import spool_body

from .deps import Context, Cursor, Limit

log = logging.getLogger("labeldp.features")

router = APIRouter(prefix="/v1/releases", tags=["releases"])

_RELEASE = {"release_id": "$response.body#/id"}
_MANIFEST = {"type": "object", "description": "a ReleaseManifest (labeldp.message_shards)"}
ReleaseId = Path(max_length=256, description="the manifest's release id")


@router.post(
    "",
    status_code=201,
    response_model=responses.InboxReceipt,
    summary="Receive a release's manifest (the inbox, step 1)",
    description="For the labels party's outbox only: the manifest's Ed25519 signature is checked over its exact "
    "bytes, then its schema; it is deduplicated on the release id before anything else. A new manifest is "
    "stored (201, `receiving`, every shard `missing`); the same manifest again answers 200 with `complete` "
    "(a duplicate: send nothing more) or the shards still `missing` (a resumed delivery).",
    dependencies=[Security(SIGNATURE)],
    responses={
        **ok(responses.EXAMPLE_RECEIPT, "stored; send the missing shards", 201, None,
             {"complete_release": _RELEASE}),
        **ok(responses.EXAMPLE_COMPLETE, "already known: complete, or the shards still missing",
             model=responses.InboxReceipt),
        **errors(401, 403, 409, 413, 422, 503, e401="bad_signature", e403="client_certificate_required",
                 e409="release_conflict", e422="invalid_message"),
    },
    openapi_extra=request_body(
        {"application/json": (_MANIFEST, {"release_id": responses.REL})},
        "the exact manifest bytes the labels party wrote (at most `inbox_max_manifest_bytes`), signed in "
        "`X-Labeldp-Signature`",
    ),
)
async def receive_manifest(request: Request, ctx: Context, response: Response) -> responses.InboxReceipt:
    raw = await request.body()  # at most inbox_max_manifest_bytes (1 MiB): the size limit holds it
    try:
        answer = await run_in_threadpool(
            inbox.receive_manifest, ctx.sessions, ctx.settings.signing_public_keys, raw,
            request.headers.get(SIGNATURE_HEADER), ctx.record_event,
        )
    except LabelDPError as exc:
        ctx.inbox_messages.labels(result=exc.code).inc()
        log.info("release manifest rejected: %s", exc.code)
        raise
    ctx.inbox_messages.labels(result="manifest_" + ("new" if answer.new else answer.status)).inc()
    ctx.announce(answer.event)
    response.status_code = answer.http_status
    return answer.body()


@router.put(
    "/{release_id}/shards/{index}",
    response_model=responses.ShardReceipt,
    summary="Receive one shard of a release's message (the inbox, step 2)",
    description="The shard's exact bytes (Parquet), spooled to disk; its size and sha256 must be the ones its "
    "signed manifest lists, then its rows are checked (ids non-empty, sorted, unique, in the listed range; "
    "labels finite) and it is stored as an object. A shard already held answers `duplicate`.",
    responses={
        **ok(responses.EXAMPLE_SHARD, "stored (or already held)"),
        **errors(401, 403, 404, 413, 422, 503, e403="client_certificate_required", e404="manifest_unknown",
                 e422="digest_mismatch"),
    },
    openapi_extra=request_body(
        {OCTET_STREAM: ({**BINARY, "description": "a Parquet file: the shard's exact bytes"}, None)},
        "the shard's exact bytes (at most `inbox_max_body_bytes`), whatever the Content-Type says",
    ),
)
async def receive_shard(
    request: Request, ctx: Context, release_id: str = ReleaseId, index: int = Path(ge=0, le=10**7)
) -> responses.ShardReceipt:
    # A bounded number of shards at once, each on disk, one in memory while its rows are checked.
    if ctx.inbox_slots.locked():
        ctx.inbox_messages.labels(result="inbox_busy").inc()
        raise Unavailable("inbox_busy", "the inbox is receiving other shards", headers={"Retry-After": "2"})
    async with ctx.inbox_slots:
        body = await spool_body(request, ctx.spool_dir)
        try:
            status = await run_in_threadpool(
                inbox.receive_shard, ctx.sessions, ctx.store, release_id, index, body.path, body.sha256, body.size
            )
        except LabelDPError as exc:
            ctx.inbox_messages.labels(result=exc.code).inc()
            log.info("release shard rejected: %s", exc.code)
            raise
        finally:
            body.discard()
    ctx.inbox_messages.labels(result="shard_" + status).inc()
    return responses.ShardReceipt(id=release_id, index=index, status=status)


@router.post(
    "/{release_id}/complete",
    response_model=responses.InboxReceipt,
    summary="Complete a release's delivery (the inbox, step 3)",
    description="Once every shard is held the release is complete: readable and trainable from then on. "
    "Idempotent; 409 `shards_missing` while a shard is still missing.",
    responses={
        **ok(responses.EXAMPLE_COMPLETE, "complete"),
        **errors(401, 403, 404, 409, 422, 503, e403="client_certificate_required", e404="manifest_unknown",
                 e409="shards_missing"),
    },
)
def complete_release(ctx: Context, release_id: str = ReleaseId) -> responses.InboxReceipt:
    answer = inbox.complete_release(ctx.sessions, release_id, ctx.record_event)
    ctx.inbox_messages.labels(result="complete").inc()
    ctx.announce(answer.event)
    return answer.body()


events_router = APIRouter(prefix="/v1/inbox", tags=["releases"])


@events_router.get(
    "/events",
    summary="Follow the inbox",
    description="Server-Sent Events for the publisher's own systems: `release.received` when a release's signed "
    "manifest is stored, `release.completed` when its last shard made it readable and trainable, each with the "
    "release's public facts (ids, counts, ε, message digest, signing key id; never a row). The stream starts "
    "now (earlier releases: `GET /v1/releases`) and never ends by itself: a comment every 15 s, `closing` when "
    "the server stops; reconnect and list what arrived meanwhile. The same events go to the signed webhook, "
    "if `LABELDP_INBOX_WEBHOOK_URL` is set. Nothing of this reaches the labels party.",
    response_class=EventStreamResponse,
    responses={
        **event_stream_ok(responses.EXAMPLE_INBOX_EVENTS, "the event stream"),
        **errors(401, 422, 503, by_ref=True),
    },
)
async def inbox_events(
    request: Request,
    ctx: Context,
    max_seconds: float | None = Query(
        None, gt=0, le=86400, description="end the stream (`closing`, reason `max_seconds`) after this long; "
        "default: only when the server stops"
    ),
) -> StreamingResponse:
    feed = inbox.InboxFeed(ctx.sessions)
    await run_in_threadpool(feed.poll)  # "now": what is already there is not sent
    return StreamingResponse(
        feed_stream(lambda: run_in_threadpool(feed.poll), stopping=shutdown_flag(request.app).is_set,
                    max_seconds=max_seconds),
        media_type=EVENT_STREAM,
        headers=STREAM_HEADERS,
    )


@events_router.get(
    "/webhook-deliveries",
    response_model=responses.WebhookDeliveryPage,
    summary="List the webhook's deliveries",
    description="Each inbox event's delivery to `LABELDP_INBOX_WEBHOOK_URL`, oldest (or `order=desc`: newest) "
    "first, optionally of one "
    "`state`: `pending` (with its next attempt), `delivered`, or `failed` after every attempt. Delivered ones "
    "are kept 7 days. At least once: a receiver deduplicates on `event_id`.",
    responses={
        **ok(responses.EXAMPLE_WEBHOOK_PAGE, "a page"),
        **errors(401, 422, 503, e422="invalid_cursor"),
    },
)
def list_webhook_deliveries(
    ctx: Context,
    state: Literal["pending", "delivered", "failed"] | None = Query(None, description="only deliveries in it"),
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    order: OrderQuery = "asc",
) -> dict[str, Any]:
    with ctx.sessions() as session:
        return webhooks.list_deliveries(session, store.WEBHOOK_DELIVERIES, limit, cursor, state, order)


@events_router.post(
    "/webhook-deliveries/{delivery_id}/retry",
    response_model=responses.WebhookDelivery,
    summary="Retry a failed webhook delivery",
    description="Puts a `failed` delivery back in the queue, due now, its attempts counted from zero (the same "
    "event id: a receiver that got it meanwhile deduplicates). 409 `webhook_delivery_not_failed` otherwise.",
    responses={
        **ok(responses.EXAMPLE_WEBHOOK_DELIVERY, "queued again"),
        **errors(401, 404, 409, 422, 503, e404="webhook_delivery_not_found", e409="webhook_delivery_not_failed"),
    },
)
def retry_webhook_delivery(ctx: Context, delivery_id: str = Path(max_length=40)) -> dict[str, Any]:
    table = store.WEBHOOK_DELIVERIES
    if not webhooks.retry_failed(ctx.sessions, table, delivery_id):
        with ctx.sessions() as session:
            exists = session.scalar(select(table.c.id).where(table.c.id == delivery_id)) is not None
        if not exists:
            raise NotFound("webhook_delivery_not_found", "no such webhook delivery")
        raise Conflict("webhook_delivery_not_failed", "only a failed delivery is retried")
    ctx.announce({"id": delivery_id})
    with ctx.sessions() as session:
        row = session.execute(select(table).where(table.c.id == delivery_id)).one()
    return webhooks.describe_delivery(row)
