"""Label sets: create, list, read, delete their raw labels, and upload their ids and labels.

Uploads are read as a stream to disk (labeldp.service.spool), never whole into memory; the
domain functions (labels_party.uploads) then read the spooled file in batches.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from labeldp.service.idempotency import request_fingerprint
from labeldp.service.openapi import (
    UploadFormat,
    errors,
    file_body,
    format_query,
    json_example,
    ok,
    request_body,
    upload_media_type,
)
from labeldp.service.pagination import DEFAULT_LIMIT, MAX_LIMIT, OrderQuery
from labeldp.service.spool import spool_body

from .. import label_sets, responses, sources, uploads
from .deps import Context, IdempotencyKey, Metrics, ReleaseKey

log = logging.getLogger("labeldp.labels")

router = APIRouter(prefix="/v1", tags=["label sets"])

_LABEL_SET = {"label_set_id": "$response.body#/id"}
_LINKS = dict.fromkeys(
    ("get_label_set", "upload_ids", "upload_labels", "create_release", "delete_labels", "list_releases",
     "list_label_set_releases", "delete_label_set"), _LABEL_SET
)
_IDS_JSON = {"type": "object", "properties": {"ids": {"type": "array", "items": {"type": ["string", "integer"]}}},
             "required": ["ids"]}
_LABELS_JSON = {
    "type": "object",
    "properties": {
        "ids": {"type": "array", "items": {"type": ["string", "integer"]}},
        "labels": {"type": "array", "items": {"type": ["number", "string", "null"]}},
        "rows": {"type": "array", "items": {"type": "object"}},
    },
}
_FORMATS = ("csv", "parquet", "arrow")
_FORMAT = Query(None, alias="format", description=format_query(_FORMATS))
_ID_COLUMN = Query(None, min_length=1, max_length=uploads.MAX_COLUMN_NAME,
                   description="the column (or JSON rows' key) holding the ids, if not `id`")
_LABEL_COLUMN = Query(None, min_length=1, max_length=uploads.MAX_COLUMN_NAME,
                      description="the column (or JSON rows' key) holding the labels, if not `label`")


@router.post(
    "/label-sets",
    status_code=201,
    response_model=responses.LabelSet,
    summary="Create a label set",
    description="Public ids (inline, up to 10⁶, or uploaded later to `/ids`) and the rules their labels "
    "follow; it charges its privacy domain's per-id ledger. `Idempotency-Key` makes a retry safe.",
    responses={
        **ok(responses.EXAMPLE_LABEL_SET, "created", 201, {"Location": "the set's URL"}, _LINKS),
        **errors(401, 403, 404, 409, 413, 422, 503, e404="privacy_domain_not_found"),
    },
    openapi_extra=json_example(
        {"name": "spend", "label_type": "real", "domain": {"low": 0, "high": 10}, "privacy_domain": responses.PD,
         "ids": ["u001", "u002", "u003"]}
    ),
)
def create_label_set(
    body: label_sets.LabelSetCreate, ctx: Context, response: Response, key: IdempotencyKey, caller: ReleaseKey
) -> dict[str, Any]:
    scope = "POST /v1/label-sets"
    stored = ctx.idempotency.execute(
        scope,
        key,
        request_fingerprint(scope, body.model_dump_json()),
        lambda claim: label_sets.create_label_set(ctx, body, claim, caller),
    )
    log.info("label set created")
    return stored.answer(response)


@router.get(
    "/label-sets",
    response_model=responses.LabelSetPage,
    summary="List label sets",
    description="Oldest first (`order=desc`: newest first), a page at a time: pass `next_cursor` back as `cursor`.",
    responses={
        **ok(responses.EXAMPLE_LABEL_SET_PAGE, "a page"),
        **errors(401, 403, 422, 503, e422="invalid_cursor"),
    },
)
def list_label_sets(
    ctx: Context,
    limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
    cursor: str | None = Query(None, max_length=400),
    order: OrderQuery = "asc",
    name: str | None = Query(None, max_length=200, description="only the sets of this name (names are not unique)"),
) -> responses.LabelSetPage:
    return label_sets.list_label_sets(ctx, limit, cursor, order, name)


@router.delete(
    "/label-sets/{label_set_id}/labels",
    response_model=responses.LabelSet,
    summary="Delete a label set's raw labels",
    description="Once spent, raw labels need not be kept: ids, the ledger and the releases stay; no further "
    "release of the set is possible.",
    responses={
        **ok({**responses.EXAMPLE_LABEL_SET, "labels_deleted": True}, "labels deleted"),
        **errors(401, 403, 404, 409, 422, 503, e404="label_set_not_found"),
    },
)
def delete_labels(label_set_id: str, ctx: Context, caller: ReleaseKey) -> responses.LabelSet:
    out = label_sets.delete_labels(ctx, label_set_id, caller)
    log.info("label set %s: raw labels deleted", label_set_id)
    return out


@router.delete(
    "/label-sets/{label_set_id}",
    response_model=responses.Deleted,
    summary="Delete a label set",
    description="A set no release was made from (a mistaken upload, a test): its row, ids and labels go; the "
    "privacy domain's per-id ledger is untouched. A set with any release is 409 `label_set_in_use` (delete its "
    "raw labels instead).",
    responses={
        **ok(responses.EXAMPLE_DELETED, "deleted"),
        **errors(401, 403, 404, 409, 422, 503, e404="label_set_not_found", e409="label_set_in_use"),
    },
)
def delete_label_set(label_set_id: str, ctx: Context) -> responses.Deleted:
    label_sets.delete_label_set(ctx, label_set_id)
    log.info("label set %s deleted", label_set_id)
    return responses.Deleted(id=label_set_id, deleted=True)


@router.get(
    "/label-sets/{label_set_id}",
    response_model=responses.LabelSet,
    summary="Read a label set",
    description="Counts, budget (total, spent, remaining: the least any of its ids has left) and releases.",
    responses={
        **ok(responses.EXAMPLE_LABEL_SET, "the label set"),
        **errors(401, 403, 404, 422, 503, e404="label_set_not_found"),
    },
)
def get_label_set(label_set_id: str, ctx: Context) -> responses.LabelSet:
    return label_sets.get_label_set(ctx, label_set_id)


@router.post(
    "/label-sets/{label_set_id}/ids",
    response_model=responses.LabelSet,
    summary="Upload a label set's ids",
    description="Once, for a set created without ids (up to 10⁹): an `id` column as CSV, Parquet or Arrow IPC, "
    "or JSON `{\"ids\": [...]}`; `id_column` names another column. Streamed to disk, sorted once (the release "
    "order).",
    responses={
        **ok(responses.EXAMPLE_LABEL_SET, "ids stored"),
        **errors(401, 403, 404, 409, 413, 415, 422, 503, e409="ids_already_set", e422="duplicate_ids"),
    },
    openapi_extra=request_body(
        {
            "application/json": (_IDS_JSON, {"ids": ["u001", "u002"]}),
            **file_body(_FORMATS, "id\nu001\nu002\n"),
        },
        "the ids: a column named `id`",
    ),
)
async def upload_ids(
    label_set_id: str,
    request: Request,
    ctx: Context,
    response: Response,
    key: IdempotencyKey,
    upload_format: UploadFormat | None = _FORMAT,
    id_column: str | None = _ID_COLUMN,
) -> dict[str, Any]:
    content_type = upload_media_type(request.headers.get("content-type", ""), upload_format)
    uploads.media_type(content_type)  # 415 before reading the body
    names = uploads.Columns.of(id_column)
    body = await spool_body(request, ctx.spool_dir)
    try:
        scope = f"POST /v1/label-sets/{label_set_id}/ids"
        stored = await run_in_threadpool(
            ctx.idempotency.execute,
            scope,
            key,
            request_fingerprint(scope, content_type, body.sha256, *_named(id_column)),
            lambda claim: uploads.upload_ids(ctx, label_set_id, body.path, content_type, claim, names),
        )
    finally:
        body.discard()
    return stored.answer(response)


@router.post(
    "/label-sets/{label_set_id}/labels",
    response_model=responses.LabelsUploaded,
    summary="Upload labels",
    description="All rows or none: every row is validated against the set's ids and rules; errors name the "
    "row (from 1) and the id, never the value. `validate_only=true` checks without storing. `id_column` and "
    "`label_column` name the file's own columns (a named column it lacks: 422 `unknown_column`).",
    responses={
        **ok(responses.EXAMPLE_UPLOADED, "labels stored (or validated)"),
        **errors(401, 403, 404, 409, 413, 415, 422, 503, e409="ids_missing", e422="invalid_labels"),
    },
    openapi_extra=request_body(
        {
            "application/json": (_LABELS_JSON, {"ids": ["u001", "u002"], "labels": [3.5, 0]}),
            **file_body(_FORMATS, "id,label\nu001,3.5\nu002,0\n"),
        },
        "columns `id` and `label` (or as `id_column`/`label_column` name them); JSON also as "
        "`{\"rows\": [{\"id\", \"label\"}]}`",
    ),
)
async def upload_labels(
    label_set_id: str,
    request: Request,
    ctx: Context,
    metrics: Metrics,
    response: Response,
    key: IdempotencyKey,
    validate_only: bool = Query(False),
    upload_format: UploadFormat | None = _FORMAT,
    id_column: str | None = _ID_COLUMN,
    label_column: str | None = _LABEL_COLUMN,
) -> dict[str, Any]:
    content_type = upload_media_type(request.headers.get("content-type", ""), upload_format)
    uploads.media_type(content_type)  # 415 before reading the body
    names = uploads.Columns.of(id_column, label_column)
    body = await spool_body(request, ctx.spool_dir)
    try:
        scope = f"POST /v1/label-sets/{label_set_id}/labels"
        stored = await run_in_threadpool(
            ctx.idempotency.execute,
            scope,
            key,
            request_fingerprint(scope, content_type, str(validate_only), body.sha256,
                                *_named(id_column, label_column)),
            lambda claim: uploads.upload_labels(
                ctx, label_set_id, body.path, content_type, validate_only=validate_only, claim=claim, names=names
            ),
        )
    finally:
        body.discard()
    if not stored.replayed and not validate_only:
        metrics.uploaded_labels.inc(stored.body["accepted_rows"])
        log.info("label set %s: %d labels stored", label_set_id, stored.body["accepted_rows"])
    return stored.answer(response)


@router.post(
    "/label-sets/{label_set_id}/ids/from-url",
    response_model=responses.LabelSet,
    summary="Upload a label set's ids by reference",
    description="The service reads an `id` column (CSV, Parquet or Arrow IPC) from an object URL under one of "
    "its operator's `LABELDP_UPLOAD_SOURCES` prefixes, a batch at a time: no request body limit. Otherwise as "
    "`POST /ids`.",
    responses={
        **ok(responses.EXAMPLE_LABEL_SET, "ids stored"),
        **errors(401, 404, 409, 413, 415, 422, 503, e404="upload_source_not_found", e422="upload_source_not_allowed"),
    },
    openapi_extra=json_example({"url": "s3://advertiser-exports/conversions/ids.parquet", "format": "parquet"}),
)
def upload_ids_from_url(
    label_set_id: str, body: sources.SourceIn, ctx: Context, response: Response, key: IdempotencyKey,
    id_column: str | None = _ID_COLUMN,
) -> dict[str, Any]:
    scope = f"POST /v1/label-sets/{label_set_id}/ids/from-url"
    names = uploads.Columns.of(id_column)
    stored = ctx.idempotency.execute(
        scope,
        key,
        request_fingerprint(scope, body.model_dump_json(), *_named(id_column)),
        lambda claim: uploads.upload_ids(
            ctx, label_set_id, sources.open_source(ctx.settings, body.url), body.media_type, claim, names
        ),
    )
    return stored.answer(response)


@router.post(
    "/label-sets/{label_set_id}/labels/from-url",
    response_model=responses.LabelsUploaded,
    summary="Upload labels by reference",
    description="The service reads columns `id` and `label` (CSV, Parquet or Arrow IPC) from an object URL under "
    "one of its operator's `LABELDP_UPLOAD_SOURCES` prefixes, a batch at a time. Validated as `POST /labels`: "
    "all rows or none.",
    responses={
        **ok(responses.EXAMPLE_UPLOADED, "labels stored (or validated)"),
        **errors(401, 404, 409, 413, 415, 422, 503, e404="upload_source_not_found", e422="upload_source_not_allowed"),
    },
    openapi_extra=json_example({"url": "s3://advertiser-exports/conversions/labels.parquet", "format": "parquet"}),
)
def upload_labels_from_url(
    label_set_id: str,
    body: sources.SourceIn,
    ctx: Context,
    metrics: Metrics,
    response: Response,
    key: IdempotencyKey,
    validate_only: bool = Query(False),
    id_column: str | None = _ID_COLUMN,
    label_column: str | None = _LABEL_COLUMN,
) -> dict[str, Any]:
    scope = f"POST /v1/label-sets/{label_set_id}/labels/from-url"
    names = uploads.Columns.of(id_column, label_column)
    stored = ctx.idempotency.execute(
        scope,
        key,
        request_fingerprint(scope, str(validate_only), body.model_dump_json(), *_named(id_column, label_column)),
        lambda claim: uploads.upload_labels(
            ctx, label_set_id, sources.open_source(ctx.settings, body.url), body.media_type,
            validate_only=validate_only, claim=claim, names=names,
        ),
    )
    if not stored.replayed and not validate_only:
        metrics.uploaded_labels.inc(stored.body["accepted_rows"])
        log.info("label set %s: %d labels stored (by reference)", label_set_id, stored.body["accepted_rows"])
    return stored.answer(response)


def _named(*columns: str | None) -> list[str]:
    """The column names a request gave, for its idempotency fingerprint (none: the fingerprint is as before)."""
    return [] if all(c is None for c in columns) else ["columns", *(c or "" for c in columns)]
