"""Liveness. Readiness (``/readyz``) and ``/metrics`` are mounted by the shared plumbing
(labeldp.service.health, labeldp.service.metrics)."""

from __future__ import annotations

from fastapi import APIRouter

from labeldp import __version__
from labeldp.service.openapi import ok

from .. import responses

router = APIRouter(tags=["health"])

HEALTH = responses.Health(status="ok", service="labels", version=__version__)


@router.get(
    "/healthz",
    response_model=responses.Health,
    summary="Liveness",
    description="Answers while the process serves requests; says nothing about the database (see /readyz).",
    responses=ok(HEALTH.model_dump(), "alive"),
)
def healthz() -> responses.Health:
    return HEALTH
