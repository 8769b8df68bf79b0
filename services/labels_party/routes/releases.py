"""Releases: privatize a label set's labels, charge its ids and deliver the message once."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from labeldp.errors import LabelDPError
from labeldp.release.randomizer import MECHANISMS
from labeldp.service.events import EVENT_STREAM, STREAM_HEADERS, EventStreamResponse, event_stream, shutdown_flag
from labeldp.service.idempotency import request_fingerprint
from labeldp.service.openapi import errors, event_stream_ok, json_example, ok
from labeldp.service.pagination import DEFAULT_LIMIT, MAX_LIMIT, OrderQuery

from .. import releases, responses
from .deps import Context, IdempotencyKey, Metrics, ReleaseKey

log = logging.getLogger("labeldp.labels")

router = APIRouter(prefix="/v1", tags=["releases"])

_RELEASE = {"release_id": "$response.body#/id"}
_LINKS = {"get_release": _RELEASE, "redeliver": _RELEASE}


def mechanism_label(name: str) -> str:
    """Bounded metric cardinality: unknown names from clients collapse to "other"."""
    return name if name in MECHANISMS or name == "auto" else "other"


@router.get(
    "/releases",
    response_model=responses.ReleasePage,
    summary="List releases",
    description="Oldest first (`order=desc`: newest first), a page at a time (pass `next_cursor` back as "
    "`cursor`), optionally of one label "
    "set or of one privacy domain; never reads message bytes.",
    responses={
        **ok(responses.EXAMPLE_RELEASE_PAGE, "a page"),
        **errors(401, 403, 404, 422, 503, e404="privacy_domain_not_found", e422="invalid_cursor"),
    },
)
def list_releases(
    ctx: Context,
    label_set_id: str | None = Query(None, max_length=40),
    privacy_domain: str | None = Query(
        None, max_length=200, description="only the releases of this domain's sets: its id "
        "(`pd_…`; anything else, a name included, is 404 `privacy_domain_not_found`)"
    ),
    limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
    cursor: str | None = Query(None, max_length=400),
    order: OrderQuery = "asc",
) -> responses.ReleasePage:
    return releases.list_releases(ctx, label_set_id, limit, cursor, privacy_domain, order=order)


@router.get(
    "/label-sets/{label_set_id}/releases",
    response_model=responses.ReleasePage,
    summary="List a label set's releases",
    description="The set's releases, oldest first (`order=desc`: newest first), a page at a time (pass `next_cursor` "
    "back as `cursor`): what "
    "the set's `releases` shows, without growing with it.",
    responses={
        **ok(responses.EXAMPLE_RELEASE_PAGE, "a page"),
        **errors(401, 403, 404, 422, 503, e404="label_set_not_found", e422="invalid_cursor"),
    },
)
def list_label_set_releases(
    label_set_id: str,
    ctx: Context,
    limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
    cursor: str | None = Query(None, max_length=400),
    order: OrderQuery = "asc",
) -> responses.ReleasePage:
    return releases.list_releases(ctx, label_set_id, limit, cursor, known_set=True, order=order)


@router.post(
    "/label-sets/{label_set_id}/releases",
    status_code=202,
    response_model=responses.Release,
    summary="Release the labels, privatized",
    description="Checks the request (ε, mechanism, parameters, the label set's labels and budget) and queues "
    "the release as a job: 202 at once, status `queued`. A release worker then estimates the prior, fits the "
    "mechanism, privatizes every label, writes the message and charges every id in one transaction (status "
    "`pending`), or fails the job with a stable `error.code` and charges nothing (status `failed`); the outbox "
    "then delivers it. Follow it with `GET /v1/releases/{id}` or its events. Exactly once per "
    "`Idempotency-Key`: a replay answers the same release, as it stands now.",
    responses={
        **ok(responses.EXAMPLE_RELEASE_QUEUED, "accepted: queued for a release worker", 202,
             {"Location": "the release's URL"}, _LINKS),
        **errors(401, 403, 404, 409, 413, 422, 503, e404="label_set_not_found", e409="budget_exhausted"),
    },
    openapi_extra=json_example({"mechanism": "laplace", "epsilon": 1, "feature_table": "clicks"}),
)
def create_release(
    label_set_id: str,
    body: releases.ReleaseCreate,
    ctx: Context,
    metrics: Metrics,
    response: Response,
    key: IdempotencyKey,
    caller: ReleaseKey,
) -> dict[str, Any] | responses.Release:
    scope = f"POST /v1/label-sets/{label_set_id}/releases"
    outcomes = metrics.release_requests
    try:
        stored = ctx.idempotency.execute(
            scope,
            key,
            request_fingerprint(scope, body.model_dump_json()),
            lambda claim: releases.create_release(ctx, label_set_id, body, claim, caller),
        )
    except LabelDPError as exc:
        outcomes.labels(mechanism_label(body.mechanism), exc.code).inc()
        raise
    if not stored.replayed:
        outcomes.labels(stored.body["mechanism"], "accepted").inc()
        log.info("release %s of %s on %s queued", stored.body["id"], stored.body["epsilon"], label_set_id)
        return stored.answer(response)
    stored.answer(response)
    return releases.get_release(ctx, stored.body["id"])  # the same job, as it stands now


@router.get(
    "/releases/{release_id}",
    response_model=responses.Release,
    summary="Read a release",
    description="Delivery status, attempts, ε and the message digest; never reads the message bytes.",
    responses={
        **ok(responses.EXAMPLE_RELEASE, "the release"),
        **errors(401, 403, 404, 422, 503, e404="release_not_found"),
    },
)
def get_release(release_id: str, ctx: Context) -> responses.Release:
    return releases.get_release(ctx, release_id)


@router.post(
    "/releases/{release_id}/redeliver",
    status_code=202,
    response_model=responses.Release,
    summary="Deliver a rejected release again",
    description="The same bytes again: no new charge.",
    responses={
        **ok(responses.EXAMPLE_RELEASE, "queued again", 202),
        **errors(401, 403, 404, 409, 422, 503, e404="release_not_found", e409="already_delivered"),
    },
)
def redeliver(release_id: str, ctx: Context) -> responses.Release:
    return releases.redeliver(ctx, release_id)


@router.get(
    "/releases/{release_id}/events",
    summary="Follow a release's delivery",
    description="Server-Sent Events: a `release` event whenever its stage or attempts change (accepted, "
    "privatizing, then the delivery's), then `end` once delivered, rejected or failed (`closing` if the "
    "server stops first). Catalogue facts only, never a label.",
    response_class=EventStreamResponse,
    responses={
        **event_stream_ok(responses.EXAMPLE_RELEASE_EVENTS, "the event stream"),
        **errors(401, 403, 404, 422, 503, by_ref=True, e404="release_not_found"),
    },
)
async def release_events(release_id: str, request: Request, ctx: Context) -> StreamingResponse:
    """The release's stage as Server-Sent Events, until delivered, rejected or failed."""
    await run_in_threadpool(releases.release_snapshot, ctx, release_id)  # 404 before the stream starts
    return StreamingResponse(
        event_stream(
            lambda: run_in_threadpool(releases.release_snapshot, ctx, release_id),
            "release",
            stopping=shutdown_flag(request.app).is_set,
        ),
        media_type=EVENT_STREAM,
        headers=STREAM_HEADERS,
    )
