"""Parquet files read a batch at a time with memory bounded by the batch, not by the file.

pyarrow's ``ParquetFile`` pre-buffers column chunks by default, and ``iter_batches``
then keeps every buffered chunk until the iteration ends: a pass over a file grows with
the file. Every streamed pass (the features party's staging join and batch prediction, the
labels party's upload parser) opens its file here, with pre-buffering off (docs/architecture.md,
"Training at scale"). Decided in docs/decisions/0017-parquet-no-prebuffer.md.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq


def open_for_batches(path: str | Path) -> pq.ParquetFile:
    """``path`` for ``iter_batches``: one batch in memory at a time (raises as ``pq.ParquetFile`` does)."""
    return pq.ParquetFile(path, pre_buffer=False)
