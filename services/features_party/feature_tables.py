"""Feature tables: the features party's own rows, uploaded as CSV, kept as Parquet.

Every feature column is either ``numeric`` (stored as float64) or ``categorical``
(stored as string), so training and prediction see the same types no matter how
the CSV spelled them. The id column is always read as a string: ids are joined
with the ids of a release, which are strings on the wire.
"""

from __future__ import annotations

import io
import logging
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from features_party import store
from labeldp.errors import Conflict, InvalidInput, LabelDPError, NotFound
from labeldp.parquet_batches import utf8_text
from labeldp.schema import FEATURE_TABLE_NAME
from labeldp.service.idempotency import Claim, StoredResponse
from labeldp.service.pagination import keyset_page
from labeldp.service.timestamps import iso, utcnow

log = logging.getLogger("labeldp.features")

TABLE_NAME = re.compile(FEATURE_TABLE_NAME)
TABLES_DIR = "tables"
NUMERIC = "numeric"
CATEGORICAL = "categorical"
MAX_EXAMPLES = 5
ROW_GROUP_ROWS = 65_536
"""Rows per row group of a stored table: a streamed pass over it (the staging join) holds one row group's
column chunks. Decided in docs/decisions/0016-feature-table-row-groups.md."""


@dataclass(frozen=True)
class ParsedTable:
    """A validated upload: the id column first, then features with normalized types."""

    table: pa.Table
    id_column: str
    columns: list[dict[str, str]]  # [{"name", "kind"}] for the feature columns


def split_names(value: str | None) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]`` (query-parameter lists)."""
    if not value:
        return []
    return [part.strip() for part in value.split(",") if part.strip()]


def check_table_name(name: str) -> None:
    if not TABLE_NAME.match(name or ""):
        raise InvalidInput(
            "invalid_table_name", "table name must match ^[A-Za-z0-9_.-]{1,64}$"
        )


def _csv_error(exc: Exception) -> LabelDPError:
    # pyarrow's message quotes the offending cell; keep only the column number.
    match = re.search(r"column #(\d+)", str(exc))
    details = [{"column_index": int(match.group(1))}] if match else []
    return InvalidInput("invalid_csv", "the body is not a CSV this service can read", details)


def parse_csv(
    body: bytes,
    id_column: str,
    categorical: Sequence[str] = (),
    numeric: Sequence[str] = (),
) -> ParsedTable:
    """Parse and validate a CSV upload; undeclared columns get their kind from pyarrow's type."""
    overlap = (set(categorical) & set(numeric)) | ({id_column} & (set(categorical) | set(numeric)))
    if overlap:
        raise InvalidInput(
            "invalid_column_declaration",
            "a column is declared twice or the id column is declared as a feature",
            [{"column": name} for name in sorted(overlap)],
        )
    # The id column as bytes: utf8_text names the row whose id is not UTF-8 (invalid_id) instead of
    # a whole-file invalid_csv; other text is checked the same way below.
    column_types: dict[str, pa.DataType] = {id_column: pa.binary()}
    column_types.update({name: pa.string() for name in categorical})
    column_types.update({name: pa.float64() for name in numeric})
    try:
        table = pacsv.read_csv(
            io.BytesIO(body),
            convert_options=pacsv.ConvertOptions(column_types=column_types, strings_can_be_null=True),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise _csv_error(exc) from None

    try:
        names = table.column_names  # decoded only here
    except UnicodeDecodeError:
        raise InvalidInput("invalid_csv", "the CSV header is not UTF-8") from None
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise InvalidInput("invalid_csv", "the CSV header repeats a column name", [{"column": n} for n in dupes])
    if id_column not in names:
        raise InvalidInput("missing_id_column", f"the CSV has no id column {id_column!r}")
    unknown = [n for n in [*categorical, *numeric] if n not in names]
    if unknown:
        raise InvalidInput(
            "unknown_column", "declared columns are not in the CSV", [{"column": n} for n in unknown]
        )
    if table.num_rows == 0:
        raise InvalidInput("invalid_csv", "the CSV has no data rows")

    ids = utf8_text(table.column(id_column), code="invalid_id", what="id")
    if ids.null_count:
        raise InvalidInput("invalid_csv", "some rows have an empty id", [{"count": ids.null_count}])
    counts = pc.value_counts(ids)
    repeated = counts.filter(pc.greater(counts.field("counts"), pa.scalar(1)))
    if len(repeated):
        examples = repeated.field("values").to_pylist()[:MAX_EXAMPLES]
        raise InvalidInput(
            "duplicate_ids",
            f"{len(repeated)} ids occur more than once",
            [{"count": len(repeated), "examples": examples}],
        )

    arrays: list[pa.ChunkedArray] = [ids]
    fields: list[pa.Field] = [pa.field(id_column, pa.string())]
    columns: list[dict[str, str]] = []
    for name in names:
        if name == id_column:
            continue
        column = table.column(name)
        dtype: pa.DataType
        if name in numeric or (name not in categorical and _is_numeric(column.type)):
            kind, dtype = NUMERIC, pa.float64()
        else:
            kind, dtype = CATEGORICAL, pa.string()
            # a column whose bytes are not UTF-8 is inferred as binary: name its row, not a 500
            column = utf8_text(column, code="invalid_csv", what=f"value in column {name[:100]!r}")
        arrays.append(column.cast(dtype))
        fields.append(pa.field(name, dtype))
        columns.append({"name": name, "kind": kind})
    return ParsedTable(pa.Table.from_arrays(arrays, schema=pa.schema(fields)), id_column, columns)


def _is_numeric(dtype: pa.DataType) -> bool:
    return pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_decimal(dtype)


def table_id(row: store.FeatureTable) -> str:
    """``ft_`` + the table file's random name: unique per table, fixed once written, no extra column."""
    return "ft_" + PurePosixPath(row.path).stem


def describe(row: store.FeatureTable) -> dict[str, Any]:
    return {
        "id": table_id(row),
        "name": row.name,
        "n_rows": row.n_rows,
        "id_column": row.id_column,
        "columns": row.columns,
        "created_at": iso(row.created_at),
    }


def create_feature_table(
    session_factory: sessionmaker[Session],
    data_dir: Path,
    name: str,
    body: bytes,
    id_column: str = "id",
    categorical: Sequence[str] = (),
    numeric: Sequence[str] = (),
    claim: Claim | None = None,
) -> StoredResponse:
    """Validate, write the Parquet file, then record it; on any error nothing remains.

    With an ``Idempotency-Key`` the row and the stored answer (``claim``) commit together.
    """
    check_table_name(name)
    with session_factory() as session:
        if session.get(store.FeatureTable, name) is not None:
            raise _exists(name)
    parsed = parse_csv(body, id_column, categorical, numeric)

    relative = f"{TABLES_DIR}/{uuid.uuid4().hex}.parquet"
    path = Path(data_dir) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    try:
        pq.write_table(parsed.table, tmp, row_group_size=ROW_GROUP_ROWS)
        tmp.replace(path)
        row = store.FeatureTable(
            name=name,
            id_column=id_column,
            n_rows=parsed.table.num_rows,
            columns=parsed.columns,
            path=relative,
            created_at=utcnow(),  # set here: the answer is built before the row is flushed
        )
        response = StoredResponse(201, describe(row), {"Location": f"/v1/feature-tables/{name}"})
        with session_factory.begin() as session:
            if session.get(store.FeatureTable, name) is not None:
                raise _exists(name)
            session.add(row)
            if claim is not None:
                claim.complete(session, response)
    except IntegrityError:
        _remove(tmp, path)
        raise _exists(name) from None
    except BaseException:
        _remove(tmp, path)
        raise
    log.info("feature table %s stored: %d rows, %d columns", name, row.n_rows, len(row.columns))
    return response


def _exists(name: str) -> LabelDPError:
    return Conflict("feature_table_exists", f"feature table {name!r} already exists")


def _remove(*paths: Path) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def list_feature_tables(session: Session, limit: int, cursor: str | None) -> dict[str, Any]:
    """A page of feature tables, oldest first (keyset on creation time and name)."""
    return keyset_page(
        session, select(store.FeatureTable), store.FeatureTable.created_at, store.FeatureTable.name, limit, cursor,
        describe,
    )


def get_feature_table(session: Session, name: str) -> store.FeatureTable:
    row = session.get(store.FeatureTable, name)
    if row is None:
        raise NotFound("feature_table_not_found", "no such feature table")
    return row


TABLE_ID = re.compile(r"^ft_[0-9a-f]{32}$")


def get_feature_table_by_id(session: Session, table_id: str) -> store.FeatureTable:
    """The table whose id (``ft_`` + its file's name, :func:`table_id`) is ``table_id``, or 404."""
    row = None
    if TABLE_ID.match(table_id):
        path = f"{TABLES_DIR}/{table_id.removeprefix('ft_')}.parquet"
        row = session.execute(select(store.FeatureTable).where(store.FeatureTable.path == path)).scalar_one_or_none()
    if row is None:
        raise NotFound("feature_table_not_found", "no such feature table")
    return row


def read_table(data_dir: Path, row: store.FeatureTable, columns: list[str] | None = None) -> pa.Table:
    """The stored table (id column first), or only ``columns`` of it."""
    return pq.read_table(Path(data_dir) / row.path, columns=columns)


def unknown_ids_error(missing: int, examples: list[str]) -> LabelDPError:
    """422 ``unknown_ids`` with a count and a few examples, never the full list."""
    return InvalidInput(
        "unknown_ids",
        f"{missing} ids are not in the feature table",
        [{"count": missing, "examples": examples[:MAX_EXAMPLES]}],
    )


def missing_ids(ids: pa.Array | pa.ChunkedArray, table_ids: pa.Array | pa.ChunkedArray) -> tuple[int, list[str]]:
    """How many of ``ids`` are not in ``table_ids``, and a few of them."""
    present = pc.is_in(ids, value_set=table_ids)
    absent = pc.invert(present)
    count = int(pc.sum(pc.cast(absent, pa.int64())).as_py() or 0)
    examples = pc.filter(ids, absent).slice(0, MAX_EXAMPLES).to_pylist() if count else []
    return count, [str(i) for i in examples]


def select_rows(table: pa.Table, id_column: str, ids: Sequence[str] | pa.Array) -> pa.Table:
    """The rows of ``table`` for ``ids``, in that order, without the id column.

    Raises ``unknown_ids`` when an id has no row.
    """
    wanted = ids if isinstance(ids, pa.Array) else pa.array(ids, pa.string())
    table_ids = table.column(id_column).combine_chunks()
    positions = pc.index_in(wanted, value_set=table_ids)
    if positions.null_count:
        count, examples = missing_ids(wanted, table_ids)
        raise unknown_ids_error(count, examples)
    return table.drop_columns([id_column]).take(positions)
