"""Uploads of labels (and of a label set's ids): spooled to disk, parsed in chunks, validated as columns.

CSV, JSON, Parquet and Arrow IPC bodies are read with pyarrow a chunk at a time; a label
chunk is parsed to float64 at once. A labels upload never holds the body, the set's ids or
its labels whole: the parsed rows are sorted externally by id (:mod:`.external_sort`) and
merge-joined with the set's sorted id chunks (:func:`upload_labels`). Every row is validated
— id known, not repeated, not already labeled, value a finite number in the domain (an
integer where required, a known class name) — and the upload is all or nothing: the next
labels object is written a chunk at a time and the catalogue moves to it with a
compare-and-swap on its version. Row errors name the row (1-based), the public id and a
code, never the label value (docs/architecture.md, invariant 5).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pa_compute
import pyarrow.csv as pa_csv
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
from sqlalchemy import update

from labeldp.errors import Conflict, InvalidInput, LabelDPError, UnsupportedMediaType
from labeldp.parquet_batches import check_column_type, check_unicode, is_unicode, open_for_batches, utf8_text
from labeldp.service.idempotency import Claim, StoredResponse
from labeldp.storage import ObjectStore

from . import external_sort, id_lookup, responses
from .columnar import release_unused_memory
from .context import LabelsContext
from .label_sets import (
    LABELS_DELETED,
    LABELS_SCHEMA,
    LABELS_SUFFIX,
    class_names,
    iter_id_chunks,
    labels_chunks,
    labels_object_key,
    load_label_set,
    set_ids,
)
from .sources import Body
from .store import LabelSetRow

# pyarrow-stubs type the compute kernels' results as `object`; their call sites are read untyped.
pc: Any = pa_compute

MAX_REPORTED_ERRORS = 100
CSV_BLOCK_BYTES = 1 << 22
"""Bytes of CSV parsed at a time (read at each call: a test may make it small)."""
CSV_TYPES = ("text/csv", "application/csv")
JSON_TYPES = ("application/json",)
PARQUET_TYPES = ("application/vnd.apache.parquet", "application/x-parquet", "application/parquet")
ARROW_TYPES = ("application/vnd.apache.arrow.stream", "application/vnd.apache.arrow.file")
MEDIA_TYPES = CSV_TYPES + JSON_TYPES + PARQUET_TYPES + ARROW_TYPES

# Value problems, in the order they are checked; 0 = fine.
VALUE_CODES = ("", "not_a_number", "non_finite", "out_of_domain", "not_integer", "unknown_class")
VALUE_MESSAGES = {
    "not_a_number": "label is missing or not a number",
    "non_finite": "label must be finite",
    "out_of_domain": "label is outside the declared domain",
    "not_integer": "label must be an integer",
    "unknown_class": "label is not one of the label set's classes",
}
ID_MESSAGES = {
    "missing_id": "row has no id",
    "unknown_id": "id is not part of this label set",
    "duplicate_id": "id appears more than once in this upload",
    "already_labeled": "id already has a label",
}


@dataclass(frozen=True)
class LabelRules:
    """What a valid label is for one label set (public facts only)."""

    label_type: str
    low: float
    high: float
    classes: list[str] | None = None


# --------------------------------------------------------------------------- reading


def media_type(content_type: str) -> str:
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind not in MEDIA_TYPES:
        raise UnsupportedMediaType(
            "unsupported_media_type",
            "send text/csv, application/json, application/vnd.apache.parquet or application/vnd.apache.arrow.stream",
        )
    return kind


@dataclass(frozen=True)
class Columns:
    """Which of an upload's columns hold the ids and the labels (``?id_column=&label_column=``).

    An integrator's own file keeps its names (``order_id``, ``conversion_value``): nothing is
    renamed before the upload. Names match case-insensitively, blanks around them ignored.
    A column the request names that the file lacks is 422 ``unknown_column``; without
    names, the defaults ``id`` and ``label`` are required as before.
    """

    id: str = "id"
    label: str = "label"
    named: bool = False
    """Whether the request named the columns (a missing one is then ``unknown_column``)."""

    @classmethod
    def of(cls, id_column: str | None = None, label_column: str | None = None) -> Columns:
        named = id_column is not None or label_column is not None
        out = cls((id_column or "id").strip(), (label_column or "label").strip(), named)
        for name in (out.id, out.label):
            if not name or len(name) > MAX_COLUMN_NAME or not is_unicode(name):
                raise InvalidInput("invalid_request", f"a column name is 1 to {MAX_COLUMN_NAME} characters",
                                   [{"loc": ["query", "id_column" if name == out.id else "label_column"]}])
        if out.id.lower() == out.label.lower():
            raise InvalidInput("invalid_column_declaration", "id_column and label_column name the same column",
                               [{"column": out.id}])
        return out

    def source(self, column: str) -> str:
        """The file's name (lower-case) for the canonical ``column`` (``id`` or ``label``)."""
        return (self.id if column == "id" else self.label).lower()

    def missing(self, columns: tuple[str, ...], names: list[str], kind: str, what: str) -> None:
        """Raise when the file's ``names`` (lower-case) lack one of ``columns``."""
        absent = [c for c in columns if self.source(c) not in names]
        if not absent:
            return
        if self.named:
            given = [self.id if c == "id" else self.label for c in absent]
            raise InvalidInput("unknown_column", f"the {what} has no column {', '.join(map(repr, given))}",
                               [{"column": c[:MAX_COLUMN_NAME]} for c in given])
        raise InvalidInput(f"invalid_{kind}", f"the {what} must have columns {' and '.join(columns)}")


DEFAULT_COLUMNS = Columns()
MAX_COLUMN_NAME = 200


def read_batches(
    path: Body, kind: str, columns: tuple[str, ...], names: Columns = DEFAULT_COLUMNS
) -> Iterator[dict[str, pa.Array]]:
    """The body's ``columns`` (``id``, ``label``; found under ``names``), a chunk at a time.

    ``path`` is a spooled local file or an object of an allowed upload source
    (:class:`.sources.RemoteObject`, read through pyarrow.fs) or a resumable upload's parts
    (:class:`.resumable.PartsSource`): Parquet and Arrow files by random access, CSV as a
    stream; never whole.
    """
    if not isinstance(path, Path) and kind in JSON_TYPES:
        raise UnsupportedMediaType(
            "unsupported_media_type", "an upload by reference is CSV, Parquet or Arrow IPC (not JSON)"
        )
    if kind in CSV_TYPES:
        yield from _csv_batches(path, columns, names)
    elif kind in PARQUET_TYPES:
        yield from _parquet_batches(path, columns, names)
    elif kind in ARROW_TYPES:
        yield from _arrow_batches(path, columns, names)
    else:
        yield _json_columns(path, columns, names)


def _open_stream(path: Body) -> Any:
    return open(path, "rb") if isinstance(path, Path) else path.open_stream()


def _csv_batches(path: Body, columns: tuple[str, ...], cols: Columns) -> Iterator[dict[str, pa.Array]]:
    with _open_stream(path) as f:
        first = f.read(1 << 16).split(b"\n", 1)[0]
    try:
        header_text = first.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput("invalid_csv", "CSV must be UTF-8") from exc
    try:
        header = next(csv.reader(io.StringIO(header_text)), None)
    except csv.Error:  # e.g. a lone carriage return inside the header (found by schemathesis)
        raise InvalidInput("invalid_csv", "CSV header could not be parsed") from None
    if not header:
        raise InvalidInput("invalid_csv", "empty CSV")
    names = [h.strip().lower() for h in header]
    cols.missing(columns, names, "csv", "CSV header")
    generated = [f"c{i}" for i in range(len(names))]
    wanted = {c: f"c{names.index(cols.source(c))}" for c in columns}
    source: Any = path if isinstance(path, Path) else path.open_stream()
    try:
        reader = pa_csv.open_csv(
            source,
            read_options=pa_csv.ReadOptions(column_names=generated, skip_rows=1, block_size=CSV_BLOCK_BYTES),
            convert_options=pa_csv.ConvertOptions(
                include_columns=list(wanted.values()),
                # ids as bytes: utf8_text then names the row that is not UTF-8 (invalid_id)
                column_types={g: pa.binary() if c == "id" else pa.string() for c, g in wanted.items()},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
        for batch in reader:
            yield {c: batch.column(g) for c, g in wanted.items()}
    except (pa.ArrowInvalid, UnicodeDecodeError):
        # pyarrow's message quotes the offending row, which may hold a label: never pass it on.
        raise InvalidInput(
            "invalid_csv", "CSV could not be parsed (UTF-8, one header row, the same number of cells per row)"
        ) from None
    finally:
        if not isinstance(source, Path):
            source.close()


def _pick(schema: pa.Schema, columns: tuple[str, ...], kind: str, cols: Columns) -> list[str]:
    """The file's names for ``columns``; 422 ``unsupported_column_type`` for a nested or other odd type."""
    lower = {n.strip().lower(): n for n in schema.names}
    cols.missing(columns, list(lower), kind, f"{kind} file")
    picked = [lower[cols.source(c)] for c in columns]
    for name in picked:
        check_column_type(name, schema.field(name).type)
    return picked


def _parquet_batches(path: Body, columns: tuple[str, ...], cols: Columns) -> Iterator[dict[str, pa.Array]]:
    source = None if isinstance(path, Path) else path.open_file()
    try:
        # pre-buffering off: memory bounded by a batch, not the file
        pf = pq.ParquetFile(source, pre_buffer=False) if source is not None else open_for_batches(str(path))
        picked = _pick(pf.schema_arrow, columns, "parquet", cols)
        for batch in pf.iter_batches(batch_size=1 << 18, columns=picked):
            yield {c: batch.column(name) for c, name in zip(columns, picked)}
    except LabelDPError:
        raise
    except Exception:  # pyarrow raises several types for a damaged file
        raise InvalidInput("invalid_parquet", "body is not a readable Parquet file") from None
    finally:
        if source is not None:
            source.close()


def _arrow_batches(path: Body, columns: tuple[str, ...], cols: Columns) -> Iterator[dict[str, pa.Array]]:
    try:
        with pa.memory_map(str(path), "r") if isinstance(path, Path) else path.open_file() as source:
            try:
                reader: Any = ipc.open_file(source)
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
            except pa.ArrowInvalid:
                source.seek(0)
                reader = ipc.open_stream(source)
                batches = iter(reader)
            picked = _pick(reader.schema, columns, "arrow", cols)
            for batch in batches:
                yield {c: batch.column(name) for c, name in zip(columns, picked)}
    except LabelDPError:
        raise
    except Exception:
        raise InvalidInput("invalid_arrow", "body is not a readable Arrow IPC file or stream") from None


def _json_columns(path: Body, columns: tuple[str, ...], cols: Columns) -> dict[str, pa.Array]:
    try:
        doc = json.loads(path.read_bytes()) if isinstance(path, Path) else None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InvalidInput("invalid_json", "body is not valid JSON") from None
    plural = {"id": "ids", "label": "labels"}
    if isinstance(doc, dict) and isinstance(doc.get("rows"), list):
        rows = [r if isinstance(r, dict) else {} for r in doc["rows"]]
        keys = {c: cols.id if c == "id" else cols.label for c in columns}  # the rows' keys, exactly
        if cols.named and rows:
            absent = [k for k in keys.values() if not any(k in r for r in rows)]
            if absent:
                raise InvalidInput("unknown_column", f"no row has the key {', '.join(map(repr, absent))}",
                                   [{"column": k[:MAX_COLUMN_NAME]} for k in absent])
        values = {c: [r.get(keys[c]) for r in rows] for c in columns}
    elif isinstance(doc, dict) and all(isinstance(doc.get(plural[c]), list) for c in columns):
        values = {c: doc[plural[c]] for c in columns}
        if len({len(v) for v in values.values()}) != 1:
            raise InvalidInput("invalid_json", "ids and labels must have the same length")
    else:
        shape = '{"ids": [...]}' if columns == ("id",) else '{"rows": [{"id", "label"}]} or {"ids": [], "labels": []}'
        raise InvalidInput("invalid_json", f"JSON must be {shape}")
    # json.loads keeps "\ud800" as a lone surrogate, which Arrow cannot encode: refuse it by row.
    check_unicode(values["id"], code="invalid_id", what="id")
    out: dict[str, pa.Array] = {"id": pa.array([_id_text(v) for v in values["id"]], pa.string())}
    if "label" in columns:
        check_unicode(values["label"], code="invalid_labels", what="label")
        out["label"] = pa.array([_json_label(v) for v in values["label"]], pa.string())
    return out


def _id_text(value: object) -> str | None:
    if isinstance(value, bool) or value is None or isinstance(value, (dict, list, float)):
        return None
    return str(value)


def _json_label(value: object) -> str | None:
    # Labels travel as text to the one parser below; JSON's own NaN/Infinity stay recognisable.
    if isinstance(value, bool) or value is None or isinstance(value, (dict, list)):
        return None
    if isinstance(value, int) and abs(value) > 10**300:
        return "not-a-number"
    return value if isinstance(value, str) else repr(value)


# --------------------------------------------------------------------------- validation


def parse_labels(raw: pa.Array, rules: LabelRules, first_row: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(float64 values, int8 value codes) for one chunk (its first row is ``first_row``, 1-based)."""
    n = len(raw)
    codes = np.zeros(n, dtype=np.int8)
    if rules.classes is not None:
        text = utf8_text(raw, code="invalid_labels", what="label", first_row=first_row)
        index = pc.index_in(text, value_set=pa.array(rules.classes, pa.string()))
        values = pc.fill_null(index, -1).to_numpy(zero_copy_only=False).astype(np.float64)
        codes[values < 0] = VALUE_CODES.index("unknown_class")
        return values, codes
    if pa.types.is_string(raw.type) or pa.types.is_large_string(raw.type):
        try:
            values = pc.cast(raw, pa.float64()).to_numpy(zero_copy_only=False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            values = np.array([_as_float(v) for v in raw.to_pylist()], dtype=np.float64)
    elif pa.types.is_integer(raw.type) or pa.types.is_floating(raw.type):
        values = pc.cast(raw, pa.float64()).to_numpy(zero_copy_only=False)
    else:
        values = np.full(n, np.nan)
        codes[:] = VALUE_CODES.index("not_a_number")
        return values, codes
    null = np.asarray(raw.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    unparsed = null | _unparsed_nan(raw, values)
    codes[unparsed] = VALUE_CODES.index("not_a_number")
    ok = codes == 0
    finite = np.isfinite(values)
    codes[ok & ~finite] = VALUE_CODES.index("non_finite")
    ok = codes == 0
    with np.errstate(invalid="ignore"):
        codes[ok & ((values < rules.low) | (values > rules.high))] = VALUE_CODES.index("out_of_domain")
    if rules.label_type == "integer":
        ok = codes == 0
        codes[ok & (np.floor(values) != values)] = VALUE_CODES.index("not_integer")
    return values, codes


def _unparsed_nan(raw: pa.Array, values: np.ndarray) -> np.ndarray:
    """NaN that the text did not spell: the marker of a cell that is not a number."""
    nan = np.isnan(values)
    if not nan.any() or not (pa.types.is_string(raw.type) or pa.types.is_large_string(raw.type)):
        return np.zeros(values.shape, dtype=bool)
    spelled = pc.fill_null(pc.match_substring_regex(raw, r"^\s*[+-]?nan\s*$", ignore_case=True), False)
    return nan & ~np.asarray(spelled.to_numpy(zero_copy_only=False), dtype=np.bool_)


def _as_float(value: object) -> float:
    if value is None:
        return math.nan
    try:
        text = str(value).strip()
        if len(text) > 400:
            return math.nan
        return float(text)
    except ValueError:
        return math.nan


def _trimmed(ids: pa.Array) -> pa.Array:
    """CSV cells without surrounding blanks (copied only when some cell has them)."""
    padded = pc.any(pc.match_substring_regex(ids, r"^\s|\s$")).as_py()
    return pc.utf8_trim_whitespace(ids) if padded else ids


@dataclass(frozen=True)
class ParsedUpload:
    ids: pa.ChunkedArray
    values: np.ndarray
    codes: np.ndarray  # value codes (VALUE_CODES)


def parse_label_upload(path: Body, kind: str, rules: LabelRules, names: Columns = DEFAULT_COLUMNS) -> ParsedUpload:
    ids, values, codes = [], [], []
    row = 1
    for batch in read_batches(path, kind, ("id", "label"), names):
        ident = utf8_text(batch["id"], code="invalid_id", what="id", first_row=row)
        ids.append(_trimmed(ident) if kind in CSV_TYPES else ident)
        v, c = parse_labels(batch["label"], rules, row)
        values.append(v)
        codes.append(c)
        row += len(ident)
    return ParsedUpload(
        pa.chunked_array(ids, type=pa.string()),
        np.concatenate(values) if values else np.zeros(0),
        np.concatenate(codes) if codes else np.zeros(0, dtype=np.int8),
    )


def row_errors(
    upload: ParsedUpload, set_ids: pa.Array | pa.ChunkedArray, labeled: np.ndarray
) -> tuple[np.ndarray, list[dict[str, Any]], int]:
    """(positions in the set, the first row errors, how many rows are wrong).

    Vectorized over the whole upload; the temporaries are a few bytes per row (an int32
    position, int8 codes, booleans), so 10⁷ rows fit beside the label column.
    """
    ids = upload.ids
    n = len(ids)
    missing = np.asarray(
        pc.fill_null(pc.equal(pc.utf8_length(ids), 0), True).to_numpy(zero_copy_only=False), dtype=np.bool_
    )
    positions = id_lookup.positions(set_ids, ids)  # the set's ids are sorted: binary search, no hash table
    known = positions >= 0
    unknown = ~known & ~missing
    duplicate = np.zeros(n, dtype=bool)
    if n:
        counts = np.bincount(positions[known], minlength=len(set_ids))
        repeated = np.flatnonzero(known & (counts[np.maximum(positions, 0)] > 1))
        del counts
        if repeated.size:  # rare: every occurrence after an id's first is a duplicate
            _, first = np.unique(positions[repeated], return_index=True)
            duplicate[repeated] = True
            duplicate[repeated[first]] = False
    already = np.zeros(n, dtype=bool)
    already[known] = labeled[positions[known]]
    already &= ~duplicate
    id_code = np.zeros(n, dtype=np.int8)  # assigned from the last check to the first: the first wins
    id_code[already] = 4
    id_code[duplicate] = 3
    id_code[unknown] = 2
    id_code[missing] = 1
    del already, duplicate, unknown, missing, known
    bad = np.flatnonzero((id_code > 0) | (upload.codes > 0))
    errors = []
    id_names = ("", "missing_id", "unknown_id", "duplicate_id", "already_labeled")
    for r in bad[:MAX_REPORTED_ERRORS]:
        code = id_names[id_code[r]] if id_code[r] else VALUE_CODES[upload.codes[r]]
        ident = ids[int(r)].as_py()
        errors.append({
            "row": int(r) + 1,
            "id": ident or None,
            "code": code,
            "message": ID_MESSAGES.get(code) or VALUE_MESSAGES[code],
        })
    return positions, errors, int(bad.size)


# --------------------------------------------------------------------------- use cases


def rules_of(row: LabelSetRow) -> LabelRules:
    return LabelRules(row.label_type, row.domain_low, row.domain_high, class_names(row))


UPLOAD_PAYLOAD = pa.schema({"value": pa.float64(), "code": pa.int8(), "row": pa.int64()})  # type: ignore[arg-type]
"""What a labels upload's rows carry through the external sort with their id: the parsed label, its
value code (VALUE_CODES) and the row number (0-based) that errors name."""
ROW_CODES = ("", "missing_id", "unknown_id", "duplicate_id", "already_labeled", *VALUE_CODES[1:])
"""Every row problem: an id's (the first that applies wins over the value's), then the value's."""
_MISSING, _UNKNOWN, _DUPLICATE, _ALREADY = 1, 2, 3, 4


@dataclass
class RowErrors:
    """How many rows are wrong and the first ``MAX_REPORTED_ERRORS`` of them by row, found in any order
    (a sorted upload meets its rows in id order): memory holds at most that many."""

    count: int = 0
    first: list[tuple[int, int, str | None]] = field(default_factory=list)  # (row, code, id)

    def add(self, rows: np.ndarray, codes: np.ndarray, ids: Callable[[np.ndarray], list[Any]] | None) -> None:
        """``rows`` (0-based) with their ``codes`` (ROW_CODES); ``ids(index)``: the ids of ``rows[index]``."""
        self.count += len(rows)
        if not len(rows) or (len(self.first) >= MAX_REPORTED_ERRORS and rows.min() > self.first[-1][0]):
            return
        pick = np.argsort(rows, kind="stable")[:MAX_REPORTED_ERRORS]
        names = ids(pick) if ids is not None else [None] * len(pick)
        found = [(int(rows[i]), int(codes[i]), names[n]) for n, i in enumerate(pick)]
        self.first = sorted(self.first + found)[:MAX_REPORTED_ERRORS]

    def details(self) -> list[dict[str, Any]]:
        out = []
        for row, code, ident in self.first:
            name = ROW_CODES[code]
            out.append({"row": row + 1, "id": ident or None, "code": name,
                        "message": ID_MESSAGES.get(name) or VALUE_MESSAGES[name]})
        return out


def sort_upload(
    body: Body, kind: str, rules: LabelRules, names: Columns, runs: external_sort.SortedRuns, errors: RowErrors
) -> int:
    """Parse the body a batch at a time into ``runs`` (id, value, value code, row); rows without an id
    go to ``errors`` at once. Returns how many rows the body has."""
    row = 1
    for batch in read_batches(body, kind, ("id", "label"), names):
        ident = utf8_text(batch["id"], code="invalid_id", what="id", first_row=row)
        ident = _trimmed(ident) if kind in CSV_TYPES else ident
        values, codes = parse_labels(batch["label"], rules, row)
        rows = np.arange(row - 1, row - 1 + len(ident), dtype=np.int64)
        row += len(ident)
        missing = np.asarray(
            pc.fill_null(pc.equal(pc.utf8_length(ident), 0), True).to_numpy(zero_copy_only=False), dtype=np.bool_
        )
        if missing.any():
            errors.add(rows[missing], np.full(int(missing.sum()), _MISSING, dtype=np.int8), None)
            keep = ~missing
            ident, values, codes, rows = ident.filter(pa.array(keep)), values[keep], codes[keep], rows[keep]
        if len(ident):
            runs.add(ident, {"value": values, "code": codes, "row": rows})
    return row - 1


class _Join:
    """The set's sorted ids and labels a stored chunk at a time, met by the sorted upload's rows.

    Each chunk's labels are updated in place and (when ``writer``) written as the next labels
    batch once the upload has moved past the chunk, while no row was wrong.
    """

    def __init__(self, chunks: Iterator[pa.Array], labels: Callable[[int, int, int], np.ndarray],
                 errors: RowErrors, writer: Any, digest: Any) -> None:
        self.chunks, self.read, self.errors, self.writer, self.digest = chunks, labels, errors, writer, digest
        self.k, self.start = -1, 0
        self.ids: pa.Array | None = None
        self.labels = np.zeros(0)
        self.upper = pa.array([""], pa.large_string())

    def advance(self) -> bool:
        """Write the current chunk's labels and move to the next chunk; False past the last."""
        if self.ids is not None and self.writer is not None and not self.errors.count:
            self.writer.write_batch(pa.record_batch([pa.array(self.labels, pa.float64())], schema=LABELS_SCHEMA))
            self.digest.update(self.labels.data)
        if self.ids is not None:
            self.start += len(self.ids)
        self.ids = next(self.chunks, None)
        if self.ids is None:
            return False
        self.k += 1
        self.labels = self.read(self.k, self.start, len(self.ids))
        # an upload id belongs to this chunk up to its last id: every id < that id + NUL (none: empty chunk)
        last = self.ids[len(self.ids) - 1].as_py() + "\x00" if len(self.ids) else ""
        self.upper = pa.array([last], pa.large_string())
        return True

    def rows_in_chunk(self, ids: pa.Array) -> int:
        """How many of the sorted ``ids`` sort up to the current chunk's last id."""
        return int(id_lookup.lower_bounds(ids, self.upper)[0])

    def check(self, ids: pa.Array, part: pa.Table) -> None:
        """Validate the sorted upload rows ``part`` (ids ``ids``) against the current chunk (none: past the
        set's last id); store their labels when no row is wrong."""
        n = len(ids)
        rows = part.column("row").to_numpy()
        pos = id_lookup.positions(self.ids, ids) if self.ids is not None else np.full(n, -1, dtype=np.int32)
        known = pos >= 0
        duplicate = np.zeros(n, dtype=bool)
        kpos = pos[known]
        if kpos.size > 1:
            # sorted by id: the rows of one id are adjacent; the first by row number is not a duplicate
            starts = np.flatnonzero(np.r_[True, kpos[1:] != kpos[:-1]])
            if starts.size < kpos.size:
                sizes = np.diff(np.r_[starts, kpos.size])
                krows = rows[known]
                first = np.minimum.reduceat(krows, starts)
                duplicate[known] = krows != np.repeat(first, sizes)
        already = np.zeros(n, dtype=bool)
        already[known] = ~np.isnan(self.labels[kpos])
        already &= ~duplicate
        code = part.column("code").to_numpy().astype(np.int8)
        code = np.where(code > 0, code + _ALREADY, 0).astype(np.int8)
        code[already] = _ALREADY
        code[duplicate] = _DUPLICATE
        code[~known] = _UNKNOWN
        bad = np.flatnonzero(code)
        if bad.size:
            self.errors.add(rows[bad], code[bad], lambda pick: ids.take(bad[pick]).to_pylist())
        elif not self.errors.count:
            self.labels[kpos] = part.column("value").to_numpy()


def merge_upload(ctx: LabelsContext, row: LabelSetRow, runs: external_sort.SortedRuns, errors: RowErrors,
                 writer: Any, digest: Any) -> None:
    """Walk the sorted upload and the set's sorted id chunks together: every row checked, and (with a
    ``writer`` and no wrong row) the set's new labels written a chunk at a time."""
    with labels_chunks(ctx, row) as labels:
        join = _Join(iter_id_chunks(ctx, row), labels, errors, writer, digest)
        join.advance()
        for part in runs.merged_tables():
            ids = id_lookup.flat_ids(part.column("id"))
            at = 0
            while at < len(ids):
                end = len(ids) if join.ids is None else at + join.rows_in_chunk(ids.slice(at))
                if end > at:
                    join.check(ids.slice(at, end - at), part.slice(at, end - at))
                if end < len(ids):
                    join.advance()
                at = end
            del part, ids
        if writer is not None and not errors.count:
            while join.advance():  # the chunks no row reached, copied
                pass


def put_labels(store: ObjectStore, key: str, staged: Path) -> None:
    """Put the staged labels file (in the request's scratch) under its content key in the shared
    store (known only once every batch is written)."""
    store.put_file(key, staged)


def upload_labels(
    ctx: LabelsContext, label_set_id: str, body: Body, content_type: str, *, validate_only: bool, claim: Claim | None,
    names: Columns = DEFAULT_COLUMNS, run_rows: int = external_sort.RUN_ROWS,
    batch_rows: int = external_sort.BATCH_ROWS,
) -> StoredResponse:
    """Validate and (unless ``validate_only``) store labels; all rows or none.

    Memory is bounded whatever the upload's and the set's size: the body is parsed a batch at a
    time into sorted runs of ``run_rows`` rows (:mod:`.external_sort`, ``batch_rows`` rows per
    run batch), merged a range at a time and joined with the set's sorted ids a stored chunk at
    a time (:func:`merge_upload`); the new labels object is written a batch per ids chunk while
    no row is wrong, then put under its content key. The errors are those of the in-memory
    check (:func:`row_errors`): the count, the first ``MAX_REPORTED_ERRORS`` by row. The runs and
    the staged labels are the request's own working files, in its local scratch
    (``LabelsContext.scratch``, removed at the end whatever happened); the shared store gets the
    labels object once. A refused upload leaves no labels object.
    """
    kind = media_type(content_type)
    with ctx.sessions() as s:
        row = load_label_set(s, label_set_id)
    if not row.ids_ready:
        raise Conflict("ids_missing", "upload the label set's ids first")
    if row.labels_version == LABELS_DELETED:  # 409 before any parsing
        raise Conflict("labels_deleted", "this label set's raw labels were deleted")
    with ctx.scratch() as scratch:
        runs = external_sort.SortedRuns(
            scratch, "runs", run_rows=run_rows, batch_rows=batch_rows, payload=UPLOAD_PAYLOAD
        )
        staged = f"staged{LABELS_SUFFIX}"
        errors = RowErrors()
        try:
            n = sort_upload(body, kind, rules_of(row), names, runs, errors)
            if n == 0:
                raise InvalidInput("empty_upload", "upload has no rows")
            digest = hashlib.sha256()
            with contextlib.ExitStack() as stack:
                writer = None
                if not validate_only:
                    writer = stack.enter_context(ipc.new_file(stack.enter_context(
                        scratch.open_output_stream(staged)), LABELS_SCHEMA))
                merge_upload(ctx, row, runs, errors, writer, digest)
                if errors.count:  # raised inside the stream: the staged object is never completed
                    raise InvalidInput(
                        "invalid_labels", f"{errors.count} of {n} rows are invalid; nothing was stored",
                        errors.details(),
                    )
            runs.close()
            labeled_after = row.labeled + (0 if validate_only else n)
            response = responses.LabelsUploaded(
                label_set_id=label_set_id,
                validate_only=validate_only,
                accepted_rows=int(n),
                labeled=int(labeled_after),
                missing=int(row.n_ids - labeled_after),
            )
            out = StoredResponse(200, response.model_dump())
            if validate_only:
                return out
            # Named by content, not by version: an upload that loses the compare-and-swap below has
            # written its own object, never over the winner's.
            key = labels_object_key(label_set_id, digest.hexdigest())
            put_labels(ctx.store, key, scratch.local_path(staged))
            with ctx.sessions.begin() as s:
                moved = s.execute(
                    update(LabelSetRow)
                    .where(LabelSetRow.id == label_set_id, LabelSetRow.labels_version == row.labels_version)
                    .values(labels_version=row.labels_version + 1, labels_object=key, labeled=labeled_after)
                )
                if moved.rowcount != 1:  # type: ignore[attr-defined]
                    raise Conflict(
                        "concurrent_upload", "another upload to this label set finished first; retry",
                        headers={"Retry-After": "1"},
                    )
                if claim is not None:
                    claim.complete(s, out)
            # The object this one replaces may still be open in a reader that loaded the row before
            # the swap: the sweep removes it once no row names it and it is old.
            return out
        finally:
            runs.close()
            release_unused_memory()


def upload_ids(
    ctx: LabelsContext, label_set_id: str, body: Body, content_type: str, claim: Claim | None,
    names: Columns = DEFAULT_COLUMNS,
) -> StoredResponse:
    """Read the ids a chunk at a time into :func:`.label_sets.set_ids` (which sorts them externally):
    the body is never held whole."""
    kind = media_type(content_type)

    def chunks() -> Iterator[pa.Array]:
        row = 1
        for batch in read_batches(body, kind, ("id",), names):
            ids = utf8_text(batch["id"], code="invalid_id", what="id", first_row=row)
            row += len(ids)
            yield _trimmed(ids) if kind in CSV_TYPES else ids

    return set_ids(ctx, label_set_id, chunks(), claim)
