"""Label uploads: parse CSV, JSON or Parquet, validate every row, store all or nothing.

Row-level errors name the row, the (public) id and a code, never the label value.
An accepted upload with an idempotency key is remembered, so a retried request
gets the same answer and stores nothing twice.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from labeldp.http_api import ApiError

from .label_sets import class_names, load_label_set
from .store import LabelRow, UploadRow

MAX_REPORTED_ERRORS = 100


@dataclass(frozen=True)
class ParsedRow:
    row: int  # 1-based data row number
    id: str | None
    value: object  # raw cell; validated below


def parse_upload(body: bytes, content_type: str) -> list[ParsedRow]:
    """Rows of ``id``/``label`` from a CSV, JSON or Parquet body."""
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind in ("text/csv", "application/csv"):
        return _parse_csv(body)
    if kind == "application/json":
        return _parse_json(body)
    if kind in ("application/vnd.apache.parquet", "application/x-parquet", "application/parquet"):
        return _parse_parquet(body)
    raise ApiError(
        415,
        "unsupported_media_type",
        "send text/csv, application/json or application/vnd.apache.parquet",
    )


def _parse_csv(body: bytes) -> list[ParsedRow]:
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ApiError(422, "invalid_csv", "CSV must be UTF-8") from exc
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None:
        raise ApiError(422, "invalid_csv", "empty CSV")
    names = [h.strip().lower() for h in header]
    if "id" not in names or "label" not in names:
        raise ApiError(422, "invalid_csv", "CSV header must have columns id and label")
    i_id, i_label = names.index("id"), names.index("label")
    rows = []
    for n, cells in enumerate(reader, start=1):
        if not cells:
            continue
        ident = cells[i_id].strip() if i_id < len(cells) else None
        value = cells[i_label].strip() if i_label < len(cells) else None
        rows.append(ParsedRow(n, ident or None, value))
    return rows


def _parse_json(body: bytes) -> list[ParsedRow]:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(422, "invalid_json", "body is not valid JSON") from exc
    if isinstance(doc, dict) and isinstance(doc.get("rows"), list):
        out = []
        for n, item in enumerate(doc["rows"], start=1):
            if not isinstance(item, dict):
                out.append(ParsedRow(n, None, None))
                continue
            ident = item.get("id")
            out.append(ParsedRow(n, None if ident is None else str(ident), item.get("label")))
        return out
    if isinstance(doc, dict) and isinstance(doc.get("ids"), list) and isinstance(doc.get("labels"), list):
        if len(doc["ids"]) != len(doc["labels"]):
            raise ApiError(422, "invalid_json", "ids and labels must have the same length")
        return [
            ParsedRow(n, None if i is None else str(i), v)
            for n, (i, v) in enumerate(zip(doc["ids"], doc["labels"]), start=1)
        ]
    raise ApiError(422, "invalid_json", 'JSON must be {"rows": [{"id", "label"}]} or {"ids": [], "labels": []}')


def _parse_parquet(body: bytes) -> list[ParsedRow]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(pa.BufferReader(body))
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise ApiError(422, "invalid_parquet", "body is not a readable Parquet file") from exc
    if "id" not in table.column_names or "label" not in table.column_names:
        raise ApiError(422, "invalid_parquet", "Parquet file must have columns id and label")
    ids = table.column("id").to_pylist()
    labels = table.column("label").to_pylist()
    return [
        ParsedRow(n, None if i is None else str(i), v) for n, (i, v) in enumerate(zip(ids, labels), start=1)
    ]


def _as_float(value: object) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def validate_rows(
    rows: list[ParsedRow],
    *,
    declared: dict[str, bool],
    label_type: str,
    low: float,
    high: float,
    classes: list[str] | None = None,
) -> tuple[list[tuple[str, float]], list[dict[str, Any]]]:
    """(accepted id/value pairs, row errors). ``declared`` maps id -> already labeled.

    Categorical labels are class names; they are stored as class indices.
    """
    class_index = None if classes is None else {c: float(k) for k, c in enumerate(classes)}
    errors: list[dict[str, Any]] = []
    accepted: list[tuple[str, float]] = []
    seen: set[str] = set()

    def fail(row: ParsedRow, code: str, message: str) -> None:
        errors.append({"row": row.row, "id": row.id, "code": code, "message": message})

    for row in rows:
        if row.id is None or row.id == "":
            fail(row, "missing_id", "row has no id")
            continue
        if row.id in seen:
            fail(row, "duplicate_id", "id appears more than once in this upload")
            continue
        seen.add(row.id)
        if row.id not in declared:
            fail(row, "unknown_id", "id is not part of this label set")
            continue
        if declared[row.id]:
            fail(row, "already_labeled", "id already has a label")
            continue
        if class_index is not None:
            key = row.value if isinstance(row.value, str) else None
            if key is None or key not in class_index:
                fail(row, "unknown_class", "label is not one of the label set's classes")
                continue
            accepted.append((row.id, class_index[key]))
            continue
        value = _as_float(row.value)
        if value is None:
            fail(row, "not_a_number", "label is missing or not a number")
            continue
        if not math.isfinite(value):
            fail(row, "non_finite", "label must be finite")
            continue
        if not (low <= value <= high):
            fail(row, "out_of_domain", "label is outside the declared domain")
            continue
        if label_type == "integer" and not value.is_integer():
            fail(row, "not_integer", "label must be an integer")
            continue
        accepted.append((row.id, value))
    return accepted, errors


def request_fingerprint(body: bytes, content_type: str, validate_only: bool) -> str:
    h = hashlib.sha256()
    h.update(content_type.encode())
    h.update(b"\x00validate_only=" + str(validate_only).encode() + b"\x00")
    h.update(body)
    return h.hexdigest()


def upload_labels(
    sessions: sessionmaker[Session],
    label_set_id: str,
    body: bytes,
    content_type: str,
    *,
    validate_only: bool = False,
    idempotency_key: str | None = None,
) -> tuple[dict[str, Any], bool]:
    """Validate and (unless ``validate_only``) store labels. Returns (response, replayed)."""
    rows = parse_upload(body, content_type)
    if not rows:
        raise ApiError(422, "empty_upload", "upload has no rows")
    fingerprint = request_fingerprint(body, content_type, validate_only)
    if idempotency_key is not None and not (0 < len(idempotency_key) <= 200):
        raise ApiError(422, "invalid_idempotency_key", "Idempotency-Key must be 1-200 characters")

    with sessions.begin() as s:  # BEGIN IMMEDIATE: the checks below see a stable state
        ls = load_label_set(s, label_set_id)
        if idempotency_key is not None:
            previous = s.scalar(
                select(UploadRow).where(
                    UploadRow.label_set_id == label_set_id,
                    UploadRow.idempotency_key == idempotency_key,
                )
            )
            if previous is not None:
                if previous.request_sha256 != fingerprint:
                    raise ApiError(
                        422,
                        "idempotency_key_reused",
                        "this Idempotency-Key was used for a different request",
                    )
                return json.loads(previous.response_json), True
        declared = dict(
            s.execute(
                select(LabelRow.example_id, LabelRow.value.is_not(None)).where(
                    LabelRow.label_set_id == label_set_id
                )
            ).all()
        )
        accepted, errors = validate_rows(
            rows,
            declared=declared,
            label_type=ls.label_type,
            low=ls.domain_low,
            high=ls.domain_high,
            classes=class_names(ls),
        )
        if errors:
            raise ApiError(
                422,
                "invalid_labels",
                f"{len(errors)} of {len(rows)} rows are invalid; nothing was stored",
                errors[:MAX_REPORTED_ERRORS],
            )
        labeled_before = sum(1 for v in declared.values() if v)
        labeled_after = labeled_before if validate_only else labeled_before + len(accepted)
        response = {
            "label_set_id": label_set_id,
            "validate_only": validate_only,
            "accepted_rows": len(accepted),
            "labeled": labeled_after,
            "missing": ls.n_ids - labeled_after,
        }
        if validate_only:
            return response, False
        s.connection().execute(
            update(LabelRow.__table__)
            .where(
                LabelRow.__table__.c.label_set_id == bindparam("b_set"),
                LabelRow.__table__.c.example_id == bindparam("b_id"),
                LabelRow.__table__.c.value.is_(None),
            )
            .values(value=bindparam("b_value")),
            [{"b_set": label_set_id, "b_id": i, "b_value": v} for i, v in accepted],
        )
        s.add(
            UploadRow(
                label_set_id=label_set_id,
                idempotency_key=idempotency_key,
                request_sha256=fingerprint,
                response_json=json.dumps(response),
                rows=len(accepted),
            )
        )
        try:
            s.flush()
        except IntegrityError as exc:  # same key raced in on another connection
            raise ApiError(409, "idempotency_conflict", "a request with this key is in progress") from exc
    return response, False
