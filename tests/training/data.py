"""A feature table on disk and a release's ids and labels for training tests (no HTTP)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def write_table(path: Path, n: int, seed: int = 0, extra: int = 0) -> tuple[pa.Array, np.ndarray, pa.Table]:
    """(release ids, labels, features without ids) for ``n`` rows; the file holds them shuffled plus
    ``extra`` rows that are in no release. Column ``key`` is the row's release position (to check joins)."""
    rng = np.random.default_rng(seed)
    ids = pa.array([f"id{i:07d}" for i in range(n + extra)])
    x1 = rng.normal(size=n + extra)
    x2 = rng.uniform(-1, 1, size=n + extra)
    group = rng.choice(["a", "b", "c"], size=n + extra)
    effect = np.select([group == "a", group == "b"], [1.0, -2.0], 0.0)
    y = 3.0 * x1 - 2.0 * np.sin(2 * x2) + effect + 0.5 + rng.normal(size=n + extra) * 0.3
    features = pa.table({"x1": x1, "x2": x2, "group": pa.array(group, pa.string()),
                         "key": np.arange(n + extra, dtype=np.float64)})
    full = features.add_column(0, "id", ids)
    pq.write_table(full.take(pa.array(rng.permutation(n + extra))), path, row_group_size=max(1, n // 3))
    return ids.slice(0, n), y[:n], features.slice(0, n)
