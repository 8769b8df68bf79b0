"""Readiness of both services: ``/readyz`` answers 200 only while the database answers and the
data folder has room.

``/healthz`` stays a liveness probe (the process serves HTTP): a supervisor restarts a
service that fails it, which would not help while the database is down. ``/readyz`` is
what load balancers and compose healthchecks ask: ``SELECT 1`` within the connect timeout,
else 503 ``database_unavailable`` with ``Retry-After``; and the service's data folder must have at least
``LABELDP_MIN_FREE_DISK_BYTES`` free, else 503 ``insufficient_storage`` (a full disk fails every upload).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path
from typing import Literal

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from sqlalchemy import Engine

from labeldp.service.database import ping
from labeldp.service.http_api import database_unavailable_response, insufficient_storage_response
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
    disk: Literal["ok"]


def disk_free_bytes(folder: Path) -> int | None:
    """Free bytes of the file system holding ``folder`` (its nearest existing parent); None if unknown."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            try:
                return shutil.disk_usage(candidate).free
            except OSError:
                return None
    return None


def mount_readiness(
    app: FastAPI, engine: Engine, timeout_seconds: float, data_dir: Path | None = None, min_free_bytes: int = 0
) -> None:
    """Add ``GET /readyz`` (unauthenticated, like ``/healthz``) to ``app``."""

    @app.get(
        "/readyz",
        tags=["health"],
        summary="Readiness",
        description="200 while the database answers within the readiness timeout and the data folder has "
        "LABELDP_MIN_FREE_DISK_BYTES free; 503 `database_unavailable` or `insufficient_storage` (with "
        "Retry-After) otherwise: a load balancer sends no traffic to a replica that is not ready.",
        response_model=Ready,
        responses={**ok({"status": "ready", "database": "ok", "disk": "ok"}, "ready"), **errors(503)},
    )
    async def readyz() -> JSONResponse:
        if not await database_ready(engine, timeout_seconds):
            return database_unavailable_response()
        if data_dir is not None and min_free_bytes > 0:
            free = disk_free_bytes(data_dir)
            if free is not None and free < min_free_bytes:
                log.warning("readiness: %d bytes free in the data folder, under %d", free, min_free_bytes)
                response = insufficient_storage_response()
                response.status_code = 503  # not ready: load balancers read 503
                return response
        return JSONResponse({"status": "ready", "database": "ok", "disk": "ok"})


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
