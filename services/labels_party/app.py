"""The advertiser-facing API. Routers are thin: each calls one domain function."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily

from labeldp import __version__
from labeldp.database import make_engine, make_session_factory
from labeldp.http_api import ApiError, BodySizeLimit, bearer_auth, configure_logging, install_error_handlers
from labeldp.metrics import mount_metrics
from labeldp.settings import Settings

from . import label_sets, releases, uploads
from .randomizer import MECHANISMS
from .store import Base

log = logging.getLogger("labeldp.labels")


def _mechanism_label(name: str) -> str:
    # Bounded metric cardinality: unknown names from clients collapse to "other".
    return name if name in MECHANISMS or name == "auto" else "other"


class _ReleaseStatusCollector:
    """Releases by delivery status, read from the ledger at scrape time."""

    def __init__(self, sessions) -> None:  # type: ignore[no-untyped-def]
        self.sessions = sessions

    def collect(self):  # type: ignore[no-untyped-def]
        family = GaugeMetricFamily("labeldp_releases", "releases by delivery status", labels=["status"])
        for status, count in releases.status_counts(self.sessions).items():
            family.add_metric([status], count)
        yield family


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    configure_logging(settings.log_level)
    engine = make_engine(settings.labels_database_url)
    Base.metadata.create_all(engine)
    sessions = make_session_factory(engine)

    registry = CollectorRegistry()
    uploaded_rows = Counter("labeldp_uploaded_labels", "labels accepted by uploads", registry=registry)
    release_outcomes = Counter(
        "labeldp_release_requests", "release requests by mechanism and outcome", ["mechanism", "outcome"],
        registry=registry,
    )
    registry.register(_ReleaseStatusCollector(sessions))

    app = FastAPI(title="labeldp labels party", version=__version__)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    install_error_handlers(app)
    mount_metrics(app, registry)
    app.state.settings = settings
    app.state.sessions = sessions

    api = APIRouter(prefix="/v1", dependencies=[Depends(bearer_auth(settings.labels_api_key))])

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "party": "labels", "version": __version__}

    @api.post("/label-sets", status_code=201)
    def create_label_set(body: label_sets.LabelSetCreate, response: Response) -> dict[str, Any]:
        out = label_sets.create_label_set(sessions, body)
        response.headers["Location"] = f"/v1/label-sets/{out['id']}"
        log.info("label set %s created with %d ids", out["id"], out["counts"]["ids"])
        return out

    @api.get("/label-sets/{label_set_id}")
    def get_label_set(label_set_id: str) -> dict[str, Any]:
        return label_sets.get_label_set(sessions, label_set_id)

    @api.post("/label-sets/{label_set_id}/labels")
    async def upload(
        label_set_id: str,
        request: Request,
        response: Response,
        validate_only: bool = Query(False),
        idempotency_key: str | None = Header(None),
    ) -> dict[str, Any]:
        body = await request.body()
        out, replayed = await run_in_threadpool(
            uploads.upload_labels,
            sessions,
            label_set_id,
            body,
            request.headers.get("content-type", ""),
            validate_only=validate_only,
            idempotency_key=idempotency_key,
        )
        if replayed:
            response.headers["Idempotent-Replay"] = "true"
        elif not validate_only:
            uploaded_rows.inc(out["accepted_rows"])
            log.info("label set %s: %d labels stored", label_set_id, out["accepted_rows"])
        return out

    @api.post("/label-sets/{label_set_id}/releases", status_code=202)
    def create_release(label_set_id: str, body: releases.ReleaseCreate, response: Response) -> dict[str, Any]:
        try:
            out = releases.create_release(sessions, label_set_id, body)
        except ApiError as exc:
            release_outcomes.labels(_mechanism_label(body.mechanism), exc.code).inc()
            raise
        release_outcomes.labels(out["mechanism"], "accepted").inc()
        response.headers["Location"] = f"/v1/releases/{out['id']}"
        log.info("release %s charged %s on %s", out["id"], out["epsilon"], label_set_id)
        return out

    @api.get("/releases/{release_id}")
    def get_release(release_id: str) -> dict[str, Any]:
        return releases.get_release(sessions, release_id)

    @api.post("/releases/{release_id}/redeliver", status_code=202)
    def redeliver(release_id: str) -> dict[str, Any]:
        return releases.redeliver(sessions, release_id)

    app.include_router(api)
    return app
