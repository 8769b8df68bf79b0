"""Feature tables: the publisher's features, keyed by example id (a CSV upload)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from features_party import feature_tables, responses
from labeldp.errors import UnsupportedMediaType
from labeldp.service.idempotency import request_fingerprint
from labeldp.service.openapi import errors, file_body, ok, request_body
from labeldp.service.pagination import DEFAULT_LIMIT

from .deps import Context, Cursor, IdempotencyKey, Limit

router = APIRouter(prefix="/v1", tags=["feature tables"])

CSV_TYPES = {"text/csv", "application/csv", "text/plain", "application/octet-stream"}


@router.post(
    "/feature-tables",
    status_code=201,
    response_model=responses.FeatureTable,
    summary="Upload a feature table",
    description="A CSV with an id column and the features; kinds are inferred (name `categorical`/`numeric` "
    "to override). Ids stay strings. `Idempotency-Key` makes a retry safe.",
    responses={
        **ok(responses.EXAMPLE_TABLE, "stored", 201, {"Location": "the table's URL"},
             {"get_feature_table": {"name": "$response.body#/name"}}),
        **errors(401, 409, 413, 415, 422, 503, e409="feature_table_exists", e422="invalid_csv"),
    },
    openapi_extra=request_body(
        file_body(("csv",), "id,age,city\nu001,31,paris\nu002,45,lyon\n"),
        "the table as CSV, header first, sent as `application/octet-stream` or `text/csv`",
    ),
)
async def upload_feature_table(
    request: Request,
    ctx: Context,
    response: Response,
    key: IdempotencyKey,
    name: str = Query(...),
    id_column: str = Query("id"),
    categorical: str | None = Query(None),
    numeric: str | None = Query(None),
) -> dict[str, Any]:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type and content_type not in CSV_TYPES:
        raise UnsupportedMediaType("unsupported_media_type", "send the table as text/csv")
    body = await request.body()
    cats, nums = feature_tables.split_names(categorical), feature_tables.split_names(numeric)
    scope = "POST /v1/feature-tables"
    query = json.dumps({"name": name, "id_column": id_column, "categorical": cats, "numeric": nums})
    stored = await run_in_threadpool(
        ctx.idempotency.execute,
        scope,
        key,
        request_fingerprint(scope, query, hashlib.sha256(body).hexdigest()),
        lambda claim: feature_tables.create_feature_table(
            ctx.sessions, ctx.data_dir, name, body, id_column, cats, nums, claim
        ),
    )
    return stored.answer(response)


@router.get(
    "/feature-tables/{name}",
    response_model=responses.FeatureTable,
    summary="Read a feature table",
    description="Its id, size, id column and feature columns with their kinds.",
    responses={
        **ok(responses.EXAMPLE_TABLE, "the table"),
        **errors(401, 404, 422, 503, e404="feature_table_not_found"),
    },
)
def get_feature_table(name: str, ctx: Context) -> dict[str, Any]:
    with ctx.sessions() as session:
        return feature_tables.describe(feature_tables.get_feature_table(session, name))


@router.get(
    "/feature-tables",
    response_model=responses.FeatureTablePage,
    summary="List feature tables",
    description="Oldest first; a cursor page (`next_cursor` null on the last page).",
    responses={
        **ok(responses.EXAMPLE_TABLE_PAGE, "a page"),
        **errors(401, 422, 503, e422="invalid_cursor"),
    },
)
def list_feature_tables(ctx: Context, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None) -> dict[str, Any]:
    with ctx.sessions() as session:
        return feature_tables.list_feature_tables(session, limit, cursor)
