"""The binary-search id lookup against its plain-Python twin and against pyarrow's index_in."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from labels_party.id_lookup import positions, positions_reference


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
