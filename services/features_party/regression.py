"""Regressors on privatized labels: plain, or debiased and privately selected.

:func:`fit_regressor` is the papers' protocol (train on the labels as released, keep
the last epoch) and the demo's non-private baseline; :func:`fit_private_regressor`
is the service's default learning (docs/architecture.md): debiasing through the
release's transition law, shrinkage and epoch selection on a privatized validation
split (:mod:`features_party.selection`). Targets are standardized internally; every
reported loss is MSE in label units.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from features_party.config import DEFAULT_LEARNING, LearningConfig, TrainingConfig
from features_party.debiasing import LabelLaw, PostProcessing, label_law
from features_party.loop import (
    EpochReport,
    Objective,
    check_targets,
    fit_network,
    make_plan,
    squared_error,
    standardize,
)
from features_party.networks import MLP, MLPRegressor
from features_party.persistence import TrainedRegressor
from features_party.selection import Criterion, Selector, estimate_note, private_reference


def fit_regressor(
    table: pa.Table,
    targets: np.ndarray,
    config: TrainingConfig,
    on_epoch: Callable[[EpochReport], None] | None = None,
) -> TrainedRegressor:
    """Train the MLP on ``table`` (feature columns only, rows aligned with ``targets``).

    A random ``validation_fraction`` of rows is held out; the preprocessor and the
    target scaling are fitted on the training rows. ``on_epoch`` runs after every
    epoch (it may raise to stop training).
    """
    targets = check_targets(targets, table.num_rows, "targets")
    plan = make_plan(table.num_rows, config)
    mean, std, standardized = standardize(targets, plan.train_idx)
    objective = Objective(MLPRegressor, squared_error, loss_scale=std * std)
    fitted = fit_network(table, standardized, objective, config, plan, on_epoch)
    return TrainedRegressor(fitted.model, fitted.preprocessor, mean, std, **fitted.trained(plan))



def fit_private_regressor(
    table: pa.Table,
    privatized_labels: np.ndarray,
    spec: Any,
    config: TrainingConfig,
    learning: LearningConfig = DEFAULT_LEARNING,
    on_epoch: Callable[[EpochReport], None] | None = None,
    oracle_validation_labels: np.ndarray | None = None,
) -> TrainedRegressor:
    """Train on a release's privatized labels and select, debias and shrink as ``learning`` says.

    ``spec``: the release's mechanism spec (object or JSON dict), a
    :class:`LabelLaw`, or ``None`` for labels that need no debiasing (non-private
    baselines). The validation split (``config.validation_fraction`` of the rows,
    drawn from the seed before any label is read) is scored with the private
    estimate of :mod:`features_party.selection`. With ``oracle_validation_labels``
    (true labels, one per row of ``table``; only the validation rows are read)
    the ORACLE criterion selects instead, for benchmarks. ``predict()`` of the
    result applies the chosen debiasing and λ; ``selection_`` records the epoch,
    λ and estimates.
    """
    models = _fit_selected(
        table, privatized_labels, spec, config, learning, on_epoch, oracle_validation_labels, pair=False
    )
    return models[0]



def fit_private_and_oracle(
    table: pa.Table,
    privatized_labels: np.ndarray,
    spec: Any,
    config: TrainingConfig,
    learning: LearningConfig,
    oracle_validation_labels: np.ndarray,
    on_epoch: Callable[[EpochReport], None] | None = None,
) -> tuple[TrainedRegressor, TrainedRegressor]:
    """(privately selected, oracle-selected) models from ONE training run, for benchmarks.

    Both watch the same trajectory, so their difference is the selection alone.
    """
    private, oracle = _fit_selected(
        table, privatized_labels, spec, config, learning, on_epoch, oracle_validation_labels, pair=True
    )
    return private, oracle



def _fit_selected(
    table: pa.Table,
    privatized_labels: np.ndarray,
    spec: Any,
    config: TrainingConfig,
    learning: LearningConfig,
    on_epoch: Callable[[EpochReport], None] | None,
    oracle_labels: np.ndarray | None,
    *,
    pair: bool,
) -> list[TrainedRegressor]:
    labels = check_targets(privatized_labels, table.num_rows, "privatized_labels")
    law = spec if isinstance(spec, LabelLaw) else label_law(spec)
    if oracle_labels is not None:
        oracle_labels = check_targets(oracle_labels, table.num_rows, "oracle_validation_labels")
    plan = make_plan(table.num_rows, config)
    has_validation = len(plan.val_idx) > 0
    if (learning.needs_validation or oracle_labels is not None) and not has_validation:
        raise ValueError("model selection (select_epoch, shrinkage='auto', oracle) needs validation_fraction > 0")
    targets = law.debias_labels(labels) if learning.debias == "targets" else labels
    mean, std, standardized = standardize(targets, plan.train_idx)

    criteria: list[tuple[Criterion, np.ndarray]] = []
    if has_validation:
        if oracle_labels is None or pair:
            criteria.append(("private", private_reference(law, labels[plan.val_idx])))
        if oracle_labels is not None:
            criteria.append(("oracle", oracle_labels[plan.val_idx]))
    fixed = 0.0 if learning.shrinkage == "auto" else float(learning.shrinkage)
    selectors = [
        Selector(law, learning.debias, ref, learning.shrinkage, learning.select_epoch, criterion)
        for criterion, ref in criteria
    ]
    best: list[dict[str, torch.Tensor] | None] = [None] * len(selectors)

    def inspect(epoch: int, outputs: np.ndarray, model: MLP) -> float | None:
        label_units = outputs * std + mean
        for i, selector in enumerate(selectors):
            if selector.observe(epoch, label_units) and learning.select_epoch:
                best[i] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return selectors[0].history_[-1]["estimate"] if selectors else None

    objective = Objective(MLPRegressor, squared_error, loss_scale=std * std)
    fitted = fit_network(table, standardized, objective, config, plan, on_epoch, inspect if selectors else None)

    results: list[TrainedRegressor] = []
    for i, selector in enumerate(selectors or [None]):
        model = fitted.model
        state = best[i] if i < len(best) else None
        if state is not None:
            if i < len(selectors) - 1:
                model = copy.deepcopy(fitted.model)
            model.load_state_dict(state)
            model.eval()
        if selector is None:
            lam, summary = (0.0 if learning.debias == "none" else fixed), None
            epoch = config.epochs
        else:
            if selector.shrinkage_ is None or selector.epoch_ is None:
                raise RuntimeError("model selection observed no epoch")
            lam, epoch = float(selector.shrinkage_), int(selector.epoch_)
            summary = {**selector.summary(), "note": estimate_note(selector.criterion, law)}
        post = PostProcessing(learning.debias, lam if learning.debias != "none" else 0.0, law)
        kwargs = fitted.trained(plan)
        kwargs["config"] = {**kwargs["config"], "learning": learning.to_dict(), "selected_epoch": epoch}
        results.append(
            TrainedRegressor(
                model, fitted.preprocessor, mean, std,
                postprocessing=post, learning=learning.to_dict(), selection=summary, **kwargs,
            )
        )
    return results
