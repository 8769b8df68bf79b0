"""Immutable columnar objects: ids, labels and message bytes in the object store.

Ids, labels and message bytes are objects of :class:`labeldp.storage.ObjectStore`
(``put_*``/``get_*``: a local folder or S3, what every replica and the outbox share);
the ledger's buckets are objects too (``ledger.py``); files under the process's data
directory (``write_*``/``read_*``, with their temp-name, fsync and rename) remain only for
a ledger from before buckets, read once when it is bucketed. Either way the SQL catalogue
only references them (docs/architecture.md, "The per-id ledger", "Storage"): a row names
an object only after it is complete, a reader
never sees half of one, a crash leaves at most an unreferenced one, and nothing is
modified once a committed row names it.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, cast

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from labeldp.errors import NotFound, StorageError
from labeldp.storage import ObjectStore


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


def put_array(store: ObjectStore, key: str, values: np.ndarray) -> None:
    """``values`` as the ``.npy`` object ``key`` (streamed: no second copy in memory)."""
    with store.open_output_stream(key) as out:
        np.save(out, values, allow_pickle=False)


_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _npy_header(f: pa.NativeFile, key: str) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, fortran order, dtype, offset of the data) of the ``.npy`` object open as ``f``."""
    f.seek(0)
    head = io.BytesIO(f.read(min(f.size(), 1 << 16)))
    version = np.lib.format.read_magic(head)
    if version not in _NPY_HEADERS:
        raise ValueError(f"unsupported .npy version {version} in {key!r}")
    shape, fortran, dtype = _NPY_HEADERS[version](head)
    if dtype.hasobject:
        raise ValueError(f"{key!r} holds Python objects, which are never loaded")
    return shape, fortran, dtype, head.tell()


def get_array(store: ObjectStore, key: str) -> np.ndarray:
    """A private, writable copy of the ``.npy`` object ``key``, read in one request after its header.

    Not ``np.load``: on anything but a real file it reads 256 KiB at a time, which on S3 is
    one GET each (a 40 MB column took 15 s against a loopback S3 server, 150 requests).
    """
    with _named(key), store.open_input_file(key) as f:
        shape, fortran, dtype, at = _npy_header(f, key)
        raw = np.empty(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, dtype=np.uint8)
        f.seek(at)
        if f.readinto(raw.data) != raw.size:
            raise ValueError(f"{key!r} is shorter than its .npy header says")
    return raw.view(dtype).reshape(shape, order="F" if fortran else "C")


@contextlib.contextmanager
def npy_slices(store: ObjectStore, key: str) -> Iterator[Callable[[int, int], np.ndarray]]:
    """``read(start, n)``: a private copy of elements ``[start, start + n)`` of the one-dimensional
    ``.npy`` object ``key``, one ranged read each (the whole array is never loaded)."""
    with _named(key), store.open_input_file(key) as f:
        shape, _, dtype, at = _npy_header(f, key)
        if len(shape) != 1:
            raise ValueError(f"{key!r} is not one-dimensional")

        def read(start: int, n: int) -> np.ndarray:
            if start < 0 or start + n > shape[0]:
                raise ValueError(f"{key!r} holds {shape[0]} values, not [{start}, {start + n})")
            f.seek(at + start * dtype.itemsize)
            raw = f.read(n * dtype.itemsize)
            if len(raw) != n * dtype.itemsize:
                raise ValueError(f"{key!r} is shorter than its .npy header says")
            return np.frombuffer(raw, dtype=dtype).copy()

        yield read


def put_table(store: ObjectStore, key: str, table: pa.Table) -> None:
    """``table`` as the Arrow IPC file object ``key``."""
    with store.open_output_stream(key) as out, ipc.new_file(out, table.schema) as writer:
        writer.write_table(table)


def get_table(store: ObjectStore, key: str) -> pa.Table:
    """The Arrow IPC file object ``key``, read through random access (no mmap: it may be remote)."""
    with _named(key), store.open_input_file(key) as f:
        return ipc.open_file(f).read_all()


@contextlib.contextmanager
def _named(key: str) -> Iterator[None]:
    """An object a committed row names is missing: the store is not the one that row was written to
    (a replica with its own folder, a wrong LABELDP_STORAGE_URL) — a server fault, never a 404 that
    would tell the client its label set does not exist."""
    try:
        yield
    except NotFound as exc:
        raise StorageError("stored_object_missing", f"the stored object {key!r} is missing from the store") from exc


def release_unused_memory() -> None:
    """Hand Arrow's freed pool memory back to the OS after a large request.

    Arrow's allocator keeps freed blocks for reuse; between requests that reach several
    hundred MB this keeps a service's resident size at its largest request's peak plus the
    next one's. Returning it bounds the peak by the single largest request.
    """
    pa.default_memory_pool().release_unused()
