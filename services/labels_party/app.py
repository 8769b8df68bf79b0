"""The advertiser-facing API. Routers are thin: each calls one domain function."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry

from labeldp import __version__
from labeldp.database import make_session_factory, open_database
from labeldp.health import mount_readiness
from labeldp.http_api import ApiError, BodySizeLimit, bearer_auth, install_error_handlers
from labeldp.idempotency import Claim, StoredResponse, idempotency_key, request_fingerprint
from labeldp.logs import RequestContext, configure_logging
from labeldp.metrics import OUTBOX_METRICS_DIR, instrument, labels_metrics
from labeldp.migrations import SERVICES
from labeldp.pagination import DEFAULT_LIMIT, MAX_LIMIT
from labeldp.settings import Settings, require_secrets
from labeldp.spool import spool_body

from . import label_sets, privacy_domains, releases, uploads
from .context import LabelsContext
from .randomizer import MECHANISMS
from .sweep import sweep_orphans

log = logging.getLogger("labeldp.labels")


def _mechanism_label(name: str) -> str:
    # Bounded metric cardinality: unknown names from clients collapse to "other".
    return name if name in MECHANISMS or name == "auto" else "other"


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    require_secrets(settings, "labels_api_key")
    configure_logging(settings.log_level, "labels")
    engine = open_database(settings.labels_database_url, SERVICES["labels"], settings)
    ctx = LabelsContext(make_session_factory(engine), settings.labels_data_dir, settings)
    # Files a crash left between writing and committing; young ones may be another replica's.
    swept = sweep_orphans(ctx, min_age_seconds=max(3600.0, 2 * settings.idempotency_lease_seconds))
    if swept:
        log.info("swept %d orphaned files", swept)

    registry = CollectorRegistry()
    measured = labels_metrics(registry)
    uploaded_rows, release_outcomes = measured.uploaded_labels, measured.release_requests

    app = FastAPI(title="labeldp labels party", version=__version__)
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

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "party": "labels", "version": __version__}

    @api.post("/privacy-domains", status_code=201)
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

    @api.get("/privacy-domains/{name}")
    def get_privacy_domain(name: str) -> dict[str, Any]:
        return privacy_domains.get_privacy_domain(ctx, name)

    @api.post("/label-sets", status_code=201)
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

    @api.get("/label-sets")
    def list_label_sets(
        limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT), cursor: str | None = Query(None, max_length=400)
    ) -> dict[str, Any]:
        return label_sets.list_label_sets(ctx, limit, cursor)

    @api.delete("/label-sets/{label_set_id}/labels")
    def delete_labels(label_set_id: str) -> dict[str, Any]:
        out = label_sets.delete_labels(ctx, label_set_id)
        log.info("label set %s: raw labels deleted", label_set_id)
        return out

    @api.get("/releases")
    def list_releases(
        label_set_id: str | None = Query(None, max_length=40),
        limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
        cursor: str | None = Query(None, max_length=400),
    ) -> dict[str, Any]:
        return releases.list_releases(ctx, label_set_id, limit, cursor)

    @api.get("/label-sets/{label_set_id}")
    def get_label_set(label_set_id: str) -> dict[str, Any]:
        return label_sets.get_label_set(ctx, label_set_id)

    @api.post("/label-sets/{label_set_id}/ids")
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

    @api.post("/label-sets/{label_set_id}/labels")
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

    @api.post("/label-sets/{label_set_id}/releases", status_code=202)
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
        except ApiError as exc:
            release_outcomes.labels(_mechanism_label(body.mechanism), exc.code).inc()
            raise
        if not response.replayed:
            release_outcomes.labels(response.body["mechanism"], "accepted").inc()
            log.info("release %s charged %s on %s", response.body["id"], response.body["epsilon"], label_set_id)
        return response.to_response()

    @api.get("/releases/{release_id}")
    def get_release(release_id: str) -> dict[str, Any]:
        return releases.get_release(ctx, release_id)

    @api.post("/releases/{release_id}/redeliver", status_code=202)
    def redeliver(release_id: str) -> dict[str, Any]:
        return releases.redeliver(ctx, release_id)

    app.include_router(api)
    return app
