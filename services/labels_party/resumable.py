"""Resumable uploads: a label set's ids or labels sent as numbered parts, then completed.

One body of 10⁹ labels is tens of GB: no proxy lets it through, and a connection lost at 90 %
would send it all again. A client instead creates an upload (``uploads/<id>/session.json``),
sends its bytes in parts — each part is one object of the shared object store
(``uploads/<id>/part-000001``…), so any replica may take the next part or the completion —
asks which parts arrived, re-sends only the missing ones, and completes. Completion reads
the parts in order as one file (:class:`PartsSource`: random access across the part objects,
nothing assembled on a disk) through exactly the validation of a one-body upload, then
removes the parts. A part re-sent replaces the earlier one; nothing is charged before
completion, and a failed completion (a 422 naming the rows) leaves the parts, so a corrected
part can be sent and completion tried again.
"""

from __future__ import annotations

import bisect
import io
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from labeldp.errors import Conflict, InvalidInput, NotFound, PayloadTooLarge
from labeldp.service.idempotency import Claim, StoredResponse
from labeldp.storage import ObjectStore

from . import responses, uploads
from .context import LabelsContext
from .label_sets import load_label_set
from .sources import FORMATS

UPLOADS = "uploads"


class UploadCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: Literal["ids", "labels"] = Field(description="what the parts are: the set's ids, or its labels")
    format: Literal["csv", "parquet", "arrow"] = Field(
        description="the format of the whole file the parts make when joined in order"
    )
    validate_only: bool = Field(False, description="labels: check every row at completion without storing")
    id_column: str | None = Field(None, min_length=1, max_length=200,
                                  description="the file's column holding the ids, if not `id`")
    label_column: str | None = Field(None, min_length=1, max_length=200,
                                     description="labels: the file's column holding the labels, if not `label`")


class UploadComplete(BaseModel):
    model_config = ConfigDict(extra="forbid")

    parts: int = Field(
        ge=1, le=100_000, description="how many parts the file has: parts 1 to this number, all received"
    )


def _prefix(upload_id: str) -> str:
    if not (upload_id.startswith("up_") and len(upload_id) == 35 and upload_id[3:].isalnum()):
        raise NotFound("upload_not_found", "no such upload")
    return f"{UPLOADS}/{upload_id}"


def _part_key(upload_id: str, number: int) -> str:
    return f"{_prefix(upload_id)}/part-{number:06d}"


def _session(ctx: LabelsContext, upload_id: str) -> dict[str, Any]:
    key = f"{_prefix(upload_id)}/session.json"
    try:
        session: dict[str, Any] = json.loads(ctx.store.get_bytes(key))
    except NotFound:
        raise NotFound("upload_not_found", "no such upload") from None
    if ctx.store.exists(f"{_prefix(upload_id)}/completed.json"):
        session["state"] = "completed"
    return session


def _parts(ctx: LabelsContext, upload_id: str) -> dict[int, int]:
    """Received part number → size in bytes."""
    out = {}
    for key in ctx.store.list(_prefix(upload_id)):
        name = key.rsplit("/", 1)[1]
        if name.startswith("part-"):
            out[int(name[5:])] = ctx.store.size(key)
    return dict(sorted(out.items()))


def _describe(ctx: LabelsContext, upload_id: str, session: dict[str, Any]) -> responses.Upload:
    parts = _parts(ctx, upload_id) if session.get("state") != "completed" else {}
    highest = max(parts, default=0)
    return responses.Upload(
        id=upload_id,
        label_set_id=session["label_set_id"],
        target=session["target"],
        format=session["format"],
        validate_only=session["validate_only"],
        state=session.get("state", "open"),
        parts=[responses.UploadPartInfo(number=n, size=size) for n, size in parts.items()],
        missing_below_highest=[n for n in range(1, highest) if n not in parts][:1000],
        part_max_bytes=ctx.settings.upload_part_max_bytes,
        max_parts=ctx.settings.upload_max_parts,
        created_at=session["created_at"],
    )


def create_upload(ctx: LabelsContext, label_set_id: str, body: UploadCreate) -> responses.Upload:
    with ctx.sessions() as s:
        load_label_set(s, label_set_id)  # 404 before anything is written
    if body.validate_only and body.target == "ids":
        raise InvalidInput("invalid_request", "validate_only is for labels uploads")
    uploads.Columns.of(body.id_column, body.label_column)  # 422 before anything is written
    upload_id = "up_" + uuid.uuid4().hex
    session = {
        "label_set_id": label_set_id, "target": body.target, "format": body.format,
        "validate_only": body.validate_only, "created_at": datetime.now(UTC).isoformat(),
        "id_column": body.id_column, "label_column": body.label_column,
    }
    ctx.store.put_bytes(f"{_prefix(upload_id)}/session.json", json.dumps(session).encode())
    return _describe(ctx, upload_id, session)


def get_upload(ctx: LabelsContext, upload_id: str) -> responses.Upload:
    return _describe(ctx, upload_id, _session(ctx, upload_id))


def put_part(ctx: LabelsContext, upload_id: str, number: int, body: Path, size: int) -> responses.UploadPart:
    """Store one part (replacing a part of that number sent before)."""
    if not 1 <= number <= ctx.settings.upload_max_parts:
        raise InvalidInput("invalid_part_number", f"part numbers run from 1 to {ctx.settings.upload_max_parts}")
    if size > ctx.settings.upload_part_max_bytes:
        raise PayloadTooLarge("part_too_large", f"a part has at most {ctx.settings.upload_part_max_bytes} bytes")
    if size == 0:
        raise InvalidInput("empty_part", "a part holds at least one byte")
    if _session(ctx, upload_id).get("state") == "completed":
        raise Conflict("upload_completed", "this upload is already completed")
    ctx.store.put_file(_part_key(upload_id, number), body)
    return responses.UploadPart(upload_id=upload_id, number=number, size=size)


def complete_upload(
    ctx: LabelsContext, upload_id: str, body: UploadComplete, claim: Claim | None
) -> StoredResponse:
    """Validate and store the joined parts exactly as one body of the same bytes would be."""
    session = _session(ctx, upload_id)
    if session.get("state") == "completed":
        raise Conflict("upload_completed", "this upload is already completed")
    if body.parts > ctx.settings.upload_max_parts:
        raise InvalidInput("invalid_part_number", f"an upload has at most {ctx.settings.upload_max_parts} parts")
    parts = _parts(ctx, upload_id)
    missing = [n for n in range(1, body.parts + 1) if n not in parts]  # at most upload_max_parts
    if missing:
        raise InvalidInput(
            "upload_parts_missing", f"{len(missing)} of the {body.parts} parts have not arrived; send them again",
            [{"part": n} for n in missing[:1000]],
        )
    extra = [n for n in parts if n > body.parts]
    if extra:
        raise InvalidInput("upload_parts_extra", f"parts after part {body.parts} were sent",
                           [{"part": n} for n in extra[:1000]])
    source = PartsSource(ctx.store, [(_part_key(upload_id, n), parts[n]) for n in range(1, body.parts + 1)])
    kind = FORMATS[session["format"]]
    label_set_id = session["label_set_id"]
    names = uploads.Columns.of(session.get("id_column"), session.get("label_column"))  # older sessions: none
    if session["target"] == "ids":
        done = uploads.upload_ids(ctx, label_set_id, source, kind, None, names)
        answer = responses.UploadCompleted(
            upload_id=upload_id, target="ids", label_set=responses.LabelSet.model_validate(done.body), labels=None
        )
    else:
        done = uploads.upload_labels(
            ctx, label_set_id, source, kind, validate_only=bool(session["validate_only"]), claim=None, names=names
        )
        answer = responses.UploadCompleted(
            upload_id=upload_id, target="labels", label_set=None,
            labels=responses.LabelsUploaded.model_validate(done.body),
        )
    out = StoredResponse(200, answer.model_dump())
    if claim is not None:
        with ctx.sessions.begin() as s:
            claim.complete(s, out)
    if not session["validate_only"]:
        ctx.store.put_bytes(f"{_prefix(upload_id)}/completed.json", b"{}")
        for n in parts:
            ctx.store.delete(_part_key(upload_id, n))
    return out


@dataclass
class PartsSource:
    """The part objects, in order, read as one file (what :mod:`.uploads` parses)."""

    store: ObjectStore
    parts: list[tuple[str, int]]  # (key, size)

    def open_file(self) -> pa.NativeFile:
        return pa.PythonFile(io.BufferedReader(_Joined(self.store, self.parts), 1 << 20), mode="r")

    def open_stream(self) -> pa.NativeFile:
        return self.open_file()


class _Joined(io.RawIOBase):
    """Random access over consecutive objects: one open reader at a time, never a whole part in memory."""

    def __init__(self, store: ObjectStore, parts: list[tuple[str, int]]) -> None:
        self._store = store
        self._keys = [k for k, _ in parts]
        self._starts = [0]
        for _, size in parts:
            self._starts.append(self._starts[-1] + size)
        self._pos = 0
        self._open: tuple[int, pa.NativeFile] | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._starts[-1]}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        total = self._starts[-1]
        if self._pos >= total or not len(view):
            return 0
        index = bisect.bisect_right(self._starts, self._pos) - 1
        if self._open is None or self._open[0] != index:
            self._close_part()
            self._open = (index, self._store.open_input_file(self._keys[index]))
        part = self._open[1]
        want = min(len(view), self._starts[index + 1] - self._pos)
        part.seek(self._pos - self._starts[index])
        data = part.read(want)
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def _close_part(self) -> None:
        if self._open is not None:
            self._open[1].close()
            self._open = None

    def close(self) -> None:
        self._close_part()
        super().close()
