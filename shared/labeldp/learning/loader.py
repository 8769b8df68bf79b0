"""Batches streamed from staged row groups: bounded memory, a sampler over row groups per worker.

Each epoch draws a permutation of the row groups from (seed, epoch), the same on every
worker; worker ``rank`` of ``world`` takes every ``world``-th of them (the order is
padded by wrapping round so every worker gets as many, as ``DistributedSampler`` pads).
A worker reads ``buffer_row_groups`` of its row groups at a time, transforms them with
the fitted preprocessor, shuffles the rows inside that buffer and cuts batches;
the next buffer is read and transformed on a background thread while the current one
trains (Arrow reads and numpy release the GIL). On CUDA the buffer is pinned and each
batch is copied with ``non_blocking=True``. Memory is therefore about
(``buffer_row_groups`` + 1) row groups, whatever the number of rows.

Every worker yields the same number of batches per epoch (the most any worker needs;
a worker that runs out yields empty batches), because DistributedDataParallel needs
every worker in every all-reduce.
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch

from labeldp.learning.preprocessing import Preprocessor
from labeldp.learning.staging import TARGET

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Shard:
    """The row groups of one worker in one epoch (in reading order)."""

    groups: list[int]
    rows: int


class RowGroupLoader:
    """Shuffled batches of standardized features and targets from one staged Parquet file."""

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
    ) -> None:
        """``class_targets``: the staged targets are class indices, yielded as int64 and not
        standardized (a classifier's); otherwise float32 standardized by ``target_mean``/``target_std``."""
        if not 0 <= rank < world:
            raise ValueError("rank must be in [0, world)")
        self.path = Path(path)
        self.pre = preprocessor
        self.batch_size = batch_size
        self.target_mean, self.target_std = target_mean, target_std
        self.buffer_row_groups = max(1, buffer_row_groups)
        self.seed, self.rank, self.world = seed, rank, world
        self.device = device
        self.class_targets = class_targets
        meta = pq.ParquetFile(self.path).metadata
        self.group_rows = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]

    @property
    def rows(self) -> int:
        return sum(self.group_rows)

    def shard(self, epoch: int, rank: int | None = None) -> Shard:
        """Worker ``rank``'s row groups in ``epoch`` (1-based): a strided share of one seeded permutation."""
        rank = self.rank if rank is None else rank
        n_groups = len(self.group_rows)
        order = np.random.default_rng([self.seed, epoch]).permutation(n_groups)
        padded = math.ceil(n_groups / self.world) * self.world
        order = np.resize(order, padded)  # wraps round: every worker gets as many row groups
        groups = [int(g) for g in order[rank :: self.world]]
        return Shard(groups, sum(self.group_rows[g] for g in groups))

    def steps_per_epoch(self, epoch: int) -> int:
        """Batches every worker yields in ``epoch``: the most any worker's share needs."""
        return max(math.ceil(self.shard(epoch, r).rows / self.batch_size) for r in range(self.world))

    def _buffers(self, epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        shard = self.shard(epoch)
        source = pq.ParquetFile(self.path)
        rng = np.random.default_rng([self.seed, epoch, self.rank, 1])
        for start in range(0, len(shard.groups), self.buffer_row_groups):
            table = source.read_row_groups(shard.groups[start : start + self.buffer_row_groups])
            numeric, categorical = self.pre.transform(table.drop_columns([TARGET]))
            y = self.targets(table.column(TARGET).to_numpy())
            order = rng.permutation(table.num_rows)
            yield numeric[order], categorical[order], y[order]

    def targets(self, staged: np.ndarray) -> np.ndarray:
        """The staged target column as the loss takes it: class indices, or standardized values."""
        if self.class_targets:
            return staged.astype(np.int64)
        return ((staged - self.target_mean) / self.target_std).astype(np.float32)

    def _prefetched(self, epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
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
                for item in self._buffers(epoch):
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

    def batches(self, epoch: int) -> Iterator[Batch]:
        """Exactly :meth:`steps_per_epoch` batches of at most ``batch_size`` rows (the tail may be empty)."""
        device = torch.device(self.device)
        pin = device.type == "cuda"
        steps = self.steps_per_epoch(epoch)
        emitted = 0
        carry: tuple[np.ndarray, ...] | None = None

        def staged(parts: tuple[np.ndarray, ...]) -> list[torch.Tensor]:
            tensors = [torch.from_numpy(np.ascontiguousarray(p)) for p in parts]
            return [t.pin_memory() for t in tensors] if pin else tensors

        def batch(tensors: list[torch.Tensor], start: int, stop: int) -> Batch:
            x, c, y = (t[start:stop].to(device, non_blocking=True) for t in tensors)
            return x, c, y

        for buffer in self._prefetched(epoch):
            parts: tuple[np.ndarray, ...] = buffer
            if carry is not None:
                parts = tuple(np.concatenate([a, b]) for a, b in zip(carry, parts))
                carry = None
            n = len(parts[2])
            full = n - n % self.batch_size
            tensors = staged(parts)
            for start in range(0, full, self.batch_size):
                yield batch(tensors, start, start + self.batch_size)
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
