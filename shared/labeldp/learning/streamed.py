"""Training a release at scale: stage it as row groups, then train in this process or as a torchrun job.

The in-memory path (:func:`features_party.training_fit.fit_for_release`) stays the default;
this one is chosen by ``LABELDP_TRAINING_WORKERS`` > 1 or ``LABELDP_TRAINING_STREAMING``
(docs/architecture.md, "Training at scale"). Categorical releases train classifiers,
staged with their class indices as targets; either kind trains in this process or as a
torchrun job.

Given an object store and a stage key (the service passes its shared store and the
training's key), the stage is written there (:func:`labeldp.learning.staging.stage_to_store`)
under ``<stage key>/<fingerprint>`` — what decides its content besides the training itself:
the seed (the split), the row-group and partition sizes — and a complete stage found there is
reused, so a training resumed by a worker on another host trains the stage the first staged,
without a shared disk. The work folder holds only a cache of it (:func:`~labeldp.learning.staging.fetch_stage`).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from labeldp.errors import InvalidInput
from labeldp.learning.classifier import fit_staged_classifier
from labeldp.learning.config import DEFAULT_LEARNING, LearningConfig, TrainingConfig
from labeldp.learning.debiasing import LabelLaw, constant_prediction, label_law
from labeldp.learning.loop import EpochReport, Plan, check_targets, make_split_bits, split_bits_slice
from labeldp.learning.persistence import TrainedClassifier, TrainedRegressor
from labeldp.learning.regression import fit_staged_regressor, training_targets
from labeldp.learning.staging import (
    STAGE_CHUNK_ROWS,
    StagedRelease,
    StageRows,
    fetch_stage,
    stage_chunk,
    stage_complete,
    stage_rows_release,
    stage_rows_to_store,
)
from labeldp.learning.true_scale import noise_variance, staged_true_scale_error
from labeldp.storage import ObjectStore

if TYPE_CHECKING:
    from labeldp.learning.distributed import Hosts

log = logging.getLogger("labeldp.features")


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


@dataclass(frozen=True)
class ReleaseChunks:
    """A release read chunk by chunk in release order (the service reads its shards one by one): ``rows`` in
    all, ``chunks`` its (ids, privatized labels) pairs, iterated at most once (not at all when the
    training's stage is found complete in the object store)."""

    rows: int
    chunks: Iterable[tuple[pa.Array | pa.ChunkedArray, np.ndarray]]

    @classmethod
    def of_arrays(cls, ids: pa.Array | pa.ChunkedArray, labels: np.ndarray,
                  chunk_rows: int = STAGE_CHUNK_ROWS) -> ReleaseChunks:
        """A release held whole in memory, in chunks of ``chunk_rows`` rows."""
        n = len(ids)
        return cls(n, ((ids[i : i + chunk_rows], labels[i : i + chunk_rows]) for i in range(0, n, chunk_rows)))

    def map_labels(self, convert: Callable[[np.ndarray], np.ndarray]) -> ReleaseChunks:
        """The same rows with each chunk's labels converted (elementwise), as they are read."""
        return ReleaseChunks(self.rows, ((ids, convert(labels)) for ids, labels in self.chunks))


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
    **options: Any,
) -> TrainedRegressor:
    """:func:`fit_release_chunks_streamed` of a release held in memory (``ids``, ``labels``)."""
    labels = check_targets(labels, len(ids), "privatized_labels")
    return fit_release_chunks_streamed(feature_path, id_column, ReleaseChunks.of_arrays(ids, labels), spec, config,
                                       work_dir, learning, on_epoch, **options)


def fit_release_chunks_streamed(
    feature_path: str | Path | pa.NativeFile,
    id_column: str,
    release: ReleaseChunks,
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
    objects: ObjectStore | None = None,
    stage_key: str | None = None,
) -> TrainedRegressor:
    """Stage the ``release`` (read chunk by chunk, never held whole) joined with the feature table at
    ``feature_path`` and train a regressor on it, in this process (``workers`` 1 and no ``hosts``) or
    with ``workers`` torchrun processes (on this host and each of ``hosts``' peers).

    The split is drawn from the seed over release positions as in memory
    (:func:`~labeldp.learning.loop.make_split_bits`, :func:`~labeldp.learning.loop.make_plan`'s draw);
    ``work_dir`` is the caller's to remove.
    ``checkpoint``/``resume``: as :func:`~labeldp.learning.loop.fit_streamed` takes them, in this
    process only (a torchrun job checkpoints in its own work folder). ``prior``: the release's DP
    prior (spec or JSON dict), whose mean joins the private mean as in memory
    (:class:`~labeldp.learning.regression.Selection`, the one place the anchor is computed).
    ``objects``/``stage_key``: where the stage is kept for other processes (:func:`stage_for_training`).
    """
    law = law_for(spec)
    plan, bits = make_split_bits(release.rows, config)  # the stage holds the split: the plan has no rows
    staged = stage_for_training(
        feature_path, id_column, release, lambda labels: training_targets(law, learning, labels),
        "privatized_labels", plan, bits, config, work_dir, objects, stage_key,
    )
    del bits
    run = config.replace(seed=plan.seed, device=plan.device)
    if workers <= 1 and hosts is None:
        trained = fit_staged_regressor(staged, law, run, plan, learning, on_epoch, None, checkpoint, resume, prior)
    else:
        from labeldp.learning.distributed import run_torchrun

        law_source = spec if not isinstance(spec, LabelLaw) and law.name != "identity" else None
        trained = run_torchrun(
            staged, law_source, law, run, learning, workers, Path(work_dir), on_epoch, hosts, prior=prior
        )
    try:
        estimate = staged_true_label_error(trained, staged, spec, law, learning)
    except Exception as exc:  # a card's estimate never fails the training it describes
        log.warning("true-label error estimate skipped: %s", type(exc).__name__)
        estimate = None
    if estimate is not None:
        trained.selection_ = {**(trained.selection_ or {}), "true_scale": estimate}
    return trained


def staged_true_label_error(
    trained: TrainedRegressor, staged: StagedRelease, spec: Any, law: LabelLaw, learning: LearningConfig
) -> dict[str, Any] | None:
    """The model card's true-label error (labeldp.learning.true_scale) of a streamed or torchrun
    training, as the in-memory path states it (features_party's ``true_label_error``): the staged
    validation rows read once, beside the model's anchor or else the training rows' private mean,
    here from the stage's target moments. None without a spec, validation rows or a regression law."""
    if spec is None or isinstance(spec, LabelLaw) or staged.n_validation < 2:
        return None
    try:
        variance = noise_variance(spec, law)
    except (ValueError, LookupError):
        return None
    anchor = trained.postprocessing_.anchor
    if anchor is None:  # private_mean of the training rows' privatized labels, from their targets' moments
        mean, std = staged.target_mean, staged.target_std
        if learning.debias == "targets":  # targets ỹ = (ŷ − b)/a: back to ŷ's moments
            mean, std = float(law.rebias(np.array([mean]))[0]), std * law.a
        anchor = constant_prediction(mean, std, staged.n_train, law, "predictions")
    out = staged_true_scale_error(trained.predict, staged, law, variance, float(anchor))
    return {**out, "private_mean": float(anchor)}


def fit_classifier_streamed(
    feature_path: str | Path | pa.NativeFile,
    id_column: str,
    ids: pa.Array | pa.ChunkedArray,
    class_indices: np.ndarray,
    n_classes: int,
    config: TrainingConfig,
    work_dir: str | Path,
    on_epoch: Callable[[EpochReport], None] | None = None,
    **options: Any,
) -> TrainedClassifier:
    """:func:`fit_classifier_chunks_streamed` of a release held in memory (``ids``, ``class_indices``)."""
    labels = check_targets(class_indices, len(ids), "class_indices")
    return fit_classifier_chunks_streamed(feature_path, id_column, ReleaseChunks.of_arrays(ids, labels), n_classes,
                                          config, work_dir, on_epoch, **options)


def fit_classifier_chunks_streamed(
    feature_path: str | Path | pa.NativeFile,
    id_column: str,
    release: ReleaseChunks,
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
    objects: ObjectStore | None = None,
    stage_key: str | None = None,
) -> TrainedClassifier:
    """Stage the ``release`` (its labels class indices 0..K-1, staged as the targets; read chunk by chunk)
    and train a classifier on the stage, in this process (``workers`` 1) or with ``workers`` torchrun
    processes. The split is drawn from the seed over release positions, as in memory;
    ``objects``/``stage_key`` as for :func:`fit_release_chunks_streamed`."""
    plan, bits = make_split_bits(release.rows, config)  # the stage holds the split: the plan has no rows
    staged = stage_for_training(
        feature_path, id_column, release, lambda labels: labels, "class_indices", plan, bits, config, work_dir,
        objects, stage_key,
    )
    del bits
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


STAGE_CACHE = "stage"
"""Under a streaming training's work folder: the local cache of its stage (train.parquet, ...)."""


def stage_prefix(stage_key: str, seed: int, config: TrainingConfig) -> str:
    """Where a training's stage lies under its key: one per (seed, row-group rows, partition rows),
    the settings besides the training itself that decide what is staged."""
    return f"{stage_key.strip('/')}/s{seed}-g{config.row_group_rows}-p{config.join_partition_rows}"


def stage_rows(
    release: ReleaseChunks, targets: Callable[[np.ndarray], np.ndarray], what: str, bits: np.ndarray
) -> StageRows:
    """The release's rows as a stage takes them, chunk by chunk as they are read: each chunk's labels
    checked (finite, one per id), its targets computed (``targets``: elementwise) and its split cut from
    ``bits`` (:func:`~labeldp.learning.loop.make_split_bits`)."""

    def chunks() -> Iterator[pa.Table]:
        start = 0
        for ids, labels in release.chunks:
            labels = check_targets(labels, len(ids), what)
            if start + len(ids) > release.rows:
                raise ValueError("the release holds more rows than it declares")
            yield stage_chunk(ids, start, labels, targets(labels), split_bits_slice(bits, start, len(ids)))
            start += len(ids)
        if start != release.rows:
            raise ValueError("the release holds fewer rows than it declares")

    return StageRows(release.rows, chunks())


def stage_for_training(
    feature_path: str | Path | pa.NativeFile,
    id_column: str,
    release: ReleaseChunks,
    targets: Callable[[np.ndarray], np.ndarray],
    what: str,
    plan: Plan,
    bits: np.ndarray,
    config: TrainingConfig,
    work_dir: str | Path,
    objects: ObjectStore | None,
    stage_key: str | None,
) -> StagedRelease:
    """The training's stage, cached in ``work_dir``: from ``objects`` under ``stage_key`` (staged there first
    unless a complete stage is there already: then the release is not read), or, without them, staged for
    this process alone. ``targets``, ``what`` and ``bits``: as :func:`stage_rows` takes them."""
    cache = Path(work_dir) / STAGE_CACHE
    if objects is not None and stage_key is not None:
        prefix = stage_prefix(stage_key, plan.seed, config)
        if stage_complete(objects, prefix):
            log.info("stage %s is in the object store: fetched, not staged again", prefix)
            return fetch_stage(objects, prefix, cache)
    rows = stage_rows(release, targets, what, bits)
    if objects is None or stage_key is None:
        return stage_rows_release(feature_path, id_column, rows, cache, config.row_group_rows,
                                  config.join_partition_rows)
    meta = stage_rows_to_store(feature_path, id_column, rows, objects, prefix, Path(work_dir) / "join",
                               config.row_group_rows, config.join_partition_rows)
    log.info("stage %s written to the object store: %d partitions, %d training rows", prefix,
             len(meta["partitions"]), meta["n_train"])
    return fetch_stage(objects, prefix, cache)


WORK_DIR = "work"
"""Under the features data directory: one scratch folder per streaming training (the join's partition
files, the stage's cache, a torchrun job's files), removed after it: nothing there outlives the process."""


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
    release: ReleaseChunks,
    spec: Any,
    config: TrainingConfig,
    learning: LearningConfig,
    on_epoch: Callable[[EpochReport], None] | None,
    **options: Any,
) -> TrainedRegressor:
    """:func:`fit_release_chunks_streamed` in a fresh scratch folder of the data directory (the service's hook)."""
    with scratch_dir(data_dir) as work_dir:
        return fit_release_chunks_streamed(feature_path, id_column, release, spec, config, work_dir, learning,
                                           on_epoch, **options)
