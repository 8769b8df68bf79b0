"""Prometheus metrics on a per-app registry (no process-global state).

Metric labels are mechanism names, outcomes and codes only, never label values.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


def mount_metrics(app: FastAPI, registry: CollectorRegistry) -> None:
    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
