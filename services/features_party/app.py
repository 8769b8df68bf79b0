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
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Query, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from prometheus_client import CollectorRegistry, Counter
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker
from starlette.background import BackgroundTask

from features_party import feature_tables, inbox, jobs, model_delivery, models, responses, store
from labeldp import __version__
from labeldp.errors import LabelDPError, Unavailable, UnsupportedMediaType
from labeldp.learning.device import resolve_device
from labeldp.schema import SIGNATURE_HEADER
from labeldp.service.database import make_session_factory
from labeldp.service.events import EVENT_STREAM, STREAM_HEADERS, EventStreamResponse, event_stream, shutdown_flag
from labeldp.service.health import mount_readiness
from labeldp.service.http_api import BodySizeLimit, bearer_auth, install_error_handlers
from labeldp.service.idempotency import IdempotencyKeys, idempotency_key, request_fingerprint
from labeldp.service.logs import RequestContext, configure_logging
from labeldp.service.metrics import TrainingObserver, features_metrics, instrument
from labeldp.service.migrations import open_database
from labeldp.service.openapi import (
    BINARY,
    CSV_TEXT,
    SIGNATURE,
    documented_app,
    errors,
    event_stream_ok,
    file_ok,
    ok,
    request_body,
)
from labeldp.service.pagination import DEFAULT_LIMIT, MAX_LIMIT
from labeldp.service.settings import Settings, require_secrets
from labeldp.service.spool import spool_body

log = logging.getLogger("labeldp.features")

CSV_TYPES = {"text/csv", "application/csv", "text/plain", "application/octet-stream"}

DESCRIPTION = """The publisher's side of labeldp: feature tables, the inbox that receives the labels
party's signed release messages, trainings on features × privatized labels, models and predictions.

Authenticate with `Authorization: Bearer <key>`; the inbox (`POST /v1/releases`) instead checks the
HMAC signature of the labels party's outbox. Every error is `{code, message, details}` with a stable
`code`. Ids are prefixed by kind (`ft_`, `rel_`, `trn_`, `mdl_`); timestamps carry a UTC offset.
There is no route that reaches the labels party."""

TAGS = [
    {"name": "feature tables", "description": "the publisher's features, keyed by example id"},
    {"name": "releases", "description": "the inbox and the privatized labels it holds"},
    {"name": "trainings", "description": "background training jobs"},
    {"name": "models", "description": "model cards and predictions"},
    {"name": "health", "description": "liveness"},
]


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
    engine = open_database(settings.features_database_url, "features_party.migrations", settings)
    sessions = make_session_factory(engine)
    data_dir = Path(settings.features_data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    registry = CollectorRegistry()
    measured = features_metrics(registry)
    training_metrics = TrainingObserver(measured)
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
            join_partition_rows=settings.training_join_partition_rows,
            on_status=training_metrics.status_changed,
            on_trained=training_metrics.trained,
        )
    )
    return AppContext(
        settings=settings,
        engine=engine,
        sessions=sessions,
        data_dir=data_dir,
        registry=registry,
        inbox_messages=measured.inbox_messages,
        trainings=measured.trainings,
        runner=runner,
        model_cache=models.ModelCache(data_dir, device=resolve_device(settings.device)),
        idempotency=IdempotencyKeys(store.IDEMPOTENCY_KEYS, sessions, settings.idempotency_lease_seconds),
    )


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service; the training worker lives as long as the app's lifespan."""
    settings = settings or Settings()
    require_secrets(settings, "features_api_key", "exchange_secret")
    configure_logging(settings.log_level, "features")
    ctx = _context(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(ctx.runner.start)
        try:
            yield
        finally:
            await run_in_threadpool(ctx.runner.shutdown)
            ctx.engine.dispose()

    app = documented_app("labeldp features party", DESCRIPTION, TAGS, lifespan)
    app.state.ctx = ctx
    app.add_middleware(
        BodySizeLimit,
        max_bytes=settings.max_body_bytes,
        limits={
            "/v1/releases": settings.inbox_max_body_bytes,
            "/v1/models/{model_id}/predictions": settings.prediction_max_body_bytes,
        },
    )
    install_error_handlers(app)
    mount_readiness(app, ctx.engine, settings.database_connect_timeout_seconds)
    # Metrics, then the request id outermost: every answer (a 413 too) is timed and carries an id.
    instrument(app, ctx.registry, "features")
    app.add_middleware(RequestContext)
    app.include_router(_public_router(ctx))
    app.include_router(_inbox_router(ctx))
    app.include_router(_api_router(ctx), dependencies=[Depends(bearer_auth(settings.features_api_key))])
    return app


def _public_router(ctx: AppContext) -> APIRouter:
    router = APIRouter()

    @router.get(
        "/healthz",
        tags=["health"],
        summary="Liveness",
        description="Answers while the process serves requests; says nothing about the database (see /readyz).",
        responses=ok(responses.Health, {"status": "ok", "service": "features", "version": __version__}, "alive"),
    )
    def healthz() -> dict[str, str]:
        return {"status": "ok", "service": "features", "version": __version__}

    return router


def _inbox_router(ctx: AppContext) -> APIRouter:
    """Authenticated by the message signature, not by the publisher's API key."""
    router = APIRouter()

    slots = asyncio.Semaphore(ctx.settings.inbox_max_concurrent)

    REL = responses.REL

    @router.post(
        "/v1/releases",
        status_code=201,
        tags=["releases"],
        summary="Receive a release message (the inbox)",
        description="For the labels party's outbox only: the body is spooled to disk, its HMAC signature checked "
        "over the file, then the schema, the digest and the ids; every valid, signed release is stored once "
        "(201), a resend of the same bytes is a duplicate (200).",
        dependencies=[Security(SIGNATURE)],
        responses={
            **ok(responses.InboxReceipt, responses.EXAMPLE_RECEIPT, "stored", 201, None,
                 {"get_release": {"release_id": "$response.body#/id"},
                  "get_release_labels": {"release_id": "$response.body#/id"}}),
            **ok(responses.InboxReceipt, {**responses.EXAMPLE_RECEIPT, "status": "duplicate"}, "already stored"),
            **errors(401, 409, 413, 422, 503, e401="bad_signature", e409="release_conflict", e422="invalid_message"),
        },
        openapi_extra=request_body(
            {"application/json": ({"type": "object", "description": "a LabelRelease message"}, {"release_id": REL})},
            "the exact message bytes the labels party wrote, signed in `X-Labeldp-Signature`",
        ),
    )
    async def receive(request: Request) -> JSONResponse:
        # Unauthenticated bytes never sit in memory: the body goes to disk, the signature is
        # checked over the file, and only a signed message is parsed; a bounded number at once.
        if slots.locked():
            ctx.inbox_messages.labels(result="inbox_busy").inc()
            raise Unavailable("inbox_busy", "the inbox is receiving other messages", headers={"Retry-After": "2"})
        async with slots:
            body = await spool_body(request, ctx.data_dir / "spool")
            signature = request.headers.get(SIGNATURE_HEADER)
            try:
                result = await run_in_threadpool(
                    inbox.receive_release, ctx.sessions, ctx.settings.exchange_secret, body.path, signature
                )
            except LabelDPError as exc:
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

    @router.post(
        "/feature-tables",
        status_code=201,
        tags=["feature tables"],
        summary="Upload a feature table",
        description="A CSV with an id column and the features; kinds are inferred (name `categorical`/`numeric` "
        "to override). Ids stay strings. `Idempotency-Key` makes a retry safe.",
        responses={
            **ok(responses.FeatureTable, responses.EXAMPLE_TABLE, "stored", 201, {"Location": "the table's URL"},
                 {"get_feature_table": {"name": "$response.body#/name"}}),
            **errors(401, 409, 413, 415, 422, 503, e409="feature_table_exists", e422="invalid_csv"),
        },
        openapi_extra=request_body(
            {"text/csv": (CSV_TEXT, "id,age,city\nu001,31,paris\nu002,45,lyon\n")},
            "the table as CSV, header first",
        ),
    )
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
            raise UnsupportedMediaType("unsupported_media_type", "send the table as text/csv")
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

    @router.get(
        "/feature-tables/{name}",
        tags=["feature tables"],
        summary="Read a feature table",
        description="Its id, size, id column and feature columns with their kinds.",
        responses={
            **ok(responses.FeatureTable, responses.EXAMPLE_TABLE, "the table"),
            **errors(401, 404, 422, 503, e404="feature_table_not_found"),
        },
    )
    def get_feature_table(name: str) -> dict[str, Any]:
        with ctx.sessions() as session:
            return feature_tables.describe(feature_tables.get_feature_table(session, name))

    @router.get(
        "/releases/{release_id}",
        tags=["releases"],
        summary="Read a received release",
        description="The message's metadata: mechanism, prior, accounting, rows, digest.",
        responses={
            **ok(responses.ReceivedRelease, responses.EXAMPLE_RELEASE, "the release"),
            **errors(401, 404, 422, 503, e404="release_not_found"),
        },
    )
    def get_release(release_id: str) -> dict[str, Any]:
        with ctx.sessions() as session:
            return inbox.describe_release(inbox.get_release(session, release_id))

    @router.get(
        "/releases/{release_id}/labels",
        tags=["releases"],
        summary="Read a release's privatized labels",
        description="Every id once, sorted, with its privatized label (re-read from the exact signed bytes).",
        responses={
            **ok(responses.ReleaseLabels, responses.EXAMPLE_LABELS, "the columns"),
            **errors(401, 404, 422, 503, e404="release_not_found"),
        },
    )
    def get_release_labels(release_id: str) -> dict[str, Any]:
        with ctx.sessions() as session:
            ids, labels = inbox.release_columns(inbox.get_release(session, release_id))
        return {"ids": ids.to_pylist(), "labels": labels.tolist()}

    @router.post(
        "/trainings",
        status_code=202,
        tags=["trainings"],
        summary="Start a training",
        description="Joins a release with a feature table (which must hold every id) and queues a training; "
        "options default to the benchmarked configuration. `Idempotency-Key` makes a retry safe.",
        responses={
            **ok(responses.TrainingQueued, responses.EXAMPLE_QUEUED, "queued", 202, {"Location": "the training's URL"},
                 {"get_training": {"training_id": "$response.body#/id"}}),
            **errors(
                401, 404, 409, 413, 422, 429, 503,
                e404="release_not_found", e422="unknown_ids", e429="training_queue_full",
            ),
        },
        openapi_extra={"requestBody": {"content": {"application/json": {"example": {
            "release_id": responses.REL, "feature_table": "clicks", "epochs": 20, "batch_size": 256}}}}},
    )
    def start_training(body: jobs.TrainingRequest, key: str | None = Depends(idempotency_key)) -> JSONResponse:
        scope = "POST /v1/trainings"
        # The body as sent (unset fields left out): which learning options were explicit matters.
        fingerprint = request_fingerprint(scope, body.model_dump_json(exclude_unset=True))
        response = ctx.idempotency.execute(
            scope,
            key,
            fingerprint,
            lambda claim: jobs.create_training(
                ctx.sessions,
                ctx.data_dir,
                body,
                claim,
                queue_max=ctx.settings.training_queue_max,
                retry_after=ctx.runner.board.retry_after_seconds,
            ),
        )
        if not response.replayed:
            ctx.trainings.labels(status=jobs.QUEUED).inc()
            ctx.runner.submit(response.body["id"])
        return response.to_response()

    @router.get(
        "/trainings/{training_id}",
        tags=["trainings"],
        summary="Read a training",
        description="Status, progress and per-epoch history; `model_id` once it succeeded.",
        responses={
            **ok(responses.Training, responses.EXAMPLE_TRAINING, "the training"),
            **errors(401, 404, 422, 503, e404="training_not_found"),
        },
    )
    def get_training(training_id: str) -> dict[str, Any]:
        with ctx.sessions() as session:
            return jobs.training_status(session, jobs.get_training(session, training_id), ctx.runner.board)

    @router.get(
        "/models/{model_id}",
        tags=["models"],
        summary="Read a model card",
        description="Task, data, privacy cost (ε, accounting, mechanism), fit and what model selection chose.",
        responses={
            **ok(responses.ModelCard, responses.EXAMPLE_MODEL, "the card"),
            **errors(401, 404, 422, 503, e404="model_not_found"),
        },
    )
    def get_model(model_id: str) -> dict[str, Any]:
        with ctx.sessions() as session:
            row = models.get_model(session, model_id)
            training = session.get(store.Training, row.training_id)
        try:
            loaded = ctx.model_cache.get(row)  # the card's selection fields live in the model file
        except (OSError, ValueError, RuntimeError):
            loaded = None
        return models.model_card(row, training, loaded)

    @router.post(
        "/models/{model_id}/predict",
        tags=["models"],
        summary="Predict",
        description="For ids of the model's feature table, or for rows given as `{feature: value}`.",
        responses={
            **ok(responses.Predictions, responses.EXAMPLE_PREDICTIONS, "one prediction per id or row"),
            **errors(401, 404, 413, 422, 503, e404="model_not_found", e422="invalid_rows"),
        },
        openapi_extra={"requestBody": {"content": {"application/json": {"example": {"ids": ["u001", "u002"]}}}}},
    )
    def predict(model_id: str, body: models.PredictRequest) -> dict[str, Any]:
        return models.predict(ctx.sessions, ctx.data_dir, ctx.model_cache, model_id, body)

    _model_file_routes(router, ctx)
    _management_routes(router, ctx)
    return router


def _model_file_routes(router: APIRouter, ctx: AppContext) -> None:
    """Models used elsewhere: the exported graph and batch predictions over Parquet
    (features_party.model_delivery; docs/architecture.md, "Training at scale")."""

    @router.get(
        "/models/{model_id}/export",
        tags=["models"],
        summary="Download a model as ONNX or TorchScript",
        description="The trained network as a file another runtime loads: ONNX (opset 17, dynamic batch) or "
        "TorchScript. Inputs `numeric` (standardized float32) and `categorical` (int64 codes); the preprocessor "
        "and post-processing that surround the graph are embedded as JSON (ONNX `metadata_props[\"labeldp\"]`, "
        "TorchScript extra file `labeldp.json`).",
        response_class=FileResponse,
        responses={
            **file_ok("application/octet-stream", "<the model file's bytes>", "the model file"),
            **errors(401, 404, 409, 422, 503, by_ref=True, e404="model_not_found", e409="model_unavailable",
                     e422="model_not_exportable"),
        },
    )
    async def download_model(
        model_id: str,
        fmt: Literal["onnx", "torchscript"] = Query("onnx", alias="format", description="`onnx` or `torchscript`"),
    ) -> FileResponse:
        path = await run_in_threadpool(model_delivery.exported_file, ctx.sessions, ctx.data_dir, model_id, fmt)
        return FileResponse(
            path, media_type="application/octet-stream", filename=model_delivery.export_filename(model_id, fmt)
        )

    @router.post(
        "/models/{model_id}/predictions",
        tags=["models"],
        summary="Predict a Parquet file",
        description="A Parquet upload in, a Parquet file of predictions out, a batch at a time (bodies up to "
        "`LABELDP_PREDICTION_MAX_BODY_BYTES`). With `feature_table_id` the upload holds ids (column `id_column`) "
        "looked up in that feature table; without it, the model's feature columns. The answer has the id column "
        "(when the upload has one), `prediction`, and `p_<class>` per class for a classifier. Errors name counts "
        "and columns, never ids or values.",
        response_class=FileResponse,
        responses={
            **file_ok(model_delivery.PARQUET, "<Parquet bytes: id, prediction>", "one prediction per input row"),
            **errors(401, 404, 409, 413, 415, 422, 503, by_ref=True, e404="model_not_found",
                     e409="model_unavailable", e422="unknown_ids"),
        },
        openapi_extra=request_body(
            {model_delivery.PARQUET: (BINARY, None)}, "a Parquet file of ids or of feature rows"
        ),
    )
    async def predict_batch(
        model_id: str,
        request: Request,
        feature_table_id: str | None = Query(
            None, max_length=64, description="`ft_…`: look the upload's ids up in this feature table"
        ),
        id_column: str = Query("id", min_length=1, max_length=256, description="the upload's id column"),
    ) -> FileResponse:
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type not in model_delivery.PARQUET_TYPES:
            raise UnsupportedMediaType("unsupported_media_type", f"send the rows as {model_delivery.PARQUET}")

        def known() -> None:
            with ctx.sessions() as session:
                models.get_model(session, model_id)

        await run_in_threadpool(known)  # 404 before reading a large body
        body = await spool_body(request, ctx.data_dir / "spool")
        try:
            output = await run_in_threadpool(
                model_delivery.predict_upload, ctx.sessions, ctx.data_dir, ctx.model_cache, model_id, body.path,
                feature_table_id, id_column,
            )
        finally:
            body.discard()
        return FileResponse(
            output, media_type=model_delivery.PARQUET, filename=f"predictions-{model_id}.parquet",
            background=BackgroundTask(output.unlink, missing_ok=True),
        )


Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="items per page")]
Cursor = Annotated[str | None, Query(max_length=400, description="next_cursor of the previous page")]


def _management_routes(router: APIRouter, ctx: AppContext) -> None:
    """Lists (labeldp.service.pagination), cancel and the training event stream (docs/architecture.md,
    "Progress and events")."""

    @router.get(
        "/feature-tables",
        tags=["feature tables"],
        summary="List feature tables",
        description="Oldest first; a cursor page (`next_cursor` null on the last page).",
        responses={
            **ok(responses.FeatureTablePage, responses.EXAMPLE_TABLE_PAGE, "a page"),
            **errors(401, 422, 503, e422="invalid_cursor"),
        },
    )
    def list_feature_tables(limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None) -> dict[str, Any]:
        with ctx.sessions() as session:
            return feature_tables.list_feature_tables(session, limit, cursor)

    @router.get(
        "/releases",
        tags=["releases"],
        summary="List received releases",
        description="Oldest received first, optionally of one label set; never loads a message body.",
        responses={
            **ok(responses.ReceivedReleasePage, responses.EXAMPLE_RELEASE_PAGE, "a page"),
            **errors(401, 422, 503, e422="invalid_cursor"),
        },
    )
    def list_releases(
        label_set_id: str | None = Query(None, max_length=256), limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None
    ) -> dict[str, Any]:
        with ctx.sessions() as session:
            return inbox.list_releases(session, limit, cursor, label_set_id)

    @router.get(
        "/trainings",
        tags=["trainings"],
        summary="List trainings",
        description="In creation order (the order the queue runs them), optionally by status or release.",
        responses={
            **ok(responses.TrainingPage, responses.EXAMPLE_TRAINING_PAGE, "a page"),
            **errors(401, 422, 503, e422="invalid_status"),
        },
    )
    def list_trainings(
        status: str | None = Query(None, max_length=16),
        release_id: str | None = Query(None, max_length=256),
        limit: Limit = DEFAULT_LIMIT,
        cursor: Cursor = None,
    ) -> dict[str, Any]:
        with ctx.sessions() as session:
            return jobs.list_trainings(session, limit, cursor, status, release_id, ctx.runner.board)

    @router.get(
        "/models",
        tags=["models"],
        summary="List model cards",
        description="Oldest first, optionally of one release.",
        responses={
            **ok(responses.ModelPage, responses.EXAMPLE_MODEL_PAGE, "a page"),
            **errors(401, 422, 503, e422="invalid_cursor"),
        },
    )
    def list_models(
        release_id: str | None = Query(None, max_length=256), limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None
    ) -> dict[str, Any]:
        with ctx.sessions() as session:
            return models.list_models(session, limit, cursor, release_id)

    @router.post(
        "/trainings/{training_id}/cancel",
        tags=["trainings"],
        summary="Cancel a training",
        description="A queued training is cancelled at once (200); a running one stops at its next batch "
        "boundary (202, `cancelling`, then `cancelled`) and leaves no model behind; one already over is a 409.",
        responses={
            **ok(responses.Training, {**responses.EXAMPLE_TRAINING, "status": "cancelled", "model_id": None},
                 "cancelled"),
            **ok(responses.Training, responses.EXAMPLE_CANCELLING, "stops at the next batch", 202),
            **errors(401, 404, 409, 422, 503, e404="training_not_found", e409="training_finished"),
        },
    )
    def cancel_training(training_id: str) -> JSONResponse:
        status_code, body = jobs.cancel_training(ctx.sessions, ctx.runner.board, training_id)
        if status_code == 200:  # cancelled while queued: the worker, which counts the others, never saw it
            ctx.trainings.labels(status=jobs.CANCELLED).inc()
        return JSONResponse(body, status_code=status_code)

    @router.get(
        "/trainings/{training_id}/events",
        tags=["trainings"],
        summary="Follow a training",
        description="Server-Sent Events: a `training` event whenever its status, epoch or batch changes (with "
        "elapsed time, ETA and queue position), then `end` once it is over (`closing` if the server stops first).",
        response_class=EventStreamResponse,
        responses={
            **event_stream_ok(responses.EXAMPLE_TRAINING_EVENTS, "the event stream"),
            **errors(401, 404, 422, 503, by_ref=True, e404="training_not_found"),
        },
    )
    async def training_events(training_id: str, request: Request) -> StreamingResponse:
        def poll() -> Any:
            return jobs.training_snapshot(ctx.sessions, ctx.runner.board, training_id)

        await run_in_threadpool(poll)  # 404 before the stream starts
        return StreamingResponse(
            event_stream(lambda: run_in_threadpool(poll), "training", stopping=shutdown_flag(request.app).is_set),
            media_type=EVENT_STREAM,
            headers=STREAM_HEADERS,
        )
