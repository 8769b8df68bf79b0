"""What a release's labels are: regression values, or class indices with their transition matrix.

Read from the release's mechanism spec alone, generically over mechanisms through the
registry (the mechanism rebuilt from its spec states its law); no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np

from labeldp.mechanisms.registry import entry_for_spec
from labeldp.schema import mechanism_spec

Task = Literal["regression", "classification"]
REGRESSION: Final = "regression"
CLASSIFICATION: Final = "classification"


@dataclass(frozen=True)
class LabelTask:
    """What a release's mechanism spec says about its label column.

    A spec with a ``classes`` list is categorical: the label column holds class
    indices 0..K-1 (as float64) and the features party trains a classifier.
    ``transition_matrix`` is P(released j | true i), row i, column j, from the
    mechanism's law; it enables forward loss correction. It is None when the rows
    follow two laws (a split prior's first stage: ``release_laws``), where one
    matrix would misstate the prior rows' noise.
    """

    task: Task
    classes: tuple[str, ...] | None = None
    transition_matrix: tuple[tuple[float, ...], ...] | None = None

    @classmethod
    def of(cls, spec: Any) -> LabelTask:
        """From a spec object or its JSON dict (as stored with a release); generic over mechanisms."""
        classes = _field(spec, "classes")
        if not isinstance(classes, (list, tuple)):
            return cls(REGRESSION)
        return cls(CLASSIFICATION, tuple(str(c) for c in classes), _one_matrix(spec))

    @property
    def n_classes(self) -> int:
        return len(self.classes or ())



def _one_matrix(spec: Any) -> tuple[tuple[float, ...], ...] | None:
    """The transition matrix every row of the release was drawn from, or None if rows differ."""
    parsed = mechanism_spec(spec)
    if getattr(parsed, "prior_split", None) is not None:
        return None
    matrix = entry_for_spec(parsed).from_spec(parsed).law().matrix
    if matrix is None:  # pragma: no cover - every categorical entry states a matrix law
        raise LookupError(f"{parsed.name} states no transition matrix")
    return tuple(tuple(float(v) for v in row) for row in matrix)


def _field(spec: Any, name: str) -> Any:
    if isinstance(spec, Mapping):
        return spec.get(name)
    return getattr(spec, name, None)



def check_transition_matrix(matrix: Any, n_classes: int, atol: float = 1e-6) -> np.ndarray:
    """A K×K row-stochastic matrix as float64, or ValueError (the message quotes no entries)."""
    t = np.asarray(matrix, dtype=np.float64)
    if t.shape != (n_classes, n_classes):
        raise ValueError(f"transition_matrix must be {n_classes}x{n_classes}")
    if not np.all(np.isfinite(t)) or np.any(t < 0) or np.any(t > 1):
        raise ValueError("transition_matrix entries must be probabilities")
    if not np.allclose(t.sum(axis=1), 1.0, rtol=0, atol=atol):
        raise ValueError("transition_matrix rows must sum to 1")
    return t



def to_class_indices(labels: np.ndarray, n_classes: int) -> np.ndarray:
    """Float64 labels that must be exact class indices 0..K-1 -> int64 (ValueError otherwise)."""
    labels = np.asarray(labels, dtype=np.float64)
    if labels.ndim != 1:
        raise ValueError("class labels must be one-dimensional")
    valid = np.isfinite(labels) & (labels == np.round(labels)) & (labels >= 0) & (labels < n_classes)
    if not np.all(valid):
        raise ValueError(f"class labels must be integers in [0, {n_classes})")
    return labels.astype(np.int64)
