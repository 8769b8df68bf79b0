"""Input checks every mechanism shares: ε, public grids and label arrays."""

from __future__ import annotations

import math

import numpy as np


def check_epsilon(epsilon: float) -> float:
    epsilon = float(epsilon)
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("epsilon must be a finite number > 0")
    return epsilon


def check_grid(grid: np.ndarray) -> np.ndarray:
    """A public support: 1-D, finite, strictly increasing float64."""
    grid = np.ascontiguousarray(grid, dtype=np.float64)
    if grid.ndim != 1 or grid.size == 0:
        raise ValueError("grid must be a non-empty 1-D array")
    if not np.all(np.isfinite(grid)):
        raise ValueError("grid must be finite")
    if np.any(np.diff(grid) <= 0):
        raise ValueError("grid must be strictly increasing")
    return grid


def check_labels(labels: np.ndarray) -> np.ndarray:
    labels = np.asarray(labels, dtype=np.float64)
    if not np.all(np.isfinite(labels)):
        raise ValueError("labels must be finite")
    return labels
