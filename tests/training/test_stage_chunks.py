"""The release side of a stage streams in: read chunk by chunk, never held whole (issue 23, item 2).

A streamed training's release comes as chunks (the service's shards); each chunk's label,
target and split travel with its rows into the join's partition files. These tests watch
Arrow's memory pool while the stage consumes a release of many chunks (what it holds must not
grow with the chunks it has read) and check that the chunking changes nothing that is staged.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tests.training.data import write_table

from labeldp.learning.config import TrainingConfig
from labeldp.learning.loop import make_plan, make_split_bits, split_bits_slice
from labeldp.learning.staging import stage_release
from labeldp.learning.streamed import ReleaseChunks, stage_for_training

N, CHUNK = 60_000, 500
CONFIG = TrainingConfig(epochs=1, batch_size=64, seed=3, device="cpu", threads=1, row_group_rows=4096,
                        join_partition_rows=8192)


def test_the_split_as_bits_is_make_plans_split() -> None:
    for n in (1, 2, 9, 1000, 12_345):
        for seed in (0, 3):
            config = CONFIG.replace(seed=seed)
            plan = make_plan(n, config)
            _, bits = make_split_bits(n, config)
            assert bits.nbytes == (n + 7) // 8
            mask = np.zeros(n, bool)
            mask[plan.val_idx] = True
            assert np.array_equal(split_bits_slice(bits, 0, n), mask)
            for start, rows in ((0, 0), (1, 7), (5, 11), (8, 8), (n // 2, n - n // 2)):
                if start + rows <= n:
                    assert np.array_equal(split_bits_slice(bits, start, rows), mask[start : start + rows])


def test_the_stage_holds_one_chunk_of_the_release_at_a_time(tmp_path: Path) -> None:
    ids, y, _ = write_table(tmp_path / "f.parquet", N)
    held: list[int] = []

    def chunks() -> Iterator[tuple[pa.Array, np.ndarray]]:
        for start in range(0, N, CHUNK):
            held.append(pa.total_allocated_bytes())  # before this chunk exists: what the stage kept of the last ones
            # a fresh copy of each chunk (a shard as read): the stage may keep it only as long as it cuts it
            yield pa.array(ids[start : start + CHUNK].to_pylist(), pa.string()), y[start : start + CHUNK].copy()

    release = ReleaseChunks(N, chunks())
    plan, bits = make_split_bits(N, CONFIG)
    staged = stage_for_training(tmp_path / "f.parquet", "id", release, lambda labels: labels, "labels", plan, bits,
                                CONFIG, tmp_path / "work", None, None)
    assert staged.n_train + staged.n_validation == N and len(held) == N // CHUNK
    whole = ids.nbytes  # the release's ids as one Arrow array (its labels are numpy's: not in Arrow's pool)
    growth = max(held) - held[0]
    assert growth < whole / 10, (growth, whole)


def test_the_chunking_of_the_release_changes_nothing_staged(tmp_path: Path) -> None:
    ids, y, _ = write_table(tmp_path / "f.parquet", 5000, extra=200)
    plan = make_plan(5000, CONFIG)
    is_val = np.zeros(5000, bool)
    is_val[plan.val_idx] = True
    whole = stage_release(tmp_path / "f.parquet", "id", ids, y, y, is_val, tmp_path / "a", 512, 1024)
    run, bits = make_split_bits(5000, CONFIG)
    chunked = ReleaseChunks(5000, ((ids[i : i + 777], y[i : i + 777]) for i in range(0, 5000, 777)))
    streamed = stage_for_training(tmp_path / "f.parquet", "id", chunked, lambda labels: labels, "labels", run, bits,
                                  CONFIG.replace(row_group_rows=512, join_partition_rows=1024), tmp_path / "b", None,
                                  None)
    assert np.array_equal(whole.val_labels, streamed.val_labels)
    for path in ("train_path", "validation_path"):
        assert pq.read_table(getattr(whole, path)).equals(pq.read_table(getattr(streamed, path)))
    assert (whole.target_mean, whole.target_std) == (streamed.target_mean, streamed.target_std)


def test_the_validation_labels_go_to_the_store_a_block_at_a_time(tmp_path: Path) -> None:
    """``val.npz`` is written from the labels' scratch file as ``np.savez`` would write the array, without
    the array: at 10^8 rows the stage held its 10^7 validation labels up to four times (list, concatenation,
    the archive, its bytes). Planted once: reading the scratch file whole made the peak 8 MB and this failed."""
    import tracemalloc

    from labeldp.learning.staging import write_labels_npz

    values = np.random.default_rng(0).normal(size=1_000_000)
    raw = tmp_path / "labels.f8"
    raw.write_bytes(values.astype("<f8").tobytes())
    tracemalloc.start()
    try:
        with (tmp_path / "val.npz").open("wb") as out:
            write_labels_npz(out, raw, len(values))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    with np.load(tmp_path / "val.npz") as data:
        assert np.array_equal(data["val_labels"], values) and data["val_labels"].dtype == np.float64
    assert peak < 3 << 20  # a copy block or two, not the 8 MB of labels
    (tmp_path / "none.f8").write_bytes(b"")
    write_labels_npz(tmp_path / "empty.npz", tmp_path / "none.f8", 0)
    with np.load(tmp_path / "empty.npz") as data:
        assert data["val_labels"].shape == (0,)
