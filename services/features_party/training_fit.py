"""Train the model a release's labels call for, on its rows already joined with their features.

The release's mechanism spec decides the task: a spec that declares ``classes`` makes the
label column class indices and the training fits a classifier (optionally with forward loss
correction by the spec's transition matrix); otherwise a regressor, which learns from the
mechanism's label law and whose model card gets its error on the true-label scale. No
catalogue and no store: the job (:mod:`features_party.training_run`) reads and writes those.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from labeldp.errors import InvalidInput
from labeldp.learning import streamed
from labeldp.learning.classifier import fit_classifier
from labeldp.learning.config import PLAIN, LearningConfig, TrainingConfig
from labeldp.learning.debiasing import private_mean
from labeldp.learning.loop import EpochReport, _split
from labeldp.learning.persistence import TrainedModel, TrainedRegressor
from labeldp.learning.regression import fit_private_regressor
from labeldp.learning.tasks import CLASSIFICATION, LabelTask, check_transition_matrix, to_class_indices
from labeldp.learning.true_scale import noise_variance, true_scale_error

log = logging.getLogger("labeldp.features")


def check_forward_correction(task: LabelTask) -> None:
    """Forward correction needs a categorical release whose spec states its transition matrix."""
    if task.task != CLASSIFICATION or task.transition_matrix is None:
        raise InvalidInput(
            "forward_correction_unavailable",
            "forward_correction needs a categorical release whose rows all follow one transition matrix "
            "(not a split prior's two stages)",
        )
    try:
        check_transition_matrix(task.transition_matrix, task.n_classes)
    except ValueError:
        k = task.n_classes
        message = f"transition_matrix must be {k}x{k} and row-stochastic"
        raise InvalidInput("invalid_transition_matrix", message) from None


def fit_for_release(
    task: LabelTask,
    features: pa.Table,
    labels: np.ndarray,
    config: TrainingConfig,
    on_epoch: Callable[[EpochReport], None] | None = None,
    *,
    forward_correction: bool = False,
    spec: Any = None,
    learning: LearningConfig = PLAIN,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    resume: dict[str, Any] | None = None,
    prior: Any = None,
) -> TrainedModel:
    """Train the model the release's labels call for: a regressor, or a classifier over its classes.

    Regressors learn as ``learning`` says from the release's mechanism ``spec``
    (:func:`fit_private_regressor`); the default is plain training on the labels.
    ``checkpoint``/``resume``: after every epoch, and where to continue from (a training job).
    ``prior``: the release's DP prior (JSON), whose mean sharpens the regressor's private mean.
    """
    if task.task != CLASSIFICATION:
        if forward_correction:
            check_forward_correction(task)
        trained = fit_private_regressor(
            features, labels, streamed.law_for(spec), config, learning, on_epoch, checkpoint=checkpoint, resume=resume,
            prior=prior,
        )
        try:
            estimate = true_label_error(trained, features, labels, spec)
        except Exception as exc:  # a card's estimate never fails the training it describes
            log.warning("true-label error estimate skipped: %s", type(exc).__name__)
            estimate = None
        if estimate is not None and isinstance(trained, TrainedRegressor):
            trained.selection_ = {**(trained.selection_ or {}), "true_scale": estimate}
        return trained
    indices, matrix = classifier_targets(task, labels, forward_correction)
    return fit_classifier(
        features, indices, task.n_classes, config, on_epoch, classes=list(task.classes or ()), transition_matrix=matrix,
        checkpoint=checkpoint, resume=resume,
    )


def true_label_error(
    trained: TrainedModel, features: pa.Table, labels: np.ndarray, spec: Any
) -> dict[str, Any] | None:
    """The model card's error on the TRUE-label scale (labeldp.learning.true_scale), on the
    validation rows: their predictions against their debiased privatized labels, less the
    mechanism's known noise variance, beside the private-mean baseline. Post-processing of the
    release (no ε); None without validation rows or for a law with no regression form.
    """
    config = getattr(trained, "config_", None) or {}
    fraction, seed = config.get("validation_fraction") or 0.0, config.get("seed")
    post = getattr(trained, "postprocessing_", None)
    if spec is None or seed is None or fraction <= 0 or post is None:
        return None
    try:
        law = streamed.law_for(spec)  # the law the model was trained and post-processed under
        variance = noise_variance(spec, law)
    except (ValueError, LookupError):
        return None
    train_idx, val_idx = _split(len(labels), float(fraction), np.random.default_rng(int(seed)))
    if val_idx.size < 2 or features.num_rows != len(labels):
        return None
    labels = np.asarray(labels, dtype=np.float64)
    anchor = post.anchor if post.anchor is not None else private_mean(labels[train_idx], law)
    predictions = trained.predict(features.take(pa.array(val_idx)))
    out = true_scale_error(predictions, labels[val_idx], law, variance, float(anchor))
    return {**out, "private_mean": float(anchor)}


def classifier_targets(task: LabelTask, labels: np.ndarray, forward_correction: bool) -> tuple[np.ndarray, Any]:
    """A categorical release's labels as class indices, and its transition matrix when the training
    asks for forward correction; 422 with a stable code when the release cannot train a classifier."""
    if task.n_classes < 2:
        raise InvalidInput("invalid_classes", "a categorical release needs at least two distinct classes")
    try:
        indices = to_class_indices(labels, task.n_classes)
    except ValueError:
        message = f"labels of a categorical release must be class indices 0..{task.n_classes - 1}"
        raise InvalidInput("invalid_class_labels", message) from None
    matrix = None
    if forward_correction:
        check_forward_correction(task)
        matrix = task.transition_matrix
    return indices, matrix
