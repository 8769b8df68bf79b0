"""Immutable columnar files under the labels party's data directory.

Ids, labels, ledger columns and message bytes live in files; the SQL catalogue only
references them (docs/architecture.md, "The per-id ledger"). A file is written to a
temporary name, flushed to disk and renamed into place, so a reader never sees half a
file and a crash leaves at most an unreferenced temporary. Catalogue rows name a file
only after it is complete; files are never modified once a committed row names them.
"""

from __future__ import annotations

import hashlib
import io
import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, cast

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write ``path`` through ``write(file)``: temp file, fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_array(path: Path, values: np.ndarray) -> None:
    atomic_write(path, lambda f: np.save(f, values, allow_pickle=False))


def read_array(path: Path, mmap: bool = False) -> np.ndarray:
    return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)


def write_table(path: Path, table: pa.Table) -> None:
    def _write(f: BinaryIO) -> None:
        with ipc.new_file(cast(io.IOBase, f), table.schema) as writer:
            writer.write_table(table)

    atomic_write(path, _write)


def read_table(path: Path) -> pa.Table:
    with pa.memory_map(str(path), "r") as source:
        return ipc.open_file(source).read_all()


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def iter_file(path: Path, chunk: int = 1 << 20) -> Iterator[bytes]:
    with open(path, "rb") as f:
        yield from iter(lambda: f.read(chunk), b"")


def release_unused_memory() -> None:
    """Hand Arrow's freed pool memory back to the OS after a large request.

    Arrow's allocator keeps freed blocks for reuse; between requests that reach several
    hundred MB this keeps a service's resident size at its largest request's peak plus the
    next one's. Returning it bounds the peak by the single largest request.
    """
    pa.default_memory_pool().release_unused()
