"""Where an upload's bytes come from: a spooled request body, or an object the service may read.

A client with 10⁹ labels does not push them through one HTTP body: it names an object
(``s3://…`` or ``file://…``) that the service reads itself, a batch at a time through
:mod:`pyarrow.fs` — never whole, never copied to a local disk. Only URLs under the prefixes
of ``LABELDP_UPLOAD_SOURCES`` are read (empty: none); anything else is refused with
422 ``upload_source_not_allowed`` before a byte is read or written.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal, Protocol
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.fs as pafs
from pydantic import BaseModel, ConfigDict, Field

from labeldp.errors import InvalidInput, NotFound, StorageError
from labeldp.service.settings import Settings

log = logging.getLogger("labeldp.labels")

MAX_URL_LENGTH = 2000


@dataclass(frozen=True)
class RemoteObject:
    """An object of an allowed upload source, opened on demand (random access or a stream)."""

    fs: pafs.FileSystem
    path: str
    url: str

    def open_file(self) -> pa.NativeFile:
        with _read_errors("open the upload source"):
            return self.fs.open_input_file(self.path)

    def open_stream(self) -> pa.NativeFile:
        with _read_errors("open the upload source"):
            return self.fs.open_input_stream(self.path)


class Readable(Protocol):
    """Bytes the upload parsers can open: an allowed remote object, or a resumable upload's parts."""

    def open_file(self) -> pa.NativeFile: ...

    def open_stream(self) -> pa.NativeFile: ...


Body = Path | Readable
"""What the upload parsers read: a local (spooled) file, an object of an allowed source, or parts."""


def allowed_prefixes(settings: Settings) -> list[str]:
    return [p.strip() for p in settings.upload_sources.split(",") if p.strip()]


def _normal(url: str) -> tuple[str, str, str]:
    """(scheme, bucket or '', absolute path) of an s3:// or file:// URL; 422 for anything else."""
    parsed = urlparse(url)
    if parsed.scheme not in ("s3", "file") or parsed.query or parsed.fragment or parsed.params:
        raise InvalidInput("upload_source_invalid", "an upload source is an s3://bucket/key or file:///path URL")
    path = unquote(parsed.path)
    parts = path.split("/")
    if any(p in (".", "..") for p in parts) or "\x00" in path or "\\" in path:
        raise InvalidInput("upload_source_invalid", "an upload source URL names its object without . or ..")
    if parsed.scheme == "s3" and not parsed.netloc:
        raise InvalidInput("upload_source_invalid", "an s3:// upload source needs a bucket")
    if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
        raise InvalidInput("upload_source_invalid", "a file:// upload source is on this host: file:///path")
    return parsed.scheme, parsed.netloc if parsed.scheme == "s3" else "", str(PurePosixPath("/" + path.lstrip("/")))


def _under(url: tuple[str, str, str], prefix: tuple[str, str, str], prefix_text: str) -> bool:
    if url[:2] != prefix[:2]:
        return False
    folder = prefix[2].rstrip("/")
    if prefix_text.endswith("/") or folder == "":
        return url[2].startswith(folder + "/")
    return url[2] == folder or url[2].startswith(folder + "/")


def open_source(settings: Settings, url: str) -> RemoteObject:
    """The object at ``url`` if it lies under an allowed prefix; 422 ``upload_source_not_allowed`` if not."""
    if len(url) > MAX_URL_LENGTH:
        raise InvalidInput("upload_source_invalid", f"an upload source URL has at most {MAX_URL_LENGTH} characters")
    target = _normal(url)
    prefixes = allowed_prefixes(settings)
    if not any(_under(target, _normal(p), p) for p in prefixes):
        # The message never lists the allowed prefixes: they are the operator's, not the client's.
        raise InvalidInput(
            "upload_source_not_allowed",
            "this service may not read that URL (uploads by reference are limited to the operator's "
            "LABELDP_UPLOAD_SOURCES)" if prefixes else "this service reads no upload URLs (LABELDP_UPLOAD_SOURCES "
            "is empty): send the file in the request body or as a resumable upload",
        )
    scheme, bucket, path = target
    fs: pafs.FileSystem
    if scheme == "s3":
        options: dict[str, Any] = {
            k: v for k, v in {
                "endpoint_override": settings.storage_s3_endpoint, "region": settings.storage_s3_region,
                "access_key": settings.storage_s3_access_key, "secret_key": settings.storage_s3_secret_key,
            }.items() if v
        }
        endpoint = options.get("endpoint_override", "")
        if "://" in endpoint:
            options["scheme"], _, host = endpoint.partition("://")
            options["endpoint_override"] = host.rstrip("/")
        with _read_errors("open the upload source"):
            fs = pafs.S3FileSystem(**options)
        remote = RemoteObject(fs, f"{bucket}{path}", url)
    else:
        remote = RemoteObject(pafs.LocalFileSystem(), path, url)
    with _read_errors("look up the upload source"):
        info = remote.fs.get_file_info(remote.path)
    if info.type != pafs.FileType.File:
        raise NotFound("upload_source_not_found", "no object at the upload source URL")
    return remote


@contextlib.contextmanager
def _read_errors(action: str) -> Iterator[None]:
    """A missing object is 404 ``upload_source_not_found``; any other failure of the source 503 (the
    backend's text, which names endpoints and paths, goes to the log only)."""
    try:
        yield
    except FileNotFoundError as exc:
        raise NotFound("upload_source_not_found", "no object at the upload source URL") from exc
    except (OSError, pa.ArrowException) as exc:
        log.warning("upload source: cannot %s (%s: %s)", action, type(exc).__name__, exc)
        raise StorageError("upload_source_unavailable", f"could not {action}; retry later") from exc


FORMATS = {"csv": "text/csv", "parquet": "application/vnd.apache.parquet", "arrow": "application/vnd.apache.arrow.file"}


class SourceIn(BaseModel):
    """An upload by reference: the object the service reads, and its format."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        min_length=1, max_length=MAX_URL_LENGTH,
        description="s3://bucket/key or file:///path, under a prefix of the service's LABELDP_UPLOAD_SOURCES",
    )
    format: Literal["csv", "parquet", "arrow"] = Field(
        description="csv (a header row), parquet, or arrow (an IPC file or stream)"
    )

    @property
    def media_type(self) -> str:
        return FORMATS[self.format]
