"""Sorting an upload's ids with bounded memory: sorted runs in a store, then a merge by ranges.

An ids upload may hold more ids than a process can sort in memory (10⁹ ids of 16 characters
are 24 GB as an Arrow column). :class:`SortedRuns` takes the ids a chunk at a time, sorts
every ``run_rows`` of them with ``pyarrow.compute.sort_indices`` and writes each sorted run as
an Arrow IPC object of record batches of ``batch_rows`` ids, keeping only the first id of each
batch. :meth:`SortedRuns.merged` then yields every id in order, a range at a time: the
batch heads of all runs, sorted, give splitters ``batch_rows · per_range`` ids apart; the ids
of one range are the batches of each run that overlap it (found by a binary search over that
run's heads), filtered to the range and sorted — a k-way merge built from Arrow's own
kernels, never a per-id loop in Python. A range holds at most
``(per_range + runs) · batch_rows`` ids, so memory is bounded by the run size and the range
size whatever n. Equal ids always fall in one range: duplicates are adjacent in its output.
Payload columns (``payload``: a labels upload's value, value code and row number) travel with
their ids through runs and ranges (:meth:`SortedRuns.merged_tables`). The uploads keep their runs
in the request's local scratch (``LabelsContext.scratch``), never in the shared store.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pa_compute
import pyarrow.ipc as ipc

from labeldp.storage import ObjectStore

from . import id_lookup
from .columnar import release_unused_memory

pc: Any = pa_compute

RUN_ROWS = 1 << 22
"""Ids sorted in memory at once: 4·2²⁰ ids of 16 characters are ≈ 100 MB with their sort indices."""
BATCH_ROWS = 1 << 14
"""Ids per record batch of a run: the grain a range reads (a range reads at most one extra batch per run)."""
RANGE_BATCHES = 64
"""Batch heads between two splitters: a range holds about 2²⁰ ids (the chunk of a stored id column).
Decided in docs/decisions/0021-ids-upload-external-sort.md."""

_SCHEMA = pa.schema({"id": pa.large_string()})


@dataclass
class _Run:
    key: str
    heads: pa.Array  # the first id of each batch (large_string)
    n: int


@dataclass
class SortedRuns:
    """Ids added a chunk at a time, kept as sorted runs under ``prefix`` in ``store``; :meth:`close` removes them.

    ``payload``: further columns added with the ids (:meth:`add`'s ``columns``), kept row by row
    with their id through the sort.
    """

    store: ObjectStore
    prefix: str
    run_rows: int = RUN_ROWS
    batch_rows: int = BATCH_ROWS
    payload: pa.Schema | None = None
    runs: list[_Run] = field(default_factory=list)
    n: int = 0
    _pending: list[pa.Table] = field(default_factory=list)
    _pending_rows: int = 0

    @property
    def schema(self) -> pa.Schema:
        return _SCHEMA if self.payload is None else pa.schema([*_SCHEMA, *self.payload])

    def add(self, ids: pa.Array, columns: dict[str, Any] | None = None) -> None:
        """Take a chunk of (valid, non-null) ids, with their ``payload`` ``columns`` (arrays of the same
        length) when the runs have one; a full run is sorted and written at once."""
        ids = id_lookup.flat_ids(ids)
        values = [ids]
        if self.payload is not None:
            assert columns is not None, "runs with a payload take its columns with every chunk"
            values += [pa.array(columns[f.name], f.type) for f in self.payload]
        table = pa.Table.from_arrays(values, schema=self.schema)
        at = 0
        while at < len(ids):
            take = min(len(ids) - at, self.run_rows - self._pending_rows)
            self._pending.append(table.slice(at, take))
            self._pending_rows += take
            at += take
            if self._pending_rows >= self.run_rows:
                self._flush()
        self.n += len(ids)

    def _flush(self) -> None:
        if not self._pending_rows:
            return
        chunk = pa.concat_tables(self._pending).combine_chunks()
        self._pending, self._pending_rows = [], 0
        ordered = chunk.take(pc.sort_indices(chunk.column("id")))
        del chunk
        key = f"{self.prefix}/run-{len(self.runs):06d}-{uuid.uuid4().hex}"
        with self.store.open_output_stream(key) as out, ipc.new_file(out, self.schema) as writer:
            writer.write_table(ordered, max_chunksize=self.batch_rows)
        starts = np.arange(0, len(ordered), self.batch_rows)
        heads = id_lookup.flat_ids(ordered.column("id").take(starts))
        self.runs.append(_Run(key, heads, len(ordered)))
        del ordered
        release_unused_memory()  # the pool would otherwise keep the run's peak for the merge and beyond

    def merged(self, per_range: int = RANGE_BATCHES) -> Iterator[pa.Array]:
        """Every id added, in UTF-8 byte order, as ``large_string`` arrays of about
        ``per_range · batch_rows`` ids (duplicates kept, adjacent)."""
        for part in self.merged_tables(per_range):
            yield id_lookup.flat_ids(part.column("id"))

    def merged_tables(self, per_range: int = RANGE_BATCHES) -> Iterator[pa.Table]:
        """:meth:`merged` with the payload: tables of ``id`` and the payload columns, sorted by id."""
        self._flush()
        if not self.runs:
            return
        heads = pa.concat_arrays([r.heads for r in self.runs])
        heads = heads.take(pc.sort_indices(heads))
        splitters = pc.unique(heads.take(np.arange(per_range, len(heads), per_range))) if len(heads) > per_range \
            else pa.array([], pa.large_string())
        bounds: list[Any] = [None, *splitters.to_pylist(), None]
        files = [self.store.open_input_file(r.key) for r in self.runs]
        readers = [ipc.open_file(f) for f in files]
        try:
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                parts = [self._range(run, reader, lo, hi) for run, reader in zip(self.runs, readers)]
                part = pa.concat_tables([p for p in parts if len(p)] or parts[:1]).combine_chunks()
                del parts
                if len(part):
                    yield part.take(pc.sort_indices(part.column("id")))
        finally:
            for f in files:
                f.close()

    def _range(self, run: _Run, reader: Any, lo: str | None, hi: str | None) -> pa.Table:
        """The rows of ``run`` with an id in [lo, hi) (None: unbounded), reading only the batches that may hold them."""
        n_batches = len(run.heads)
        # a batch whose head is before ``lo`` may still hold ids from ``lo`` on: start one batch early
        first = 0 if lo is None else max(0, _bound(run.heads, lo) - 1)
        stop = n_batches if hi is None else _bound(run.heads, hi)
        if first >= stop:
            return self.schema.empty_table()
        rows = pa.Table.from_batches([reader.get_batch(k) for k in range(first, stop)], schema=self.schema)
        ids = rows.column("id")
        keep = None
        if lo is not None:
            keep = pc.greater_equal(ids, pa.scalar(lo, pa.large_string()))
        if hi is not None:
            below = pc.less(ids, pa.scalar(hi, pa.large_string()))
            keep = below if keep is None else pc.and_(keep, below)
        return rows if keep is None else rows.filter(keep)

    def close(self) -> None:
        """Remove the run objects (a crash leaves them to the store's sweep of unreferenced objects)."""
        for run in self.runs:
            self.store.delete(run.key)
        self.runs = []


def _bound(heads: pa.Array, value: str) -> int:
    """How many of the sorted ``heads`` come before ``value``."""
    return int(id_lookup.lower_bounds(heads, pa.array([value], pa.large_string()))[0])
