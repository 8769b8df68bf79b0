"""Liveness (labeldp.service.health.healthz_router). Readiness (``/readyz``) and ``/metrics`` are
mounted by the shared plumbing (labeldp.service.health, labeldp.service.metrics)."""

from __future__ import annotations

from labeldp import __version__
from labeldp.service.health import healthz_router

from .. import responses

HEALTH = responses.Health(status="ok", service="features", version=__version__)

router = healthz_router(HEALTH)
