"""Positions of ids in a label set's sorted id column, by binary search over the Arrow buffers.

A label set's ids are stored sorted (the canonical release order), so finding where an
uploaded id sits needs no hash table: a binary search per id over the UTF-8 bytes costs
~24 comparisons at 10⁷ ids and no memory beyond the answer (``pyarrow.compute.index_in``
builds a hash table of the whole set: ≈ 80 bytes per id). The numba kernel below is the
one used; :func:`positions_reference` is its plain-Python twin the tests compare against.
"""

from __future__ import annotations

import bisect
from typing import cast

import numba
import numpy as np
import pyarrow as pa


def buffers(values: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, data, valid) of a string array, honouring a slice offset."""
    if values.type != pa.string():
        values = values.cast(pa.string())
    n = len(values)
    _, offsets_buf, data_buf = values.buffers()
    if offsets_buf is None:  # every string array has offsets; the stubs allow None
        raise ValueError("a string array without an offsets buffer")
    offsets = np.frombuffer(memoryview(offsets_buf), dtype=np.int32)[values.offset : values.offset + n + 1]
    data = np.frombuffer(memoryview(data_buf), dtype=np.uint8) if data_buf is not None else np.zeros(0, dtype=np.uint8)
    valid = (
        np.ones(n, dtype=np.bool_)
        if values.null_count == 0
        else np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
    )
    return offsets, data, valid


@numba.njit(cache=True, nogil=True)
def _compare(a: np.ndarray, a0: int, a1: int, b: np.ndarray, b0: int, b1: int) -> int:
    """-1, 0 or 1 as bytes a[a0:a1] sort before, equal or after b[b0:b1] (UTF-8 byte order)."""
    la, lb = a1 - a0, b1 - b0
    m = la if la < lb else lb
    for k in range(m):
        x, y = a[a0 + k], b[b0 + k]
        if x != y:
            return -1 if x < y else 1
    if la == lb:
        return 0
    return -1 if la < lb else 1


@numba.njit(cache=True, nogil=True)
def _search(
    set_offsets: np.ndarray, set_data: np.ndarray, q_offsets: np.ndarray, q_data: np.ndarray, q_valid: np.ndarray
) -> np.ndarray:
    n_set = set_offsets.shape[0] - 1
    n_q = q_offsets.shape[0] - 1
    out = np.full(n_q, -1, dtype=np.int32)
    for i in range(n_q):
        if not q_valid[i]:
            continue
        q0, q1 = q_offsets[i], q_offsets[i + 1]
        lo, hi = 0, n_set
        while lo < hi:
            mid = (lo + hi) >> 1
            c = _compare(set_data, set_offsets[mid], set_offsets[mid + 1], q_data, q0, q1)
            if c < 0:
                lo = mid + 1
            elif c > 0:
                hi = mid
            else:
                out[i] = mid
                break
    return out


def positions(sorted_ids: pa.Array | pa.ChunkedArray, queries: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """int32 position of each query in ``sorted_ids`` (strictly increasing), -1 where absent or null."""
    flat: pa.Array
    if isinstance(sorted_ids, pa.ChunkedArray):
        flat = cast(pa.Array, sorted_ids.chunk(0)) if sorted_ids.num_chunks == 1 else sorted_ids.combine_chunks()
    else:
        flat = sorted_ids
    if len(flat) >= 2**31:
        raise ValueError("a label set holds fewer than 2³¹ ids")
    set_offsets, set_data, _ = buffers(flat)
    chunks = queries.chunks if isinstance(queries, pa.ChunkedArray) else [queries]
    parts = []
    for chunk in chunks:
        q_offsets, q_data, q_valid = buffers(chunk)
        parts.append(_search(set_offsets, set_data, q_offsets, q_data, q_valid))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


@numba.njit(cache=True, nogil=True)
def _lower(
    set_offsets: np.ndarray, set_data: np.ndarray, q_offsets: np.ndarray, q_data: np.ndarray
) -> np.ndarray:
    n_set = set_offsets.shape[0] - 1
    n_q = q_offsets.shape[0] - 1
    out = np.empty(n_q, dtype=np.int64)
    for i in range(n_q):
        q0, q1 = q_offsets[i], q_offsets[i + 1]
        lo, hi = 0, n_set
        while lo < hi:
            mid = (lo + hi) >> 1
            if _compare(set_data, set_offsets[mid], set_offsets[mid + 1], q_data, q0, q1) < 0:
                lo = mid + 1
            else:
                hi = mid
        out[i] = lo
    return out


def lower_bounds(sorted_ids: pa.Array, queries: pa.Array) -> np.ndarray:
    """int64 index of the first id in ``sorted_ids`` not before each (non-null) query: where it would go."""
    set_offsets, set_data, _ = buffers(sorted_ids)
    q_offsets, q_data, _ = buffers(queries)
    return _lower(set_offsets, set_data, q_offsets, q_data)


def positions_reference(sorted_ids: list[str], queries: list[str | None]) -> np.ndarray:
    """The same answer with Python's bisect over UTF-8 bytes (for tests)."""
    keys = [s.encode("utf-8") for s in sorted_ids]
    out = np.full(len(queries), -1, dtype=np.int32)
    for i, q in enumerate(queries):
        if q is None:
            continue
        b = q.encode("utf-8")
        k = bisect.bisect_left(keys, b)
        if k < len(keys) and keys[k] == b:
            out[i] = k
    return out
