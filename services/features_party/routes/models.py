"""Models: their cards and lists, predictions (JSON and Parquet batches) and the export of
the trained graph (features_party.model_delivery; docs/architecture.md, "Training at scale")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, StreamingResponse
from starlette.background import BackgroundTask

from features_party import model_delivery, models, responses, store
from labeldp.errors import UnsupportedMediaType
from labeldp.service.openapi import BINARY, OCTET_STREAM, errors, file_ok, json_example, ok, request_body
from labeldp.service.pagination import DEFAULT_LIMIT
from labeldp.service.spool import spool_body

from .deps import Context, Cursor, Limit, Order

router = APIRouter(prefix="/v1", tags=["models"])


@router.get(
    "/models/{model_id}",
    response_model=responses.ModelCard,
    summary="Read a model card",
    description="Task, data, privacy cost (ε, accounting, mechanism), fit and what model selection chose.",
    responses={
        **ok(responses.EXAMPLE_MODEL, "the card"),
        **errors(401, 404, 422, 503, e404="model_not_found"),
    },
)
def get_model(model_id: str, ctx: Context) -> responses.ModelCard:
    with ctx.sessions() as session:
        row = models.get_model(session, model_id)
        training = session.get(store.Training, row.training_id)
    try:
        loaded = ctx.model_cache.get(row)  # the card's selection fields live in the model file
    except (OSError, ValueError, RuntimeError):
        loaded = None
    return models.model_card(row, training, loaded)


@router.get(
    "/models",
    response_model=responses.ModelPage,
    summary="List model cards",
    description="Oldest first (`order=desc`: newest first), optionally of one release.",
    responses={
        **ok(responses.EXAMPLE_MODEL_PAGE, "a page"),
        **errors(401, 422, 503, e422="invalid_cursor"),
    },
)
def list_models(
    ctx: Context,
    release_id: str | None = Query(None, max_length=256),
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    order: Order = "asc",
) -> responses.ModelPage:
    with ctx.sessions() as session:
        return models.list_models(session, limit, cursor, release_id, order)


@router.post(
    "/models/{model_id}/predict",
    response_model=responses.Predictions,
    response_model_exclude_unset=True,  # a regressor's answer has no `probabilities` or `classes`
    summary="Predict",
    description="For ids of the model's feature table, or for rows given as `{feature: value}`.",
    responses={
        **ok(responses.EXAMPLE_PREDICTIONS, "one prediction per id or row"),
        **errors(401, 404, 413, 422, 503, e404="model_not_found", e422="invalid_rows"),
    },
    openapi_extra=json_example({"ids": ["u001", "u002"]}),
)
def predict(model_id: str, body: models.PredictRequest, ctx: Context) -> responses.Predictions:
    return models.predict(ctx.sessions, ctx.store, ctx.model_cache, model_id, body)


@router.get(
    "/models/{model_id}/export",
    summary="Download a model as ONNX or TorchScript",
    description="The trained network as a file another runtime loads: ONNX (opset 17, dynamic batch) or "
    "TorchScript. Inputs `numeric` (standardized float32) and `categorical` (int64 codes); the preprocessor "
    "and post-processing that surround the graph are embedded as JSON (ONNX `metadata_props[\"labeldp\"]`, "
    "TorchScript extra file `labeldp.json`).",
    response_class=StreamingResponse,
    responses={
        **file_ok("application/octet-stream", "<the model file's bytes>", "the model file"),
        **errors(401, 404, 409, 422, 503, 507, by_ref=True, e404="model_not_found", e409="model_unavailable",
                 e422="model_not_exportable"),  # 507: the first request stores the export
    },
)
async def download_model(
    model_id: str,
    ctx: Context,
    fmt: Literal["onnx", "torchscript"] = Query("onnx", alias="format", description="`onnx` or `torchscript`"),
) -> StreamingResponse:
    key = await run_in_threadpool(
        model_delivery.exported_object, ctx.sessions, ctx.store, ctx.spool_dir, model_id, fmt
    )
    size = await run_in_threadpool(ctx.store.size, key)
    reader = await run_in_threadpool(ctx.store.open_input_stream, key)
    name = model_delivery.export_filename(model_id, fmt)
    return StreamingResponse(
        _chunks(reader), media_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="{name}"', "Content-Length": str(size)},
    )


def _chunks(reader: Any, size: int = 1 << 20) -> Iterator[bytes]:
    """An object's bytes a block at a time (Starlette runs this in its thread pool), then closed."""
    with reader:
        while block := reader.read(size):
            yield bytes(block)


@router.post(
    "/models/{model_id}/predictions",
    summary="Predict a Parquet file",
    description="A Parquet upload in, a Parquet file of predictions out, a batch at a time (bodies up to "
    "`LABELDP_PREDICTION_MAX_BODY_BYTES`). With `feature_table_id` the upload holds ids (column `id_column`) "
    "looked up in that feature table; without it, the model's feature columns. The answer has the id column "
    "(when the upload has one), `prediction`, and `p_<class>` per class for a classifier. Errors name counts "
    "and columns, never ids or values.",
    response_class=FileResponse,
    responses={
        **file_ok(model_delivery.PARQUET, "<Parquet bytes: id, prediction>", "one prediction per input row"),
        **errors(401, 404, 409, 413, 415, 422, 503, by_ref=True, e404="model_not_found",
                 e409="model_unavailable", e422="unknown_ids"),
    },
    openapi_extra=request_body(
        {OCTET_STREAM: (BINARY, None)},
        f"a Parquet file of ids or of feature rows, sent as `{OCTET_STREAM}` or `{model_delivery.PARQUET}`",
    ),
)
async def predict_batch(
    model_id: str,
    request: Request,
    ctx: Context,
    feature_table_id: str | None = Query(
        None, max_length=64, description="`ft_…`: look the upload's ids up in this feature table"
    ),
    id_column: str = Query("id", min_length=1, max_length=256, description="the upload's id column"),
) -> FileResponse:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type not in model_delivery.PARQUET_TYPES:
        raise UnsupportedMediaType("unsupported_media_type", f"send the rows as {model_delivery.PARQUET}")

    def known() -> None:
        with ctx.sessions() as session:
            models.get_model(session, model_id)

    await run_in_threadpool(known)  # 404 before reading a large body
    body = await spool_body(request, ctx.spool_dir)
    try:
        output = await run_in_threadpool(
            model_delivery.predict_upload, ctx.sessions, ctx.store, ctx.model_cache, model_id, body.path,
            feature_table_id, id_column,
        )
    finally:
        body.discard()
    return FileResponse(
        output, media_type=model_delivery.PARQUET, filename=f"predictions-{model_id}.parquet",
        background=BackgroundTask(output.unlink, missing_ok=True),
    )
