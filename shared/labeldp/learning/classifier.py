"""Classifiers on privatized classes: the shared MLP body with a softmax head.

Losses are cross-entropy in nats and accuracies against the privatized labels; with a
transition matrix the loss is Patrini et al.'s forward correction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import torch
import torch.nn.functional as F

from labeldp.learning.config import TrainingConfig
from labeldp.learning.loop import EpochReport, Fitted, Objective, Plan, Workers, fit_network, fit_streamed, make_plan
from labeldp.learning.networks import MLPClassifier
from labeldp.learning.persistence import TrainedClassifier
from labeldp.learning.staging import StagedRelease
from labeldp.learning.tasks import check_transition_matrix, to_class_indices

_LOG_FLOOR = 1e-12  # forward correction: log(p·T) never sees an exact zero


def cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, y, reduction="none")



def forward_corrected(transition: torch.Tensor) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Patrini et al. 2017: model the privatized label as softmax(f(x))·T, so f learns the true class."""

    def loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        noisy = torch.softmax(logits, dim=1) @ transition
        return F.nll_loss(torch.log(noisy.clamp_min(_LOG_FLOOR)), y, reduction="none")

    return loss



def _class_names(n_classes: int, classes: list[str] | None) -> list[str]:
    if n_classes < 2:
        raise ValueError("a classifier needs at least two classes")
    names = [str(c) for c in classes] if classes is not None else [str(i) for i in range(n_classes)]
    if len(names) != n_classes or len(set(names)) != n_classes:
        raise ValueError("classes must be n_classes distinct names")
    return names


def _objective(n_classes: int, matrix: np.ndarray | None, device: str) -> Objective:
    """Cross-entropy, or with a transition matrix Patrini et al.'s forward correction."""
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    if matrix is None:
        loss = cross_entropy
    else:
        loss = forward_corrected(torch.as_tensor(matrix, dtype=torch.float32, device=device))
    return Objective(lambda n, vocab: MLPClassifier(n, vocab, n_classes), loss, accuracy=True)


def _trained(fitted: Fitted, names: list[str], matrix: np.ndarray | None, plan: Plan) -> TrainedClassifier:
    fitted.config["transition_matrix"] = matrix.tolist() if matrix is not None else None
    return TrainedClassifier(fitted.model, fitted.preprocessor, names, **fitted.trained(plan))


def fit_classifier(
    table: pa.Table,
    class_indices: np.ndarray,
    n_classes: int,
    config: TrainingConfig,
    on_epoch: Callable[[EpochReport], None] | None = None,
    *,
    classes: list[str] | None = None,
    transition_matrix: np.ndarray | Sequence[Sequence[float]] | None = None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    resume: dict[str, Any] | None = None,
) -> TrainedClassifier:
    """Train the same MLP body with a K-way softmax head on (privatized) class indices 0..K-1.

    ``class_indices`` may be float64 (as in a release) but must hold exact integers.
    ``classes`` names the classes in index order (default "0".."K-1"). With a
    ``transition_matrix`` T (T[i, j] = P(released j | true i)) the loss is the forward
    correction of Patrini et al. (2017), CE(log(softmax(f(x))·T), ŷ): the network
    then estimates the true class while T accounts for the mechanism's noise.
    ``checkpoint`` and ``resume`` as :func:`~labeldp.learning.loop.fit_network` takes them.
    """
    names = _class_names(n_classes, classes)
    y = to_class_indices(class_indices, n_classes)
    if y.shape != (table.num_rows,):
        raise ValueError("class_indices must have one value per row")
    matrix = check_transition_matrix(transition_matrix, n_classes) if transition_matrix is not None else None
    plan = make_plan(table.num_rows, config)
    objective = _objective(n_classes, matrix, plan.device)
    fitted = fit_network(table, y, objective, config, plan, on_epoch, None, checkpoint, resume)
    return _trained(fitted, names, matrix, plan)


def fit_staged_classifier(
    staged: StagedRelease,
    n_classes: int,
    config: TrainingConfig,
    plan: Plan,
    on_epoch: Callable[[EpochReport], None] | None = None,
    *,
    classes: list[str] | None = None,
    transition_matrix: np.ndarray | Sequence[Sequence[float]] | None = None,
    workers: Workers | None = None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    resume: dict[str, Any] | None = None,
) -> TrainedClassifier:
    """:func:`fit_classifier` streamed from a release staged with class indices as its targets
    (:func:`labeldp.learning.streamed.fit_classifier_streamed`; docs/architecture.md, "Training at scale").

    ``workers``, ``checkpoint`` and ``resume`` as :func:`labeldp.learning.loop.fit_streamed` takes them
    (a torchrun worker, :mod:`labeldp.learning.distributed`).
    """
    names = _class_names(n_classes, classes)
    matrix = check_transition_matrix(transition_matrix, n_classes) if transition_matrix is not None else None
    objective = _objective(n_classes, matrix, plan.device)
    fitted = fit_streamed(staged, objective, config, plan, on_epoch, None, workers, checkpoint, resume)
    return _trained(fitted, names, matrix, plan)
