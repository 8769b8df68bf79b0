"""Training a release at scale: stage it as row groups, then train in this process or as a torchrun job.

The in-memory path (:func:`features_party.jobs.fit_for_release`) stays the default;
this one is chosen by ``LABELDP_TRAINING_WORKERS`` > 1 or ``LABELDP_TRAINING_STREAMING``
(docs/architecture.md, "Training at scale"). Categorical releases train classifiers,
staged with their class indices as targets; either kind trains in this process or as a
torchrun job.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from labeldp.errors import InvalidInput
from labeldp.learning.classifier import fit_staged_classifier
from labeldp.learning.config import DEFAULT_LEARNING, LearningConfig, TrainingConfig
from labeldp.learning.debiasing import LabelLaw, label_law
from labeldp.learning.loop import EpochReport, Plan, check_targets, make_plan
from labeldp.learning.persistence import TrainedClassifier, TrainedRegressor
from labeldp.learning.regression import fit_staged_regressor, training_targets
from labeldp.learning.staging import stage_release

if TYPE_CHECKING:
    from labeldp.learning.distributed import Hosts


def law_for(spec: Any) -> LabelLaw:
    """The release's label law (registry-derived; docs/architecture.md, "The mechanism contract"),
    or 422 when its spec does not rebuild to a consistent law: never plain learning in its place."""
    if isinstance(spec, LabelLaw):
        return spec
    try:
        return label_law(spec)
    except ValueError:
        raise InvalidInput(
            "label_law_unavailable", "the release's mechanism spec does not rebuild to a consistent label law"
        ) from None


def fit_release_streamed(
    feature_path: str | Path | pa.NativeFile,
    id_column: str,
    ids: pa.Array | pa.ChunkedArray,
    labels: np.ndarray,
    spec: Any,
    config: TrainingConfig,
    work_dir: str | Path,
    learning: LearningConfig = DEFAULT_LEARNING,
    on_epoch: Callable[[EpochReport], None] | None = None,
    *,
    workers: int = 1,
    hosts: Hosts | None = None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    resume: dict[str, Any] | None = None,
    prior: Any = None,
) -> TrainedRegressor:
    """Stage ``ids``/``labels`` joined with the feature table at ``feature_path`` under ``work_dir``
    and train a regressor on it, in this process (``workers`` 1 and no ``hosts``) or with ``workers``
    torchrun processes (on this host and each of ``hosts``' peers).

    The split is drawn from the seed over release positions as in memory
    (:func:`~labeldp.learning.loop.make_plan`); ``work_dir`` is the caller's to remove.
    ``checkpoint``/``resume``: as :func:`~labeldp.learning.loop.fit_streamed` takes them, in this
    process only (a torchrun job checkpoints in its own work folder). ``prior``: the release's DP
    prior (spec or JSON dict), whose mean joins the private mean as in memory
    (:class:`~labeldp.learning.regression.Selection`, the one place the anchor is computed).
    """
    labels = check_targets(labels, len(ids), "privatized_labels")
    law = law_for(spec)
    plan = make_plan(len(ids), config)
    is_validation = np.zeros(len(ids), dtype=bool)
    is_validation[plan.val_idx] = True
    targets = training_targets(law, learning, labels)
    staged = stage_release(
        feature_path, id_column, ids, labels, targets, is_validation, Path(work_dir) / "stage", config.row_group_rows,
        config.join_partition_rows,
    )
    del is_validation, targets
    plan = Plan(plan.seed, plan.device, np.empty(0, np.int64), np.empty(0, np.int64))  # the stage holds the split
    run = config.replace(seed=plan.seed, device=plan.device)
    if workers <= 1 and hosts is None:
        return fit_staged_regressor(staged, law, run, plan, learning, on_epoch, None, checkpoint, resume, prior)
    from labeldp.learning.distributed import run_torchrun

    law_source = spec if not isinstance(spec, LabelLaw) and law.name != "identity" else None
    return run_torchrun(staged, law_source, law, run, learning, workers, Path(work_dir), on_epoch, hosts, prior=prior)


def fit_classifier_streamed(
    feature_path: str | Path | pa.NativeFile,
    id_column: str,
    ids: pa.Array | pa.ChunkedArray,
    class_indices: np.ndarray,
    n_classes: int,
    config: TrainingConfig,
    work_dir: str | Path,
    on_epoch: Callable[[EpochReport], None] | None = None,
    *,
    classes: list[str] | None = None,
    transition_matrix: np.ndarray | Sequence[Sequence[float]] | None = None,
    workers: int = 1,
    hosts: Hosts | None = None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    resume: dict[str, Any] | None = None,
) -> TrainedClassifier:
    """Stage ``ids`` with their class indices (0..K-1) as targets and train a classifier on the stage,
    in this process (``workers`` 1) or with ``workers`` torchrun processes. The split is drawn from
    the seed over release positions, as in memory."""
    labels = check_targets(class_indices, len(ids), "class_indices")
    plan = make_plan(len(ids), config)
    is_validation = np.zeros(len(ids), dtype=bool)
    is_validation[plan.val_idx] = True
    staged = stage_release(
        feature_path, id_column, ids, labels, labels, is_validation, Path(work_dir) / "stage", config.row_group_rows,
        config.join_partition_rows,
    )
    del is_validation
    plan = Plan(plan.seed, plan.device, np.empty(0, np.int64), np.empty(0, np.int64))  # the stage holds the split
    run = config.replace(seed=plan.seed, device=plan.device)
    if workers <= 1 and hosts is None:
        return fit_staged_classifier(
            staged, n_classes, run, plan, on_epoch, classes=classes, transition_matrix=transition_matrix,
            checkpoint=checkpoint, resume=resume,
        )
    from labeldp.learning.distributed import run_torchrun_classifier

    names = list(classes) if classes is not None else [str(i) for i in range(n_classes)]
    return run_torchrun_classifier(
        staged, n_classes, names, transition_matrix, run, workers, Path(work_dir), on_epoch, hosts
    )


WORK_DIR = "work"
"""Under the features data directory: one scratch folder per streaming training, removed after it."""


@contextmanager
def scratch_dir(data_dir: Path) -> Iterator[Path]:
    """A fresh scratch folder under ``<data dir>/work`` for one streaming training, removed after it."""
    scratch = Path(data_dir) / WORK_DIR
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as work_dir:
        yield Path(work_dir)


def fit_in_work_dir(
    data_dir: Path,
    feature_path: str | Path | pa.NativeFile,
    id_column: str,
    ids: pa.Array,
    labels: np.ndarray,
    spec: Any,
    config: TrainingConfig,
    learning: LearningConfig,
    on_epoch: Callable[[EpochReport], None] | None,
    *,
    workers: int,
    hosts: Hosts | None = None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    resume: dict[str, Any] | None = None,
    prior: Any = None,
) -> TrainedRegressor:
    """:func:`fit_release_streamed` in a fresh scratch folder of the data directory (the service's hook)."""
    with scratch_dir(data_dir) as work_dir:
        return fit_release_streamed(
            feature_path, id_column, pa.array(ids, pa.string()), labels, spec, config, work_dir, learning,
            on_epoch, workers=workers, hosts=hosts, checkpoint=checkpoint, resume=resume, prior=prior,
        )
