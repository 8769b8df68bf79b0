"""A first-in, first-out spool of integer arrays, for a release computed a chunk of labels at a time.

Where a prior needs a second look at values it drew in its first pass over the labels (the
noised labels of Liu & Huang's Alg. 3, the first-stage outputs of the label-independent split),
those values — already privatized, never raw labels — are appended here chunk by chunk and read
back in the same order. Up to :data:`MEMORY_BYTES` they stay in memory; beyond, in an anonymous
temporary file (removed by the operating system when closed, even if the process dies), so a
release's memory does not grow with its row count.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import IO

import numpy as np

MEMORY_BYTES = 64 << 20
"""Spooled bytes kept in memory before the spool moves to a temporary file.
Decided in docs/decisions/0023-release-job-streamed.md."""


class Spool:
    """Arrays of one dtype appended in order, read back in order (``read(count)``), once."""

    def __init__(self, dtype: type = np.int64, memory_bytes: int = MEMORY_BYTES) -> None:
        self.dtype = np.dtype(dtype)
        self.memory_bytes = memory_bytes
        self._parts: list[np.ndarray] = []
        self._held = 0
        self._file: IO[bytes] | None = None
        self._reading = False
        self._at = 0
        self.size = 0

    def append(self, values: np.ndarray) -> None:
        if self._reading:
            raise RuntimeError("a spool is written, then read")
        values = np.ascontiguousarray(values, dtype=self.dtype).ravel()
        self.size += values.size
        if self._file is not None:
            self._file.write(values.tobytes())
            return
        self._parts.append(values)
        self._held += values.nbytes
        if self._held > self.memory_bytes:
            self._file = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
            for part in self._parts:
                self._file.write(part.tobytes())
            self._parts, self._held = [], 0

    def read(self, count: int) -> np.ndarray:
        """The next ``count`` values, in the order they were appended."""
        if not self._reading:
            self._reading = True
            if self._file is not None:
                self._file.flush()
                self._file.seek(0)
            else:
                whole = np.concatenate(self._parts) if self._parts else np.zeros(0, self.dtype)
                self._parts = [whole]
                self._at = 0
        if self._file is not None:
            raw = self._file.read(count * self.dtype.itemsize)
            if len(raw) != count * self.dtype.itemsize:
                raise ValueError("read past the spool's end")
            return np.frombuffer(raw, dtype=self.dtype).copy()
        whole = self._parts[0]
        if self._at + count > whole.size:
            raise ValueError("read past the spool's end")
        out = whole[self._at : self._at + count]
        self._at += count
        return out

    def blocks(self, size: int) -> Iterator[np.ndarray]:
        """Every value from the first, in blocks of ``size`` (the last may be shorter); may be repeated."""
        self._reading = False
        left = self.size
        while left > 0:
            take = min(size, left)
            yield self.read(take)
            left -= take
        self._reading = False

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._parts = []
