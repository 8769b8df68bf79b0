"""Feature tables: the features party's own rows, uploaded (or named by an object URL) as CSV,
Parquet or Arrow, kept as Parquet objects in the object store.

A source is read one bounded batch at a time (a CSV block, a Parquet or Arrow batch of
``ROW_GROUP_ROWS`` rows), never whole: converted to a local scratch file, its ids counted by
hash partitions, then streamed to the store (docs/architecture.md, "Storage"). The kinds of a
CSV's undeclared columns are inferred from its first block (``CSV_BLOCK_BYTES``); declare
``categorical``/``numeric`` to override.

Every feature column is either ``numeric`` (stored as float64) or ``categorical``
(stored as string), so training and prediction see the same types no matter how
the CSV spelled them. The id column is always read as a string: ids are joined
with the ids of a release, which are strings on the wire.
"""

from __future__ import annotations

import logging
import re
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, cast

import pyarrow as pa
import pyarrow.acero as acero
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from features_party import responses, store
from labeldp.errors import Conflict, InvalidInput, LabelDPError, NotFound
from labeldp.learning.id_partitions import repeated_ids
from labeldp.learning.staging import PARTITION_ROWS
from labeldp.parquet_batches import check_column_type, is_number, open_for_batches, utf8_text
from labeldp.schema import FEATURE_TABLE_NAME
from labeldp.service.idempotency import Claim, StoredResponse
from labeldp.service.pagination import ASC, Order, keyset_page
from labeldp.service.timestamps import iso, utcnow
from labeldp.storage import ObjectStore

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
    n_rows: int = 0


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
    if TABLE_ID.match(name):
        raise InvalidInput("invalid_table_name", "a table name may not take the shape of a table id (ft_ + 32 hex)")


def _csv_error(exc: Exception) -> LabelDPError:
    # pyarrow's message quotes the offending cell; keep only the column number.
    match = re.search(r"column #(\d+)", str(exc))
    details = [{"column_index": int(match.group(1))}] if match else []
    return InvalidInput("invalid_csv", "the body is not a CSV this service can read", details)


CSV, PARQUET, ARROW = "csv", "parquet", "arrow"
FORMATS = (CSV, PARQUET, ARROW)
_WHAT = {CSV: "CSV", PARQUET: "Parquet file", ARROW: "Arrow file"}
CSV_BLOCK_BYTES = 4 << 20
"""Bytes of CSV parsed at a time: kinds of undeclared columns are inferred from the first block."""
_READ_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OSError)


def sniff(head: bytes) -> str:
    """A table's format from its first bytes: Parquet and Arrow IPC have magic numbers; the rest is CSV."""
    if head.startswith(b"PAR1"):
        return PARQUET
    if head.startswith((b"ARROW1", b"\xff\xff\xff\xff")):
        return ARROW
    return CSV


def _bad(fmt: str) -> str:
    return f"invalid_{fmt}"


@dataclass
class _Plan:
    """How each source column becomes a stored one: the id column as text, features as float64 or text."""

    fmt: str
    id_column: str
    columns: list[dict[str, str]]  # [{"name", "kind"}] for the feature columns

    @property
    def schema(self) -> pa.Schema:
        return pa.schema(
            [pa.field(self.id_column, pa.string())]
            + [pa.field(c["name"], pa.float64() if c["kind"] == NUMERIC else pa.string()) for c in self.columns]
        )


def _plan(
    fmt: str, schema: pa.Schema, id_column: str, categorical: Sequence[str], numeric: Sequence[str]
) -> _Plan:
    what = _WHAT[fmt]
    try:
        names = schema.names  # decoded only here
    except UnicodeDecodeError:
        raise InvalidInput(_bad(fmt), f"the {what}'s column names are not UTF-8") from None
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise InvalidInput(_bad(fmt), f"the {what} repeats a column name", [{"column": n} for n in dupes])
    if id_column not in names:
        raise InvalidInput("missing_id_column", f"the {what} has no id column {id_column!r}")
    unknown = [n for n in [*categorical, *numeric] if n not in names]
    if unknown:
        raise InvalidInput(
            "unknown_column", f"declared columns are not in the {what}", [{"column": n} for n in unknown]
        )
    typed = fmt != CSV  # a CSV's types are pyarrow's guesses, cast as before; a typed file's are checked
    if typed:
        check_column_type(id_column, schema.field(id_column).type)
    columns: list[dict[str, str]] = []
    for name in names:
        if name == id_column:
            continue
        dtype = schema.field(name).type
        if typed:
            check_column_type(name, dtype)
        numeric_kind = name in numeric or (name not in categorical and is_number(dtype))
        columns.append({"name": name, "kind": NUMERIC if numeric_kind else CATEGORICAL})
    return _Plan(fmt, id_column, columns)


def _normalize(batch: pa.RecordBatch, plan: _Plan, first_row: int) -> pa.Table:
    """One source batch as stored: ids as text (none empty), numbers as float64, categories as text."""
    bad = _bad(plan.fmt)
    ids = batch.column(plan.id_column)
    ids = ids.cast(pa.string()) if is_number(ids.type) else utf8_text(
        ids, code="invalid_id", what="id", first_row=first_row
    )
    if ids.null_count:
        raise InvalidInput(bad, "some rows have an empty id", [{"count": ids.null_count}])
    arrays = [ids]
    for column in plan.columns:
        name, values = column["name"], batch.column(column["name"])
        if column["kind"] == NUMERIC:
            try:
                values = values.cast(pa.float64())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise InvalidInput(bad, "a numeric column has a value that is not a number",
                                   [{"column": name[:100]}]) from None
        else:
            # a column whose bytes are not UTF-8 is inferred as binary: name its row, not a 500
            values = utf8_text(values, code=bad, what=f"value in column {name[:100]!r}", first_row=first_row)
        arrays.append(values)
    return pa.Table.from_arrays(arrays, schema=plan.schema)


def _read_batches(
    source: pa.NativeFile, fmt: str, id_column: str, categorical: Sequence[str], numeric: Sequence[str]
) -> tuple[_Plan, Iterator[pa.RecordBatch]]:
    """The plan and the batches of an open source (one bounded batch at a time, never the whole table)."""
    bad, what = _bad(fmt), _WHAT[fmt]
    schema: pa.Schema
    batches: Iterator[pa.RecordBatch]
    try:
        if fmt == CSV:
            # The id column as bytes: utf8_text names the row whose id is not UTF-8 (invalid_id) instead of
            # a whole-file invalid_csv; other text is checked the same way.
            types: dict[str, pa.DataType] = {id_column: pa.binary()}
            types.update({name: pa.string() for name in categorical})
            types.update({name: pa.float64() for name in numeric})
            reader = pacsv.open_csv(
                cast(Any, source),
                read_options=pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES),
                convert_options=pacsv.ConvertOptions(column_types=types, strings_can_be_null=True),
            )
            schema, batches = reader.schema, iter(reader)
        elif fmt == PARQUET:
            parquet = open_for_batches(source)
            schema, batches = parquet.schema_arrow, parquet.iter_batches(batch_size=ROW_GROUP_ROWS)
        else:
            try:
                ipc = pa.ipc.open_file(source)
                schema = ipc.schema
                batches = (ipc.get_batch(i) for i in range(ipc.num_record_batches))
            except pa.ArrowInvalid:
                source.seek(0)
                stream = pa.ipc.open_stream(source)
                schema, batches = stream.schema, iter(stream)
    except _READ_ERRORS as exc:
        if fmt == CSV:
            raise _csv_error(exc) from None
        raise InvalidInput(bad, f"the body is not a {what} this service can read") from None
    plan = _plan(fmt, schema, id_column, categorical, numeric)

    def checked() -> Iterator[pa.RecordBatch]:
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except _READ_ERRORS as exc:
                if fmt == CSV:
                    raise _csv_error(exc) from None
                raise InvalidInput(bad, f"the {what} cannot be read to its end") from None
            # a source's batch may be large (an Arrow file's are the writer's): store it in bounded slices
            for start in range(0, batch.num_rows, ROW_GROUP_ROWS):
                yield batch.slice(start, ROW_GROUP_ROWS)

    return plan, checked()


class _RowGroups:
    """Writes ``ROW_GROUP_ROWS``-row groups of a Parquet file, buffering at most one group."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.writer = pq.ParquetWriter(path, schema)
        self.pending: list[pa.Table] = []
        self.n_pending = 0
        self.rows = 0

    def add(self, table: pa.Table) -> None:
        self.pending.append(table)
        self.n_pending += table.num_rows
        while self.n_pending >= ROW_GROUP_ROWS:
            merged = pa.concat_tables(self.pending)
            self.writer.write_table(merged.slice(0, ROW_GROUP_ROWS), row_group_size=ROW_GROUP_ROWS)
            rest = merged.slice(ROW_GROUP_ROWS)
            self.pending, self.n_pending = ([rest] if rest.num_rows else []), rest.num_rows
        self.rows += table.num_rows

    def close(self) -> None:
        if self.n_pending:
            self.writer.write_table(pa.concat_tables(self.pending), row_group_size=ROW_GROUP_ROWS)
        self.pending, self.n_pending = [], 0
        self.writer.close()


def convert(
    source: pa.NativeFile,
    fmt: str,
    destination: Path,
    id_column: str,
    categorical: Sequence[str] = (),
    numeric: Sequence[str] = (),
    partition_rows: int = PARTITION_ROWS,
) -> ParsedTable:
    """Read ``source`` (CSV, Parquet or Arrow) a batch at a time into the stored form at ``destination``.

    Every check of an upload runs here: columns, kinds, ids (text, none empty, none repeated:
    counted by id-hash partitions, :func:`labeldp.learning.id_partitions.repeated_ids`).
    ``ParsedTable.table`` is the stored schema's empty table (no rows are kept in memory).
    """
    overlap = (set(categorical) & set(numeric)) | ({id_column} & (set(categorical) | set(numeric)))
    if overlap:
        raise InvalidInput(
            "invalid_column_declaration",
            "a column is declared twice or the id column is declared as a feature",
            [{"column": name} for name in sorted(overlap)],
        )
    plan, batches = _read_batches(source, fmt, id_column, categorical, numeric)
    writer = _RowGroups(destination, plan.schema)
    try:
        for batch in batches:
            writer.add(_normalize(batch, plan, writer.rows + 1))
    finally:
        writer.close()
    if writer.rows == 0:
        raise InvalidInput(_bad(fmt), f"the {_WHAT[fmt]} has no data rows")
    count, examples = repeated_ids(destination, id_column, destination.with_name("ids"), partition_rows)
    if count:
        raise InvalidInput(
            "duplicate_ids", f"{count} ids occur more than once", [{"count": count, "examples": examples}]
        )
    return ParsedTable(plan.schema.empty_table(), id_column, plan.columns, writer.rows)


def parse_csv(
    body: bytes,
    id_column: str,
    categorical: Sequence[str] = (),
    numeric: Sequence[str] = (),
) -> ParsedTable:
    """Parse and validate a CSV held in memory (small tables, tests); uploads go through :func:`convert`."""
    with tempfile.TemporaryDirectory() as work:
        destination = Path(work) / "table.parquet"
        parsed = convert(pa.BufferReader(body), CSV, destination, id_column, categorical, numeric)
        return ParsedTable(pq.read_table(destination), id_column, parsed.columns, parsed.n_rows)


def _is_numeric(dtype: pa.DataType) -> bool:
    return pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_decimal(dtype)


def table_id(row: store.FeatureTable) -> str:
    """``ft_`` + the table file's random name: unique per table, fixed once written, no extra column."""
    return "ft_" + PurePosixPath(row.path).stem


def describe(row: store.FeatureTable) -> responses.FeatureTable:
    return responses.FeatureTable(
        id=table_id(row),
        name=row.name,
        n_rows=row.n_rows,
        id_column=row.id_column,
        columns=row.columns,
        created_at=iso(row.created_at),
    )


@dataclass(frozen=True)
class TableSource:
    """Where an upload's bytes are: a spooled request body, or an object a reference names."""

    open: Callable[[], pa.NativeFile]
    """A fresh random-access reader (closed by the caller)."""
    fmt: str | None = None
    """``csv``, ``parquet`` or ``arrow``; None: from the first bytes (:func:`sniff`)."""


def local_source(path: Path, fmt: str | None = None) -> TableSource:
    return TableSource(lambda: pa.OSFile(str(path), "rb"), fmt)


def create_feature_table(
    session_factory: sessionmaker[Session],
    objects: ObjectStore,
    scratch: Path,
    name: str,
    source: TableSource,
    id_column: str = "id",
    categorical: Sequence[str] = (),
    numeric: Sequence[str] = (),
    claim: Claim | None = None,
    partition_rows: int = PARTITION_ROWS,
) -> StoredResponse:
    """Validate and convert the source a batch at a time, store the Parquet object, then record it.

    The stored form is written to a scratch file under ``scratch`` first (a local folder of this
    process), checked (duplicate ids need the whole id column, counted by partitions), then
    streamed to the object store; on any error nothing remains. With an ``Idempotency-Key`` the
    row and the stored answer (``claim``) commit together.
    """
    check_table_name(name)
    with session_factory() as session:
        if session.get(store.FeatureTable, name) is not None:
            raise _exists(name)
    key, parsed, fmt = _store_source(objects, scratch, source, id_column, categorical, numeric, partition_rows)
    try:
        row = store.FeatureTable(
            name=name,
            id_column=id_column,
            n_rows=parsed.n_rows,
            columns=parsed.columns,
            path=key,
            created_at=utcnow(),  # set here: the answer is built before the row is flushed
        )
        response = StoredResponse(
            201, describe(row).model_dump(), {"Location": f"/v1/feature-tables/{table_id(row)}"}
        )
        with session_factory.begin() as session:
            if session.get(store.FeatureTable, name) is not None:
                raise _exists(name)
            session.add(row)
            if claim is not None:
                claim.complete(session, response)
    except IntegrityError:
        objects.delete(key)
        raise _exists(name) from None
    except BaseException:
        objects.delete(key)
        raise
    log.info("feature table %s stored (%s): %d rows, %d columns", name, fmt, row.n_rows, len(row.columns))
    return response


def _store_source(
    objects: ObjectStore, scratch: Path, source: TableSource, id_column: str, categorical: Sequence[str],
    numeric: Sequence[str], partition_rows: int,
) -> tuple[str, ParsedTable, str]:
    """Convert and check ``source`` in a scratch file, then put it in the store: (its key, what it holds,
    its format). Nothing is stored when a check fails; the caller deletes the object if its row is not
    written."""
    if source.fmt is not None and source.fmt not in FORMATS:
        raise InvalidInput("invalid_format", f"format must be one of {', '.join(FORMATS)}")
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as work:
        local = Path(work) / "table.parquet"
        with source.open() as reader:
            fmt = source.fmt or sniff(reader.read(8))
            reader.seek(0)
            parsed = convert(reader, fmt, local, id_column, categorical, numeric, partition_rows)
        key = f"{TABLES_DIR}/{uuid.uuid4().hex}.parquet"
        objects.put_file(key, local)
    return key, parsed, fmt


ACTIVE_TRAININGS = (store.QUEUED, store.RUNNING, store.CANCELLING)
"""The training states that will read a feature table (a worker reads it by name when it starts)."""


def _lock_unused(session: Session, name: str) -> store.FeatureTable:
    """The table's row, locked until the transaction ends; 409 ``feature_table_in_use`` while a training
    that has not finished names it (a worker reads the table by name when it starts)."""
    row = session.execute(
        select(store.FeatureTable).where(store.FeatureTable.name == name).with_for_update()
    ).scalar_one_or_none()
    if row is None:
        raise NotFound("feature_table_not_found", "no such feature table")
    busy = session.scalar(
        select(func.count()).select_from(store.Training)
        .where(store.Training.feature_table == name, store.Training.status.in_(ACTIVE_TRAININGS))
    )
    if busy:
        raise Conflict(
            "feature_table_in_use", f"{busy} trainings that have not finished read this table: wait or cancel them",
            [{"trainings": int(busy)}],
        )
    return row


def replace_feature_table(
    session_factory: sessionmaker[Session],
    objects: ObjectStore,
    scratch: Path,
    name: str,
    source: TableSource,
    id_column: str = "id",
    categorical: Sequence[str] = (),
    numeric: Sequence[str] = (),
    claim: Claim | None = None,
    partition_rows: int = PARTITION_ROWS,
) -> StoredResponse:
    """Replace the rows of the table ``name`` by a new upload, checked exactly as a new table.

    The new object is written first; the row then moves to it in one transaction (which refuses
    while a training that has not finished names the table, ``feature_table_in_use``), so the
    table is the old one or the new one, never a mix; on any failure the new object is deleted.
    The table gets a new ``ft_`` id (an id names one content); finished trainings and their
    models are untouched (a model holds what it learned). The old object goes after the commit.
    """
    with session_factory() as session:
        get_feature_table(session, name)  # 404 before reading the body
    key, parsed, fmt = _store_source(objects, scratch, source, id_column, categorical, numeric, partition_rows)
    try:
        with session_factory.begin() as session:
            row = _lock_unused(session, name)
            old = row.path
            row.path, row.id_column, row.n_rows, row.columns = key, id_column, parsed.n_rows, parsed.columns
            response = StoredResponse(200, describe(row).model_dump())
            if claim is not None:
                claim.complete(session, response)
    except BaseException:
        objects.delete(key)
        raise
    _delete_object(objects, old)
    log.info("feature table %s replaced (%s): %d rows, %d columns", name, fmt, parsed.n_rows, len(parsed.columns))
    return response


def delete_feature_table(
    session_factory: sessionmaker[Session], objects: ObjectStore, name: str
) -> responses.Deleted:
    """Delete the table ``name``: its row (409 ``feature_table_in_use`` while a training that has not
    finished names it), then its object. Models trained on it keep working: what they need travels
    in their own files; predictions by id then need another table."""
    with session_factory.begin() as session:
        row = _lock_unused(session, name)
        path, table = row.path, table_id(row)
        session.delete(row)
    _delete_object(objects, path)
    log.info("feature table %s deleted", name)
    return responses.Deleted(id=table, deleted=True)


def _delete_object(objects: ObjectStore, key: str) -> None:
    """Remove an object no row names any more; a failure is logged (the row is already right)."""
    try:
        objects.delete(key)
    except Exception as exc:  # the catalogue committed: the table is already deleted or replaced
        log.warning("feature table object %s could not be deleted: %s", key, type(exc).__name__)


def reference_source(url: str, allowed: str, fmt: str | None = None, **options: Any) -> TableSource:
    """The object ``url`` names, if it lies under one of the comma-separated ``allowed`` URL prefixes
    (``LABELDP_FEATURE_SOURCES``); else 422 ``feature_source_not_allowed``. ``options``: S3 options
    as :meth:`ObjectStore.from_url` takes them. A missing object is 422 ``feature_source_not_found``."""
    for prefix in split_names(allowed):
        base = prefix.rstrip("/") + "/"
        if not url.startswith(base) or len(url) == len(base):
            continue
        key = url[len(base):]
        if "?" in key or "#" in key or any(p in ("", ".", "..") or p.startswith(".") for p in key.split("/")):
            break  # no way out of the prefix, and no hidden (unfinished) objects
        bucket = ObjectStore.from_url(base.rstrip("/"), **options)

        def open_object(bucket: ObjectStore = bucket, key: str = key) -> pa.NativeFile:
            try:
                return bucket.open_input_file(key)
            except NotFound:
                raise InvalidInput("feature_source_not_found", "no object at the feature source URL") from None

        return TableSource(open_object, fmt)
    raise InvalidInput(
        "feature_source_not_allowed",
        "this service may not read that URL: an operator lists the allowed prefixes in LABELDP_FEATURE_SOURCES",
    )


def _exists(name: str) -> LabelDPError:
    return Conflict("feature_table_exists", f"feature table {name!r} already exists")


def list_feature_tables(
    session: Session, limit: int, cursor: str | None, order: Order = ASC, name: str | None = None
) -> responses.FeatureTablePage:
    """A page of feature tables in creation ``order`` (keyset on creation time and name; ``name``: only that one)."""
    stmt = select(store.FeatureTable)
    if name is not None:
        stmt = stmt.where(store.FeatureTable.name == name)
    return responses.FeatureTablePage(**keyset_page(
        session, stmt, store.FeatureTable.created_at, store.FeatureTable.name, limit, cursor,
        describe, order,
    ))


def get_feature_table(session: Session, name: str) -> store.FeatureTable:
    row = session.get(store.FeatureTable, name)
    if row is None:
        raise NotFound("feature_table_not_found", "no such feature table")
    return row


TABLE_ID = re.compile(r"^ft_[0-9a-f]{32}$")


TABLE_NOT_FOUND = (
    "no feature table has that id: ids look like ft_…; find one by name with GET /v1/feature-tables?name=…"
)


def find_hinted_table(session: Session, hint: str) -> store.FeatureTable | None:
    """The table a release's ``feature_table`` hint names (a cross-party hint the labels party passes on,
    not a reference: its name, or the id the advertiser copied), or None."""
    if TABLE_ID.match(hint):
        try:
            return get_feature_table_by_id(session, hint)
        except NotFound:
            pass
    return session.get(store.FeatureTable, hint)


def get_feature_table_by_id(session: Session, table_id: str) -> store.FeatureTable:
    """The table whose id (``ft_`` + its file's name, :func:`table_id`) is ``table_id``; anything else, a
    name included, is 404 ``feature_table_not_found`` saying how to find the id (issue 26: one way to
    refer to a resource)."""
    row = None
    if TABLE_ID.match(table_id):
        path = f"{TABLES_DIR}/{table_id.removeprefix('ft_')}.parquet"
        row = session.execute(select(store.FeatureTable).where(store.FeatureTable.path == path)).scalar_one_or_none()
    if row is None:
        raise NotFound("feature_table_not_found", TABLE_NOT_FOUND)
    return row


def read_table(objects: ObjectStore, row: store.FeatureTable, columns: list[str] | None = None) -> pa.Table:
    """The stored table (id column first), or only ``columns`` of it."""
    with objects.open_input_file(row.path) as f:
        return pq.read_table(f, columns=columns)


def missing_from_table(
    objects: ObjectStore, row: store.FeatureTable, ids: pa.Array | pa.ChunkedArray
) -> tuple[int, list[str]]:
    """How many of ``ids`` the table lacks, and a few of them (in ``ids``' order). One hash join (Arrow's
    Acero, an anti join): the hash table is of ``ids``' distinct values, built once; the table's id column
    streams through it a row group at a time, so what this holds is of the size of ``ids``, never the table's."""
    wanted = pa.table({"wanted": pc.unique(ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids)
                       .cast(pa.string())})
    with objects.open_input_file(row.path) as f:
        batches = (pa.record_batch([batch.column(0).cast(pa.string())], schema=ID_SIDE)
                   for batch in open_for_batches(f).iter_batches(batch_size=ROW_GROUP_ROWS, columns=[row.id_column]))
        source = acero.RecordBatchReaderSourceNodeOptions(  # type: ignore[attr-defined]  # (pyarrow-stubs lack it)
            pa.RecordBatchReader.from_batches(ID_SIDE, batches))
        table_side = acero.Declaration("record_batch_reader_source", source)
        join = acero.Declaration("hashjoin", acero.HashJoinNodeOptions("right anti", ["id"], ["wanted"]), inputs=[
            table_side, acero.Declaration("table_source", acero.TableSourceNodeOptions(wanted))])
        absent = join.to_table(use_threads=False).column("wanted")
    if not len(absent):
        return 0, []
    rows = pc.is_in(ids, value_set=absent.combine_chunks())
    count = int(pc.sum(pc.cast(rows, pa.int64())).as_py() or 0)
    return count, [str(i) for i in pc.filter(ids, rows).slice(0, MAX_EXAMPLES).to_pylist()]


ID_SIDE = pa.schema([pa.field("id", pa.string())])
"""The table's side of :func:`missing_from_table`: its id column, as text."""


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
