"""Trainings: background jobs on a release's privatized labels × a feature table; their
state, list, cancel and event stream (docs/architecture.md, "Progress and events")."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from features_party import responses, store, training_request, trainings
from features_party.context import training_processes
from labeldp.service.events import EVENT_STREAM, STREAM_HEADERS, EventStreamResponse, event_stream, shutdown_flag
from labeldp.service.idempotency import request_fingerprint
from labeldp.service.openapi import errors, event_stream_ok, json_example, ok
from labeldp.service.pagination import DEFAULT_LIMIT

from .deps import Context, Cursor, IdempotencyKey, Limit, Order

router = APIRouter(prefix="/v1", tags=["trainings"])


@router.post(
    "/trainings",
    status_code=202,
    response_model=responses.TrainingQueued,
    summary="Start a training",
    description="Joins a release with a feature table (which must hold every id) and queues a training; "
    "options default to the benchmarked configuration. `Idempotency-Key` makes a retry safe. The join of a "
    "release of more than `LABELDP_TRAINING_JOIN_CHECK_ROWS` rows is checked by the training, not here: "
    "it fails with `unknown_ids`.",
    responses={
        **ok(responses.EXAMPLE_QUEUED, "queued", 202, {"Location": "the training's URL"},
             {"get_training": {"training_id": "$response.body#/id"}}),
        **errors(
            401, 404, 409, 413, 422, 429, 503,
            e404="release_not_found", e422="unknown_ids", e429="training_queue_full",
        ),
    },
    openapi_extra=json_example({"release_id": responses.REL, "feature_table_id": "ft_84a29ff790ea4943b002d959b8f2d3b6",
                                "epochs": 20, "batch_size": 256}),
)
def start_training(
    body: training_request.TrainingRequest, ctx: Context, response: Response, key: IdempotencyKey
) -> dict[str, Any]:
    scope = "POST /v1/trainings"
    # The body as sent (unset fields left out): which learning options were explicit matters.
    fingerprint = request_fingerprint(scope, body.model_dump_json(exclude_unset=True))
    stored = ctx.idempotency.execute(
        scope,
        key,
        fingerprint,
        lambda claim: trainings.create_training(
            ctx.sessions,
            ctx.store,
            body,
            claim,
            queue_max=ctx.settings.training_queue_max,
            retry_after=ctx.runner.board.retry_after_seconds,
            join_check_rows=ctx.settings.training_join_check_rows,
            processes=training_processes(ctx.settings),
        ),
    )
    if not stored.replayed:
        ctx.trainings.labels(status=store.QUEUED).inc()
        ctx.runner.submit(stored.body["id"])
    return stored.answer(response)


@router.get(
    "/trainings/{training_id}",
    response_model=responses.Training,
    summary="Read a training",
    description="Status, progress and per-epoch history; `model_id` once it succeeded.",
    responses={
        **ok(responses.EXAMPLE_TRAINING, "the training"),
        **errors(401, 404, 422, 503, e404="training_not_found"),
    },
)
def get_training(training_id: str, ctx: Context) -> responses.Training:
    with ctx.sessions() as session:
        return trainings.training_status(session, trainings.get_training(session, training_id), ctx.runner.board)


@router.get(
    "/trainings/{training_id}/history",
    response_model=responses.HistoryPage,
    summary="Page through a training's history",
    description="Its per-epoch losses, first epoch first (`order=desc`: last first), a page at a time (pass "
    "`next_cursor` back as `cursor`): "
    "what the training's `history` shows, for trainings with many epochs.",
    responses={
        **ok(responses.EXAMPLE_HISTORY_PAGE, "a page"),
        **errors(401, 404, 422, 503, e404="training_not_found", e422="invalid_cursor"),
    },
)
def training_history(
    training_id: str, ctx: Context, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None, order: Order = "asc"
) -> responses.HistoryPage:
    with ctx.sessions() as session:
        return trainings.training_history(session, training_id, limit, cursor, order)


@router.get(
    "/trainings",
    response_model=responses.TrainingPage,
    summary="List trainings",
    description="In creation order (the order the queue runs them; `order=desc`: newest first), optionally by "
    "status or release.",
    responses={
        **ok(responses.EXAMPLE_TRAINING_PAGE, "a page"),
        **errors(401, 422, 503, e422="invalid_status"),
    },
)
def list_trainings(
    ctx: Context,
    status: str | None = Query(None, max_length=16),
    release_id: str | None = Query(None, max_length=256),
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    order: Order = "asc",
) -> responses.TrainingPage:
    with ctx.sessions() as session:
        return trainings.list_trainings(session, limit, cursor, status, release_id, ctx.runner.board, order)


@router.post(
    "/trainings/{training_id}/cancel",
    response_model=responses.Training,
    summary="Cancel a training",
    description="A queued training is cancelled at once (200); a running one stops at its next batch "
    "boundary (202, `cancelling`, then `cancelled`) and leaves no model behind; one already over is a 409.",
    responses={
        **ok({**responses.EXAMPLE_TRAINING, "status": "cancelled", "model_id": None}, "cancelled"),
        **ok(responses.EXAMPLE_CANCELLING, "stops at the next batch", 202, model=responses.Training),
        **errors(401, 404, 409, 422, 503, e404="training_not_found", e409="training_finished"),
    },
)
def cancel_training(training_id: str, ctx: Context, response: Response) -> responses.Training:
    status_code, body = trainings.cancel_training(ctx.sessions, ctx.runner.board, training_id)
    if status_code == 200:  # cancelled while queued: the worker, which counts the others, never saw it
        ctx.trainings.labels(status=store.CANCELLED).inc()
    response.status_code = status_code
    return body


@router.get(
    "/trainings/{training_id}/events",
    summary="Follow a training",
    description="Server-Sent Events: a `training` event whenever its status, epoch or batch changes (with "
    "elapsed time, ETA and queue position), then `end` once it is over (`closing` if the server stops first).",
    response_class=EventStreamResponse,
    responses={
        **event_stream_ok(responses.EXAMPLE_TRAINING_EVENTS, "the event stream"),
        **errors(401, 404, 422, 503, by_ref=True, e404="training_not_found"),
    },
)
async def training_events(training_id: str, request: Request, ctx: Context) -> StreamingResponse:
    def poll() -> Any:
        return trainings.training_snapshot(ctx.sessions, ctx.runner.board, training_id)

    await run_in_threadpool(poll)  # 404 before the stream starts
    return StreamingResponse(
        event_stream(lambda: run_in_threadpool(poll), "training", stopping=shutdown_flag(request.app).is_set),
        media_type=EVENT_STREAM,
        headers=STREAM_HEADERS,
    )
