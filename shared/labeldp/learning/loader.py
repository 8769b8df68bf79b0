"""Batches streamed from staged row groups: bounded memory, the same steps whatever the number of processes.

The training row groups are dealt into ``S`` *data shards* (row group ``g`` to shard
``g mod S``; ``S`` is ``TrainingConfig.data_shards``, by default one per process). Each
epoch every shard permutes its own row groups from (seed, epoch, shard), reads
``buffer_row_groups`` of them at a time, transforms them with the fitted preprocessor,
shuffles the rows inside that buffer and cuts batches of ``ceil(batch_size / S)`` rows.
Step ``k`` of the training is batch ``k`` of every shard: which rows make a step depends on
the seed and ``S`` alone, never on how many processes share the shards, so one process
reading both shards of ``S = 2`` takes the steps two processes take together
(:class:`DataOrder`). A process reads only the shards it owns (:class:`ShardLayout`
names the file and row groups of each; a host of a multi-node job holds only its own).

The next buffer is read and transformed on a background thread while the current one
trains (Arrow reads and numpy release the GIL). On CUDA the buffer is pinned and each
batch is copied with ``non_blocking=True``. Memory is therefore about
(``buffer_row_groups`` + 1) row groups per owned shard, whatever the number of rows.

Every process yields the same number of batches per epoch (the most any shard needs; an
exhausted shard yields empty ones): DistributedDataParallel needs every process in every all-reduce.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch

from labeldp.learning.preprocessing import Preprocessor
from labeldp.learning.staging import (
    PARTS,
    TARGET,
    TRAIN_FILE,
    StagedRelease,
    open_stage,
    part_key,
    stage_groups,
    staged_of,
    write_options,
)
from labeldp.storage import ObjectStore

log = logging.getLogger("labeldp.features")

SHARDS_FILE = "shards.json"
"""In a host's copy of a stage: the shard layout (its own shards' files, every shard's rows)."""
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
Parts = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Shard:
    """The row groups of one data shard in one epoch (in reading order)."""

    groups: list[int]
    rows: int


@dataclass(frozen=True)
class ShardSource:
    """Where one data shard lies: a Parquet file and which of its row groups are the shard's, in order."""

    path: Path
    groups: tuple[int, ...]


@dataclass(frozen=True)
class ShardLayout:
    """A training's data shards: every shard's row count (each process needs them all to cut the same
    steps) and where the shards this process can read lie (a host of a multi-node job has only its own)."""

    rows: tuple[int, ...]
    sources: Mapping[int, ShardSource]

    @property
    def shards(self) -> int:
        return len(self.rows)

    @classmethod
    def of_file(cls, path: str | Path, shards: int) -> ShardLayout:
        """The row groups of the staged ``path`` dealt into ``shards`` shards (group ``g`` to ``g mod shards``)."""
        if shards < 1:
            raise ValueError("a training needs at least one data shard")
        path = Path(path)
        meta = pq.ParquetFile(path).metadata
        group_rows = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        sources = {s: ShardSource(path, tuple(range(s, len(group_rows), shards))) for s in range(shards)}
        rows = tuple(sum(group_rows[g] for g in sources[s].groups) for s in range(shards))
        if len(group_rows) < shards:
            # Still the step's mean, but a step holds fewer rows than batch_size and a process may idle.
            log.warning("%s row groups dealt into %s data shards: lower LABELDP_TRAINING_ROW_GROUP_ROWS",
                        len(group_rows), shards)
        return cls(rows, sources)

    def to_dict(self, base: Path) -> dict[str, object]:
        """As JSON, file names relative to ``base`` (a host's copy is moved as one folder)."""
        return {
            "rows": list(self.rows),
            "sources": {
                str(s): {"file": os.path.relpath(src.path, base), "groups": list(src.groups)}
                for s, src in self.sources.items()
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object], base: Path) -> ShardLayout:
        rows = tuple(int(r) for r in data["rows"])  # type: ignore[attr-defined]
        sources = {
            int(s): ShardSource(base / str(src["file"]), tuple(int(g) for g in src["groups"]))
            for s, src in data["sources"].items()  # type: ignore[attr-defined]
        }
        return cls(rows, sources)


def stage_layout(directory: str | Path, shards: int) -> ShardLayout:
    """The data shards of the stage in ``directory``: a host copy's own (``shards.json``), or the whole
    ``train.parquet`` dealt into ``shards``."""
    directory = Path(directory)
    copied = directory / SHARDS_FILE
    if copied.exists():
        layout = ShardLayout.from_dict(json.loads(copied.read_text()), directory)
        if layout.shards != shards:
            raise ValueError(f"this copy of the stage was cut into {layout.shards} data shards, not {shards}")
        return layout
    return ShardLayout.of_file(directory / TRAIN_FILE, shards)


def copy_shards(layout: ShardLayout, shards: Sequence[int], directory: str | Path) -> ShardLayout:
    """Write ``shards`` of ``layout`` into ``directory`` (one Parquet file each, its row groups kept) with
    ``shards.json``: what a host of a multi-node job reads instead of the whole ``train.parquet``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    sources: dict[int, ShardSource] = {}
    for s in shards:
        source = layout.sources[s]
        reader = pq.ParquetFile(source.path)
        path = directory / f"train-shard-{s:05d}-of-{layout.shards:05d}.parquet"
        with pq.ParquetWriter(path, reader.schema_arrow, **write_options(reader.schema_arrow)) as writer:
            for g in source.groups:
                group = reader.read_row_group(g)
                writer.write_table(group, row_group_size=max(1, group.num_rows))
        sources[s] = ShardSource(path, tuple(range(len(source.groups))))
    copied = ShardLayout(layout.rows, sources)
    (directory / SHARDS_FILE).write_text(json.dumps(copied.to_dict(directory)))
    return copied


def fetch_own_shards(
    objects: ObjectStore, prefix: str, own: Sequence[int], shards: int, directory: str | Path
) -> StagedRelease:
    """A rank's own data shards of the stage under ``prefix``, read straight from the store into ``directory``.

    The stage's training row groups (:func:`labeldp.learning.staging.stage_groups`, the row groups of
    the home host's ``train.parquet``) are dealt into ``shards`` as :meth:`ShardLayout.of_file` deals
    them; only ``own``'s are read, one row group at a time, each shard into its own file (written
    under a temporary name, then renamed), with ``shards.json`` and the fitted statistics (no
    validation rows or labels). What a rank on another host needs: the store and the stage's prefix.
    """
    meta = open_stage(objects, prefix)
    groups = stage_groups(meta)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    sources: dict[int, ShardSource] = {}
    for s in own:
        path = directory / f"train-shard-{s:05d}-of-{shards:05d}.parquet"
        tmp = path.with_name(path.name + ".tmp")
        writer: pq.ParquetWriter | None = None
        mine = groups[s::shards]
        for partition in dict.fromkeys(p for p, _, _ in mine):
            with objects.open_input_file(part_key(prefix, False, partition)) as source:
                reader = pq.ParquetFile(source)
                writer = writer or pq.ParquetWriter(tmp, reader.schema_arrow, **write_options(reader.schema_arrow))
                for _, g, rows in (group for group in mine if group[0] == partition):
                    table = reader.read_row_group(g)
                    if table.num_rows != rows:
                        raise ValueError(f"row group {g} of partition {partition} under {prefix!r} is not as staged")
                    writer.write_table(table, row_group_size=max(1, rows))
        if writer is None:  # more shards than row groups: an empty shard
            first = next(i for i, part in enumerate(meta["partitions"]) if part[PARTS[False]])
            with objects.open_input_file(part_key(prefix, False, first)) as source:
                writer = pq.ParquetWriter(tmp, pq.ParquetFile(source).schema_arrow)
        writer.close()
        os.replace(tmp, path)
        sources[s] = ShardSource(path, tuple(range(len(mine))))
    shard_rows = tuple(sum(n for _, _, n in groups[s::shards]) for s in range(shards))
    (directory / SHARDS_FILE).write_text(json.dumps(ShardLayout(shard_rows, sources).to_dict(directory)))
    staged = staged_of(meta, directory, np.empty((0,)), prefix)
    staged.save()
    return staged


@dataclass(frozen=True)
class DataOrder:
    """Which rows make each step: batch ``k`` of every data shard, ``ceil(batch_size / shards)`` rows each.

    It depends on the seed, the batch size and the shards' row counts alone, so every process of
    a job (and one process reading every shard) cuts the same steps and knows each step's size.
    """

    seed: int
    batch_size: int
    shard_rows: tuple[int, ...]

    @property
    def shard_batch(self) -> int:
        return max(1, math.ceil(self.batch_size / len(self.shard_rows)))

    def steps(self) -> int:
        """Steps per epoch: the most any shard needs."""
        return max(math.ceil(rows / self.shard_batch) for rows in self.shard_rows)

    def step_rows(self, step: int) -> int:
        """Rows in step ``step`` (0-based) over every shard: what the step's mean loss divides by."""
        b = self.shard_batch
        return sum(min(b, max(0, rows - step * b)) for rows in self.shard_rows)

    def to_dict(self) -> dict[str, object]:
        return {"seed": self.seed, "batch_size": self.batch_size, "shard_rows": list(self.shard_rows)}


class RowGroupLoader:
    """Shuffled batches of standardized features and targets from the data shards this process owns."""

    def __init__(
        self,
        path: str | Path,
        preprocessor: Preprocessor,
        batch_size: int,
        *,
        target_mean: float,
        target_std: float,
        buffer_row_groups: int = 4,
        seed: int = 0,
        rank: int = 0,
        world: int = 1,
        device: str = "cpu",
        class_targets: bool = False,
        layout: ShardLayout | None = None,
        owned: Sequence[int] | None = None,
    ) -> None:
        """``batch_size``: rows per step over all processes. ``layout``: the data shards (default: the
        row groups of ``path`` dealt into ``world`` shards); ``owned``: the shards this process reads
        (default: every ``world``-th from ``rank``). ``class_targets``: the staged targets are class
        indices, yielded as int64 and not standardized (a classifier's); otherwise float32
        standardized by ``target_mean``/``target_std``."""
        if not 0 <= rank < world:
            raise ValueError("rank must be in [0, world)")
        self.layout = layout if layout is not None else ShardLayout.of_file(path, world)
        self.owned = list(owned) if owned is not None else list(range(rank, self.layout.shards, world))
        missing = [s for s in self.owned if s not in self.layout.sources or not 0 <= s < self.layout.shards]
        if missing:
            raise ValueError(f"data shards {missing} are not readable here")
        self.pre = preprocessor
        self.order = DataOrder(seed, batch_size, self.layout.rows)
        self.target_mean, self.target_std = target_mean, target_std
        self.buffer_row_groups = max(1, buffer_row_groups)
        self.seed = seed
        self.device = device
        self.class_targets = class_targets
        self._group_rows: dict[Path, list[int]] = {}

    @property
    def rows(self) -> int:
        """Training rows this process reads per epoch."""
        return sum(self.layout.rows[s] for s in self.owned)

    def steps_per_epoch(self, epoch: int = 1) -> int:
        """Batches every process yields in an epoch (the same in every epoch)."""
        return self.order.steps()

    def step_rows(self, step: int) -> int:
        """Rows of step ``step`` over all processes."""
        return self.order.step_rows(step)

    def _rows_of(self, path: Path) -> list[int]:
        if path not in self._group_rows:
            meta = pq.ParquetFile(path).metadata
            self._group_rows[path] = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        return self._group_rows[path]

    def shard(self, epoch: int, shard: int | None = None) -> Shard:
        """Data shard ``shard``'s row groups in ``epoch`` (1-based): its own, in a seeded permutation.

        One shard permutes from (seed, epoch) as the single-process loader always has; several
        from (seed, epoch, shards, shard).
        """
        shard = self.owned[0] if shard is None else shard
        source = self.layout.sources[shard]
        key = [self.seed, epoch] if self.layout.shards == 1 else [self.seed, epoch, self.layout.shards, shard]
        order = np.random.default_rng(key).permutation(len(source.groups))
        groups = [source.groups[i] for i in order]
        group_rows = self._rows_of(source.path)
        return Shard(groups, sum(group_rows[g] for g in groups))

    def _buffers(self, epoch: int, shard: int | None = None) -> Iterator[Parts]:
        shard = self.owned[0] if shard is None else shard
        groups = self.shard(epoch, shard).groups
        source = pq.ParquetFile(self.layout.sources[shard].path)
        rng = np.random.default_rng([self.seed, epoch, shard, 1])
        for start in range(0, len(groups), self.buffer_row_groups):
            table = source.read_row_groups(groups[start : start + self.buffer_row_groups])
            numeric, categorical = self.pre.transform(table.drop_columns([TARGET]))
            y = self.targets(table.column(TARGET).to_numpy())
            order = rng.permutation(table.num_rows)
            yield numeric[order], categorical[order], y[order]

    def targets(self, staged: np.ndarray) -> np.ndarray:
        """The staged target column as the loss takes it: class indices, or standardized values."""
        if self.class_targets:
            return staged.astype(np.int64)
        return ((staged - self.target_mean) / self.target_std).astype(np.float32)

    def _prefetched(self, epoch: int, shard: int) -> Iterator[Parts]:
        """:meth:`_buffers`, one buffer ahead on a background thread."""
        slots: queue.Queue[object] = queue.Queue(maxsize=1)
        done = object()
        stop = threading.Event()

        def offer(item: object) -> bool:
            """Put ``item`` unless the consumer has gone (then the producer must not block)."""
            while not stop.is_set():
                try:
                    slots.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def produce() -> None:
            try:
                for item in self._buffers(epoch, shard):
                    if not offer(item):
                        return
                offer(done)
            except BaseException as exc:  # handed to the consumer, raised there
                offer(exc)

        thread = threading.Thread(target=produce, name="labeldp-loader", daemon=True)
        thread.start()
        try:
            while True:
                item = slots.get()
                if item is done:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item  # type: ignore[misc]
        finally:
            stop.set()
            thread.join()

    def _shard_batches(self, epoch: int, shard: int) -> Iterator[Batch]:
        """Exactly :meth:`steps_per_epoch` batches of ``order.shard_batch`` rows from one shard (then the
        shorter tail, then empty batches)."""
        device = torch.device(self.device)
        pin = device.type == "cuda"
        size = self.order.shard_batch
        steps = self.order.steps()
        emitted = 0
        carry: tuple[np.ndarray, ...] | None = None

        def staged(parts: tuple[np.ndarray, ...]) -> list[torch.Tensor]:
            tensors = [torch.from_numpy(np.ascontiguousarray(p)) for p in parts]
            return [t.pin_memory() for t in tensors] if pin else tensors

        def batch(tensors: list[torch.Tensor], start: int, stop: int) -> Batch:
            x, c, y = (t[start:stop].to(device, non_blocking=True) for t in tensors)
            return x, c, y

        for buffer in self._prefetched(epoch, shard):
            parts: tuple[np.ndarray, ...] = buffer
            if carry is not None:
                parts = tuple(np.concatenate([a, b]) for a, b in zip(carry, parts))
                carry = None
            n = len(parts[2])
            full = n - n % size
            tensors = staged(parts)
            for start in range(0, full, size):
                yield batch(tensors, start, start + size)
                emitted += 1
            if full < n:
                carry = tuple(a[full:] for a in parts)
        if carry is not None:
            yield batch(staged(carry), 0, len(carry[2]))
            emitted += 1
        empty = staged((
            np.zeros((0, len(self.pre.numeric_columns)), np.float32),
            np.zeros((0, len(self.pre.categorical_columns)), np.int64),
            np.zeros((0,), np.int64 if self.class_targets else np.float32),
        ))
        while emitted < steps:
            yield batch(empty, 0, 0)
            emitted += 1

    def steps(self, epoch: int) -> Iterator[list[Batch]]:
        """Exactly :meth:`steps_per_epoch` steps, each batch ``k`` of every owned shard, in shard order
        (a tail may be short or empty): a process's shards are micro-batches of one step."""
        streams = [self._shard_batches(epoch, s) for s in self.owned]
        try:
            for parts in zip(*streams):
                yield list(parts)
        finally:
            for stream in streams:
                stream.close()  # type: ignore[attr-defined]

    def batches(self, epoch: int) -> Iterator[Batch]:
        """:meth:`steps` with each step's micro-batches in one batch."""
        for parts in self.steps(epoch):
            if len(parts) == 1:
                yield parts[0]
            else:
                x, c, y = (torch.cat(column) for column in zip(*parts))
                yield x, c, y
