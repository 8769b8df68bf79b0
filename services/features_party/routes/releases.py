"""Releases the inbox received complete: the reads of what it stored (metadata, privatized
labels, lists), authenticated by the publisher's API key. The inbox itself is routes.inbox."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Literal

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask

from features_party import inbox, responses
from labeldp.service.openapi import BINARY, OCTET_STREAM, errors, ok
from labeldp.service.pagination import DEFAULT_LIMIT
from labeldp.signing import header_key_id

from .deps import Context, Cursor, Limit, Order

log = logging.getLogger("labeldp.features")

router = APIRouter(prefix="/v1", tags=["releases"])

@router.get(
    "/releases/{release_id}",
    response_model=responses.ReceivedRelease,
    summary="Read a received release",
    description="The message's metadata: mechanism, prior, accounting, rows, digest.",
    responses={
        **ok(responses.EXAMPLE_RELEASE, "the release"),
        **errors(401, 404, 422, 503, e404="release_not_found"),
    },
)
def get_release(release_id: str, ctx: Context) -> responses.ReceivedRelease:
    with ctx.sessions() as session:
        return inbox.describe_release(inbox.get_release(session, release_id))


@router.get(
    "/releases/{release_id}/labels",
    response_model=responses.ReleaseLabels,
    summary="Read a release's privatized labels",
    description="Every id once, sorted, with its privatized label (re-read from its shards, each digest checked).",
    responses={
        **ok(responses.EXAMPLE_LABELS, "the columns"),
        **errors(401, 404, 422, 503, e404="release_not_found"),
    },
)
def get_release_labels(release_id: str, ctx: Context) -> responses.ReleaseLabels:
    with ctx.sessions() as session:
        ids, labels = inbox.release_columns(inbox.get_release(session, release_id))
    return responses.ReleaseLabels(ids=ids.to_pylist(), labels=labels.tolist())


_LABEL_FILES = {
    inbox.LABEL_FILE_TYPES["parquet"]: "<Parquet bytes: id, label>",
    inbox.LABEL_FILE_TYPES["arrow"]: "<Arrow IPC stream bytes: id, label>",
    OCTET_STREAM: "<the file's bytes>",  # before text/csv: a generator takes the first type it knows (bytes)
    inbox.LABEL_FILE_TYPES["csv"]: "id,label\nu001,3.71\n",
}


@router.get(
    "/releases/{release_id}/labels/file",
    summary="Download a release's privatized labels as a file",
    description="The same rows as `GET /v1/releases/{id}/labels` (columns `id` and `label`, sorted by id) as one "
    "file: `format=parquet` (the default), `arrow` (an IPC stream) or `csv` (a header row). The answer's "
    "Content-Type is the format's own; it is documented under `application/octet-stream` as well, so generated "
    "clients read it as bytes.",
    response_class=FileResponse,
    responses={
        200: {
            "description": "the labels file",
            "content": {kind: {"schema": BINARY, "example": example} for kind, example in _LABEL_FILES.items()},
            "headers": {"Content-Disposition": {"description": "`attachment; filename=\"…\"`",
                                                "schema": {"type": "string"}, "required": True}},
        },
        **errors(401, 404, 422, 503, by_ref=True, e404="release_not_found"),
    },
)
async def download_release_labels(
    release_id: str,
    ctx: Context,
    fmt: Literal["parquet", "arrow", "csv"] = Query("parquet", alias="format",
                                                    description="`parquet`, `arrow` or `csv`"),
) -> FileResponse:
    def write() -> Path:
        with ctx.sessions() as session:
            ids, labels = inbox.release_columns(inbox.get_release(session, release_id))
        scratch = ctx.spool_dir
        scratch.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="labels-", dir=scratch)
        os.close(fd)
        path = Path(name)
        try:
            inbox.write_labels_file(ids, labels, fmt, path)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return path

    path = await run_in_threadpool(write)
    ext = {"parquet": "parquet", "arrow": "arrows", "csv": "csv"}[fmt]
    return FileResponse(
        path, media_type=inbox.LABEL_FILE_TYPES[fmt], filename=f"labels-{release_id}.{ext}",
        background=BackgroundTask(path.unlink, missing_ok=True),
    )


@router.get(
    "/releases/{release_id}/manifest",
    response_model=responses.SignedManifest,
    summary="Read a release's signed manifest",
    description="The manifest's exact text as received and the advertiser's signature it arrived with: anyone "
    "holding the advertiser's public key can check what was sent (`labeldp.signing.verify` over the UTF-8 "
    "bytes of `manifest`), and every shard's sha256 is in it.",
    responses={
        **ok(responses.EXAMPLE_SIGNED_MANIFEST, "the manifest and its signature"),
        **errors(401, 404, 422, 503, e404="release_not_found"),
    },
)
def get_release_manifest(release_id: str, ctx: Context) -> responses.SignedManifest:
    with ctx.sessions() as session:
        raw, signature = inbox.signed_manifest(inbox.get_release(session, release_id))
    return responses.SignedManifest(
        release_id=release_id, manifest=raw.decode("utf-8"), signature=signature,
        signing_key_id=header_key_id(signature),
    )


@router.get(
    "/releases",
    response_model=responses.ReceivedReleasePage,
    summary="List received releases",
    description="Oldest received first (`order=desc`: newest first), optionally of one label set; never loads "
    "a message body.",
    responses={
        **ok(responses.EXAMPLE_RELEASE_PAGE, "a page"),
        **errors(401, 422, 503, e422="invalid_cursor"),
    },
)
def list_releases(
    ctx: Context,
    label_set_id: str | None = Query(None, max_length=256),
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    order: Order = "asc",
) -> responses.ReceivedReleasePage:
    with ctx.sessions() as session:
        return inbox.list_releases(session, limit, cursor, label_set_id, order)
