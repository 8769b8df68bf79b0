"""Resumable uploads: create, send parts, see what arrived, complete (labels_party.resumable)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Path, Request, Response
from fastapi.concurrency import run_in_threadpool

from labeldp.service.idempotency import request_fingerprint
from labeldp.service.openapi import BINARY, errors, json_example, ok, request_body
from labeldp.service.spool import spool_body

from .. import resumable
from ..responses import EXAMPLE_LABEL_SET, EXAMPLE_UPLOAD, UP, Upload, UploadCompleted, UploadPart
from .deps import Context, IdempotencyKey, Metrics

log = logging.getLogger("labeldp.labels")

router = APIRouter(prefix="/v1", tags=["label sets"])


@router.post(
    "/label-sets/{label_set_id}/uploads",
    status_code=201,
    response_model=Upload,
    summary="Start a resumable upload",
    description="For files too large for one request (10⁹ labels): send the file's bytes as numbered parts "
    "(`PUT /v1/uploads/{upload_id}/parts/{number}`), each stored as an object any replica can read, then "
    "complete. A client that lost its connection asks which parts arrived and sends only the others.",
    responses={
        **ok(EXAMPLE_UPLOAD | {"parts": [], "missing_below_highest": []}, "upload created", 201,
             {"Location": "the upload's URL"}),
        **errors(401, 404, 413, 422, 503, e404="label_set_not_found"),
    },
    openapi_extra=json_example({"target": "labels", "format": "parquet"}),
)
def create_upload(label_set_id: str, body: resumable.UploadCreate, ctx: Context, response: Response) -> Upload:
    out = resumable.create_upload(ctx, label_set_id, body)
    response.headers["Location"] = f"/v1/uploads/{out.id}"
    return out


@router.get(
    "/uploads/{upload_id}",
    response_model=Upload,
    summary="Read a resumable upload",
    description="Its parts received so far (number and size) and the numbers missing below the highest.",
    responses={**ok(EXAMPLE_UPLOAD, "the upload"), **errors(401, 404, 422, 503, e404="upload_not_found")},
)
def get_upload(upload_id: str, ctx: Context) -> Upload:
    return resumable.get_upload(ctx, upload_id)


@router.put(
    "/uploads/{upload_id}/parts/{number}",
    response_model=UploadPart,
    summary="Send one part of a resumable upload",
    description="The bytes of part `number` (from 1): the file is the parts joined in number order. Sending a "
    "part again replaces it. At most `part_max_bytes` bytes each.",
    responses={
        **ok({"upload_id": UP, "number": 1, "size": 67108864}, "part stored"),
        **errors(401, 404, 409, 413, 422, 503, e404="upload_not_found", e409="upload_completed"),
    },
    openapi_extra=request_body({"application/octet-stream": (BINARY, None)}, "the part's bytes"),
)
async def put_part(
    upload_id: str, request: Request, ctx: Context, number: int = Path(ge=1, le=100_000)
) -> UploadPart:
    body = await spool_body(request, ctx.spool_dir)  # then one object in the store; the spool is removed
    try:
        return await run_in_threadpool(resumable.put_part, ctx, upload_id, number, body.path, body.size)
    finally:
        body.discard()


@router.post(
    "/uploads/{upload_id}/complete",
    response_model=UploadCompleted,
    summary="Complete a resumable upload",
    description="Parts 1 to `parts` joined are validated exactly as one body of those bytes (all rows or none; "
    "errors name rows from 1 across the whole file); 422 `upload_parts_missing` lists the parts still to send.",
    responses={
        **ok({"upload_id": UP, "target": "ids", "label_set": EXAMPLE_LABEL_SET, "labels": None}, "completed"),
        **errors(401, 404, 409, 413, 422, 503, e404="upload_not_found", e422="upload_parts_missing"),
    },
    openapi_extra=json_example({"parts": 16}),
)
def complete_upload(
    upload_id: str, body: resumable.UploadComplete, ctx: Context, metrics: Metrics, response: Response,
    key: IdempotencyKey,
) -> dict[str, Any]:
    scope = f"POST /v1/uploads/{upload_id}/complete"
    stored = ctx.idempotency.execute(
        scope, key, request_fingerprint(scope, body.model_dump_json()),
        lambda claim: resumable.complete_upload(ctx, upload_id, body, claim),
    )
    labels = stored.body.get("labels")
    if not stored.replayed and labels and not labels["validate_only"]:
        metrics.uploaded_labels.inc(labels["accepted_rows"])
        log.info("label set %s: %d labels stored (resumable upload)", labels["label_set_id"], labels["accepted_rows"])
    return stored.answer(response)
