"""The features party's FastAPI app: thin routers over the domain modules.

Everything the app needs (engine, sessions, metrics registry, training worker,
model cache) is built in :func:`create_app` from the settings passed in and kept
on ``app.state``; nothing is module-level, so tests can run several apps side by
side. There is deliberately no route or client that reaches the labels party.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, Counter
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from features_party import feature_tables, inbox, jobs, models, store
from features_party.device import resolve_device
from labeldp.database import make_session_factory, open_database
from labeldp.health import mount_readiness
from labeldp.http_api import ApiError, BodySizeLimit, bearer_auth, configure_logging, install_error_handlers
from labeldp.idempotency import IdempotencyKeys, idempotency_key, request_fingerprint
from labeldp.metrics import mount_metrics
from labeldp.migrations import SERVICES
from labeldp.schema import SIGNATURE_HEADER
from labeldp.settings import Settings, require_secrets
from labeldp.spool import spool_body

log = logging.getLogger("labeldp.features")

CSV_TYPES = {"text/csv", "application/csv", "text/plain", "application/octet-stream"}


@dataclass
class AppContext:
    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    data_dir: Path
    registry: CollectorRegistry
    inbox_messages: Counter
    trainings: Counter
    runner: jobs.TrainingRunner
    model_cache: models.ModelCache
    idempotency: IdempotencyKeys


def _context(settings: Settings) -> AppContext:
    engine = open_database(settings.features_database_url, SERVICES["features"], settings)
    sessions = make_session_factory(engine)
    data_dir = Path(settings.features_data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    registry = CollectorRegistry()
    inbox_messages = Counter(
        "labeldp_features_inbox_messages", "Release messages received, by result", ["result"], registry=registry
    )
    trainings = Counter(
        "labeldp_features_trainings", "Training status transitions, by new status", ["status"], registry=registry
    )
    runner = jobs.TrainingRunner(
        jobs.JobContext(
            session_factory=sessions,
            data_dir=data_dir,
            device=settings.device,
            threads=settings.training_threads,
            workers=settings.training_workers,
            streaming=settings.training_streaming,
            row_group_rows=settings.training_row_group_rows,
            buffer_row_groups=settings.training_buffer_row_groups,
            on_status=lambda status: trainings.labels(status=status).inc(),
        )
    )
    return AppContext(
        settings=settings,
        engine=engine,
        sessions=sessions,
        data_dir=data_dir,
        registry=registry,
        inbox_messages=inbox_messages,
        trainings=trainings,
        runner=runner,
        model_cache=models.ModelCache(data_dir, device=resolve_device(settings.device)),
        idempotency=IdempotencyKeys(store.IDEMPOTENCY_KEYS, sessions, settings.idempotency_lease_seconds),
    )


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service; the training worker lives as long as the app's lifespan."""
    settings = settings or Settings()
    require_secrets(settings, "features_api_key", "exchange_secret")
    configure_logging(settings.log_level)
    ctx = _context(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(ctx.runner.start)
        try:
            yield
        finally:
            await run_in_threadpool(ctx.runner.shutdown)
            ctx.engine.dispose()

    app = FastAPI(title="labeldp features party", version="1", lifespan=lifespan)
    app.state.ctx = ctx
    app.add_middleware(
        BodySizeLimit, max_bytes=settings.max_body_bytes, limits={"/v1/releases": settings.inbox_max_body_bytes}
    )
    install_error_handlers(app)
    mount_readiness(app, ctx.engine, settings.database_connect_timeout_seconds)
    mount_metrics(app, ctx.registry)
    app.include_router(_public_router(ctx))
    app.include_router(_inbox_router(ctx))
    app.include_router(_api_router(ctx), dependencies=[Depends(bearer_auth(settings.features_api_key))])
    return app


def _public_router(ctx: AppContext) -> APIRouter:
    router = APIRouter()

    @router.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok", "device": resolve_device(ctx.settings.device)}

    return router


def _inbox_router(ctx: AppContext) -> APIRouter:
    """Authenticated by the message signature, not by the publisher's API key."""
    router = APIRouter()

    slots = asyncio.Semaphore(ctx.settings.inbox_max_concurrent)

    @router.post("/v1/releases", status_code=201)
    async def receive(request: Request) -> JSONResponse:
        # Unauthenticated bytes never sit in memory: the body goes to disk, the signature is
        # checked over the file, and only a signed message is parsed; a bounded number at once.
        if slots.locked():
            ctx.inbox_messages.labels(result="inbox_busy").inc()
            raise ApiError(503, "inbox_busy", "the inbox is receiving other messages", headers={"Retry-After": "2"})
        async with slots:
            body = await spool_body(request, ctx.data_dir / "spool")
            signature = request.headers.get(SIGNATURE_HEADER)
            try:
                result = await run_in_threadpool(
                    inbox.receive_release, ctx.sessions, ctx.settings.exchange_secret, body.path, signature
                )
            except ApiError as exc:
                ctx.inbox_messages.labels(result=exc.code).inc()
                log.info("release message rejected: %s", exc.code)
                raise
            finally:
                body.discard()
        ctx.inbox_messages.labels(result=result.status).inc()
        return JSONResponse(result.body(), status_code=result.http_status)

    return router


def _api_router(ctx: AppContext) -> APIRouter:
    router = APIRouter(prefix="/v1")

    @router.post("/feature-tables", status_code=201)
    async def upload_feature_table(
        request: Request,
        name: str = Query(...),
        id_column: str = Query("id"),
        categorical: str | None = Query(None),
        numeric: str | None = Query(None),
        key: str | None = Depends(idempotency_key),
    ) -> JSONResponse:
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type and content_type not in CSV_TYPES:
            raise ApiError(415, "unsupported_media_type", "send the table as text/csv")
        body = await request.body()
        cats, nums = feature_tables.split_names(categorical), feature_tables.split_names(numeric)
        scope = "POST /v1/feature-tables"
        query = json.dumps({"name": name, "id_column": id_column, "categorical": cats, "numeric": nums})
        fingerprint = request_fingerprint(scope, query, hashlib.sha256(body).hexdigest())
        response = await run_in_threadpool(
            ctx.idempotency.execute,
            scope,
            key,
            fingerprint,
            lambda claim: feature_tables.create_feature_table(
                ctx.sessions, ctx.data_dir, name, body, id_column, cats, nums, claim
            ),
        )
        return response.to_response()

    @router.get("/feature-tables/{name}")
    def get_feature_table(name: str) -> dict[str, Any]:
        with ctx.sessions() as session:
            return feature_tables.describe(feature_tables.get_feature_table(session, name))

    @router.get("/releases/{release_id}")
    def get_release(release_id: str) -> dict[str, Any]:
        with ctx.sessions() as session:
            return inbox.describe_release(inbox.get_release(session, release_id))

    @router.get("/releases/{release_id}/labels")
    def get_release_labels(release_id: str) -> dict[str, Any]:
        with ctx.sessions() as session:
            ids, labels = inbox.release_columns(inbox.get_release(session, release_id))
        return {"ids": ids, "labels": labels.tolist()}

    @router.post("/trainings", status_code=202)
    def start_training(body: jobs.TrainingRequest, key: str | None = Depends(idempotency_key)) -> JSONResponse:
        scope = "POST /v1/trainings"
        # The body as sent (unset fields left out): which learning options were explicit matters.
        fingerprint = request_fingerprint(scope, body.model_dump_json(exclude_unset=True))
        response = ctx.idempotency.execute(
            scope, key, fingerprint, lambda claim: jobs.create_training(ctx.sessions, ctx.data_dir, body, claim)
        )
        if not response.replayed:
            ctx.trainings.labels(status=jobs.QUEUED).inc()
            ctx.runner.submit(response.body["training_id"])
        return response.to_response()

    @router.get("/trainings/{training_id}")
    def get_training(training_id: str) -> dict[str, Any]:
        with ctx.sessions() as session:
            return jobs.describe_training(jobs.get_training(session, training_id))

    @router.get("/models/{model_id}")
    def get_model(model_id: str) -> dict[str, Any]:
        with ctx.sessions() as session:
            row = models.get_model(session, model_id)
            training = session.get(store.Training, row.training_id)
        try:
            loaded = ctx.model_cache.get(row)  # the card's selection fields live in the model file
        except (OSError, ValueError, RuntimeError):
            loaded = None
        return models.model_card(row, training, loaded)

    @router.post("/models/{model_id}/predict")
    def predict(model_id: str, body: models.PredictRequest) -> dict[str, Any]:
        return models.predict(ctx.sessions, ctx.data_dir, ctx.model_cache, model_id, body)

    return router
