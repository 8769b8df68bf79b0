"""What the features party's handlers receive through ``Depends``: the context the app built
at start (``app.state.ctx``), the validated ``Idempotency-Key`` and the list parameters."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request

from labeldp.service.idempotency import idempotency_key
from labeldp.service.pagination import MAX_LIMIT, OrderQuery

from ..context import AppContext


def app_context(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


Context = Annotated[AppContext, Depends(app_context)]
IdempotencyKey = Annotated[str | None, Depends(idempotency_key)]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="items per page")]
Cursor = Annotated[str | None, Query(max_length=400, description="next_cursor of the previous page")]
Order = OrderQuery
