"""The features party's FastAPI app, assembled: settings, context, middleware, error handlers,
the training worker's lifespan and the routers of :mod:`features_party.routes`.

Everything the app needs (engine, sessions, metrics registry, training worker, model cache)
is built by :func:`features_party.context.build_context` from the settings passed in and kept
on ``app.state``; nothing is module-level, so tests can run several apps side by side. There
is deliberately no route or client that reaches the labels party.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from fastapi.concurrency import run_in_threadpool

from features_party import sweep
from features_party.context import AppContext, build_context
from features_party.routes import console, feature_tables, inbox, models, ops, releases, trainings
from labeldp.errors import LabelDPError
from labeldp.service.health import mount_readiness
from labeldp.service.http_api import (
    BodySizeLimit,
    RequestLimit,
    RequireCaller,
    ServerErrors,
    bearer_auth,
    inbox_transport_keys,
    install_error_handlers,
)
from labeldp.service.logs import RequestContext, configure_logging
from labeldp.service.metrics import instrument
from labeldp.service.openapi import documented_app
from labeldp.service.settings import Settings, require_secrets, require_webhook_secret
from labeldp.signing import secrets_of

log = logging.getLogger("labeldp.features")

DESCRIPTION = """The publisher's side of labeldp: feature tables, the inbox that receives the labels
party's signed release messages, trainings on features × privatized labels, models and predictions.

Authenticate with `Authorization: Bearer <key>`; the inbox (`POST /v1/releases`, the signed manifest
of a message, then its shards and `complete`) instead takes the labels party's outbox transport key in
the same header (checked before the body is read), checks the Ed25519 signature of the labels party over
the manifest (with its public keys, by kid), and each shard against the digest the manifest lists.
Every error is `{code, message, details}` with a stable `code`. Ids are prefixed by kind (`ft_`, `rel_`,
`trn_`, `mdl_`); timestamps carry a UTC offset. There is no route that reaches the labels party."""

TAGS = [
    {"name": "feature tables", "description": "the publisher's features, keyed by example id"},
    {"name": "releases", "description": "the inbox and the privatized labels it holds"},
    {"name": "trainings", "description": "background training jobs"},
    {"name": "models", "description": "model cards and predictions"},
    {"name": "health", "description": "liveness"},
]


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The training worker, the inbox's webhook sender and the sweeper live as long as the app."""
    ctx: AppContext = app.state.ctx
    await run_in_threadpool(ctx.runner.start)
    if ctx.webhooks is not None:
        ctx.webhooks.start()
    stop = threading.Event()
    sweeper = threading.Thread(
        target=sweep.run_sweeper,
        args=(ctx.sessions, ctx.store, stop, ctx.settings.sweep_interval_seconds, sweep.unfinished_age(ctx.settings),
              ctx.spool_dir),
        name="sweeper", daemon=True,
    )
    sweeper.start()
    try:
        yield
    finally:
        stop.set()
        if ctx.webhooks is not None:
            await run_in_threadpool(ctx.webhooks.stop)
        sweeper.join(30)
        await run_in_threadpool(ctx.runner.shutdown)
        ctx.engine.dispose()


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    require_secrets(settings, "features_api_key", "inbox_transport_key", "signing_public_keys")
    require_webhook_secret(settings)
    configure_logging(settings.log_level, "features")
    ctx = build_context(settings)
    try:  # what a crash or a failed delete left; the store away is no reason not to start
        if swept := sweep.sweep_orphans(ctx.sessions, ctx.store, sweep.unfinished_age(settings),
                                        spool=ctx.spool_dir):
            log.info("swept %d orphaned feature-table objects and unfinished writes", swept)
    except LabelDPError as exc:
        log.warning("start-up sweep failed (%s)", exc.code)

    app = documented_app("labeldp features party", DESCRIPTION, TAGS, lifespan)
    app.state.ctx = ctx  # what routes.deps hands each handler
    app.add_middleware(ServerErrors)  # innermost: a route's 500 keeps the request id and the connection
    app.add_middleware(
        BodySizeLimit,
        max_bytes=settings.max_body_bytes,
        limits={
            "/v1/releases": settings.inbox_max_manifest_bytes,
            "/v1/releases/{release_id}/shards/{index}": settings.inbox_max_body_bytes,
            "/v1/feature-tables": settings.feature_table_max_body_bytes,
            "/v1/models/{model_id}/predictions": settings.prediction_max_body_bytes,
        },
        body_timeout_seconds=settings.request_body_timeout_seconds,
        min_bytes_per_second=settings.request_body_min_bytes_per_second,
    )
    # Outside the size limit: who is calling is known from the headers before any body is read.
    app.add_middleware(
        RequireCaller,
        keys=secrets_of(settings.features_api_key),
        overrides={
            route: inbox_transport_keys(settings.inbox_transport_key)
            for route in (
                ("POST", "/v1/releases"),
                ("PUT", "/v1/releases/{release_id}/shards/{index}"),
                ("POST", "/v1/releases/{release_id}/complete"),
            )
        },
        public_max_body_bytes=settings.public_max_body_bytes,
        openapi=app.openapi,
        certificate_for_overrides=bool(settings.server_tls_client_ca_file),
    )
    install_error_handlers(app)
    mount_readiness(
        app, ctx.engine, settings.database_connect_timeout_seconds, settings.features_data_dir,
        settings.min_free_disk_bytes,
    )
    # Requests in progress at once (past the limit a 503), inside the metrics and the request id.
    app.add_middleware(RequestLimit, limit=settings.server_limit_concurrency)
    # Metrics, then the request id outermost: every answer (a 413, a 503 too) is timed and carries an id.
    instrument(app, ctx.registry, "features")
    app.add_middleware(RequestContext)
    app.include_router(ops.router)
    console.mount(app)  # static pages: their data comes from the routes below, with the caller's key
    app.include_router(inbox.router)  # authenticated by the manifest's signature
    app.include_router(inbox.events_router, dependencies=[Depends(bearer_auth(settings.features_api_key))])
    guarded = [Depends(bearer_auth(settings.features_api_key))]
    for resource in (feature_tables, releases, trainings, models):
        app.include_router(resource.router, dependencies=guarded)
    return app
