"""Wire specs of the categorical mechanisms (Liu & Ding): RR, RRWithPrior, BlockRR.

Every categorical spec carries ``classes`` (the public class names, in index
order): the features party detects a categorical release by that field and
trains a softmax classifier over those classes. Each spec holds exactly what
rebuilds the K×K transition matrix (``labeldp.mechanisms.categorical``'s
``from_spec(spec).transition_matrix()``); the probabilities stated here are
informational copies that the rebuild recomputes rather than trusts.

A two-stage release (Alg. 2) adds ``prior_split``: which rows were randomized
by the first stage (plain RR), that stage's spec, and the private prior the
second stage was fitted to, so the features party knows each row's law.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from labeldp.specs.base import MechanismSpecBase, SpecModel


def _check_indices(values: list[int], n_classes: int, what: str) -> None:
    if len(set(values)) != len(values):
        raise ValueError(f"{what} must not repeat a class")
    if any(v < 0 or v >= n_classes for v in values):
        raise ValueError(f"{what} must be class indices in [0, {n_classes})")


class CategoricalSpec(MechanismSpecBase):
    """Fields shared by every categorical mechanism spec."""

    epsilon: float = Field(gt=0, description="ε of the per-label randomizer")
    classes: list[str] = Field(min_length=2, description="public class names; label i means classes[i]")

    @field_validator("classes")
    @classmethod
    def _unique_names(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("class names must be unique")
        if any(not name for name in value):
            raise ValueError("class names must be non-empty")
        return value


class RandomizedResponseSpec(CategoricalSpec):
    """K-ary randomized response (Liu & Ding Def. 2.3): keep w.p. e^ε/(e^ε+K−1), else uniform."""

    name: Literal["randomized_response"] = "randomized_response"
    keep_probability: float = Field(ge=0, le=1, description="Pr[ŷ = y] = e^ε / (e^ε + K − 1)")
    other_probability: float = Field(ge=0, le=1, description="Pr[ŷ = j] for j ≠ y: 1 / (e^ε + K − 1)")


class PriorSplitSpec(SpecModel):
    """Alg. 2's split: the first ``prior_rows`` of ``n_rows`` (by ``rule``) got ``first_stage``.

    ``rule`` picks rows from the row count alone (public), never from labels:
    ``prefix`` takes the first m rows of the canonical (sorted-id) order,
    ``evenly_spaced`` takes rows ⌊i·n/m⌋ for i = 0..m−1. ``prior_probs`` is the
    debiased frequency of the first stage's outputs (post-processing).
    """

    rule: Literal["prefix", "evenly_spaced"]
    fraction: float = Field(gt=0, lt=1)
    n_rows: int = Field(ge=0)
    prior_rows: int = Field(ge=0)
    first_stage: RandomizedResponseSpec
    prior_probs: list[float]

    @model_validator(mode="after")
    def _consistent(self) -> PriorSplitSpec:
        if self.prior_rows > self.n_rows:
            raise ValueError("prior_rows cannot exceed n_rows")
        if len(self.prior_probs) != len(self.first_stage.classes):
            raise ValueError("prior_probs must have one entry per class")
        if any(p < 0 for p in self.prior_probs):
            raise ValueError("prior_probs must be >= 0")
        return self


class _PriorFittedSpec(CategoricalSpec):
    prior_split: PriorSplitSpec | None = Field(
        default=None, description="present when the prior came from a first-stage split of the same rows"
    )

    @model_validator(mode="after")
    def _split_matches(self) -> _PriorFittedSpec:
        split = self.prior_split
        if split is not None:
            if split.first_stage.classes != self.classes:
                raise ValueError("the first stage must use the same classes")
            if split.first_stage.epsilon != self.epsilon:
                raise ValueError("the first stage must use the same epsilon (parallel composition)")
        return self


class RRWithPriorSpec(_PriorFittedSpec):
    """RRWithPrior (Def. 2.4): RR inside the top-k set Y_k, uniform over Y_k for labels outside it."""

    name: Literal["rr_with_prior"] = "rr_with_prior"
    top_k: list[int] = Field(min_length=1, description="Y_k as class indices, most likely first")
    keep_probability: float = Field(ge=0, le=1, description="Pr[ŷ = y | y ∈ Y_k] = e^ε / (e^ε + k − 1)")
    other_probability: float = Field(ge=0, le=1, description="Pr[ŷ = j ∈ Y_k∖{y} | y ∈ Y_k]")
    outside_probability: float = Field(ge=0, le=1, description="Pr[ŷ = j ∈ Y_k | y ∉ Y_k] = 1/k")

    @model_validator(mode="after")
    def _indices(self) -> RRWithPriorSpec:
        _check_indices(self.top_k, len(self.classes), "top_k")
        return self


class BlockRRSpec(_PriorFittedSpec):
    """BlockRR (Alg. 1) with B = identity: majority S₁, Δ ⊆ S̃₁, closed-form β, γ of eq. (3.2).

    ``outputs='all'`` is Alg. 2's configuration (S̃ = S); ``outputs='majority'``
    reports only S̃ = S̃₁ = S₁ with Δ = S̃₁ (Table 1's RRWithPrior row).
    """

    name: Literal["block_rr"] = "block_rr"
    sigma: float = Field(gt=0, description="σ of the weight matrix, eq. (3.3)")
    outputs: Literal["all", "majority"] = "all"
    majority: list[int] = Field(min_length=1, description="S₁ as class indices (ascending)")
    delta: list[int] = Field(description="Δ as class indices, l = len(delta)")
    beta: float = Field(ge=0, le=1)
    gamma: float = Field(ge=0, le=1)

    @model_validator(mode="after")
    def _indices(self) -> BlockRRSpec:
        n_classes = len(self.classes)
        _check_indices(self.majority, n_classes, "majority")
        _check_indices(self.delta, n_classes, "delta")
        if not set(self.delta) <= set(self.majority):
            raise ValueError("delta must be a subset of the majority set")
        if self.outputs == "majority" and len(self.delta) != len(self.majority):
            raise ValueError("outputs='majority' needs delta = the whole majority set")
        return self


CategoricalMechanismSpec = RandomizedResponseSpec | RRWithPriorSpec | BlockRRSpec
