"""The validation split: the same draw as always where it fits a block, the same law above (record 0035).

Above ``SPLIT_BLOCK_ROWS`` rows the split is drawn block by block (hypergeometric counts by halving,
then a permutation inside each block) so that drawing it does not hold 4 bytes per row: at 10^8 rows
the permutation alone took a stage process from 363 to 821 MB. These tests pin the small draw to
``rng.permutation`` and check the block draw's law with small blocks: exact counts, every row
equally likely, and the per-block counts as random as a uniform draw makes them.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from labeldp.learning import loop

FRACTION = 0.1


def _val_mask(n: int, seed: int) -> np.ndarray:
    return np.unpackbits(loop._validation_bits(n, FRACTION, np.random.default_rng(seed)), count=n).astype(bool)


def test_up_to_a_block_the_split_is_the_first_rows_of_one_permutation() -> None:
    for n in (1, 2, 9, 1000, 65_537, loop.SPLIT_BLOCK_ROWS):
        for seed in (0, 7):
            order = np.random.default_rng(seed).permutation(n)
            n_val = loop._n_validation(n, FRACTION)
            train, val = loop._split(n, FRACTION, np.random.default_rng(seed))
            assert np.array_equal(val, np.sort(order[:n_val]))
            assert np.array_equal(train, np.sort(order[n_val:]))


def test_above_a_block_every_row_is_equally_likely_and_the_count_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop, "SPLIT_BLOCK_ROWS", 64)
    n, draws = 1000, 3000  # 16 blocks, the last one short
    n_val = loop._n_validation(n, FRACTION)
    hits = np.zeros(n)
    first_half = np.empty(draws)
    for seed in range(draws):
        mask = _val_mask(n, seed)
        assert mask.sum() == n_val
        hits += mask
        first_half[seed] = mask[:512].sum()
    # Each row is chosen with probability n_val / n: a binomial count per row over the draws.
    p = n_val / n
    z = (hits - draws * p) / np.sqrt(draws * p * (1 - p))
    assert np.abs(z).max() < 5
    assert abs(np.mean(z**2) - 1) < 0.15
    # Rows within each block are as likely as rows across blocks (no position favoured inside a block).
    by_offset = hits[: 15 * 64].reshape(15, 64).sum(axis=0)
    assert np.ptp(by_offset) < 0.25 * by_offset.mean()
    # The first 8 blocks' count varies as a uniform draw's does (hypergeometric), not fixed in proportion.
    expected_var = n_val * (512 / n) * (1 - 512 / n) * (n - n_val) / (n - 1)
    assert abs(first_half.mean() - n_val * 512 / n) < 0.2
    assert 0.85 < first_half.var() / expected_var < 1.15


def test_drawing_a_large_split_holds_about_a_bit_per_row() -> None:
    n = 1 << 24  # 16 blocks: one permutation of n would hold 64 MB (int32) while drawing
    tracemalloc.start()
    try:
        bits = loop._validation_bits(n, FRACTION, np.random.default_rng(1))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert int(np.unpackbits(bits).sum()) == loop._n_validation(n, FRACTION)
    assert peak < n // 8 + 12 * loop.SPLIT_BLOCK_ROWS  # the bits, one block's permutation and mask


def test_a_split_too_large_for_the_hypergeometric_is_refused() -> None:
    with pytest.raises(ValueError, match="not supported"):
        next(loop._block_counts(2 * 10**9, 10, np.random.default_rng(0)))


def test_the_validation_rows_stop_at_their_cap() -> None:
    """10 % validates up to 2^20 rows (10.5·10^6 rows in all), then 2^20 do (record 0037): a training's
    validation outputs and labels, held every epoch, stop growing with n. Planted once: the cap removed made
    the 10^8-row count 10^7 and this test failed."""
    assert loop._n_validation(10_000_000, FRACTION) == 1_000_000
    assert loop._n_validation(100_000_000, FRACTION) == loop.VALIDATION_MAX_ROWS == 1 << 20
    assert loop._n_validation(2, FRACTION) == 1 and loop._n_validation(5, 0.0) == 0
    mask = _val_mask(20_000_000, 4)
    assert mask.sum() == 1 << 20
