"""How a model is trained: the one definition of the training options, their defaults and bounds.

:class:`TrainingOptions` is declared once. ``POST /v1/trainings``
(:class:`features_party.training_request.TrainingRequest`), the in-process
:class:`TrainingConfig` and the benchmark's recipes
(``labeldp_research.utility.TrainingRecipe``) all subclass it, so a training
requested with no options runs exactly the recipe the benchmark's default
configuration was measured with (docs/architecture.md, "Benchmark protocol"):
Liu & Huang §5.3 (Adam, lr 1e-3, 50 epochs, batch 256, lr ÷ 10 after epoch 25,
weight decay 1e-4) with 10 % of the rows held out for private model selection,
and the default :class:`LearningConfig` (docs/decisions/0011-training-recipe.md).
:class:`LearningConfig` (how a regressor learns from the release's law) is declared
once as well: the request subclasses it too.

No torch here: the request model and the benchmark's tables import this module.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt

from labeldp.learning.debiasing import Debias
from labeldp.learning.staging import PARTITION_ROWS

Optimizer = Literal["adam", "rmsprop"]
Schedule = Literal["none", "step", "cosine"]
Precision = Literal["fp32", "bf16", "fp16"]
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
SCHEDULES: tuple[str, ...] = get_args(Schedule)
PRECISIONS: tuple[str, ...] = get_args(Precision)
MAX_BATCH_SIZE = 65_536


class TrainingOptions(BaseModel):
    """How the network is optimized (the same for every task and every mechanism).

    ``optimizer``: Adam or RMSProp (torch defaults otherwise), both with L2
    ``weight_decay``. ``schedule``: ``none`` keeps ``learning_rate`` constant;
    ``step`` multiplies it by ``step_factor`` every ``step_epoch`` epochs (Liu & Huang
    §5.3); ``cosine`` decays it per batch as lr·(1 + cos(π·t/T))/2 over all T batches
    (Ghazi et al. App. E.1: RMSProp 1e-3, batch 8192). ``validation_fraction`` of the
    rows (at most 2^20) is held out (drawn from ``seed`` before any label is read) for private model
    selection; ``seed`` ``None`` draws one from the OS.
    """

    model_config = ConfigDict(extra="forbid")

    epochs: int = Field(50, ge=1, le=1000)
    batch_size: int = Field(
        256, ge=1, le=MAX_BATCH_SIZE, description="rows per step over every process (unset: 256; a training of "
        "several processes that leaves it and learning_rate unset steps a larger batch, docs/decisions/0038)"
    )
    learning_rate: float = Field(1e-3, gt=0, le=10)
    weight_decay: float = Field(1e-4, ge=0, le=10)
    validation_fraction: float = Field(0.1, ge=0, lt=0.5)
    seed: int | None = Field(None, ge=0, lt=2**63)
    optimizer: Optimizer = "adam"
    schedule: Schedule = Field(
        "step", description="step: lr × step_factor every step_epoch epochs; cosine: per-batch cosine decay to 0"
    )
    step_epoch: int = Field(25, ge=1, le=1000)
    step_factor: float = Field(0.1, gt=0, le=1)
    precision: Precision = Field("fp32", description="fp32, or bf16/fp16 autocast for the forward pass")

    def options(self) -> dict[str, Any]:
        """The training options alone (no subclass fields), as plain values."""
        return self.model_dump(include=set(TrainingOptions.model_fields))


DEFAULT_OPTIONS = TrainingOptions()
"""What a training gets with no options: the benchmarked default configuration."""

PROCESS_BATCH_SCALE = 8
"""A training of several processes steps this many times the default batch (docs/decisions/0038-process-recipe.md)."""
MIN_STEPS_PER_EPOCH = 256
"""...but never fewer steps per epoch than this: a small training keeps the default batch (record 0038)."""


Options = TypeVar("Options", bound=TrainingOptions)


def recipe_for_processes(options: Options, processes: int, rows: int, explicit: Collection[str] = ()) -> Options:
    """The options a training of ``processes`` processes over ``rows`` rows runs, when its request left the
    batch and the learning rate to us (neither is in ``explicit``).

    One process keeps the benchmarked recipe. Several take a batch up to :data:`PROCESS_BATCH_SCALE` times
    larger, halved until an epoch still holds :data:`MIN_STEPS_PER_EPOCH` steps, with the learning rate ×
    √scale (Adam's square-root rule): one all-reduce per step then costs that many times fewer per row,
    which is what lets a second process add throughput, at the default recipe's accuracy (record 0038).
    The batch is global (rows per step over every process), so the model does not depend on how many
    processes run it.
    """
    if processes <= 1 or {"batch_size", "learning_rate"} & set(explicit):
        return options
    scale = PROCESS_BATCH_SCALE
    while scale > 1 and (options.batch_size * scale * MIN_STEPS_PER_EPOCH > rows
                         or options.batch_size * scale > MAX_BATCH_SIZE):
        scale //= 2
    if scale == 1:
        return options
    return options.model_copy(
        update={"batch_size": options.batch_size * scale, "learning_rate": options.learning_rate * math.sqrt(scale)}
    )


class TrainingConfig(TrainingOptions):
    """The options plus where the training runs: what the training loop takes.

    ``row_group_rows``, ``buffer_row_groups`` and ``join_partition_rows`` apply to
    streaming training (:mod:`labeldp.learning.staging`, :mod:`labeldp.learning.loader`):
    the release is joined with its features in id-hash partitions of about
    ``join_partition_rows`` rows, the staged release is cut into row groups of
    ``row_group_rows`` rows, and a worker holds at most ``buffer_row_groups`` of them
    (plus one being prefetched) at a time per data shard; ``data_shards`` fixes which rows
    make each step (:class:`labeldp.learning.loader.DataOrder`).
    """

    device: str = "auto"
    threads: int = Field(0, ge=0, description="torch CPU threads (0: torch's default)")
    row_group_rows: int = Field(65_536, ge=1, le=1 << 24)
    buffer_row_groups: int = Field(4, ge=1, le=4096)
    join_partition_rows: int = Field(PARTITION_ROWS, ge=1)
    data_shards: int = Field(
        0, ge=0, le=4096, description="data shards the staged row groups are dealt into (0: one per process; "
        "keep row groups >= shards); the steps depend on it, not on the processes, so 1 process of 2 shards "
        "trains as 2 processes do"
    )

    def replace(self, **changes: Any) -> TrainingConfig:
        """A copy with ``changes``, validated like a new config."""
        return type(self).model_validate({**self.model_dump(), **changes})


class LearningConfig(BaseModel):
    """How a regressor uses the release's transition law (post-processing: no ε).

    Declared once: ``POST /v1/trainings`` takes these fields as they are
    (:class:`features_party.training_request.TrainingRequest` subclasses this model) and a training's
    row stores them beside its :class:`TrainingOptions` (``features_party.training_request.TrainingOrder``).

    ``debias``: ``predictions`` trains on the privatized labels and maps each
    prediction through the inverse of E[ŷ | y]; ``targets`` trains on debiased
    labels (ŷ − b)/a (identical to ``predictions`` for affine laws, whose target
    standardization absorbs the affine map; the linearized law otherwise);
    ``none`` predicts E[ŷ | x] as is. ``shrinkage``: λ of λ·debiased + (1 − λ)·plain,
    or ``auto`` to choose it on the privatized validation split (the minimizer of
    the private estimate, discounted by its standard error). ``select_epoch``:
    keep the epoch with the best private selection estimate instead of the last.

    Defaults: debiased predictions, ``auto``, epoch selection.
    Decided in docs/decisions/0010-default-learning.md.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    debias: Debias = Field(
        "predictions",
        description="regression: use the release's transition law E[ŷ|y] to debias predictions or training targets",
    )
    shrinkage: Literal["auto"] | Annotated[StrictFloat | StrictInt, Field(ge=0, le=1)] = Field(
        "auto",
        description="λ of λ·debiased + (1 − λ)·plain, or 'auto' (chosen on the privatized validation split)",
    )
    select_epoch: StrictBool = Field(
        True,
        description="keep the epoch with the best private validation estimate instead of the last",
    )

    @property
    def needs_validation(self) -> bool:
        """Whether anything is chosen on the validation split."""
        return self.select_epoch or (self.debias != "none" and self.shrinkage == "auto")

    def to_dict(self) -> dict[str, Any]:
        """The learning fields alone (no subclass fields), as plain values."""
        return self.model_dump(include=set(LearningConfig.model_fields))


DEFAULT_LEARNING = LearningConfig()
"""What a regression training does by default (debiased predictions, λ and epoch chosen privately)."""

PLAIN = LearningConfig(debias="none", shrinkage=0.0, select_epoch=False)
"""Train on the privatized labels and keep the last epoch: what ``fit_regressor`` does."""
