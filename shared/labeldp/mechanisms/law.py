"""The transition law of a mechanism: what a privatized label says about the true one.

One type for every mechanism of the registry (docs/architecture.md, "The mechanism
contract"), in one of three kinds:

- ``affine``: E[ŷ | y] = a·t(y) + b for a public map t (RR-on-Bins' bin value Φ(y),
  the unbiased randomizer's clipped label, RPWithPrior's label projected onto
  [A₁, A₂], unclipped lattice noise's snapped label). Debiased labels (ŷ − b)/a are
  then unbiased for t(y).
- ``monotone``: a non-decreasing E[ŷ | y] that is not affine in any public t (clipped
  lattice noise, the exponential mechanism): exact on the mechanism's lattice, kept as
  a table of at most ``MAX_TABLE_POINTS`` (value, mean) points, with its least-squares
  line a·y + b over the lattice for debiasing labels.
- ``matrix``: a categorical mechanism's K×K transition matrix T[y, ŷ] = Pr[ŷ | y].

The features party derives everything it post-processes from this object (its
regression label laws in ``labeldp.learning.debiasing``, forward correction from the
matrix), so a mechanism states its law once, next to the code that samples it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

LawKind = Literal["affine", "monotone", "matrix"]
ArrayMap = Callable[[np.ndarray], np.ndarray]

MAX_TABLE_POINTS = 4097
"""Points kept of a monotone law's table (exact at its points; interpolated between)."""
_LINEAR_ATOL = 1e-9


@dataclass(frozen=True, eq=False)
class TransitionLaw:
    """E[ŷ | y] (regression kinds) or T[y, ŷ] (``matrix``) of one fitted mechanism.

    Regression kinds: ``a``, ``b`` (the affine law, or the monotone law's least-squares
    line), ``low``, ``high`` (the range of t, where debiased predictions are clipped),
    ``mean`` (the exact E[ŷ | y]); ``target`` (t) for ``affine``; ``values``/``means``
    (the table) for ``monotone``. ``matrix`` for the categorical kind.
    """

    name: str
    kind: LawKind
    a: float = 1.0
    b: float = 0.0
    low: float = -math.inf
    high: float = math.inf
    mean: ArrayMap | None = None
    target: ArrayMap | None = None
    values: tuple[float, ...] = ()
    means: tuple[float, ...] = ()
    matrix: np.ndarray | None = None

    @classmethod
    def affine(cls, name: str, a: float, b: float, low: float, high: float, mean: ArrayMap, target: ArrayMap
               ) -> TransitionLaw:
        """E[ŷ | y] = a·t(y) + b exactly (``mean`` computes it; ``target`` is t)."""
        return cls(name, "affine", float(a), float(b), float(low), float(high), mean=mean, target=target)

    @classmethod
    def monotone(cls, name: str, mean: ArrayMap, lattice: np.ndarray, low: float, high: float) -> TransitionLaw:
        """m = ``mean`` exactly on ``lattice``; a, b its least-squares line over the lattice (uniform weights).

        ValueError when m decreases somewhere: a non-monotone mean cannot be inverted.
        """
        lattice = np.asarray(lattice, dtype=np.float64)
        means = np.asarray(mean(lattice), dtype=np.float64)
        if np.any(np.diff(means) < -1e-9 * max(1.0, float(np.max(np.abs(means))))):
            raise ValueError(f"the conditional mean of {name} is not monotone")
        centred = lattice - lattice.mean()
        a = float(np.dot(centred, means - means.mean()) / np.dot(centred, centred))
        b = float(means.mean() - a * lattice.mean())
        count = min(lattice.size, MAX_TABLE_POINTS)
        pick = np.unique(np.rint(np.linspace(0, lattice.size - 1, count)).astype(np.int64))
        return cls(
            name, "monotone", a, b, float(low), float(high), mean=mean,
            values=tuple(lattice[pick].tolist()), means=tuple(means[pick].tolist()),
        )

    @classmethod
    def affine_or_monotone(
        cls, name: str, mean: ArrayMap, target: ArrayMap, inside: np.ndarray, lattice: np.ndarray,
        low: float, high: float,
    ) -> TransitionLaw:
        """The affine law in t read off ``mean`` at the ends of ``inside`` (t's lattice values),
        checked on every point of it; the monotone law over ``lattice`` if it is not affine."""
        inside = np.asarray(inside, dtype=np.float64)
        means = np.asarray(mean(inside), dtype=np.float64)
        if inside.size >= 2:
            a = float((means[-1] - means[0]) / (inside[-1] - inside[0]))
            b = float(means[0] - a * inside[0])
        else:
            a, b = 1.0, float(means[0] - inside[0])
        scale = max(1.0, float(np.max(np.abs(means))))
        if not np.allclose(a * inside + b, means, rtol=0, atol=_LINEAR_ATOL * scale):
            return cls.monotone(name, mean, lattice, low, high)
        return cls.affine(name, a, b, float(inside[0]), float(inside[-1]), mean, target)

    @classmethod
    def of_matrix(cls, name: str, matrix: np.ndarray) -> TransitionLaw:
        """A categorical law: T[y, ŷ] = Pr[ŷ | y], rows summing to 1."""
        t = np.array(matrix, dtype=np.float64)
        if t.ndim != 2 or t.shape[0] != t.shape[1] or not np.allclose(t.sum(axis=1), 1.0, rtol=0, atol=1e-9):
            raise ValueError("a transition matrix is square with rows summing to 1")
        t.setflags(write=False)
        return cls(name, "matrix", matrix=t)

    def conditional_mean(self, labels: np.ndarray) -> np.ndarray:
        """E[ŷ | y] exactly (regression kinds)."""
        if self.mean is None:
            raise ValueError(f"the {self.name} law is a transition matrix, not a conditional mean")
        return np.asarray(self.mean(np.asarray(labels, dtype=np.float64)), dtype=np.float64)
