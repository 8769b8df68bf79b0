"""A training's request and its stored options: ``POST /v1/trainings``'s body and the row's form.

:class:`TrainingRequest` is the body (the options of :mod:`labeldp.learning.config` and what
to train on); :class:`TrainingOrder` is the one conversion between it and the trainings
table's JSON ``config`` column, both ways (docs/architecture.md, "Training jobs").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict, Field

from labeldp.learning.config import PLAIN, LearningConfig, TrainingOptions, recipe_for_processes


class _TrainingTarget(TrainingOptions):
    """The training options and what to train on (the request's fields before the learning ones)."""

    release_id: str = Field(min_length=1, max_length=256)
    feature_table_id: str | None = Field(
        None, max_length=64,
        description="`ft_…`: the feature table to join the release with (default: the table the release's "
        "`feature_table` hint names); a name is 422 `unknown_feature_table` (find the id with "
        "`GET /v1/feature-tables?name=…`)",
    )
    forward_correction: bool = Field(
        False,
        description="categorical releases whose rows follow one transition matrix T (the mechanism's law): "
        "train with the forward-corrected loss CE(log(softmax(f(x))·T), ŷ) (Patrini et al. 2017)",
    )


class TrainingRequest(LearningConfig, _TrainingTarget):
    """Body of ``POST /v1/trainings``: the training options (defaults: the benchmarked default
    configuration, :mod:`labeldp.learning.config`), what to train on, and how to learn from it."""

    model_config = ConfigDict(extra="forbid", frozen=False)

    def learning(self) -> LearningConfig:
        return LearningConfig(**self.to_dict())


@dataclass(frozen=True)
class TrainingOrder:
    """A training's options as its row keeps them (the trainings table's JSON ``config``): the one
    conversion between the request's models and the stored form, both ways.

    Stored flat, as the request named them: the :class:`TrainingOptions`, ``forward_correction``
    and, for regressions, the resolved :class:`LearningConfig` fields (classifications store none).
    Rows queued before learning options existed train as they were requested: plainly; rows queued
    before schedules existed keep a constant rate.
    """

    options: TrainingOptions
    forward_correction: bool = False
    learning: LearningConfig | None = None  # None: a classification (or a row from before learning options)

    @classmethod
    def of_request(
        cls, request: TrainingRequest, learning: LearningConfig | None, processes: int = 1, rows: int = 0
    ) -> TrainingOrder:
        """The row's options: the request's, with the recipe of ``processes`` processes over ``rows`` rows
        where it left the batch and learning rate to us (:func:`labeldp.learning.config.recipe_for_processes`)."""
        options = recipe_for_processes(TrainingOptions(**request.options()), processes, rows, request.model_fields_set)
        return cls(options, request.forward_correction, learning)

    def stored(self) -> dict[str, Any]:
        learning = self.learning.to_dict() if self.learning is not None else {}
        return {**self.options.options(), "forward_correction": self.forward_correction, **learning}

    @classmethod
    def of_stored(cls, config: dict[str, Any]) -> TrainingOrder:
        values = dict(config)
        forward_correction = bool(values.pop("forward_correction", False))
        learned = {name: values.pop(name) for name in LearningConfig.model_fields if name in values}
        learning = LearningConfig(**{**PLAIN.to_dict(), **learned}) if learned else None
        values.setdefault("schedule", "none")
        return cls(TrainingOptions(**values), forward_correction, learning)
