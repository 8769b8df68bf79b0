"""The one public lattice: low + step·t, t = 0..J, that every additive mechanism lives on.

Why a lattice. Adding float noise to a float label leaks the label through the
low-order bits of the sum (Mironov 2012). So a label is snapped to the public
lattice, integer noise moves its index, and the output is a function of the
integer index alone: no float bit of an output depends on the label.

``index`` and ``value`` are the numpy forms; ``snap_index`` and ``index_value``
are the same arithmetic for numba kernels (same operations in the same order, so
the same floats: tests compare them bit for bit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numba
import numpy as np
import numpy.typing as npt

from labeldp.mechanisms.checks import check_labels
from labeldp.mechanisms.prior import LabelDomain

CONTINUOUS_STEPS = 2**16
"""Lattice size J of the "continuous" variants: outputs are multiples of (high − low)/65536."""
DISCRETE_REAL_STEPS = 1024
"""Lattice size J of a "discrete" variant on a real domain (integer domains use step 1)."""

Variant = Literal["continuous", "discrete"]


@dataclass(frozen=True)
class Lattice:
    """low + step·t with step = (high − low)/J; labels snap to t ∈ [0, J] (outside: the nearest end)."""

    low: float
    high: float
    n_steps: int

    @property
    def step(self) -> float:
        return (self.high - self.low) / self.n_steps

    @classmethod
    def for_domain(cls, domain: LabelDomain, step: float | None = None, variant: Variant = "discrete") -> Lattice:
        """The domain's lattice for an explicit ``step`` or the variant's default.

        Defaults: "continuous" J = 2^16; "discrete" step 1 on integer domains and
        J = 1024 on real ones. J = round(width/step), so the step actually used,
        width/J, can differ slightly from a ``step`` that does not divide the domain.
        """
        if step is None:
            if variant == "continuous":
                step = domain.width / CONTINUOUS_STEPS
            elif variant == "discrete":
                step = 1.0 if domain.kind == "integer" else domain.width / DISCRETE_REAL_STEPS
            else:
                raise ValueError("variant must be 'continuous' or 'discrete'")
        step = float(step)
        if not (math.isfinite(step) and step > 0):
            raise ValueError("step must be a finite number > 0")
        return cls(domain.low, domain.high, max(1, int(round(domain.width / step))))

    def index(self, labels: npt.ArrayLike) -> np.ndarray:
        """Index t of the nearest lattice point (ties to even), clipped to [0, J]; int64."""
        labels = check_labels(np.asarray(labels))
        return np.clip(np.rint((labels - self.low) / self.step), 0, self.n_steps).astype(np.int64)

    def value(self, index: npt.ArrayLike) -> np.ndarray:
        """low + step·t for any integer t; t = J is exactly ``high``, 0..J never leave the domain."""
        index = np.asarray(index, dtype=np.int64)
        values = self.low + self.step * index.astype(np.float64)
        values = np.where(index == self.n_steps, self.high, values)
        inside = (index >= 0) & (index <= self.n_steps)
        return np.where(inside, np.clip(values, self.low, self.high), values)

    @property
    def points(self) -> np.ndarray:
        """The J + 1 lattice points of the domain."""
        return self.value(np.arange(self.n_steps + 1))


@numba.njit(cache=True, inline="always")
def snap_index(y, low, step, n_steps):
    """``Lattice.index`` for one finite label."""
    return np.int64(min(max(np.rint((y - low) / step), 0.0), np.float64(n_steps)))


@numba.njit(cache=True, inline="always")
def index_value(t, low, high, step, n_steps):
    """``Lattice.value`` for one integer index."""
    v = low + step * np.float64(t)
    if 0 <= t <= n_steps:
        v = min(max(v, low), high)
    return high if t == n_steps else v
