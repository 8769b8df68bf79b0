"""Plain-numpy twins of the privatize kernels: the same laws, vectorized, for tests and benchmarks.

Where a kernel reads its words in a fixed pattern (clipped additive: one word per
label; unbiased: two; table rows: one; RR-on-Bins: one), the twin reads the same
words from ``random_raw`` in the same order and returns *identical* outputs for a
generator in the same state. The kernels with rejection (exponential, RPWithPrior's
uniform integers) consume words in a different order here, so there the twin has
the same law but not the same outputs. ``privatize_reference`` dispatches on the
mechanism; the speed benchmark times it beside ``mech.privatize``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from labeldp.mechanisms.checks import check_labels
from labeldp.mechanisms.lattice import Lattice
from labeldp.mechanisms.sampling import TableSampler, raw_words

_TOP53 = np.uint64(11)


def _draw(table: TableSampler, rows: np.ndarray | int, words: np.ndarray) -> np.ndarray:
    """``table.draw`` by binary search (np.searchsorted), the twin of ``sampling.table_draw``."""
    rows = np.broadcast_to(np.asarray(rows, dtype=np.int64), words.shape)
    return table.draw_reference(rows, words).reshape(words.shape)


def clipped_additive(labels: np.ndarray, lattice: Lattice, table: TableSampler, rng: np.random.Generator) -> np.ndarray:
    """Twin of ``kernels.clipped_additive`` (identical outputs)."""
    j = lattice.index(labels)
    words = raw_words(rng, j.size).reshape(j.shape)
    m = _draw(table, 0, words)
    t = np.where((words & np.uint64(1)).astype(bool), j - m, j + m)
    return lattice.value(np.clip(t, 0, lattice.n_steps))


def exponential(labels: np.ndarray, lattice: Lattice, table: TableSampler, rng: np.random.Generator) -> np.ndarray:
    """Twin of ``kernels.exponential`` (same law: vectorized rounds of rejection)."""
    j = lattice.index(labels).ravel()
    t = np.empty_like(j)
    todo = np.arange(j.size)
    while todo.size:
        words = raw_words(rng, todo.size)
        m = _draw(table, 0, words)
        cand = np.where((words & np.uint64(1)).astype(bool), j[todo] - m, j[todo] + m)
        ok = (cand >= 0) & (cand <= lattice.n_steps)
        t[todo[ok]] = cand[ok]
        todo = todo[~ok]
    return lattice.value(t).reshape(np.shape(labels))


def rp_with_prior(
    labels: np.ndarray, lattice: Lattice, a1: int, a2: int, z: int, keep_numerator: int, rng: np.random.Generator
) -> np.ndarray:
    """Twin of ``kernels.rp_with_prior`` (same law): keep word, then numpy's exact ``integers``."""
    c = np.clip(lattice.index(labels), a1, a2)
    far_count = a2 - a1
    keep = (raw_words(rng, c.size).reshape(c.shape) >> _TOP53) < np.uint64(keep_numerator)
    out = c - z + rng.integers(0, 2 * z + 1, size=c.shape, dtype=np.int64)
    if far_count > 0:
        u = a1 - z + rng.integers(0, far_count, size=c.shape, dtype=np.int64)
        u += (2 * z + 1) * (u >= c - z)  # skip the near block: uniform over the far points
        out = np.where(keep, out, u)
    return lattice.value(out)


def unbiased_rows(labels: np.ndarray, grid: np.ndarray, coins: np.ndarray) -> np.ndarray:
    """Rounded-label row: lower index + 1{coin < Pr[up]} (``unbiased.rounding_probabilities``)."""
    y = np.clip(check_labels(labels), grid[0], grid[-1])
    lower = np.clip(np.searchsorted(grid, y, side="right") - 1, 0, grid.size - 2).astype(np.int64)
    p_up = np.clip((y - grid[lower]) / (grid[lower + 1] - grid[lower]), 0.0, 1.0)
    return lower + (coins < p_up)


def unbiased(
    labels: np.ndarray, grid: np.ndarray, outputs: np.ndarray, table: TableSampler, rng: np.random.Generator
) -> np.ndarray:
    """Twin of ``kernels.unbiased`` (identical outputs): words 2i (coin) and 2i + 1 (row draw)."""
    labels = check_labels(labels)
    words = raw_words(rng, 2 * labels.size)
    coins = (words[0::2] >> _TOP53).astype(np.float64) * 2.0**-53
    rows = unbiased_rows(labels.ravel(), grid, coins)
    return outputs[_draw(table, rows, words[1::2])].reshape(labels.shape)


def rows(row_index: np.ndarray, table: TableSampler, rng: np.random.Generator) -> np.ndarray:
    """Twin of ``kernels.rows`` (identical outputs)."""
    flat = np.asarray(row_index, dtype=np.int64).ravel()
    return _draw(table, flat, raw_words(rng, flat.size)).reshape(np.shape(row_index))


def rr_on_bins(
    labels: np.ndarray, cut_points: np.ndarray, outputs: np.ndarray, keep_probability: float, rng: np.random.Generator
) -> np.ndarray:
    """Twin of ``rr_sampling.privatize_values`` (identical outputs): the same exact cells, vectorized."""
    from labeldp.mechanisms.rr_sampling import probability_cells

    own = np.searchsorted(cut_points, check_labels(labels), side="left").astype(np.int64)
    m = outputs.size
    if m == 1:
        return np.full(own.shape, outputs[0])
    span, other_width = probability_cells(m, keep_probability)
    u = raw_words(rng, own.size).reshape(own.shape)
    other = (u // np.uint64(other_width)).astype(np.int64)
    other += other >= own
    return outputs[np.where(u >= np.uint64(span), own, other)]


def privatize_reference(mech: Any, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``mech.privatize(labels, rng)`` through the numpy twins (same law; see the module docstring)."""
    from labeldp.mechanisms.additive import AdditiveLatticeMechanism, Exponential
    from labeldp.mechanisms.categorical import (
        SplitPriorRandomizer,
        _CategoricalMechanism,
        check_class_labels,
        prior_split_mask,
    )
    from labeldp.mechanisms.rp_with_prior import RPWithPrior
    from labeldp.mechanisms.rr_on_bins import RROnBins
    from labeldp.mechanisms.unbiased import UnbiasedRandomizer

    if isinstance(mech, RROnBins):
        return rr_on_bins(labels, mech.cut_points_, mech.outputs_, mech.keep_probability_ * (1.0 - 1e-12), rng)
    if isinstance(mech, Exponential):
        return exponential(labels, mech._lattice, mech.noise_table(), rng)
    if isinstance(mech, AdditiveLatticeMechanism):
        if not mech.clip:
            return mech.privatize(labels, rng)  # unclipped: already the numpy noise sampler
        return clipped_additive(labels, mech._lattice, mech.noise_table(), rng)
    if isinstance(mech, RPWithPrior):
        return rp_with_prior(
            labels, mech._lattice, mech.a1_index_, mech.a2_index_, mech.zeta_steps_, mech.keep_numerator_, rng
        )
    if isinstance(mech, UnbiasedRandomizer):
        return unbiased(labels, mech.grid_, mech.outputs_, mech._table, rng)
    if isinstance(mech, _CategoricalMechanism):
        y = check_class_labels(labels, mech._fitted().shape[0])
        return rows(y, mech.sampler(), rng)
    if isinstance(mech, SplitPriorRandomizer):
        from labeldp.mechanisms.categorical import RandomizedResponse

        classes = mech.classes
        first = RandomizedResponse(mech.epsilon, classes).fit_to()
        y = check_class_labels(labels, len(first.classes_))
        mask = prior_split_mask(y.size, mech.prior_fraction, mech.split)
        out = np.empty(y.size, dtype=np.int64)
        out[mask] = privatize_reference(first, y[mask], rng)
        second = mech.mechanism_for_prior(first.estimate_prior(out[mask]))
        out[~mask] = privatize_reference(second, y[~mask], rng)
        return out
    raise TypeError(f"no numpy twin for {type(mech).__name__}")


