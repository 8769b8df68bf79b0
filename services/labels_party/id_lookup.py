"""Positions of ids in a label set's sorted id column, by binary search over the Arrow buffers.

A label set's ids are stored sorted (the canonical release order), so finding where an
uploaded id sits needs no hash table: a binary search per id over the UTF-8 bytes costs
~24 comparisons at 10⁷ ids and no memory beyond the answer (``pyarrow.compute.index_in``
builds a hash table of the whole set: ≈ 80 bytes per id). The numba kernel below is the
one used; :func:`positions_reference` is its plain-Python twin the tests compare against.
"""

from __future__ import annotations

import bisect

import numba
import numpy as np
import pyarrow as pa


def flat_ids(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One ``large_string`` array of ``values``.

    ``string`` has int32 offsets: one array holds at most 2 GiB of text (3.6·10⁷ ids of 64
    characters failed with "offset overflow"). Ids that are concatenated, taken or sorted
    across chunks are ``large_string`` (int64 offsets; casting a ``string`` chunk copies its
    offsets, not its text).
    """
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    large = [c if c.type == pa.large_string() else c.cast(pa.large_string()) for c in chunks]
    if not large:
        return pa.array([], pa.large_string())
    return large[0] if len(large) == 1 else pa.concat_arrays(large)


ID_CHUNK_ROWS = 1 << 20
"""Rows per chunk of a stored id column: 2²⁰ ids of at most 128 characters stay far below the
2 GiB a ``string`` chunk can hold, whatever the total."""


def string_chunks(values: pa.Array | pa.ChunkedArray, rows: int = ID_CHUNK_ROWS) -> pa.ChunkedArray:
    """``values`` as ``string`` chunks of at most ``rows`` ids each: how id columns are stored and sent.

    Readers that expect ``string`` (the release message, the features party) keep reading
    them; no single chunk comes near the int32 offset limit.
    """
    flat = flat_ids(values)
    parts = [flat.slice(at, rows).cast(pa.string()) for at in range(0, len(flat), rows)]
    return pa.chunked_array(parts, type=pa.string())


def _text_chunks(values: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    """The chunks of ``values`` as ``string`` or ``large_string`` arrays (never concatenated)."""
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    text = (pa.string(), pa.large_string())
    return [c if c.type in text else c.cast(pa.large_string()) for c in chunks]


def buffers(values: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, data, valid) of a ``string`` or ``large_string`` array, honouring a slice offset.

    Offsets are int32 or int64 as the type has them (the kernels are compiled for both).
    """
    if values.type not in (pa.string(), pa.large_string()):
        values = values.cast(pa.large_string())
    n = len(values)
    _, offsets_buf, data_buf = values.buffers()
    if offsets_buf is None:  # every string array has offsets; the stubs allow None
        raise ValueError("a string array without an offsets buffer")
    width = np.int64 if values.type == pa.large_string() else np.int32
    offsets = np.frombuffer(memoryview(offsets_buf), dtype=width)[values.offset : values.offset + n + 1]
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
    """int32 position of each query in ``sorted_ids`` (strictly increasing), -1 where absent or null.

    A chunked ``sorted_ids`` is never concatenated (its chunks may hold more than 2 GiB of
    text together): each query first finds its chunk by a binary search over the chunks'
    first ids, then its place inside that chunk — ~log₂(n) comparisons whatever the chunks.
    """
    if len(sorted_ids) >= 2**31:
        raise ValueError("a label set holds fewer than 2³¹ ids")
    sets = [(buffers(c), at) for c, at in _with_starts(_text_chunks(sorted_ids)) if len(c)]
    firsts = buffers(_firsts(sorted_ids))
    parts = []
    for chunk in _text_chunks(queries):
        q_offsets, q_data, q_valid = buffers(chunk)
        if len(sets) <= 1:
            found = (
                _search(sets[0][0][0], sets[0][0][1], q_offsets, q_data, q_valid)
                if sets else np.full(len(chunk), -1, dtype=np.int32)
            )
            parts.append(found)
            continue
        exact = _search(firsts[0], firsts[1], q_offsets, q_data, q_valid)
        below = _lower(firsts[0], firsts[1], q_offsets, q_data) - 1
        home = np.where(exact >= 0, exact, below)
        home[~q_valid] = -1
        found = np.full(len(chunk), -1, dtype=np.int32)
        order = np.argsort(home, kind="stable")
        bounds = np.searchsorted(home[order], np.arange(-1, len(sets) + 1))
        for k, ((set_offsets, set_data, _), at) in enumerate(sets):
            rows = order[bounds[k + 1] : bounds[k + 2]]
            if not rows.size:
                continue
            sub = chunk.take(rows)
            s_offsets, s_data, s_valid = buffers(sub)
            here = _search(set_offsets, set_data, s_offsets, s_data, s_valid)
            hit = here >= 0
            found[rows[hit]] = here[hit] + at
        parts.append(found)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


def _firsts(sorted_ids: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The first id of each non-empty chunk (a few per 2²⁰ ids: copied, small)."""
    heads = [c.slice(0, 1).cast(pa.large_string()) for c in _text_chunks(sorted_ids) if len(c)]
    return pa.concat_arrays(heads) if heads else pa.array([], pa.large_string())


def _with_starts(chunks: list[pa.Array]) -> list[tuple[pa.Array, int]]:
    out, at = [], 0
    for c in chunks:
        out.append((c, at))
        at += len(c)
    return out


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


def lower_bounds(sorted_ids: pa.Array | pa.ChunkedArray, queries: pa.Array) -> np.ndarray:
    """int64 index of the first id in ``sorted_ids`` not before each (non-null) query: where it would go.

    Over a chunked ``sorted_ids`` it is the sum of the bounds within each chunk (the chunks are
    in order), so they are never concatenated.
    """
    q_offsets, q_data, _ = buffers(flat_ids(queries))
    out = np.zeros(len(queries), dtype=np.int64)
    for chunk in _text_chunks(sorted_ids):
        set_offsets, set_data, _ = buffers(chunk)
        out += _lower(set_offsets, set_data, q_offsets, q_data)
    return out


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
