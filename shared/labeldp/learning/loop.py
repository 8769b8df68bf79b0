"""The one training loop (:func:`train`) every path shares: split, preprocess, optimize, report every epoch.

What differs between regression and classification is an :class:`Objective` (head,
per-row loss, how losses are reported); what differs between a table in memory
(:func:`fit_network`) and a staged release streamed in row groups, in this process or
in each torchrun worker (:func:`fit_streamed`), is a :class:`TrainingData` (batches,
the step's loss, validation, the data order a checkpoint keeps). The rows that validate
are drawn from the seed before any target is looked at (:func:`make_plan`).
"""

from __future__ import annotations

import contextlib
import math
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import nn

from labeldp.learning.config import OPTIMIZERS, SCHEDULES, TrainingConfig
from labeldp.learning.device import resolve_device
from labeldp.learning.loader import RowGroupLoader, stage_layout
from labeldp.learning.networks import MLP, PREDICT_CHUNK
from labeldp.learning.precision import MixedPrecision
from labeldp.learning.preprocessing import Preprocessor
from labeldp.learning.staging import TARGET, StagedRelease


def learning_rate_at(config: TrainingConfig, epoch: int, step: int, steps_per_epoch: int) -> float:
    """The learning rate of batch ``step`` (0-based) of ``epoch`` (1-based) under ``config.schedule``."""
    lr = config.learning_rate
    if config.schedule == "step":
        return lr * config.step_factor ** ((epoch - 1) // config.step_epoch)
    if config.schedule == "cosine":
        total = max(1, config.epochs * steps_per_epoch)
        t = (epoch - 1) * steps_per_epoch + step
        return lr * 0.5 * (1.0 + math.cos(math.pi * min(t, total) / total))
    return lr



def make_optimizer(model: nn.Module, config: TrainingConfig) -> torch.optim.Optimizer:
    """The configured optimizer. On CUDA, Adam is the fused kernel: a small MLP's step is bound by
    kernel launches there, and one launch for all parameters makes a step faster
    (docs/decisions/0019-fused-adam-on-cuda.md). CPU keeps the default kernels, and its pinned bits."""
    if config.optimizer == "rmsprop":
        return torch.optim.RMSprop(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    fused = next(model.parameters()).is_cuda
    return torch.optim.Adam(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay,
                            fused=fused or None)



@dataclass(frozen=True)
class EpochReport:
    """What one finished epoch reports.

    Regression: losses are MSE in label units, accuracies are ``None``.
    Classification: losses are cross-entropy (nats) against the privatized labels
    (with forward correction: of the privatized-label model softmax(f)·T), and
    accuracies compare the predicted class (argmax of softmax(f)) with them.
    """

    epoch: int
    epochs: int
    train_loss: float
    val_loss: float | None
    seconds: float
    train_accuracy: float | None = None
    val_accuracy: float | None = None
    selection_loss: float | None = None

    def as_history(self) -> dict[str, Any]:
        """One history entry; regression entries keep their original three keys.

        ``selection_loss`` (private model selection's estimate for this epoch, see
        :mod:`labeldp.learning.selection`) is added when there is one.
        """
        entry: dict[str, Any] = {"epoch": self.epoch, "train_loss": self.train_loss, "val_loss": self.val_loss}
        if self.train_accuracy is not None:
            entry["train_accuracy"] = self.train_accuracy
            entry["val_accuracy"] = self.val_accuracy
        if self.selection_loss is not None:
            entry["selection_loss"] = self.selection_loss
        return entry



@runtime_checkable
class BatchListener(Protocol):
    """An ``on_epoch`` callback that also wants each batch (the service's progress and cancel, see
    :mod:`features_party.training_run`): ``on_batch(epoch, step, steps)`` runs after every optimizer step, with
    ``step`` of ``steps`` counted from 1; raising there stops the training at that batch boundary."""

    def __call__(self, report: EpochReport) -> None: ...

    def on_batch(self, epoch: int, step: int, steps: int) -> None: ...



@dataclass(frozen=True)
class Objective:
    """What differs between the tasks: the network's head, the per-row loss, how losses are reported."""

    network: Callable[[int, list[int]], MLP]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # per-row losses
    loss_scale: float = 1.0  # reported loss = mean loss × this (label units for regression)
    accuracy: bool = False



def squared_error(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (out - y) ** 2



@dataclass(frozen=True)
class Plan:
    """Decided before any target is looked at: seed, device, which rows train and which validate."""

    seed: int
    device: str
    train_idx: np.ndarray
    val_idx: np.ndarray



VALIDATION_MAX_ROWS = 1 << 20
"""At most this many validation rows, whatever ``validation_fraction`` gives (2^20 = 10 % of 10.5·10^6 rows).
Decided in docs/decisions/0037-validation-max-rows.md."""


def _n_validation(n: int, fraction: float) -> int:
    """How many of ``n`` rows validate: ``fraction`` of them, at most :data:`VALIDATION_MAX_ROWS`; at least
    one of two or more rows when ``fraction`` > 0."""
    if n < 1:
        raise ValueError("no rows to train on")
    n_val = min(int(math.floor(n * fraction)), VALIDATION_MAX_ROWS)
    if fraction > 0 and n >= 2:
        n_val = min(max(n_val, 1), n - 1)
    return n_val


SPLIT_BLOCK_ROWS = 1 << 20
"""Rows up to which the split is one permutation; above, block by block.
Decided in docs/decisions/0035-split-block-rows.md."""


def _split(n: int, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, validation rows), each sorted: the rows of :func:`_validation_bits`."""
    is_val = split_bits_slice(_validation_bits(n, fraction, rng), 0, n)
    return np.flatnonzero(~is_val), np.flatnonzero(is_val)


def _validation_bits(n: int, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """The validation rows, a uniform draw of ``_n_validation`` of the n, as a bit per row (``np.packbits``
    order): all that a stage keeps of the split (n/8 bytes).

    Up to :data:`SPLIT_BLOCK_ROWS` rows they are the first rows of ``rng.permutation(n)``, the draw every
    split has always been. Above, the same law without a permutation of n: how many validation rows each
    block of that many rows holds is drawn by halving (hypergeometric counts), then the rows within each
    block from a permutation of the block, so drawing holds one block, not 4 bytes per row."""
    n_val = _n_validation(n, fraction)
    bits = np.zeros((n + 7) // 8, np.uint8)
    for start, rows, k in _block_counts(n, n_val, rng):
        if k:
            mask = np.zeros(rows, bool)
            mask[rng.permutation(rows)[:k]] = True
            packed = np.packbits(mask)  # start is a multiple of SPLIT_BLOCK_ROWS: whole bytes
            bits[start // 8 : start // 8 + len(packed)] = packed
    return bits


def _block_counts(n: int, k: int, rng: np.random.Generator) -> Iterator[tuple[int, int, int]]:
    """(first row, rows, validation rows) of each block of :data:`SPLIT_BLOCK_ROWS` rows, in row order: the
    counts of a uniform draw of k of the n rows. One block takes the whole draw (no random number)."""
    blocks = -(-n // SPLIT_BLOCK_ROWS)
    if blocks > 1 and n >= 2 * 10**9:  # numpy's hypergeometric takes each part below 10**9
        raise ValueError("a split of 2·10^9 rows or more is not supported")
    pending = [(0, blocks, k)]  # (first block, end block, validation rows among them), depth first
    while pending:
        first, end, count = pending.pop()
        start, stop = first * SPLIT_BLOCK_ROWS, min(end * SPLIT_BLOCK_ROWS, n)
        if end - first == 1:
            yield start, stop - start, count
            continue
        middle = (first + end) // 2
        left = middle * SPLIT_BLOCK_ROWS - start
        in_left = int(rng.hypergeometric(left, stop - start - left, count)) if count else 0
        pending.append((middle, end, count - in_left))
        pending.append((first, middle, in_left))


def _checked_seed(config: TrainingConfig) -> int:
    if config.epochs < 1 or config.batch_size < 1:
        raise ValueError("epochs and batch_size must be positive")
    if config.optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}")
    if config.schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}")
    if config.step_epoch < 1 or not 0 < config.step_factor <= 1:
        raise ValueError("step_epoch must be >= 1 and step_factor in (0, 1]")
    if not 0 <= config.validation_fraction < 1:
        raise ValueError("validation_fraction must be in [0, 1)")
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    return config.seed if config.seed is not None else secrets.randbits(63)


def make_plan(n_rows: int, config: TrainingConfig) -> Plan:
    seed = _checked_seed(config)
    train_idx, val_idx = _split(n_rows, config.validation_fraction, np.random.default_rng(seed))
    return Plan(seed, resolve_device(config.device), train_idx, val_idx)


def make_split_bits(n_rows: int, config: TrainingConfig) -> tuple[Plan, np.ndarray]:
    """:func:`make_plan`'s split as one bit per row (its validation rows set, ``np.packbits`` order) and a
    plan without row indices: what a streamed stage holds of the split (n/8 bytes, not 8 per row)."""
    seed = _checked_seed(config)
    bits = _validation_bits(n_rows, config.validation_fraction, np.random.default_rng(seed))
    empty = np.empty(0, np.int64)
    return Plan(seed, resolve_device(config.device), empty, empty), bits


def split_bits_slice(bits: np.ndarray, start: int, rows: int) -> np.ndarray:
    """Rows ``start`` .. ``start + rows`` of a :func:`make_split_bits` mask, as booleans."""
    first = start // 8
    unpacked = np.unpackbits(bits[first : (start + rows + 7) // 8 + 1])
    return unpacked[start - 8 * first : start - 8 * first + rows].astype(bool)



@dataclass
class Fitted:
    model: MLP
    preprocessor: Preprocessor
    history: list[dict[str, Any]]
    n_train: int
    n_validation: int
    config: dict[str, Any]

    def trained(self, plan: Plan) -> dict[str, Any]:
        """The keyword arguments every trained model takes."""
        return {
            "device": plan.device,
            "history": self.history,
            "n_train": self.n_train,
            "n_validation": self.n_validation,
            "config": self.config,
        }



class Throughput:
    """Training rows per second over the optimizer passes (evaluation excluded), for the model card."""

    def __init__(self) -> None:
        self.rows = 0
        self.seconds = 0.0

    def add(self, rows: int, seconds: float) -> None:
        self.rows += rows
        self.seconds += seconds

    def card(self, device: str, precision: str, workers: int = 1) -> dict[str, Any]:
        """``device``, ``precision``, ``workers`` and ``rows_per_second``, as the model file records them."""
        rate = self.rows / self.seconds if self.seconds > 0 else None
        return {"device": device, "precision": precision, "workers": workers, "rows_per_second": rate}




@dataclass(frozen=True)
class Workers:
    """Where this process sits in a data-parallel training; one process is rank 0 of 1.

    With ``world > 1`` the process group must be initialized (:mod:`labeldp.learning.distributed`).
    ``lead``: the rank that evaluates, selects, checkpoints and reports (on a multi-node job the
    one beside the launcher that owns the training, whatever rank the rendezvous gave it).
    ``shards``: the data shards this process reads (default: every ``world``-th from ``rank``).
    """

    rank: int = 0
    world: int = 1
    lead: int = 0
    shards: tuple[int, ...] | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == self.lead



Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""Numeric features, categorical codes and targets of some training rows, on the training device."""
Validation = tuple[np.ndarray, float | None, float | None]
"""(raw outputs, reported loss, accuracy for classifiers) over the validation rows."""


class TrainingData(Protocol):
    """Where one training's rows come from: in memory (:class:`InMemoryData`) or streamed in row
    groups (:class:`StreamedData`). :func:`train` runs the same epochs over either."""

    preprocessor: Preprocessor
    n_train: int
    n_validation: int

    def steps_per_epoch(self) -> int: ...

    def steps(self, epoch: int) -> Iterator[Sequence[Batch]]:
        """Each optimizer step of ``epoch`` as its micro-batches (their gradients add up)."""
        ...

    def reduce(self, losses: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(the loss to backpropagate, its float64 sum over the rows for the epoch's report) of one
        micro-batch's per-row ``losses``."""
        ...

    def validate(self, model: MLP, objective: Objective, outputs: bool) -> Validation:
        """(raw outputs when ``outputs`` asks for them, reported loss, accuracy) over the validation rows."""
        ...

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the data order, beside the model's."""
        ...

    def restore(self, state: dict[str, Any]) -> None:
        """Continue the data order of a checkpoint (or refuse one of another order)."""
        ...


def train(
    data: TrainingData,
    objective: Objective,
    config: TrainingConfig,
    plan: Plan,
    on_epoch: Callable[[EpochReport], None] | None,
    inspect: Callable[[int, np.ndarray, MLP], float | None] | None = None,
    workers: Workers | None = None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    resume: dict[str, Any] | None = None,
) -> Fitted:
    """The one epoch loop: build the network from the seed, run the optimizer for ``config.epochs``
    over ``data``, report every epoch.

    ``inspect(epoch, validation_outputs, model)`` runs after each epoch (before
    ``on_epoch``) with the network's raw outputs on the validation rows; the float it
    returns is reported as the epoch's ``selection_loss``. ``checkpoint(state)`` runs after
    each epoch (before ``on_epoch``) with the epoch, the model's, the optimizer's (fp16: the
    scaler's) and the data order's state, the history and the throughput, as plain types;
    ``resume`` (such a state, from a run with the same seed) continues after its epoch exactly
    as the uninterrupted run would have (the service's training jobs, :mod:`features_party.training_run`).

    With ``workers.world > 1`` the network is wrapped in DistributedDataParallel; the main
    worker alone validates, calls ``inspect``, ``checkpoint`` and ``on_epoch``.
    """
    workers = workers or Workers()
    device = plan.device
    pre = data.preprocessor
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(plan.seed)
        model = objective.network(len(pre.numeric_columns), pre.vocab_sizes).to(device)
    optimizer = make_optimizer(model, config)
    amp = MixedPrecision(config.precision, device)
    meter = Throughput()
    history: list[dict[str, Any]] = []
    first = 1
    if resume is not None:
        model.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
        if amp.scaler is not None and resume.get("scaler"):
            amp.scaler.load_state_dict(resume["scaler"])
        data.restore(resume)
        history, first = list(resume["history"]), int(resume["epoch"]) + 1
        if resume.get("throughput"):  # the rows and seconds of the epochs before the restart
            meter.add(int(resume["throughput"]["rows"]), float(resume["throughput"]["seconds"]))
    trained: nn.Module = model
    if workers.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        ids = [torch.device(device).index or 0] if device != "cpu" else None
        trained = DistributedDataParallel(model, device_ids=ids)
    steps_per_epoch = data.steps_per_epoch()
    # Batch progress (and a cancel between batches) where the listener lives: the main worker.
    on_batch = on_epoch.on_batch if workers.is_main and isinstance(on_epoch, BatchListener) else None
    current_lr = optimizer.param_groups[0]["lr"]
    for epoch in range(first, config.epochs + 1):
        started = time.perf_counter()
        trained.train()
        total = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, rows, correct (classifiers)
        rows_seen = 0  # counted on the host: one kernel launch less per step on a GPU
        for step, parts in enumerate(data.steps(epoch)):
            lr = learning_rate_at(config, epoch, step, steps_per_epoch)
            if lr != current_lr:
                for group in optimizer.param_groups:
                    group["lr"] = lr
                current_lr = lr
            optimizer.zero_grad(set_to_none=True)
            for i, (x, c, y) in enumerate(parts):
                # Each owned shard is a micro-batch whose gradients add up (DDP all-reduces after the
                # last), so a process owning S shards steps as S processes do, to the bit for S = 2.
                last = i == len(parts) - 1
                with contextlib.nullcontext() if last or workers.world == 1 else trained.no_sync():  # type: ignore[operator]
                    with amp.autocast():
                        out = trained(x, c)
                    loss, loss_sum = data.reduce(objective.loss(out.float(), y), step)
                    amp.backward(loss)
                total[0] += loss_sum
                rows_seen += len(y)
                if objective.accuracy:
                    total[2] += (out.detach().argmax(dim=1) == y).sum()
            amp.update(optimizer)
            if on_batch is not None:
                on_batch(epoch, step + 1, steps_per_epoch)
        total[1] = rows_seen
        if workers.world > 1:
            torch.distributed.all_reduce(total)
        meter.add(data.n_train, time.perf_counter() - started)
        rows = max(float(total[1].item()), 1.0)
        train_loss = float(total[0].item()) / rows * objective.loss_scale
        train_acc = float(total[2].item()) / rows if objective.accuracy else None
        val_loss, val_acc, selection_loss = None, None, None
        if workers.is_main:
            outputs, val_loss, val_acc = data.validate(model, objective, inspect is not None)
            if inspect is not None:
                selection_loss = inspect(epoch, outputs, model)
        elapsed = time.perf_counter() - started
        report = EpochReport(epoch, config.epochs, train_loss, val_loss, elapsed, train_acc, val_acc, selection_loss)
        history.append(report.as_history())
        if workers.is_main:
            if checkpoint is not None:
                checkpoint({
                    "epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scaler": amp.scaler.state_dict() if amp.scaler is not None else None,
                    **data.state(), "history": list(history),
                    "throughput": {"rows": meter.rows, "seconds": meter.seconds},
                })
            if on_epoch is not None:
                on_epoch(report)
    model.eval()
    run = {**config.model_dump(), "seed": plan.seed, **meter.card(device, config.precision, workers.world)}
    if resume is not None:
        run["resumed_after_epoch"] = first - 1
    return Fitted(model, pre, history, data.n_train, data.n_validation, run)


class InMemoryData:
    """A table's training rows as tensors on the device, shuffled each epoch by a generator seeded
    from the plan; the preprocessor is fitted on the training rows."""

    def __init__(self, table: pa.Table, targets: np.ndarray, config: TrainingConfig, plan: Plan) -> None:
        device = plan.device
        train_table = table.take(pa.array(plan.train_idx))
        self.preprocessor = pre = Preprocessor.fit(train_table)

        def tensors(idx: np.ndarray, part: pa.Table | None = None) -> tuple[torch.Tensor, ...]:
            num, cat = pre.transform(part if part is not None else table.take(pa.array(idx)))
            return tuple(torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in (num, cat, targets[idx]))

        self.x, self.c, self.y = tensors(plan.train_idx, train_table)
        self.validation = tensors(plan.val_idx) if len(plan.val_idx) else None
        self.n_train, self.n_validation = len(plan.train_idx), len(plan.val_idx)
        self.batch_size, self.device = config.batch_size, device
        self.shuffle = torch.Generator().manual_seed(plan.seed)

    def steps_per_epoch(self) -> int:
        return math.ceil(self.n_train / self.batch_size)

    def steps(self, epoch: int) -> Iterator[Sequence[Batch]]:
        order = torch.randperm(self.n_train, generator=self.shuffle).to(self.device)
        for start in range(0, self.n_train, self.batch_size):
            batch = order[start : start + self.batch_size]
            yield [(self.x[batch], self.c[batch], self.y[batch])]

    def reduce(self, losses: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        loss = losses.mean()
        return loss, loss.detach().double() * len(losses)

    def validate(self, model: MLP, objective: Objective, outputs: bool) -> Validation:
        if self.validation is None:
            return np.empty((0,)), None, None
        val_loss, val_acc = evaluate(model, objective, *self.validation)
        raw = raw_outputs(model, *self.validation[:2]) if outputs else np.empty((0,))
        return raw, val_loss, val_acc

    def state(self) -> dict[str, Any]:
        return {"shuffle": self.shuffle.get_state()}

    def restore(self, state: dict[str, Any]) -> None:
        self.shuffle.set_state(state["shuffle"])


def fit_network(
    table: pa.Table,
    targets: np.ndarray,
    objective: Objective,
    config: TrainingConfig,
    plan: Plan,
    on_epoch: Callable[[EpochReport], None] | None,
    inspect: Callable[[int, np.ndarray, MLP], float | None] | None = None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    resume: dict[str, Any] | None = None,
) -> Fitted:
    """:func:`train` on ``table`` in memory: the preprocessor fitted on the plan's training rows.

    ``targets`` has one entry per row of ``table``, already in the form the loss takes;
    ``inspect``, ``checkpoint`` and ``resume`` as :func:`train` takes them.
    """
    data = InMemoryData(table, targets, config, plan)
    return train(data, objective, config, plan, on_epoch, inspect, None, checkpoint, resume)


class StreamedData:
    """A staged release read in row groups (:class:`~labeldp.learning.loader.RowGroupLoader`),
    each worker its data shards; validated one row group at a time in file order."""

    def __init__(self, staged: StagedRelease, objective: Objective, config: TrainingConfig, plan: Plan,
                 workers: Workers) -> None:
        self.staged, self.device, self.world = staged, plan.device, workers.world
        self.preprocessor = staged.preprocessor
        self.n_train, self.n_validation = staged.n_train, staged.n_validation
        self.loader = RowGroupLoader(
            staged.train_path, staged.preprocessor, config.batch_size,
            target_mean=staged.target_mean, target_std=staged.target_std,
            buffer_row_groups=config.buffer_row_groups, seed=plan.seed,
            rank=workers.rank, world=workers.world, device=plan.device, class_targets=objective.accuracy,
            layout=stage_layout(staged.directory, config.data_shards or workers.world), owned=workers.shards,
        )
        self.data_order = self.loader.order.to_dict()

    def steps_per_epoch(self) -> int:
        return self.loader.steps_per_epoch()

    def steps(self, epoch: int) -> Iterator[Sequence[Batch]]:
        return self.loader.steps(epoch)

    def reduce(self, losses: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        # The step's mean over every process's rows (DDP averages the world's gradients).
        return losses.sum() * self.world / self.loader.step_rows(step), losses.detach().double().sum()

    def validate(self, model: MLP, objective: Objective, outputs: bool) -> Validation:
        return streamed_validation(model, objective, self.staged, self.device)

    def state(self) -> dict[str, Any]:
        return {"world": self.world, "data_order": self.data_order}

    def restore(self, state: dict[str, Any]) -> None:
        if state.get("data_order", self.data_order) != self.data_order:
            raise ValueError("the checkpoint was trained in another data order")


def fit_streamed(
    staged: StagedRelease,
    objective: Objective,
    config: TrainingConfig,
    plan: Plan,
    on_epoch: Callable[[EpochReport], None] | None,
    inspect: Callable[[int, np.ndarray, MLP], float | None] | None = None,
    workers: Workers | None = None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    resume: dict[str, Any] | None = None,
) -> Fitted:
    """:func:`train` over a staged release streamed in row groups (regression or, with an
    ``accuracy`` objective, classification: the staged targets are then class indices).

    Every worker builds the same initial network from the seed; with ``workers.world >
    1`` each worker reads its data shards (:class:`~labeldp.learning.loader.DataOrder`): a
    step is ``batch_size`` rows over all shards and its loss their mean, so the steps do not
    depend on the number of workers. The main worker validates on the validation rows in
    file order (the same array a single process sees). Every epoch's data order comes from
    (seed, epoch, shard) and no other random state is drawn while training, so a resumed
    training is the uninterrupted one; a checkpoint of another data order is refused.
    """
    workers = workers or Workers()
    data = StreamedData(staged, objective, config, plan, workers)
    fitted = train(data, objective, config, plan, on_epoch, inspect, workers, checkpoint, resume)
    fitted.config.setdefault("resumed_after_epoch", 0)  # 0: trained in one go
    return fitted


def raw_outputs(model: MLP, x: torch.Tensor, c: torch.Tensor) -> np.ndarray:
    """The network's outputs on held-out rows (float64, on the CPU), in chunks."""
    model.eval()
    chunks = []
    with torch.no_grad():
        for start in range(0, x.shape[0], PREDICT_CHUNK):
            stop = start + PREDICT_CHUNK
            chunks.append(model(x[start:stop], c[start:stop]).double().cpu().numpy())
    return np.concatenate(chunks) if chunks else np.empty((0,))



def evaluate(
    model: MLP, objective: Objective, x: torch.Tensor, c: torch.Tensor, y: torch.Tensor
) -> tuple[float, float | None]:
    """Mean reported loss and (classification) accuracy over held-out rows, in chunks."""
    model.eval()
    total, correct = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(y), PREDICT_CHUNK):
            stop = start + PREDICT_CHUNK
            out = model(x[start:stop], c[start:stop])
            total += float(objective.loss(out, y[start:stop]).double().sum().item())
            if objective.accuracy:
                correct += int((out.argmax(dim=1) == y[start:stop]).sum().item())
    accuracy = correct / len(y) if objective.accuracy else None
    return total / len(y) * objective.loss_scale, accuracy



def check_targets(values: np.ndarray, n_rows: int, what: str) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (n_rows,):
        raise ValueError(f"{what} must have one value per row")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{what} must be finite")
    return values



def standardize(targets: np.ndarray, train_idx: np.ndarray) -> tuple[float, float, np.ndarray]:
    """(mean, std, standardized float32 targets), the statistics from training rows only."""
    mean = float(targets[train_idx].mean())
    std = float(targets[train_idx].std())
    std = std if std > 1e-12 else 1.0
    return mean, std, ((targets - mean) / std).astype(np.float32)


def streamed_validation(
    model: MLP, objective: Objective, staged: StagedRelease, device: str
) -> tuple[np.ndarray, float | None, float | None]:
    """(raw outputs, reported loss, accuracy for classifiers) over the validation rows, one row group
    at a time in file order."""
    if staged.n_validation == 0:
        return np.empty((0,)), None, None
    source = pq.ParquetFile(staged.validation_path)
    outputs: np.ndarray | None = None  # filled in place: a list and its concatenation held them twice
    filled, total, correct = 0, 0.0, 0
    model.eval()
    with torch.no_grad():
        for i in range(source.metadata.num_row_groups):
            table = source.read_row_group(i)
            numeric, categorical = staged.preprocessor.transform(table.drop_columns([TARGET]))
            staged_targets = table.column(TARGET).to_numpy()
            if objective.accuracy:  # class indices
                y = torch.from_numpy(staged_targets.astype(np.int64)).to(device)
            else:
                y = torch.from_numpy(((staged_targets - staged.target_mean) / staged.target_std).astype(np.float32))
                y = y.to(device)
            x, c = torch.from_numpy(numeric).to(device), torch.from_numpy(categorical).to(device)
            for start in range(0, len(y), PREDICT_CHUNK):
                stop = start + PREDICT_CHUNK
                out = model(x[start:stop], c[start:stop])
                total += float(objective.loss(out, y[start:stop]).double().sum().item())
                if objective.accuracy:
                    correct += int((out.argmax(dim=1) == y[start:stop]).sum().item())
                chunk = out.double().cpu().numpy()
                if outputs is None:
                    outputs = np.empty((staged.n_validation, *chunk.shape[1:]))
                outputs[filled : filled + len(chunk)] = chunk
                filled += len(chunk)
    assert outputs is not None and filled == staged.n_validation  # n_validation > 0 rows were read
    accuracy = correct / staged.n_validation if objective.accuracy else None
    return outputs, total / staged.n_validation * objective.loss_scale, accuracy
