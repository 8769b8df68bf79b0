"""The advertiser-facing API. Routers are thin: each calls one domain function."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client import CollectorRegistry

from labeldp import __version__
from labeldp.errors import LabelDPError
from labeldp.release.randomizer import MECHANISMS
from labeldp.service.database import make_session_factory
from labeldp.service.events import EVENT_STREAM, STREAM_HEADERS, EventStreamResponse, event_stream, shutdown_flag
from labeldp.service.health import mount_readiness
from labeldp.service.http_api import BodySizeLimit, bearer_auth, install_error_handlers
from labeldp.service.idempotency import Claim, StoredResponse, idempotency_key, request_fingerprint
from labeldp.service.logs import RequestContext, configure_logging
from labeldp.service.metrics import OUTBOX_METRICS_DIR, instrument, labels_metrics
from labeldp.service.migrations import open_database
from labeldp.service.openapi import BINARY, CSV_TEXT, documented_app, errors, event_stream_ok, ok, request_body
from labeldp.service.pagination import DEFAULT_LIMIT, MAX_LIMIT
from labeldp.service.settings import Settings, require_secrets
from labeldp.service.spool import spool_body

from . import label_sets, privacy_domains, releases, responses, uploads
from .context import LabelsContext
from .sweep import sweep_orphans

log = logging.getLogger("labeldp.labels")


def _mechanism_label(name: str) -> str:
    # Bounded metric cardinality: unknown names from clients collapse to "other".
    return name if name in MECHANISMS or name == "auto" else "other"


DESCRIPTION = """The advertiser's side of labeldp: privacy domains with a per-id ledger, label sets, and
releases that privatize every label once and push one ε-label-DP message to the features party.

Authenticate with `Authorization: Bearer <key>`. Every error is `{code, message, details}` with a
stable `code`. Mutating POSTs take `Idempotency-Key`. Ids are prefixed by kind (`pd_`, `ls_`,
`rel_`); timestamps are ISO-8601 with a UTC offset."""

TAGS = [
    {"name": "privacy domains", "description": "per-id budgets and their ledgers"},
    {"name": "label sets", "description": "ids, labels (CSV, JSON, Parquet, Arrow IPC) and budgets"},
    {"name": "releases", "description": "privatize, charge and deliver once"},
    {"name": "health", "description": "liveness"},
]

_IDS_JSON = {"type": "object", "properties": {"ids": {"type": "array", "items": {"type": ["string", "integer"]}}},
             "required": ["ids"]}
_LABELS_JSON = {
    "type": "object",
    "properties": {
        "ids": {"type": "array", "items": {"type": ["string", "integer"]}},
        "labels": {"type": "array", "items": {"type": ["number", "string", "null"]}},
        "rows": {"type": "array", "items": {"type": "object"}},
    },
}


_LABEL_SET = {"label_set_id": "$response.body#/id"}
_LABEL_SET_LINKS = dict.fromkeys(
    ("get_label_set", "upload_ids", "upload_labels", "create_release", "delete_labels", "list_releases"), _LABEL_SET
)
_RELEASE_LINKS = {"get_release": {"release_id": "$response.body#/id"},
                  "redeliver": {"release_id": "$response.body#/id"}}


def _json_example(example: dict[str, Any]) -> dict[str, Any]:
    """``openapi_extra`` adding an example to a JSON body FastAPI documents from its model."""
    return {"requestBody": {"content": {"application/json": {"example": example}}}}


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    require_secrets(settings, "labels_api_key")
    configure_logging(settings.log_level, "labels")
    engine = open_database(settings.labels_database_url, "labels_party.migrations", settings)
    ctx = LabelsContext(make_session_factory(engine), settings.labels_data_dir, settings)
    # Files a crash left between writing and committing; young ones may be another replica's.
    swept = sweep_orphans(ctx, min_age_seconds=max(3600.0, 2 * settings.idempotency_lease_seconds))
    if swept:
        log.info("swept %d orphaned files", swept)

    registry = CollectorRegistry()
    measured = labels_metrics(registry)
    uploaded_rows, release_outcomes = measured.uploaded_labels, measured.release_requests

    app = documented_app("labeldp labels party", DESCRIPTION, TAGS)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    install_error_handlers(app)
    mount_readiness(app, engine, settings.database_connect_timeout_seconds)
    # Metrics, then the request id outermost: every answer (a 413 too) is timed and carries an id.
    instrument(app, registry, "labels", senders=settings.labels_data_dir / OUTBOX_METRICS_DIR)
    app.add_middleware(RequestContext)
    app.state.settings = settings
    app.state.ctx = ctx

    api = APIRouter(prefix="/v1", dependencies=[Depends(bearer_auth(settings.labels_api_key))])

    def keyed(
        scope: str, key: str | None, fingerprint: str, work: Callable[[Claim | None], StoredResponse]
    ) -> JSONResponse:
        return ctx.idempotency.execute(scope, key, fingerprint, work).to_response()

    @app.get(
        "/healthz",
        tags=["health"],
        summary="Liveness",
        description="Answers while the process serves requests; says nothing about the database (see /readyz).",
        responses=ok(responses.Health, {"status": "ok", "service": "labels", "version": __version__}, "alive"),
    )
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "service": "labels", "version": __version__}

    @api.post(
        "/privacy-domains",
        status_code=201,
        tags=["privacy domains"],
        summary="Create a privacy domain",
        description="A per-id budget (ε, δ): no id of the domain is ever charged past it, across all its label "
        "sets and releases. `Idempotency-Key` makes a retry safe.",
        responses={
            **ok(responses.PrivacyDomain, responses.EXAMPLE_DOMAIN, "created", 201, {"Location": "the domain's URL"}),
            **errors(401, 409, 413, 422, 503, e409="privacy_domain_exists"),
        },
        openapi_extra=_json_example({"name": "conversions", "epsilon": 10, "delta": 1e-6}),
    )
    def create_privacy_domain(
        body: privacy_domains.PrivacyDomainCreate, key: str | None = Depends(idempotency_key)
    ) -> JSONResponse:
        scope = "POST /v1/privacy-domains"
        return keyed(
            scope,
            key,
            request_fingerprint(scope, body.model_dump_json()),
            lambda claim: privacy_domains.create_privacy_domain(ctx, body, claim),
        )

    @api.get(
        "/privacy-domains/{name}",
        tags=["privacy domains"],
        summary="Read a privacy domain",
        description="Its per-id budget, how many ids its ledger holds, the largest spend and the ids exhausted.",
        responses={
            **ok(responses.PrivacyDomain, responses.EXAMPLE_DOMAIN, "the domain"),
            **errors(401, 404, 422, 503, e404="privacy_domain_not_found"),
        },
    )
    def get_privacy_domain(name: str) -> dict[str, Any]:
        return privacy_domains.get_privacy_domain(ctx, name)

    @api.post(
        "/label-sets",
        status_code=201,
        tags=["label sets"],
        summary="Create a label set",
        description="Public ids (inline, up to 10⁶, or uploaded later to `/ids`) and the rules their labels "
        "follow; it charges its privacy domain's per-id ledger. `Idempotency-Key` makes a retry safe.",
        responses={
            **ok(responses.LabelSet, responses.EXAMPLE_LABEL_SET, "created", 201, {"Location": "the set's URL"},
                 _LABEL_SET_LINKS),
            **errors(401, 404, 409, 413, 422, 503, e404="privacy_domain_not_found"),
        },
        openapi_extra=_json_example(
            {"name": "spend", "label_type": "real", "domain": {"low": 0, "high": 10}, "privacy_domain": "conversions",
             "ids": ["u001", "u002", "u003"]}
        ),
    )
    def create_label_set(body: label_sets.LabelSetCreate, key: str | None = Depends(idempotency_key)) -> JSONResponse:
        scope = "POST /v1/label-sets"
        response = keyed(
            scope,
            key,
            request_fingerprint(scope, body.model_dump_json()),
            lambda claim: label_sets.create_label_set(ctx, body, claim),
        )
        log.info("label set created")
        return response

    @api.get(
        "/label-sets",
        tags=["label sets"],
        summary="List label sets",
        description="Oldest first, a page at a time: pass `next_cursor` back as `cursor`.",
        responses={
            **ok(responses.LabelSetPage, responses.EXAMPLE_LABEL_SET_PAGE, "a page"),
            **errors(401, 422, 503, e422="invalid_cursor"),
        },
    )
    def list_label_sets(
        limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT), cursor: str | None = Query(None, max_length=400)
    ) -> dict[str, Any]:
        return label_sets.list_label_sets(ctx, limit, cursor)

    @api.delete(
        "/label-sets/{label_set_id}/labels",
        tags=["label sets"],
        summary="Delete a label set's raw labels",
        description="Once spent, raw labels need not be kept: ids, the ledger and the releases stay; no further "
        "release of the set is possible.",
        responses={
            **ok(responses.LabelSet, {**responses.EXAMPLE_LABEL_SET, "labels_deleted": True}, "labels deleted"),
            **errors(401, 404, 409, 422, 503, e404="label_set_not_found"),
        },
    )
    def delete_labels(label_set_id: str) -> dict[str, Any]:
        out = label_sets.delete_labels(ctx, label_set_id)
        log.info("label set %s: raw labels deleted", label_set_id)
        return out

    @api.get(
        "/releases",
        tags=["releases"],
        summary="List releases",
        description="Oldest first, optionally of one label set; never reads message bytes.",
        responses={
            **ok(responses.ReleasePage, responses.EXAMPLE_RELEASE_PAGE, "a page"),
            **errors(401, 422, 503, e422="invalid_cursor"),
        },
    )
    def list_releases(
        label_set_id: str | None = Query(None, max_length=40),
        limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
        cursor: str | None = Query(None, max_length=400),
    ) -> dict[str, Any]:
        return releases.list_releases(ctx, label_set_id, limit, cursor)

    @api.get(
        "/label-sets/{label_set_id}",
        tags=["label sets"],
        summary="Read a label set",
        description="Counts, budget (total, spent, remaining: the least any of its ids has left) and releases.",
        responses={
            **ok(responses.LabelSet, responses.EXAMPLE_LABEL_SET, "the label set"),
            **errors(401, 404, 422, 503, e404="label_set_not_found"),
        },
    )
    def get_label_set(label_set_id: str) -> dict[str, Any]:
        return label_sets.get_label_set(ctx, label_set_id)

    @api.post(
        "/label-sets/{label_set_id}/ids",
        tags=["label sets"],
        summary="Upload a label set's ids",
        description="Once, for a set created without ids (up to 10⁹): an `id` column as CSV, Parquet or Arrow IPC, "
        "or JSON `{\"ids\": [...]}`. Streamed to disk, sorted once (the release order).",
        responses={
            **ok(responses.LabelSet, responses.EXAMPLE_LABEL_SET, "ids stored"),
            **errors(401, 404, 409, 413, 415, 422, 503, e409="ids_already_set", e422="duplicate_ids"),
        },
        openapi_extra=request_body(
            {
                "text/csv": (CSV_TEXT, "id\nu001\nu002\n"),
                "application/json": (_IDS_JSON, {"ids": ["u001", "u002"]}),
                "application/vnd.apache.parquet": (BINARY, None),
                "application/vnd.apache.arrow.stream": (BINARY, None),
            },
            "the ids: a column named `id`",
        ),
    )
    async def upload_ids(
        label_set_id: str, request: Request, key: str | None = Depends(idempotency_key)
    ) -> JSONResponse:
        content_type = request.headers.get("content-type", "")
        uploads.media_type(content_type)
        body = await spool_body(request, ctx.spool_dir)
        try:
            scope = f"POST /v1/label-sets/{label_set_id}/ids"
            fingerprint = request_fingerprint(scope, content_type, body.sha256)
            return await run_in_threadpool(
                keyed,
                scope,
                key,
                fingerprint,
                lambda claim: uploads.upload_ids(ctx, label_set_id, body.path, content_type, claim),
            )
        finally:
            body.discard()

    @api.post(
        "/label-sets/{label_set_id}/labels",
        tags=["label sets"],
        summary="Upload labels",
        description="All rows or none: every row is validated against the set's ids and rules; errors name the "
        "row (from 1) and the id, never the value. `validate_only=true` checks without storing.",
        responses={
            **ok(responses.LabelsUploaded, responses.EXAMPLE_UPLOADED, "labels stored (or validated)"),
            **errors(401, 404, 409, 413, 415, 422, 503, e409="ids_missing", e422="invalid_labels"),
        },
        openapi_extra=request_body(
            {
                "text/csv": (CSV_TEXT, "id,label\nu001,3.5\nu002,0\n"),
                "application/json": (_LABELS_JSON, {"ids": ["u001", "u002"], "labels": [3.5, 0]}),
                "application/vnd.apache.parquet": (BINARY, None),
                "application/vnd.apache.arrow.stream": (BINARY, None),
            },
            "columns `id` and `label`; JSON also as `{\"rows\": [{\"id\", \"label\"}]}`",
        ),
    )
    async def upload_labels(
        label_set_id: str,
        request: Request,
        validate_only: bool = Query(False),
        key: str | None = Depends(idempotency_key),
    ) -> JSONResponse:
        content_type = request.headers.get("content-type", "")
        uploads.media_type(content_type)
        body = await spool_body(request, ctx.spool_dir)
        try:
            scope = f"POST /v1/label-sets/{label_set_id}/labels"
            fingerprint = request_fingerprint(scope, content_type, str(validate_only), body.sha256)
            response = await run_in_threadpool(
                ctx.idempotency.execute,
                scope,
                key,
                fingerprint,
                lambda claim: uploads.upload_labels(
                    ctx, label_set_id, body.path, content_type, validate_only=validate_only, claim=claim
                ),
            )
        finally:
            body.discard()
        if not response.replayed and not validate_only:
            uploaded_rows.inc(response.body["accepted_rows"])
            log.info("label set %s: %d labels stored", label_set_id, response.body["accepted_rows"])
        return response.to_response()

    @api.post(
        "/label-sets/{label_set_id}/releases",
        status_code=202,
        tags=["releases"],
        summary="Release the labels, privatized",
        description="Estimates the prior, fits the mechanism, privatizes every label, writes the message and "
        "charges every id in one transaction; the outbox then delivers it. Exactly once per `Idempotency-Key`.",
        responses={
            **ok(responses.Release, responses.EXAMPLE_RELEASE, "charged and queued for delivery", 202,
                 {"Location": "the release's URL"}, _RELEASE_LINKS),
            **errors(401, 404, 409, 413, 422, 503, e404="label_set_not_found", e409="budget_exhausted"),
        },
        openapi_extra=_json_example({"mechanism": "laplace", "epsilon": 1, "feature_table": "clicks"}),
    )
    def create_release(
        label_set_id: str, body: releases.ReleaseCreate, key: str | None = Depends(idempotency_key)
    ) -> JSONResponse:
        scope = f"POST /v1/label-sets/{label_set_id}/releases"
        try:
            response = ctx.idempotency.execute(
                scope,
                key,
                request_fingerprint(scope, body.model_dump_json()),
                lambda claim: releases.create_release(ctx, label_set_id, body, claim),
            )
        except LabelDPError as exc:
            release_outcomes.labels(_mechanism_label(body.mechanism), exc.code).inc()
            raise
        if not response.replayed:
            release_outcomes.labels(response.body["mechanism"], "accepted").inc()
            log.info("release %s charged %s on %s", response.body["id"], response.body["epsilon"], label_set_id)
        return response.to_response()

    @api.get(
        "/releases/{release_id}",
        tags=["releases"],
        summary="Read a release",
        description="Delivery status, attempts, ε and the message digest; never reads the message bytes.",
        responses={
            **ok(responses.Release, responses.EXAMPLE_RELEASE, "the release"),
            **errors(401, 404, 422, 503, e404="release_not_found"),
        },
    )
    def get_release(release_id: str) -> dict[str, Any]:
        return releases.get_release(ctx, release_id)

    @api.post(
        "/releases/{release_id}/redeliver",
        status_code=202,
        tags=["releases"],
        summary="Deliver a rejected release again",
        description="The same bytes again: no new charge.",
        responses={
            **ok(responses.Release, responses.EXAMPLE_RELEASE, "queued again", 202),
            **errors(401, 404, 409, 422, 503, e404="release_not_found", e409="already_delivered"),
        },
    )
    def redeliver(release_id: str) -> dict[str, Any]:
        return releases.redeliver(ctx, release_id)

    @api.get(
        "/releases/{release_id}/events",
        tags=["releases"],
        summary="Follow a release's delivery",
        description="Server-Sent Events: a `release` event whenever its stage or attempts change, then `end` "
        "once delivered or rejected (`closing` if the server stops first). Catalogue facts only, never a label.",
        response_class=EventStreamResponse,
        responses={
            **event_stream_ok(responses.EXAMPLE_RELEASE_EVENTS, "the event stream"),
            **errors(401, 404, 422, 503, by_ref=True, e404="release_not_found"),
        },
    )
    async def release_events(release_id: str, request: Request) -> StreamingResponse:
        """The release's delivery stage as Server-Sent Events, until delivered or rejected."""
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

    app.include_router(api)
    return app
