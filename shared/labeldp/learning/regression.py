"""Regressors on privatized labels: plain, or debiased and privately selected.

:func:`fit_regressor` is the papers' protocol (train on the labels as released, keep
the last epoch) and the demo's non-private baseline; :func:`fit_private_regressor`
is the service's default learning (docs/architecture.md): debiasing through the
release's transition law, shrinkage and epoch selection on a privatized validation
split (:mod:`labeldp.learning.selection`). Targets are standardized internally; every
reported loss is MSE in label units.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from labeldp.learning.config import DEFAULT_LEARNING, LearningConfig, TrainingConfig
from labeldp.learning.debiasing import (
    LabelLaw,
    PostProcessing,
    constant_prediction,
    label_law,
    mean_squared_error,
    prior_moments,
)
from labeldp.learning.loop import (
    EpochReport,
    Fitted,
    Objective,
    Plan,
    Workers,
    check_targets,
    fit_network,
    fit_streamed,
    make_plan,
    squared_error,
    standardize,
)
from labeldp.learning.networks import MLP, MLPRegressor
from labeldp.learning.persistence import TrainedRegressor
from labeldp.learning.selection import Criterion, Selector, estimate_note, private_reference
from labeldp.learning.staging import StagedRelease


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
    *,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    resume: dict[str, Any] | None = None,
    prior: Any = None,
) -> TrainedRegressor:
    """Train on a release's privatized labels and select, debias and shrink as ``learning`` says.

    ``spec``: the release's mechanism spec (object or JSON dict), a
    :class:`LabelLaw`, or ``None`` for labels that need no debiasing (non-private
    baselines). The validation split (``config.validation_fraction`` of the rows,
    drawn from the seed before any label is read) is scored with the private
    estimate of :mod:`labeldp.learning.selection`. With ``oracle_validation_labels``
    (true labels, one per row of ``table``; only the validation rows are read)
    the ORACLE criterion selects instead, for benchmarks. ``predict()`` of the
    result applies the chosen debiasing and λ; ``selection_`` records the epoch,
    λ and estimates. ``checkpoint`` and ``resume`` as :func:`~labeldp.learning.loop.fit_network`
    takes them, the selection's state included. ``prior``: the release's DP prior (its ``prior``
    field, spec or JSON dict), whose mean sharpens the private mean at no ε
    (:func:`~labeldp.learning.debiasing.prior_moments`).
    """
    models = _fit_selected(
        table, privatized_labels, spec, config, learning, on_epoch, oracle_validation_labels, pair=False,
        checkpoint=checkpoint, resume=resume, prior=prior,
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
    prior: Any = None,
) -> tuple[TrainedRegressor, TrainedRegressor]:
    """(privately selected, oracle-selected) models from ONE training run, for benchmarks.

    Both watch the same trajectory, so their difference is the selection alone.
    """
    private, oracle = _fit_selected(
        table, privatized_labels, spec, config, learning, on_epoch, oracle_validation_labels, pair=True, prior=prior
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
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    resume: dict[str, Any] | None = None,
    prior: Any = None,
) -> list[TrainedRegressor]:
    plan, selection, standardized = _prepare_selection(
        table.num_rows, privatized_labels, spec, config, learning, oracle_labels, pair, prior
    )
    mean, std = selection.mean, selection.std
    objective = Objective(MLPRegressor, squared_error, loss_scale=std * std)
    if resume is not None:
        selection.restore(resume["selection"])
    save = None
    if checkpoint is not None:

        def save(state: dict[str, Any]) -> None:
            checkpoint({**state, "selection": selection.state()})

    fitted = fit_network(
        table, standardized, objective, config, plan, on_epoch, selection.inspector(), save, resume
    )
    return selection.results(fitted, plan, config.epochs, mean, std)


def _prepare_selection(
    n_rows: int,
    privatized_labels: np.ndarray,
    spec: Any,
    config: TrainingConfig,
    learning: LearningConfig,
    oracle_labels: np.ndarray | None,
    pair: bool,
    prior: Any = None,
) -> tuple[Plan, Selection, np.ndarray]:
    """The split, the model selection watching it and the standardized training targets: everything a
    training on these rows decides before it trains."""
    labels = check_targets(privatized_labels, n_rows, "privatized_labels")
    law = spec if isinstance(spec, LabelLaw) else label_law(spec)
    if oracle_labels is not None:
        oracle_labels = check_targets(oracle_labels, n_rows, "oracle_validation_labels")
    plan = make_plan(n_rows, config)
    check_validation(learning, len(plan.val_idx), oracle_labels is not None)
    targets = training_targets(law, learning, labels)
    mean, std, standardized = standardize(targets, plan.train_idx)
    oracle_val = oracle_labels[plan.val_idx] if oracle_labels is not None else None
    selection = Selection(
        law, learning, labels[plan.val_idx], oracle_val, pair, mean, std, len(plan.train_idx), prior=prior
    )
    return plan, selection, standardized


def release_detectability(
    n_rows: int,
    privatized_labels: np.ndarray,
    spec: Any,
    config: TrainingConfig,
    learning: LearningConfig,
    prior: Any = None,
) -> float:
    """:func:`labeldp.learning.selection.detectable_z` of the validation split that
    :func:`fit_private_regressor` would hold out of these rows, against the same anchor — computed
    from the release alone, without training (``inf`` where ``learning`` has no anchor)."""
    _, selection, _ = _prepare_selection(n_rows, privatized_labels, spec, config, learning, None, False, prior)
    return min((s.detectable_z_ for s in selection.selectors), default=float("inf"))


def check_validation(learning: LearningConfig, n_validation: int, oracle: bool) -> None:
    """Model selection (select_epoch, shrinkage='auto', the oracle) needs validation rows."""
    if (learning.needs_validation or oracle) and n_validation == 0:
        raise ValueError("model selection (select_epoch, shrinkage='auto', oracle) needs validation_fraction > 0")


def training_targets(law: LabelLaw, learning: LearningConfig, labels: np.ndarray) -> np.ndarray:
    """What the loss compares with: the labels, or (``debias='targets'``) their debiased values."""
    return law.debias_labels(labels) if learning.debias == "targets" else labels


class Selection:
    """Private (and, for benchmarks, oracle) model selection watching one training.

    The same object serves the in-memory loop and the streamed one, in one process or
    on the main worker of a torchrun job: it sees the validation outputs of every
    epoch, in one fixed row order, and keeps the weights of the best epoch.
    """

    def __init__(
        self,
        law: LabelLaw,
        learning: LearningConfig,
        val_labels: np.ndarray,
        oracle_val: np.ndarray | None,
        pair: bool,
        mean: float,
        std: float,
        n_train: int,
        *,
        prior: Any = None,
    ) -> None:
        self.law, self.learning, self.mean, self.std = law, learning, mean, std
        criteria: list[tuple[Criterion, np.ndarray]] = []
        if len(val_labels):
            if oracle_val is None or pair:
                criteria.append(("private", private_reference(law, val_labels)))
            if oracle_val is not None:
                criteria.append(("oracle", oracle_val))
        self.fixed = 0.0 if learning.shrinkage == "auto" else float(learning.shrinkage)
        # shrinkage='auto' also weighs the model against the private mean of the training rows
        # (``mean`` is their targets' mean): the learner is never worse than that constant.
        auto = learning.shrinkage == "auto"
        # The release's DP prior (its ε₁ already paid) states the mean of t(y) over all its rows: combined with
        # the labels' own debiased mean by inverse variances (no ε). Its noise is independent of every
        # validation row's, so the selection's proof still holds with it in the anchor.
        val_count = int(np.asarray(val_labels).size)
        moments = prior_moments(prior, law, n_train + val_count) if auto else None
        self.prior_moments = moments
        self.anchor = constant_prediction(mean, std, n_train, law, learning.debias, moments) if auto else None
        # A model that falls back to the mean predicts the private mean over every row, validation rows
        # included: the selection needed an anchor independent of them, the constant wants the most precise one.
        val_targets = training_targets(law, learning, np.asarray(val_labels, dtype=np.float64))
        total = n_train + val_targets.size
        overall = (mean * n_train + float(val_targets.sum())) / max(1, total)
        second = (n_train * (std * std + mean * mean) + float(np.dot(val_targets, val_targets))) / max(1, total)
        spread = float(np.sqrt(max(0.0, second - overall * overall)))
        self.final_anchor = constant_prediction(overall, spread, total, law, learning.debias, moments) if auto else None
        self.selectors = [
            Selector(law, learning.debias, ref, learning.shrinkage, learning.select_epoch, criterion, self.anchor)
            for criterion, ref in criteria
        ]
        self.best: list[dict[str, torch.Tensor] | None] = [None] * len(self.selectors)

    def inspector(self) -> Callable[[int, np.ndarray, MLP], float | None] | None:
        if not self.selectors:
            return None

        def inspect(epoch: int, outputs: np.ndarray, model: MLP) -> float | None:
            label_units = outputs * self.std + self.mean
            for i, selector in enumerate(self.selectors):
                if selector.observe(epoch, label_units) and self.learning.select_epoch:
                    self.best[i] = {k: v.detach().clone() for k, v in model.state_dict().items()}
            return self.selectors[0].history_[-1]["estimate"] if self.selectors else None

        return inspect

    def state(self) -> dict[str, Any]:
        """What the selection has seen so far, as plain types (for a checkpoint)."""
        return {
            "selectors": [
                {
                    "history": list(x.history_), "epoch": x.epoch_, "shrinkage": x.shrinkage_,
                    "model_weight": x.model_weight_, "estimate": x.estimate_, "gain": x.gain_,
                    "quadratic": x.quadratic_,
                }
                for x in self.selectors
            ],
            "best": list(self.best),
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state` (the same validation rows, so the same selectors)."""
        for selector, saved in zip(self.selectors, state["selectors"], strict=True):
            selector.history_ = list(saved["history"])
            selector.epoch_, selector.shrinkage_, selector.estimate_ = (
                saved["epoch"], saved["shrinkage"], saved["estimate"],
            )
            selector.model_weight_ = float(saved.get("model_weight", 1.0))
            gain = saved.get("gain")
            selector.gain_ = None if gain is None else (float(gain[0]), float(gain[1]))
            quadratic = saved.get("quadratic")
            selector.quadratic_ = None if quadratic is None else (
                float(quadratic[0]), float(quadratic[1]), float(quadratic[2])
            )
        self.best = list(state["best"])

    def results(self, fitted: Fitted, plan: Plan, epochs: int, mean: float, std: float) -> list[TrainedRegressor]:
        learning, law = self.learning, self.law
        selectors, best = self.selectors, self.best
        results: list[TrainedRegressor] = []
        for i, selector in enumerate(selectors or [None]):
            model = fitted.model
            state = best[i] if i < len(best) else None
            if state is not None:
                if i < len(selectors) - 1:
                    model = copy.deepcopy(fitted.model)
                model.load_state_dict(state)
                model.eval()
            anchor, weight = None, 1.0
            if selector is None:
                lam, summary = (0.0 if learning.debias == "none" else self.fixed), None
                epoch = epochs
            else:
                if selector.shrinkage_ is None or selector.epoch_ is None:
                    raise RuntimeError("model selection observed no epoch")
                lam, epoch = float(selector.shrinkage_), int(selector.epoch_)
                weight = float(selector.final_weight_)
                anchor = self.final_anchor if selector.mean_fallback_ else selector.anchor
                summary = {**selector.summary(), "note": estimate_note(selector.criterion, law)}
                if selector.mean_fallback_ and anchor is not None:
                    # The estimate describes what the model predicts: the constant, not the candidate it dropped.
                    constant = np.full(selector.reference.shape, anchor)
                    summary["dropped_model_estimate"] = summary["estimate"]
                    summary["estimate"] = mean_squared_error(constant, selector.reference)
            lam = lam if learning.debias != "none" else 0.0
            post = PostProcessing(learning.debias, lam, law, anchor, weight)
            kwargs = fitted.trained(plan)
            kwargs["config"] = {**kwargs["config"], "learning": learning.to_dict(), "selected_epoch": epoch}
            results.append(
                TrainedRegressor(
                    model, fitted.preprocessor, mean, std,
                    postprocessing=post, learning=learning.to_dict(), selection=summary, **kwargs,
                )
            )
        return results


def fit_staged_regressor(
    staged: StagedRelease,
    spec: Any,
    config: TrainingConfig,
    plan: Plan,
    learning: LearningConfig = DEFAULT_LEARNING,
    on_epoch: Callable[[EpochReport], None] | None = None,
    workers: Workers | None = None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    resume: dict[str, Any] | None = None,
    prior: Any = None,
) -> TrainedRegressor:
    """:func:`fit_private_regressor` over a staged release, streamed (one worker of ``workers``).

    ``plan`` must be the one the stage was split with. Every worker returns a
    model; only the main worker's has been selected (the others' are the last epoch).
    ``checkpoint(state)`` gets the loop's state plus the selection's after each epoch
    (main worker); ``resume`` continues from such a state.
    """
    law = spec if isinstance(spec, LabelLaw) else label_law(spec)
    workers = workers or Workers()
    check_validation(learning, staged.n_validation, False)
    val_labels = staged.val_labels if workers.is_main else np.empty((0,))  # other workers select nothing
    selection = Selection(
        law, learning, val_labels, None, False, staged.target_mean, staged.target_std, staged.n_train, prior=prior
    )
    objective = Objective(MLPRegressor, squared_error, loss_scale=staged.target_std**2)
    inspect = selection.inspector()
    if resume is not None and workers.is_main:
        selection.restore(resume["selection"])
    save = None
    if checkpoint is not None:

        def save(state: dict[str, Any]) -> None:
            checkpoint({**state, "selection": selection.state()})

    fitted = fit_streamed(staged, objective, config, plan, on_epoch, inspect, workers, save, resume)
    return selection.results(fitted, plan, config.epochs, staged.target_mean, staged.target_std)[0]
