"""Readiness of both services: ``/readyz`` answers 200 only while the database answers.

``/healthz`` stays a liveness probe (the process serves HTTP): a supervisor restarts a
service that fails it, which would not help while the database is down. ``/readyz`` is
what load balancers and compose healthchecks ask: ``SELECT 1`` within the connect timeout,
else 503 ``database_unavailable`` with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Literal

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from sqlalchemy import Engine

from labeldp.service.database import ping
from labeldp.service.http_api import database_unavailable_response
from labeldp.service.openapi import errors, ok

log = logging.getLogger("labeldp.service.health")


async def database_ready(engine: Engine, timeout_seconds: float) -> bool:
    """Whether ``SELECT 1`` succeeds within ``timeout_seconds``."""
    try:
        # An executor future, not anyio's thread: a cancelled wait must not block on a hung driver.
        pending = asyncio.get_running_loop().run_in_executor(None, ping, engine)
        await asyncio.wait_for(pending, timeout=timeout_seconds)
        return True
    except TimeoutError:
        log.warning("readiness: database did not answer within %.1f s", timeout_seconds)
        return False
    except Exception as exc:  # any failure to answer means not ready; the type only, never a message
        log.warning("readiness: database unavailable (%s)", type(exc).__name__)
        return False


class Ready(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["ready"]
    database: Literal["ok"]


def mount_readiness(app: FastAPI, engine: Engine, timeout_seconds: float) -> None:
    """Add ``GET /readyz`` (unauthenticated, like ``/healthz``) to ``app``."""

    @app.get(
        "/readyz",
        tags=["health"],
        summary="Readiness",
        description="200 while the database answers within the readiness timeout; 503 `database_unavailable` "
        "(with Retry-After) otherwise: a load balancer sends no traffic to a replica that is not ready.",
        response_model=Ready,
        responses={**ok({"status": "ready", "database": "ok"}, "ready"), **errors(503)},
    )
    async def readyz() -> JSONResponse:
        if await database_ready(engine, timeout_seconds):
            return JSONResponse({"status": "ready", "database": "ok"})
        return database_unavailable_response()


def healthz_router(health: BaseModel) -> APIRouter:
    """``GET /healthz`` answering ``health``, the service's own model instance: liveness, not the database."""
    router = APIRouter(tags=["health"])

    @router.get(
        "/healthz",
        response_model=type(health),
        summary="Liveness",
        description="Answers while the process serves requests; says nothing about the database (see /readyz).",
        responses=ok(health.model_dump(), "alive"),
    )
    def healthz() -> BaseModel:
        return health

    return router
