"""The id join of a feature table and a release, partition by partition, with memory bounded by a partition.

Joining in one piece holds the feature table's whole id column and a hash table of the
release's ids at once, growing with n (docs/decisions/0015-staging-partition-rows.md). Here
both sides are first cut by a hash of the id into ``K`` partition files in a local scratch
folder (Arrow IPC: the feature side as (id, its feature columns), the release side as (id,
release position, its payload), read chunk by chunk); each partition is then read and joined
on its own — an id lands in the same partition on both sides — and handed to the caller
(:func:`join_release_chunks`), which stages it (:mod:`labeldp.learning.staging`) before the
next one is read. What is held at once: one partition of both sides while joining, one chunk
of either side while cutting (docs/architecture.md, "Training at scale"). The scratch files
are removed as each partition is read: nothing of the join outlives it.
"""

from __future__ import annotations

import math
import resource
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from labeldp.parquet_batches import open_for_batches

MAX_PARTITIONS = 4096
"""At most this many partitions (a file each, all open while one side is cut): 10^9 rows at 2^18 each."""
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
    """How many partitions keep each near ``partition_rows`` rows: at most :data:`MAX_PARTITIONS` and at most
    :func:`open_files_budget`, past which each partition holds more (a partition's rows are what the join holds)."""
    return max(1, min(MAX_PARTITIONS, open_files_budget(), math.ceil(rows / max(1, partition_rows))))


def open_files_budget() -> int:
    """Partition files a cut may hold open: half the process's soft limit on open files (``ulimit -n``), the
    other half left to the service (sockets, the database's pool, torch). 512 under the common 1024."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return MAX_PARTITIONS if soft == resource.RLIM_INFINITY else max(1, soft // 2)


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


@dataclass(frozen=True)
class JoinedPartition:
    """One id-hash partition of the join: the feature rows whose id is in the release, in feature-table order.

    ``rows``: their feature columns; ``positions``: the release position of each row's id;
    ``payload``: the release side's other columns for each row;
    ``feature_rows`` and ``release_rows``: how many rows of each side the partition held (what
    the join had in memory at once for it); ``unmatched``: the release ids of the partition that no
    feature row holds (looked for only when a release row went unmatched: empty otherwise).
    """

    index: int
    rows: pa.Table
    positions: np.ndarray
    feature_rows: int
    release_rows: int
    payload: pa.Table
    unmatched: pa.Array = field(default_factory=lambda: pa.array([], pa.string()))


RELEASE_SIDE = _schema(id=pa.string(), position=pa.int64())
"""The release side's first two columns in :func:`join_release_chunks` (its payload follows them)."""


def join_release_chunks(
    feature_path: str | Path | pa.NativeFile,
    id_column: str,
    columns: list[str],
    release: Iterable[pa.Table],
    release_rows: int,
    work: str | Path,
    partition_rows: int,
    batch_rows: int = 65_536,
) -> Generator[JoinedPartition, None, None]:
    """Cut both sides into partitions under ``work``, then yield each partition joined, one at a time.

    ``columns``: the feature columns to carry (not ``id_column``). ``release``: the release side chunk by
    chunk, each a table of ``id`` (string), ``position`` (int64) and any payload columns (the same in
    every chunk), cut into the partition files as it comes, so one chunk of it is held at once;
    ``release_rows``: how many rows it holds in all (it sizes the partitions). A partition's files are
    removed when it is read, and every file of the join when the iteration ends (also early).
    """
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    source = open_for_batches(feature_path)
    k = partitions_for(max(release_rows, source.metadata.num_rows), partition_rows)
    feature_files = [work / f"features-{p}.arrow" for p in range(k)]
    release_files = [work / f"release-{p}.arrow" for p in range(k)]
    fields = [pa.field("id", pa.string())] + [source.schema_arrow.field(name) for name in columns]
    schema = pa.schema(fields)
    try:
        sinks = _writers(feature_files, schema)
        try:
            for batch in source.iter_batches(batch_size=batch_rows, columns=[id_column, *columns]):
                arrays = [batch.column(0).cast(pa.string())] + [batch.column(name) for name in columns]
                _cut(pa.Table.from_arrays(arrays, schema=schema), k, sinks)
        finally:
            for sink in sinks:
                sink.close()
        sinks = []
        try:
            for chunk in release:
                if chunk.schema.names[:2] != RELEASE_SIDE.names:
                    raise ValueError("a release chunk's first columns must be id and position")
                sinks = sinks or _writers(release_files, chunk.schema)
                _cut(chunk, k, sinks)
                del chunk
            sinks = sinks or _writers(release_files, RELEASE_SIDE)
        finally:
            for sink in sinks:
                sink.close()
        for p in range(k):
            release_part = _read(release_files[p])
            features = _read(feature_files[p])
            release_files[p].unlink()
            feature_files[p].unlink()
            found = pc.index_in(features.column(0), value_set=release_part.column("id").combine_chunks())
            rows = features.remove_column(0)
            if found.null_count:  # feature rows the release does not hold (else no copy of the rows)
                keep = pc.is_valid(found)
                found, rows = pc.filter(found, keep), rows.filter(keep)
            positions = release_part.column("position").combine_chunks().take(found)
            payload = release_part.drop_columns(RELEASE_SIDE.names).combine_chunks().take(found)
            unmatched: pa.Array = pa.array([], pa.string())
            if len(positions) != release_part.num_rows:  # some release row has no feature row: which ids
                release_ids = release_part.column("id").combine_chunks()
                held = pc.is_in(release_ids, value_set=features.column(0).combine_chunks())
                unmatched = pc.filter(release_ids, pc.invert(held))
            yield JoinedPartition(p, rows, positions.to_numpy(), features.num_rows, release_part.num_rows, payload,
                                  unmatched)
            del release_part, features, found, rows, positions, payload, unmatched
    finally:
        for path in feature_files + release_files:
            path.unlink(missing_ok=True)


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
