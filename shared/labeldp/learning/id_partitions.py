"""The id join of a feature table and a release, partition by partition, with memory bounded by a partition.

Joining in one piece holds the feature table's whole id column and a hash table of the
release's ids at once, growing with n (docs/decisions/0015-staging-partition-rows.md). Here
both sides are first cut by a hash of the id into ``K`` partition files on disk (Arrow IPC:
the feature side as (id, row number), the release side as (id, release position)); each
partition is then joined on its own — an id lands in the same partition on both sides —
and its matches are written as (row number, release position) in row order. Reading the
feature table again in file order, :class:`PositionMerge` merges the ``K`` match files
cursor by cursor, so each row gets its release position (or -1) without any per-row array
of the whole table. What is held at once: one partition of both sides, or one small batch
per partition file (docs/architecture.md, "Training at scale").
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from labeldp.parquet_batches import open_for_batches

MAX_PARTITIONS = 128
"""At most this many partition files are open at once (one per partition while cutting or merging)."""
MERGE_BATCH_ROWS = 8_192
"""Rows per batch of a partition's match file: the merge holds one such batch per partition."""
_MULTIPLIER = np.uint64(0x100000001B3)  # FNV-1a's 64-bit prime: spreads each byte over the word


def id_hash(ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash of each string id from its bytes alone (the same id hashes the same on both sides).

    Vectorized over Arrow's data buffer: Σ byte_i · P^i (mod 2⁶⁴) per string, then a
    murmur3 finalizer so the low bits used for the partition are well mixed.
    """
    array = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    array = array.cast(pa.string())
    n = len(array)
    if n == 0:
        return np.empty(0, np.uint64)
    offsets_buffer, data_buffer = array.buffers()[1:3]
    assert offsets_buffer is not None
    offsets = np.frombuffer(memoryview(offsets_buffer), dtype=np.int32)[array.offset : array.offset + n + 1]
    offsets = offsets.astype(np.int64)
    lengths = np.diff(offsets)
    first, last = int(offsets[0]), int(offsets[-1])
    data = np.empty(0, np.uint8)
    if data_buffer is not None and last > first:
        data = np.frombuffer(memoryview(data_buffer), dtype=np.uint8)[first:last]
    starts = offsets[:-1] - first
    h = np.zeros(n, np.uint64)
    if data.size:
        within = np.arange(data.size, dtype=np.int64) - np.repeat(starts, lengths)
        powers = np.cumprod(np.full(int(lengths.max()), _MULTIPLIER, np.uint64), dtype=np.uint64)
        products = data.astype(np.uint64) * powers[within]
        nonempty = lengths > 0
        h[nonempty] = np.add.reduceat(products, starts[nonempty])
    h ^= lengths.astype(np.uint64)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


def partitions_for(rows: int, partition_rows: int) -> int:
    """How many partitions keep each near ``partition_rows`` rows (at most :data:`MAX_PARTITIONS`)."""
    return max(1, min(MAX_PARTITIONS, math.ceil(rows / max(1, partition_rows))))


def _cut(table: pa.Table, k: int, sinks: list[pa.ipc.RecordBatchFileWriter]) -> None:
    """Append each row of ``table`` (its first column is the id) to its partition's file."""
    part = (id_hash(table.column(0)) % np.uint64(k)).astype(np.int64)
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(k + 1))
    ordered = table.take(order)
    for p in range(k):
        if bounds[p + 1] > bounds[p]:
            sinks[p].write_table(ordered.slice(int(bounds[p]), int(bounds[p + 1] - bounds[p])))


def _schema(**types: pa.DataType) -> pa.Schema:
    return pa.schema(list(types.items()))


def _writers(paths: list[Path], schema: pa.Schema) -> list[pa.ipc.RecordBatchFileWriter]:
    return [pa.ipc.new_file(pa.OSFile(str(path), "wb"), schema) for path in paths]


def _read(path: Path) -> pa.Table:
    with pa.OSFile(str(path), "rb") as f:
        return pa.ipc.open_file(f).read_all()


def join_partitioned(
    feature_path: str | Path | pa.NativeFile,
    id_column: str,
    ids: pa.Array | pa.ChunkedArray,
    work: str | Path,
    partition_rows: int,
    batch_rows: int = 65_536,
) -> tuple[list[Path], int]:
    """Cut both sides into partitions under ``work`` and join each; (match files, rows matched).

    Match file ``p`` holds (``row``: the feature-table row number, ``position``: the
    release position of its id) for the rows of partition ``p`` whose id is in the
    release, in row order. Partition files are removed once joined.
    """
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    source = open_for_batches(feature_path)
    k = partitions_for(max(len(ids), source.metadata.num_rows), partition_rows)
    feature_files = [work / f"features-{p}.arrow" for p in range(k)]
    release_files = [work / f"release-{p}.arrow" for p in range(k)]
    sinks = _writers(feature_files, _schema(id=pa.string(), row=pa.int64()))
    try:
        offset = 0
        for batch in source.iter_batches(batch_size=batch_rows, columns=[id_column]):
            rows = pa.array(np.arange(offset, offset + batch.num_rows, dtype=np.int64))
            offset += batch.num_rows
            _cut(pa.table({"id": batch.column(0).cast(pa.string()), "row": rows}), k, sinks)
    finally:
        for sink in sinks:
            sink.close()
    sinks = _writers(release_files, _schema(id=pa.string(), position=pa.int64()))
    try:
        for start in range(0, len(ids), batch_rows):
            chunk = ids[start : start + batch_rows]
            numbers = pa.array(np.arange(start, start + len(chunk), dtype=np.int64))
            _cut(pa.table({"id": chunk.cast(pa.string()), "position": numbers}), k, sinks)
    finally:
        for sink in sinks:
            sink.close()
    matches = [work / f"matches-{p}.arrow" for p in range(k)]
    matched = 0
    schema = _schema(row=pa.int64(), position=pa.int64())
    for p in range(k):
        release = _read(release_files[p])
        features = _read(feature_files[p])
        release_files[p].unlink()
        feature_files[p].unlink()
        found = pc.index_in(features.column("id"), value_set=release.column("id").combine_chunks())
        keep = pc.is_valid(found)
        positions = release.column("position").combine_chunks().take(pc.filter(found, keep))
        joined = pa.table({"row": pc.filter(features.column("row"), keep), "position": positions}, schema=schema)
        matched += joined.num_rows
        del release, features, found, keep
        with pa.OSFile(str(matches[p]), "wb") as f, pa.ipc.new_file(f, schema) as writer:
            writer.write_table(joined, max_chunksize=MERGE_BATCH_ROWS)
    return matches, matched


class PositionMerge:
    """The release position of each feature-table row, in file order, merged from the match files.

    :meth:`take` hands out consecutive ranges of rows; each partition's file is read one
    batch at a time, so the merge holds one batch per partition.
    """

    def __init__(self, matches: list[Path]) -> None:
        self.cursors = [_Cursor(path) for path in matches]
        self.offset = 0

    def take(self, count: int) -> np.ndarray:
        """Positions of rows ``[offset, offset + count)`` (-1 where the id is in no release)."""
        out = np.full(count, -1, dtype=np.int64)
        end = self.offset + count
        for cursor in self.cursors:
            for rows, positions in cursor.until(end):
                out[rows - self.offset] = positions
        self.offset = end
        return out

    def close(self) -> None:
        for cursor in self.cursors:
            cursor.close()


class _Cursor:
    def __init__(self, path: Path) -> None:
        self.file = pa.OSFile(str(path), "rb")
        self.reader = pa.ipc.open_file(self.file)
        self.next_batch = 0
        self.rows = np.empty(0, np.int64)
        self.positions = np.empty(0, np.int64)

    def until(self, end: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Every match with a row number below ``end`` not handed out yet."""
        while True:
            if not len(self.rows):
                if self.next_batch >= self.reader.num_record_batches:
                    return
                batch = self.reader.get_batch(self.next_batch)
                self.next_batch += 1
                self.rows = batch.column(0).to_numpy()
                self.positions = batch.column(1).to_numpy()
            cut = int(np.searchsorted(self.rows, end))
            if cut:
                yield self.rows[:cut], self.positions[:cut]
            self.rows, self.positions = self.rows[cut:], self.positions[cut:]
            if len(self.rows):
                return

    def close(self) -> None:
        self.file.close()


def repeated_ids(
    source: str | Path | pa.NativeFile,
    id_column: str,
    work: str | Path,
    partition_rows: int,
    batch_rows: int = 65_536,
    examples: int = 5,
) -> tuple[int, list[str]]:
    """How many ids occur more than once in the Parquet ``source``'s ``id_column``, and a few of them.

    Bounded as the join is: the ids are cut by the same hash into partition files under
    ``work`` (an id lands in one partition), and each partition is counted on its own, so
    what is held at once is one partition, not the whole id column.
    """
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    parquet = open_for_batches(source)
    k = partitions_for(parquet.metadata.num_rows, partition_rows)
    files = [work / f"ids-{p}.arrow" for p in range(k)]
    sinks = _writers(files, _schema(id=pa.string()))
    try:
        for batch in parquet.iter_batches(batch_size=batch_rows, columns=[id_column]):
            _cut(pa.table({"id": batch.column(0).cast(pa.string())}), k, sinks)
    finally:
        for sink in sinks:
            sink.close()
    count, found = 0, list[str]()
    for path in files:
        counts = pc.value_counts(_read(path).column("id").combine_chunks())
        path.unlink()
        repeated = counts.filter(pc.greater(counts.field("counts"), pa.scalar(1)))
        count += len(repeated)
        if len(found) < examples:
            found.extend(str(v) for v in repeated.field("values").to_pylist()[: examples - len(found)])
    return count, found
