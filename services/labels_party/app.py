"""The advertiser-facing API, assembled: settings, database, middleware, error handlers and the
routers of :mod:`labels_party.routes` (one module per resource)."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import Depends, FastAPI
from fastapi.concurrency import run_in_threadpool
from prometheus_client import CollectorRegistry

from labeldp.service.database import make_session_factory
from labeldp.service.health import mount_readiness
from labeldp.service.http_api import (
    BodySizeLimit,
    RequestLimit,
    RequireCaller,
    ServerErrors,
    bearer_auth,
    install_error_handlers,
    require_scope,
)
from labeldp.service.logs import RequestContext, configure_logging
from labeldp.service.metrics import OUTBOX_METRICS_DIR, instrument, labels_metrics
from labeldp.service.migrations import open_database
from labeldp.service.openapi import documented_app
from labeldp.service.settings import Settings, parse_api_keys, require_secrets

from . import ledger
from .context import LabelsContext
from .release_worker import ReleaseRunner
from .routes import audit_events, console, label_sets, ops, privacy_domains, releases, uploads
from .sweep import SPOOL_MIN_AGE_SECONDS, lease_age, run_sweeper, sweep_orphans

log = logging.getLogger("labeldp.labels")

DESCRIPTION = """The advertiser's side of labeldp: privacy domains with a per-id ledger, label sets, and
releases (jobs: accepted at once, privatized and charged by a release worker) that privatize every label
once and push one ε-label-DP message to the features party.

Authenticate with `Authorization: Bearer <key>`; a key's scope decides what it may do (`admin`: privacy
domains and the audit log; `release`: label sets and releases). Every error is `{code, message, details}` with a
stable `code`. Mutating POSTs take `Idempotency-Key`. Ids are prefixed by kind (`pd_`, `ls_`,
`rel_`); timestamps are ISO-8601 with a UTC offset."""

TAGS = [
    {"name": "privacy domains", "description": "per-id budgets and their ledgers"},
    {"name": "label sets", "description": "ids, labels (CSV, JSON, Parquet, Arrow IPC) and budgets"},
    {"name": "releases", "description": "privatize, charge and deliver once"},
    {"name": "audit", "description": "the append-only log of privacy-domain, label-set and release changes"},
    {"name": "health", "description": "liveness"},
]


def lifespan_of(ctx: LabelsContext, interval_seconds: float) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: the in-process release worker (LABELDP_RELEASE_IN_PROCESS_WORKER) and a
    thread that sweeps a crash's leftovers once their lease expired, as long as the app lives."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runner: ReleaseRunner = app.state.release_runner
        await run_in_threadpool(runner.start)
        stop = threading.Event()
        sweeper = threading.Thread(target=run_sweeper, args=(ctx, stop, interval_seconds), name="sweeper", daemon=True)
        sweeper.start()
        try:
            yield
        finally:
            stop.set()
            await run_in_threadpool(runner.shutdown)
            sweeper.join(30)
            if app.state.outbox_files is not None:
                app.state.outbox_files.close()  # another replica serves the outbox's metrics from its next scrape

    return lifespan


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    require_secrets(settings, "labels_api_key")
    configure_logging(settings.log_level, "labels")
    engine = open_database(settings.labels_database_url, "labels_party.migrations", settings)
    ctx = LabelsContext(make_session_factory(engine), settings.labels_data_dir, settings)
    # Files a crash left between writing and committing; young ones may be another replica's.
    swept = sweep_orphans(ctx, lease_age(ctx), SPOOL_MIN_AGE_SECONDS)
    if swept:
        log.info("swept %d orphaned files", swept)
    if bucketed := ledger.bucket_legacy_domains(ctx):  # domains from before the bucketed ledger, once
        log.info("bucketed the ledger of %d privacy domains", bucketed)

    registry = CollectorRegistry()
    app = documented_app("labeldp labels party", DESCRIPTION, TAGS, lifespan_of(ctx, settings.sweep_interval_seconds))
    app.add_middleware(ServerErrors)  # innermost: a route's 500 keeps the request id and the connection
    app.add_middleware(
        BodySizeLimit,
        max_bytes=settings.max_body_bytes,
        body_timeout_seconds=settings.request_body_timeout_seconds,
        min_bytes_per_second=settings.request_body_min_bytes_per_second,
    )
    # Outside the size limit: who is calling is known from the headers before any body is read.
    app.add_middleware(
        RequireCaller,
        keys=[key.key for key in parse_api_keys(settings.labels_api_key)],
        public_max_body_bytes=settings.public_max_body_bytes,
        openapi=app.openapi,
    )
    install_error_handlers(app)
    mount_readiness(
        app, engine, settings.database_connect_timeout_seconds, settings.labels_data_dir, settings.min_free_disk_bytes
    )
    # Requests in progress at once (past the limit a 503), inside the metrics and the request id.
    app.add_middleware(RequestLimit, limit=settings.server_limit_concurrency)
    # Metrics, then the request id outermost: every answer (a 413, a 503 too) is timed and carries an id.
    app.state.outbox_files = instrument(app, registry, "labels", senders=settings.labels_data_dir / OUTBOX_METRICS_DIR)
    app.add_middleware(RequestContext)
    app.state.settings = settings
    app.state.ctx = ctx  # what routes.deps hands each handler
    app.state.metrics = labels_metrics(registry)
    app.state.release_runner = ReleaseRunner(ctx)

    app.include_router(ops.router)
    console.mount(app)  # static pages: their data comes from the routes below, with the caller's key
    # Every key reads domains; changing them (and reading the audit log) needs the admin scope,
    # checked per route; label sets and releases need the release scope.
    guarded = [Depends(bearer_auth(settings.labels_api_key))]
    app.include_router(privacy_domains.router, dependencies=guarded)
    app.include_router(audit_events.router, dependencies=[*guarded, Depends(require_scope("admin"))])
    for resource in (label_sets, uploads, releases):
        app.include_router(resource.router, dependencies=[*guarded, Depends(require_scope("release"))])
    return app
