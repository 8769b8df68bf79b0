"""A release joined with its feature table, staged as Parquet row groups for streaming training.

The join is done partition by partition (:mod:`labeldp.learning.id_partitions`): both
sides' ids are cut by a hash into partition files of about ``partition_rows`` rows and
each partition is looked up on its own (``pc.index_in``), so the join holds one
partition at a time, not the whole table's id column and a hash table of every release
id. The feature columns are then read one batch of rows at a time in file order, each
row getting its release position from the merged matches, and from it its target and its
split (train or validation, drawn from the seed over release positions exactly as
:func:`labeldp.learning.loop.make_plan` draws it). The preprocessor and the target scaling
are fitted on the training rows in the same pass
(:class:`~labeldp.learning.preprocessing.PreprocessorBuilder`). Besides the release's own
ids, labels, targets and split, nothing per row of the table stays in memory; features and
targets live in ``train.parquet`` and ``validation.parquet`` (rows in feature-table
order), cut into row groups of ``row_group_rows`` that
:class:`labeldp.learning.loader.RowGroupLoader` streams (docs/architecture.md, "Training at
scale").
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from labeldp.learning.id_partitions import PositionMerge, join_partitioned
from labeldp.learning.preprocessing import Preprocessor, PreprocessorBuilder, RunningMoments
from labeldp.parquet_batches import open_for_batches

TARGET = "__target__"
"""The staged target column: the value the loss compares with (before standardization)."""
TRAIN_FILE, VALIDATION_FILE, META_FILE, LABELS_FILE = "train.parquet", "validation.parquet", "staged.json", "val.npz"
PARTITION_ROWS = 1 << 18
"""Rows per id-hash partition of the staging join by default (``LABELDP_TRAINING_JOIN_PARTITION_ROWS``):
what the join holds at once. Decided in docs/decisions/0015-staging-partition-rows.md."""


@dataclass(frozen=True)
class StagedRelease:
    """Where a staged release lies and what was fitted while staging it.

    ``val_labels``: the privatized labels of the validation rows in ``validation.parquet``
    order (private model selection scores against them; 10 % of the rows).
    """

    directory: Path
    preprocessor: Preprocessor
    target_mean: float
    target_std: float
    n_train: int
    n_validation: int
    val_labels: np.ndarray

    @property
    def train_path(self) -> Path:
        return self.directory / TRAIN_FILE

    @property
    def validation_path(self) -> Path:
        return self.directory / VALIDATION_FILE

    def save(self) -> None:
        """Write the fitted statistics next to the row groups, so a torchrun worker can open the stage."""
        meta: dict[str, Any] = {
            "preprocessor": self.preprocessor.to_dict(),
            "target_mean": self.target_mean,
            "target_std": self.target_std,
            "n_train": self.n_train,
            "n_validation": self.n_validation,
        }
        np.savez(self.directory / LABELS_FILE, val_labels=self.val_labels)
        (self.directory / META_FILE).write_text(json.dumps(meta))

    @classmethod
    def open(cls, directory: str | Path) -> StagedRelease:
        directory = Path(directory)
        meta = json.loads((directory / META_FILE).read_text())
        with np.load(directory / LABELS_FILE) as data:
            val_labels = np.asarray(data["val_labels"], dtype=np.float64)
        return cls(
            directory,
            Preprocessor.from_dict(meta["preprocessor"]),
            float(meta["target_mean"]),
            float(meta["target_std"]),
            int(meta["n_train"]),
            int(meta["n_validation"]),
            val_labels,
        )


class _GroupWriter:
    """Buffers batches and writes row groups of exactly ``rows`` rows (the last one shorter)."""

    def __init__(self, path: Path, schema: pa.Schema, rows: int) -> None:
        self.rows = rows
        self.writer = pq.ParquetWriter(path, schema)
        self.pending: list[pa.Table] = []
        self.n_pending = 0
        self.written = 0

    def add(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        self.pending.append(table)
        self.n_pending += table.num_rows
        while self.n_pending >= self.rows:
            merged = pa.concat_tables(self.pending)
            self._write(merged.slice(0, self.rows))
            rest = merged.slice(self.rows)
            self.pending, self.n_pending = ([rest] if rest.num_rows else []), rest.num_rows

    def _write(self, table: pa.Table) -> None:
        self.writer.write_table(table, row_group_size=self.rows)
        self.written += table.num_rows

    def close(self) -> None:
        if self.n_pending:
            self._write(pa.concat_tables(self.pending))
        self.pending, self.n_pending = [], 0
        self.writer.close()


def stage_release(
    feature_path: str | Path | pa.NativeFile,
    id_column: str,
    ids: pa.Array | pa.ChunkedArray,
    labels: np.ndarray,
    targets: np.ndarray,
    is_validation: np.ndarray,
    directory: str | Path,
    row_group_rows: int = 65_536,
    partition_rows: int = PARTITION_ROWS,
) -> StagedRelease:
    """Join ``ids`` (the release's, one per entry of ``labels``) with the feature table at ``feature_path``.

    ``targets``: what the loss compares with per release row (the labels, or their
    debiased values); ``is_validation``: the split per release row. Feature-table rows
    whose id is not in the release are skipped; a release id without a feature row
    raises ``ValueError`` (the service checks the join before queueing a training).
    ``partition_rows``: rows per partition of the join (what it holds at once).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    n = len(ids)
    if labels.shape != (n,) or targets.shape != (n,) or is_validation.shape != (n,):
        raise ValueError("labels, targets and the split must have one entry per release id")
    scratch = directory / "join"
    matches, matched = join_partitioned(feature_path, id_column, ids, scratch, partition_rows, row_group_rows)
    if matched != n:
        shutil.rmtree(scratch, ignore_errors=True)
        raise ValueError("the feature table does not hold every id of the release")
    source = open_for_batches(feature_path)
    feature_names = [name for name in source.schema_arrow.names if name != id_column]
    schema = pa.schema([source.schema_arrow.field(name) for name in feature_names] + [pa.field(TARGET, pa.float64())])
    writers = {
        False: _GroupWriter(directory / TRAIN_FILE, schema, row_group_rows),
        True: _GroupWriter(directory / VALIDATION_FILE, schema, row_group_rows),
    }
    builder = PreprocessorBuilder()
    moments = RunningMoments()
    val_labels: list[np.ndarray] = []
    merge = PositionMerge(matches)
    try:
        for batch in source.iter_batches(batch_size=row_group_rows, columns=feature_names):
            pos = merge.take(batch.num_rows)
            keep = pos >= 0
            rows = pos[keep]
            part = pa.Table.from_batches([batch]).filter(pa.array(keep))
            part = part.append_column(TARGET, pa.array(targets[rows], pa.float64()))
            validation = is_validation[rows]
            for flag in (False, True):
                chosen = part.filter(pa.array(validation == flag))
                if flag:
                    val_labels.append(labels[rows[validation]])
                else:
                    builder.update(chosen.drop_columns([TARGET]))
                    moments.update(targets[rows[~validation]])
                writers[flag].add(chosen)
    finally:
        merge.close()
        shutil.rmtree(scratch, ignore_errors=True)
    for writer in writers.values():
        writer.close()
    n_train, n_val = writers[False].written, writers[True].written
    if n_train == 0:
        raise ValueError("no rows to train on")
    std = moments.std if moments.std > 1e-12 else 1.0
    staged = StagedRelease(
        directory,
        builder.build(),
        moments.mean,
        std,
        n_train,
        n_val,
        np.concatenate(val_labels) if val_labels else np.empty((0,)),
    )
    staged.save()
    return staged
