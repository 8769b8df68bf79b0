"""What the labels party's handlers receive through ``Depends``: the context and metrics the
app built at start (kept on ``app.state``), and the validated ``Idempotency-Key``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from labeldp.service.http_api import require_scope
from labeldp.service.idempotency import idempotency_key
from labeldp.service.metrics import LabelsMetrics
from labeldp.service.settings import ApiKey

from ..context import LabelsContext


def labels_context(request: Request) -> LabelsContext:
    ctx: LabelsContext = request.app.state.ctx
    return ctx


def labels_metrics(request: Request) -> LabelsMetrics:
    metrics: LabelsMetrics = request.app.state.metrics
    return metrics


Context = Annotated[LabelsContext, Depends(labels_context)]
Metrics = Annotated[LabelsMetrics, Depends(labels_metrics)]
IdempotencyKey = Annotated[str | None, Depends(idempotency_key)]
ReleaseKey = Annotated[ApiKey, Depends(require_scope("release"))]
"""The caller's key where a route records it in the audit log (the router already requires the scope)."""
