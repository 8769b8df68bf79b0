"""A release joined with its feature table, staged as partitioned Parquet in the object store.

The stage lives in the object store (:class:`labeldp.storage.ObjectStore`, shared by every
host), so a worker on another host trains it without a shared disk: :func:`stage_rows_to_store`
writes it, :func:`fetch_stage` copies it into a local cache that can be thrown away. Under its
prefix: ``train/part-<p>.parquet`` and ``validation/part-<p>.parquet`` per id-hash partition
``p``, ``val.npz`` (the validation rows' labels, in that order) and ``staged.json``, written
last: a stage is complete once it is there. The release comes in chunk by chunk
(:class:`StageRows`: each row's id, position, label, target and split, the split as
:func:`labeldp.learning.loop.make_plan` draws it) and the join goes partition by partition
(:func:`labeldp.learning.id_partitions.join_release_chunks`): each partition of about
``partition_rows`` rows is joined and written before the next is read, so neither side is held
whole (``staged.json`` records what each partition held). The preprocessor and the target
scaling are fitted on the training rows in the same pass. The cache holds ``train.parquet`` and
``validation.parquet``: each partition's row groups of ``row_group_rows`` (its last shorter), in
partition order, which
:class:`labeldp.learning.loader.RowGroupLoader` streams; a peer host's rank reads its own of them
straight from the store (:func:`stage_groups`; docs/architecture.md, "Training at scale").
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shutil
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from labeldp.errors import InvalidInput
from labeldp.learning.id_partitions import join_release_chunks
from labeldp.learning.preprocessing import Preprocessor, PreprocessorBuilder, RunningMoments
from labeldp.parquet_batches import open_for_batches
from labeldp.storage import ObjectStore

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
    store_prefix: str | None = None
    """Where the stage lies in the object store (``stage_to_store``'s prefix); None: staged for one process."""

    @property
    def train_path(self) -> Path:
        return self.directory / TRAIN_FILE

    @property
    def validation_path(self) -> Path:
        return self.directory / VALIDATION_FILE

    def save(self, labels: bool = True) -> None:
        """Write the fitted statistics next to the row groups, so a torchrun worker can open the stage
        (``labels``: and ``val.npz``, unless it is there already)."""
        meta: dict[str, Any] = {
            "preprocessor": self.preprocessor.to_dict(),
            "target_mean": self.target_mean,
            "target_std": self.target_std,
            "n_train": self.n_train,
            "n_validation": self.n_validation,
            "store_prefix": self.store_prefix,
        }
        if labels:
            np.savez(self.directory / LABELS_FILE, val_labels=self.val_labels)
        (self.directory / META_FILE).write_text(json.dumps(meta))

    @classmethod
    def open(cls, directory: str | Path) -> StagedRelease:
        directory = Path(directory)
        meta = json.loads((directory / META_FILE).read_text())
        with np.load(directory / LABELS_FILE) as data:
            val_labels = np.asarray(data["val_labels"], dtype=np.float64)
        return staged_of(meta, directory, val_labels, meta.get("store_prefix"))


def write_options(schema: pa.Schema) -> dict[str, Any]:
    """How the stage's Parquet is written: dictionary encoding for every column but the floating-point
    ones (random reals fill a dictionary page, then fall back to plain: 4× the write time for nothing).
    Decided in docs/decisions/0024-stage-parquet-encoding.md."""
    return {"use_dictionary": [f.name for f in schema if not pa.types.is_floating(f.type)]}


STORE_META = "staged.json"
"""Under a stage's prefix in the store: written last, so a stage is complete once it is there."""
PARTS = {False: "train", True: "validation"}
"""Under a stage's prefix: the folder of each split's partition objects."""
STAGE_VERSION = 1

MISSING_EXAMPLES = 5
"""How many of the release ids without a feature row an ``unknown_ids`` error names (ids are public)."""


def missing_ids_error(missing: int, examples: list[str]) -> InvalidInput:
    """``unknown_ids``: ``missing`` release ids have no feature row; a count and a few ids, never labels."""
    return InvalidInput(
        "unknown_ids",
        f"{missing} ids of the release are not in the feature table",
        [{"count": missing, "examples": [str(i) for i in examples[:MISSING_EXAMPLES]]}],
    )


def part_key(prefix: str, validation: bool, partition: int) -> str:
    return f"{prefix}/{PARTS[validation]}/part-{partition:05d}.parquet"


def stage_complete(objects: ObjectStore, prefix: str) -> bool:
    """Whether a complete stage lies under ``prefix`` (its ``staged.json`` was written)."""
    return objects.exists(f"{prefix}/{STORE_META}")


def stage_meta(objects: ObjectStore, prefix: str) -> dict[str, Any]:
    """The ``staged.json`` of the stage under ``prefix``: fitted statistics, row counts, and per
    partition the rows the join held (``feature_rows``, ``release_rows``) and staged (``train``,
    ``validation``)."""
    meta: dict[str, Any] = json.loads(objects.get_bytes(f"{prefix}/{STORE_META}"))
    return meta


def remove_stage(objects: ObjectStore, prefix: str) -> int:
    """Delete every object under ``prefix`` (one stage, or several below it), each ``staged.json`` first
    so that no complete-looking stage ever misses a part; how many."""
    keys = objects.list(prefix)
    for key in sorted(keys, key=lambda k: not k.endswith("/" + STORE_META)):
        objects.delete(key)
    return len(keys)


STAGE_CHUNK_ROWS = 65_536
"""Release rows per chunk when a release held in memory is staged (:meth:`StageRows.of_arrays`)."""
_STAGE_ROW_FIELDS: list[tuple[str, pa.DataType]] = [
    ("id", pa.string()), ("position", pa.int64()), ("label", pa.float64()), ("target", pa.float64()),
    ("validation", pa.bool_()),
]
STAGE_ROW_SCHEMA = pa.schema(_STAGE_ROW_FIELDS)
"""One chunk of :class:`StageRows`: per release row its id, release position, privatized label, target
(what the loss compares with: the label or its debiased value) and split (True: a validation row)."""


@dataclass(frozen=True)
class StageRows:
    """The release side of a stage, chunk by chunk in release order: ``rows`` in all, ``chunks`` tables of
    :data:`STAGE_ROW_SCHEMA` (positions counting from 0), iterated once; a stage holds one chunk at once."""

    rows: int
    chunks: Iterable[pa.Table]

    @classmethod
    def of_arrays(
        cls, ids: pa.Array | pa.ChunkedArray, labels: np.ndarray, targets: np.ndarray, is_validation: np.ndarray,
        chunk_rows: int = STAGE_CHUNK_ROWS,
    ) -> StageRows:
        """A release held whole in memory, in chunks of ``chunk_rows``: one entry of each array per id."""
        n = len(ids)
        if labels.shape != (n,) or targets.shape != (n,) or is_validation.shape != (n,):
            raise ValueError("labels, targets and the split must have one entry per release id")

        def chunks() -> Iterator[pa.Table]:
            for start in range(0, n, chunk_rows):
                end = min(n, start + chunk_rows)
                yield stage_chunk(ids[start:end], start, labels[start:end], targets[start:end],
                                  is_validation[start:end])

        return cls(n, chunks())


def stage_chunk(ids: pa.Array | pa.ChunkedArray, start: int, labels: np.ndarray, targets: np.ndarray,
                is_validation: np.ndarray) -> pa.Table:
    """One chunk of :class:`StageRows`: release rows ``start`` .. ``start + len(ids)``."""
    positions = np.arange(start, start + len(ids), dtype=np.int64)
    return pa.Table.from_arrays(
        [ids.cast(pa.string()), pa.array(positions), pa.array(labels, pa.float64()), pa.array(targets, pa.float64()),
         pa.array(is_validation, pa.bool_())],
        schema=STAGE_ROW_SCHEMA,
    )


def stage_to_store(
    feature_path: str | Path | pa.NativeFile,
    id_column: str,
    ids: pa.Array | pa.ChunkedArray,
    labels: np.ndarray,
    targets: np.ndarray,
    is_validation: np.ndarray,
    objects: ObjectStore,
    prefix: str,
    scratch: str | Path,
    row_group_rows: int = 65_536,
    partition_rows: int = PARTITION_ROWS,
) -> dict[str, Any]:
    """:func:`stage_rows_to_store` of a release held in memory: ``ids`` with one entry of ``labels``,
    ``targets`` (what the loss compares with per release row: the labels, or their debiased values) and
    ``is_validation`` (the split per release row) each."""
    release = StageRows.of_arrays(ids, labels, targets, is_validation)
    return stage_rows_to_store(feature_path, id_column, release, objects, prefix, scratch, row_group_rows,
                               partition_rows)


def stage_rows_to_store(
    feature_path: str | Path | pa.NativeFile,
    id_column: str,
    release: StageRows,
    objects: ObjectStore,
    prefix: str,
    scratch: str | Path,
    row_group_rows: int = 65_536,
    partition_rows: int = PARTITION_ROWS,
) -> dict[str, Any]:
    """Join the ``release`` (its rows streamed in chunk by chunk) with the feature table at ``feature_path``
    and write the stage under ``prefix`` in ``objects``; returns its ``staged.json``.

    Each release row's label, target and split travel with it into its join partition, so nothing
    here holds the release whole. Feature-table rows whose id is not in the release are skipped;
    release ids without a feature row raise ``unknown_ids`` (:func:`missing_ids_error`: every
    partition is still joined, to count them all, but nothing more is written) and a release id held
    twice raises ``ValueError``; either leaves no object, as does an error raised by the chunks (the
    service checks the join of a small release before queueing its training, the stage that of a
    large one: docs/architecture.md, "Training jobs").
    ``partition_rows``: rows per partition of the join (what it holds at once); ``scratch``: a local
    folder for the join's partition files, removed after it.
    """
    source = open_for_batches(feature_path)
    feature_names = [name for name in source.schema_arrow.names if name != id_column]
    builder = PreprocessorBuilder()
    moments = RunningMoments()
    partitions: list[dict[str, int]] = []
    written: list[str] = []
    scratch = Path(scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    labels_path = scratch / "val_labels.f8"  # the validation rows' labels as they come: never held together
    n_labels = 0
    labels_out = labels_path.open("wb")
    try:
        joined = join_release_chunks(feature_path, id_column, feature_names, release.chunks, release.rows, scratch,
                                     partition_rows, row_group_rows)
        missing, examples = 0, list[str]()
        for part in joined:
            if len(part.unmatched):  # count every partition's, then refuse: nothing more is written
                missing += len(part.unmatched)
                examples += [str(i) for i in part.unmatched.slice(0, MISSING_EXAMPLES - len(examples)).to_pylist()]
                continue
            if len(part.positions) != part.release_rows:
                joined.close()
                raise ValueError("the feature table does not hold every id of the release once")
            if missing:
                continue
            targets = part.payload.column("target").to_numpy()
            validation = part.payload.column("validation").to_numpy(zero_copy_only=False)
            table = part.rows.append_column(TARGET, pa.array(targets, pa.float64()))
            counts = {"feature_rows": part.feature_rows, "release_rows": part.release_rows}
            for flag in (False, True):
                chosen = table.filter(pa.array(validation == flag))
                if flag:
                    chosen_labels = part.payload.column("label").to_numpy()[validation].astype("<f8")
                    labels_out.write(chosen_labels.tobytes())
                    n_labels += len(chosen_labels)
                else:
                    builder.update(chosen.drop_columns([TARGET]))
                    moments.update(targets[~validation])
                counts[PARTS[flag]] = chosen.num_rows
                if chosen.num_rows:
                    key = part_key(prefix, flag, part.index)
                    with objects.open_output_stream(key) as out:
                        pq.write_table(chosen, out, row_group_size=row_group_rows, **write_options(chosen.schema))
                    written.append(key)
            partitions.append(counts)
            del table, chosen, targets, validation, part
        if missing:
            raise missing_ids_error(missing, examples)
        n_train = sum(p["train"] for p in partitions)
        if n_train == 0:
            raise ValueError("no rows to train on")
        std = moments.std if moments.std > 1e-12 else 1.0
        meta: dict[str, Any] = {
            "version": STAGE_VERSION,
            "preprocessor": builder.build().to_dict(),
            "target_mean": moments.mean,
            "target_std": std,
            "n_train": n_train,
            "n_validation": sum(p["validation"] for p in partitions),
            "row_group_rows": row_group_rows,
            "partition_rows": partition_rows,
            "partitions": partitions,
        }
        labels_out.close()
        with objects.open_output_stream(f"{prefix}/{LABELS_FILE}") as out:
            write_labels_npz(out, labels_path, n_labels)
        written.append(f"{prefix}/{LABELS_FILE}")
        objects.put_bytes(f"{prefix}/{STORE_META}", json.dumps(meta).encode())
    except BaseException:
        for key in written:
            with contextlib.suppress(Exception):
                objects.delete(key)
        raise
    finally:
        labels_out.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return meta


def write_labels_npz(out: Any, raw: Path, rows: int) -> None:
    """What ``np.savez(out, val_labels=…)`` writes, for the ``rows`` float64 values in the file ``raw``, copied
    a block at a time: a stage of 10^8 rows would otherwise hold its 10^7 validation labels several times."""
    with (zipfile.ZipFile(out, "w", zipfile.ZIP_STORED, allowZip64=True) as archive,
          archive.open("val_labels.npy", "w", force_zip64=True) as member, raw.open("rb") as source):
        np.lib.format.write_array_header_1_0(member, {"descr": "<f8", "fortran_order": False, "shape": (rows,)})
        shutil.copyfileobj(source, member, 1 << 20)


def stage_groups(meta: dict[str, Any]) -> list[tuple[int, int, int]]:
    """The training row groups of a stage in order, as (partition, row group in its object, rows): each
    partition's ``train`` rows in row groups of ``row_group_rows`` (its last one shorter), partition after
    partition. The row groups of the cache's ``train.parquet``, and what data shards are dealt from."""
    rows = int(meta["row_group_rows"])
    return [(index, g, min(rows, part["train"] - g * rows))
            for index, part in enumerate(meta["partitions"]) for g in range(math.ceil(part["train"] / rows))]


def open_stage(objects: ObjectStore, prefix: str) -> dict[str, Any]:
    """The ``staged.json`` of the complete stage under ``prefix``, checked for this code's layout."""
    meta = stage_meta(objects, prefix)
    if meta.get("version") != STAGE_VERSION:
        raise ValueError(f"the stage under {prefix!r} has another layout version ({meta.get('version')})")
    return meta


def staged_of(meta: dict[str, Any], directory: Path, val_labels: np.ndarray, prefix: str | None) -> StagedRelease:
    """The :class:`StagedRelease` of a stage's ``staged.json``, its cache in ``directory``."""
    return StagedRelease(
        directory,
        Preprocessor.from_dict(meta["preprocessor"]),
        float(meta["target_mean"]),
        float(meta["target_std"]),
        int(meta["n_train"]),
        int(meta["n_validation"]),
        val_labels,
        prefix,
    )


def fetch_stage(objects: ObjectStore, prefix: str, directory: str | Path) -> StagedRelease:
    """The complete stage under ``prefix`` copied into the local cache ``directory`` (one row group
    at a time): ``train.parquet`` and ``validation.parquet`` (each partition's row groups in partition
    order, as :func:`stage_groups` lists them), ``val.npz`` and ``staged.json``. The cache can be
    removed at any time and fetched again; it is what the loader and a torchrun job read."""
    meta = open_stage(objects, prefix)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    schema: pa.Schema | None = None
    for flag, name in ((False, TRAIN_FILE), (True, VALIDATION_FILE)):
        writer: pq.ParquetWriter | None = None
        for index, part in enumerate(meta["partitions"]):
            if not part[PARTS[flag]]:
                continue
            with objects.open_input_file(part_key(prefix, flag, index)) as source:
                reader = pq.ParquetFile(source)
                schema = schema or reader.schema_arrow
                writer = writer or pq.ParquetWriter(directory / name, schema, **write_options(schema))
                for group in range(reader.num_row_groups):
                    table = reader.read_row_group(group)
                    writer.write_table(table, row_group_size=max(1, table.num_rows))
        assert schema is not None  # n_train > 0: the training rows came first
        (writer or pq.ParquetWriter(directory / name, schema)).close()
    with objects.open_input_stream(f"{prefix}/{LABELS_FILE}") as source, (directory / LABELS_FILE).open("wb") as sink:
        shutil.copyfileobj(source, sink, 1 << 20)  # to the cache's file, not through a bytes copy
    with np.load(directory / LABELS_FILE) as data:
        val_labels = np.asarray(data["val_labels"], dtype=np.float64)
    staged = staged_of(meta, directory, val_labels, prefix)
    staged.save(labels=False)
    return staged


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
    *,
    objects: ObjectStore | None = None,
    prefix: str = "stage",
) -> StagedRelease:
    """:func:`stage_rows_release` of a release held in memory (arrays as :func:`stage_to_store` takes them)."""
    return stage_rows_release(feature_path, id_column, StageRows.of_arrays(ids, labels, targets, is_validation),
                              directory, row_group_rows, partition_rows, objects=objects, prefix=prefix)


def stage_rows_release(
    feature_path: str | Path | pa.NativeFile,
    id_column: str,
    release: StageRows,
    directory: str | Path,
    row_group_rows: int = 65_536,
    partition_rows: int = PARTITION_ROWS,
    *,
    objects: ObjectStore | None = None,
    prefix: str = "stage",
) -> StagedRelease:
    """:func:`stage_rows_to_store` then :func:`fetch_stage` into ``directory``: the stage in ``objects`` under
    ``prefix`` (kept there for other processes), or, without ``objects``, in a local store inside
    ``directory`` that is removed once fetched (one process, nothing shared)."""
    directory = Path(directory)
    local = directory / "objects"
    store = objects or ObjectStore.from_url(str(local))
    try:
        stage_rows_to_store(feature_path, id_column, release, store, prefix, directory / "join", row_group_rows,
                            partition_rows)
        staged = fetch_stage(store, prefix, directory)
        if objects is None:  # nothing of it stays in a store
            staged = dataclasses.replace(staged, store_prefix=None)
            staged.save()
        return staged
    finally:
        if objects is None:
            shutil.rmtree(local, ignore_errors=True)
