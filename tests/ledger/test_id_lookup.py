"""The binary-search id lookup against its plain-Python twin and against pyarrow's index_in."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from labels_party.id_lookup import flat_ids, lower_bounds, positions, positions_reference, string_chunks
from labels_party.label_sets import canonical_ids
from labels_party.ledger import bucket_of


def test_kernel_matches_the_reference_and_index_in_on_awkward_ids() -> None:
    rng = np.random.default_rng(3)
    alphabet = ["a", "b", "é", "z", "0", " ", "ab", "ba", "日本", "\u00ff"]
    pool = sorted({"".join(rng.choice(alphabet, rng.integers(1, 5))) for _ in range(400)})
    sorted_ids = sorted(pool, key=lambda s: s.encode("utf-8"))
    queries = [*rng.choice(sorted_ids, 300).tolist(), "missing", "", None, "aaaaaaaaaa", sorted_ids[0], sorted_ids[-1]]
    got = positions(pa.array(sorted_ids), pa.array(queries, pa.string()))
    assert got.tolist() == positions_reference(sorted_ids, queries).tolist()
    expected = pc.fill_null(pc.index_in(pa.array(queries, pa.string()), value_set=pa.array(sorted_ids)), -1)
    assert got.tolist() == expected.to_pylist()


def test_sliced_and_chunked_inputs() -> None:
    sorted_ids = [f"id{i:04d}" for i in range(1000)]
    whole = pa.array(sorted_ids)
    queries = pa.chunked_array([pa.array(sorted_ids[10:20]), pa.array(["nope", sorted_ids[999]])])
    assert positions(whole, queries).tolist() == [*range(10, 20), -1, 999]
    sliced = pa.array(["zz", *sorted_ids]).slice(1)
    assert positions(whole, sliced).tolist() == list(range(1000))
    assert positions(pa.chunked_array([whole.slice(0, 500), whole.slice(500)]), pa.array(["id0700"])).tolist() == [700]
    assert positions(pa.array([], pa.string()), pa.array(["x"])).tolist() == [-1]


def _huge(n_bytes: int, lead: int) -> pa.Array:
    """[chr(lead), chr(lead) + n_bytes NULs]: calloc'd pages nobody touches back the long one (cheap)."""
    data = np.zeros(n_bytes + 2, np.uint8)
    data[:2] = lead
    return pa.Array.from_buffers(
        pa.string(), 2, [None, pa.py_buffer(np.array([0, 1, n_bytes + 2], np.int32)), pa.py_buffer(data)]
    )


def test_ids_past_two_gib_of_text_concatenate_as_large_strings() -> None:
    """3.6·10⁷ ids of 64 characters overflowed ``string``'s int32 offsets (ArrowInvalid: offset overflow).

    Two chunks of 2³⁰ bytes each cost no memory (untouched zero pages) and reproduce it in
    milliseconds: ``string`` cannot hold them in one array; the id path searches them chunk by chunk.
    """
    half = (1 << 30) + 16
    sorted_ids = pa.chunked_array([pa.array(["\x00"]), _huge(half, 1), _huge(half, 2), pa.array(["a", "b"])])
    assert sum(len(c.buffers()[2]) for c in sorted_ids.chunks) > 2**31
    with pytest.raises(pa.ArrowInvalid, match="offset overflow"):
        sorted_ids.combine_chunks()  # what the id path did before
    queries = pa.chunked_array([pa.array(["b", "nope", "\x00", None]), pa.array(["a", "\x02", "\x01"])])
    assert positions(sorted_ids, queries).tolist() == [6, -1, 0, -1, 5, 3, 1]
    assert lower_bounds(sorted_ids, pa.array(["0", "c"])).tolist() == [5, 7]
    assert flat_ids(pa.chunked_array([pa.array(["a"]), pa.array(["b"])])).type == pa.large_string()


def test_large_string_inputs_and_outputs() -> None:
    ids = pa.array(["b", "a", "c"], pa.large_string())
    ordered = canonical_ids(pa.chunked_array([ids.slice(0, 2), ids.slice(2)]))
    assert ordered.type == pa.large_string() and ordered.to_pylist() == ["a", "b", "c"]
    assert positions(ordered, pa.array(["c", "a"], pa.large_string())).tolist() == [2, 0]
    assert positions(pa.array(["a", "b"]), pa.array(["b"], pa.large_string())).tolist() == [1]
    assert bucket_of(ordered, 7).tolist() == bucket_of(ordered.cast(pa.string()), 7).tolist()


def test_stored_id_columns_are_string_chunks_of_bounded_rows() -> None:
    ids = pa.array([f"id{i:03d}" for i in range(10)], pa.large_string())
    chunks = string_chunks(ids, rows=4)
    assert chunks.type == pa.string() and [len(c) for c in chunks.chunks] == [4, 4, 2]
    assert chunks.to_pylist() == ids.to_pylist()
    assert positions(chunks, pa.array(["id009", "id004", "id003", "x"])).tolist() == [9, 4, 3, -1]
    assert lower_bounds(chunks, pa.array(["id0035", "id999", ""])).tolist() == [4, 10, 0]


def test_many_chunks_match_the_reference() -> None:
    rng = np.random.default_rng(11)
    pool = sorted({f"{rng.integers(0, 10**6):06d}{'é' * int(rng.integers(0, 3))}" for _ in range(2000)},
                  key=lambda s: s.encode("utf-8"))
    ids = string_chunks(pa.array(pool), rows=37)
    assert ids.num_chunks > 50
    queries = [*rng.choice(pool, 500).tolist(), *(f"{v:06d}x" for v in rng.integers(0, 10**6, 200)),
               None, "", pool[0], pool[-1], "~", pool[36], pool[37]]
    got = positions(ids, pa.array(queries, pa.string()))
    assert got.tolist() == positions_reference(pool, queries).tolist()
