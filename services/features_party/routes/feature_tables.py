"""Feature tables: the publisher's features, keyed by example id (a CSV, Parquet or Arrow upload, or an
object URL)."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from features_party import feature_tables, responses
from labeldp.errors import InvalidInput, UnsupportedMediaType
from labeldp.service.idempotency import request_fingerprint
from labeldp.service.openapi import errors, file_body, ok, request_body
from labeldp.service.pagination import DEFAULT_LIMIT
from labeldp.service.spool import spool_body

from .deps import Context, Cursor, IdempotencyKey, Limit, Order

TableRef = Annotated[str, Path(
    max_length=64, description="the table's id (`ft_…`: that content; a replaced table has a new one): a name is 404 "
    "`feature_table_not_found` (find the id with `GET /v1/feature-tables?name=…`)",
)]

router = APIRouter(prefix="/v1", tags=["feature tables"])

CSV_TYPES = {"text/csv", "application/csv", "text/plain"}
PARQUET_TYPES = {"application/vnd.apache.parquet", "application/x-parquet"}
ARROW_TYPES = {"application/vnd.apache.arrow.file", "application/vnd.apache.arrow.stream"}
SNIFFED_TYPES = {"application/octet-stream", ""}
"""Sent as bytes: the format comes from ``format`` or the body's first bytes."""
FORMAT_OF = {
    **dict.fromkeys(CSV_TYPES, feature_tables.CSV),
    **dict.fromkeys(PARQUET_TYPES, feature_tables.PARQUET),
    **dict.fromkeys(ARROW_TYPES, feature_tables.ARROW),
}


_BODY = request_body(
    file_body(("csv", "parquet", "arrow"), "id,age,city\nu001,31,paris\nu002,45,lyon\n"),
    "the table as CSV (header first), Parquet or Arrow IPC (file or stream), sent as "
    "`application/octet-stream` (`format` or its first bytes tell which), `text/csv`, "
    "`application/vnd.apache.parquet` or `application/vnd.apache.arrow.stream`; empty with `source`",
)
_ID_COLUMN = Query("id", min_length=1, max_length=256,
                   description="the file's column holding the ids (a column it lacks: 422 `missing_id_column`)")
_SOURCE = Query(None, max_length=2048, description="an object URL to read the table from")
_FORMAT = Query(None, alias="format", description="csv, parquet or arrow (default: from the content type or the bytes)")


@router.post(
    "/feature-tables",
    status_code=201,
    response_model=responses.FeatureTable,
    summary="Upload a feature table",
    description="A table with an id column and the features: a CSV (header first), Parquet or Arrow IPC body, "
    "read a batch at a time, never whole; or, with `source`, an object URL under a prefix the operator allows "
    "(`LABELDP_FEATURE_SOURCES`) and no body. Kinds are inferred (name `categorical`/`numeric` to override); "
    "ids stay strings. `Idempotency-Key` makes a retry safe.",
    responses={
        **ok(responses.EXAMPLE_TABLE, "stored", 201, {"Location": "the table's URL"},
             {"get_feature_table": {"feature_table_id": "$response.body#/id"}}),
        **errors(401, 409, 413, 415, 422, 503, e409="feature_table_exists", e422="invalid_csv"),
    },
    openapi_extra=_BODY,
)
async def upload_feature_table(
    request: Request,
    ctx: Context,
    response: Response,
    key: IdempotencyKey,
    name: str = Query(...),
    id_column: str = _ID_COLUMN,
    categorical: str | None = Query(None),
    numeric: str | None = Query(None),
    source: str | None = _SOURCE,
    format_: str | None = _FORMAT,
) -> dict[str, Any]:
    return await _upload(request, ctx, response, key, name, id_column, categorical, numeric, source, format_,
                         replace=False)


@router.put(
    "/feature-tables/{feature_table_id}",
    response_model=responses.FeatureTable,
    summary="Replace a feature table",
    description="The same upload as `POST /v1/feature-tables` (body or `source`, the same checks), put in place of "
    "the table's rows in one step: readers see the old table or the new one. The table gets a new `ft_` id; "
    "models already trained keep working. 409 `feature_table_in_use` while a training that has not finished "
    "reads it.",
    responses={
        **ok(responses.EXAMPLE_TABLE, "replaced",
             links={"get_feature_table": {"feature_table_id": "$response.body#/id"}}),
        **errors(401, 404, 409, 413, 415, 422, 503, e404="feature_table_not_found", e409="feature_table_in_use",
                 e422="invalid_csv"),
    },
    openapi_extra=_BODY,
)
async def replace_feature_table(
    feature_table_id: TableRef,
    request: Request,
    ctx: Context,
    response: Response,
    key: IdempotencyKey,
    id_column: str = _ID_COLUMN,
    categorical: str | None = Query(None),
    numeric: str | None = Query(None),
    source: str | None = _SOURCE,
    format_: str | None = _FORMAT,
) -> dict[str, Any]:
    with ctx.sessions() as session:  # the table the id names now (404 once it was replaced), by its name
        name = feature_tables.get_feature_table_by_id(session, feature_table_id).name
    return await _upload(request, ctx, response, key, name, id_column, categorical, numeric, source, format_,
                         replace=True)


async def _upload(
    request: Request, ctx: Context, response: Response, key: str | None, name: str, id_column: str,
    categorical: str | None, numeric: str | None, source: str | None, format_: str | None, *, replace: bool,
) -> dict[str, Any]:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type not in FORMAT_OF and content_type not in SNIFFED_TYPES:
        raise UnsupportedMediaType(
            "unsupported_media_type", "send the table as text/csv, application/vnd.apache.parquet or an Arrow IPC type"
        )
    fmt = format_ or FORMAT_OF.get(content_type)
    if fmt is not None and fmt not in feature_tables.FORMATS:
        raise InvalidInput("invalid_format", f"format must be one of {', '.join(feature_tables.FORMATS)}")
    cats, nums = feature_tables.split_names(categorical), feature_tables.split_names(numeric)
    scope = f"PUT /v1/feature-tables/{name}" if replace else "POST /v1/feature-tables"
    query = json.dumps({"name": name, "id_column": id_column, "categorical": cats, "numeric": nums,
                        "source": source, "format": fmt})
    settings = ctx.settings
    if source is not None:
        if await request.body():
            raise InvalidInput("invalid_request", "send either a body or a source URL, not both")
        table = feature_tables.reference_source(
            source, settings.feature_sources, fmt,
            endpoint_override=settings.storage_s3_endpoint or None, region=settings.storage_s3_region or None,
            access_key=settings.storage_s3_access_key or None, secret_key=settings.storage_s3_secret_key or None,
        )
        digest = hashlib.sha256(b"").hexdigest()
        body = None
    else:
        body = await spool_body(request, ctx.spool_dir)
        table, digest = feature_tables.local_source(body.path, fmt), body.sha256
    write = feature_tables.replace_feature_table if replace else feature_tables.create_feature_table
    try:
        stored = await run_in_threadpool(
            ctx.idempotency.execute,
            scope,
            key,
            request_fingerprint(scope, query, digest),
            lambda claim: write(
                ctx.sessions, ctx.store, ctx.spool_dir, name, table, id_column, cats, nums, claim,
                settings.training_join_partition_rows,
            ),
        )
    finally:
        if body is not None:
            body.discard()
    return stored.answer(response)


@router.delete(
    "/feature-tables/{feature_table_id}",
    response_model=responses.Deleted,
    summary="Delete a feature table",
    description="Its row and its stored rows. Models already trained on it keep working (they hold what they "
    "learned); predictions by id then need another table. 409 `feature_table_in_use` while a training that has "
    "not finished reads it.",
    responses={
        **ok(responses.EXAMPLE_DELETED, "deleted"),
        **errors(401, 404, 409, 422, 503, e404="feature_table_not_found", e409="feature_table_in_use"),
    },
)
def delete_feature_table(feature_table_id: TableRef, ctx: Context) -> responses.Deleted:
    with ctx.sessions() as session:
        name = feature_tables.get_feature_table_by_id(session, feature_table_id).name
    return feature_tables.delete_feature_table(ctx.sessions, ctx.store, name)


@router.get(
    "/feature-tables/{feature_table_id}",
    response_model=responses.FeatureTable,
    summary="Read a feature table",
    description="Its id, name, size, id column and feature columns with their kinds.",
    responses={
        **ok(responses.EXAMPLE_TABLE, "the table"),
        **errors(401, 404, 422, 503, e404="feature_table_not_found"),
    },
)
def get_feature_table(feature_table_id: TableRef, ctx: Context) -> responses.FeatureTable:
    with ctx.sessions() as session:
        return feature_tables.describe(feature_tables.get_feature_table_by_id(session, feature_table_id))


@router.get(
    "/feature-tables",
    response_model=responses.FeatureTablePage,
    summary="List feature tables",
    description="Oldest first (`order=desc`: newest first); a cursor page (`next_cursor` null on the last page).",
    responses={
        **ok(responses.EXAMPLE_TABLE_PAGE, "a page"),
        **errors(401, 422, 503, e422="invalid_cursor"),
    },
)
def list_feature_tables(
    ctx: Context, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None, order: Order = "asc",
    name: str | None = Query(None, max_length=64, description="only the table of this name"),
) -> responses.FeatureTablePage:
    with ctx.sessions() as session:
        return feature_tables.list_feature_tables(session, limit, cursor, order, name)
