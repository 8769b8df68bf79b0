"""The message writer: a manifest of shards that reads back to the exact columns, verified shard by shard."""

from __future__ import annotations

import hashlib
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labeldp.errors import InvalidInput, PayloadTooLarge
from labeldp.mechanisms import LabelDomain
from labeldp.mechanisms.additive import Laplace
from labeldp.message_shards import (
    MessageLimits,
    ReleaseManifest,
    check_digest,
    decode_shard,
    iter_columns,
    manifest_bytes,
    parse_manifest,
    read_columns,
    shard_key,
    write_message,
    write_message_chunks,
)
from labeldp.schema import EpsilonPart, PrivacyAccounting, ReleaseMetadata
from labeldp.storage import ObjectStore


def _metadata(n: int) -> ReleaseMetadata:
    return ReleaseMetadata(
        release_id="rel_x", label_set_id="ls_x", created_at=datetime(2026, 1, 1, tzinfo=UTC),
        mechanism=Laplace(1.0, LabelDomain("real", 0, 1)).fit_to().to_spec(),
        accounting=PrivacyAccounting(parts=[EpsilonPart(name="randomizer", epsilon_micro=1)], total_epsilon_micro=1),
        row_count=n,
    )


def _columns(n: int, seed: int = 0) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = sorted({f"id{v:09d}" for v in rng.integers(0, 10**9, n)})
    return ids, rng.uniform(0, 1, len(ids))


def _numpy_twin(store: ObjectStore, manifest: ReleaseManifest, manifest_key: str) -> tuple[list[str], np.ndarray]:
    """The reading done the plain way: every listed shard through pyarrow, concatenated."""
    ids: list[str] = []
    labels: list[np.ndarray] = []
    for entry in manifest.shards:
        table = pq.read_table(io.BytesIO(store.get_bytes(shard_key(manifest_key, entry.index))))
        ids += table.column("id").to_pylist()
        labels.append(table.column("label").to_numpy())
    return ids, np.concatenate(labels) if labels else np.zeros(0)


@pytest.mark.parametrize(("n", "shard_rows"), [(0, 10), (1, 10), (3, 10), (2_500, 1_000), (30_000, 7_000)])
def test_shards_and_manifest_round_trip(tmp_path: Path, n: int, shard_rows: int) -> None:
    store = ObjectStore.from_url(str(tmp_path))
    ids, labels = _columns(n, seed=n)
    limits = MessageLimits(shard_rows, 1 << 30, 1 << 20)
    written = write_message(store, "messages/rel_x", _metadata(len(ids)), pa.chunked_array([pa.array(ids)]), labels,
                            limits)
    raw = store.get_bytes(written.manifest_key)
    assert hashlib.sha256(raw).hexdigest() == written.manifest_sha256
    manifest = parse_manifest(raw)
    assert manifest_bytes(manifest) == raw  # canonical: what is signed is what it re-dumps to
    assert manifest.row_count == len(ids) and len(manifest.shards) == -(-len(ids) // shard_rows)
    assert all(s.rows <= shard_rows for s in manifest.shards)
    assert written.total_bytes == len(raw) + manifest.message_bytes
    assert set(store.list("messages/rel_x")) == set(written.keys)
    got_ids, got_labels = read_columns(store, written.manifest_key, manifest)
    assert got_ids.to_pylist() == ids and np.array_equal(got_labels, labels)
    twin_ids, twin_labels = _numpy_twin(store, manifest, written.manifest_key)
    assert twin_ids == ids and np.array_equal(twin_labels, labels)
    for entry in manifest.shards:
        data = store.get_bytes(shard_key(written.manifest_key, entry.index))
        assert (entry.first_id, entry.last_id) == (ids[sum(s.rows for s in manifest.shards[: entry.index])],
                                                   ids[sum(s.rows for s in manifest.shards[: entry.index + 1]) - 1])
        assert pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0).column(0).compression == "ZSTD"


def test_long_ids_make_smaller_shards_that_fit_the_inbox(tmp_path: Path) -> None:
    store = ObjectStore.from_url(str(tmp_path))
    rng = np.random.default_rng(1)
    ids = sorted({rng.bytes(60).hex() for _ in range(6_000)})  # incompressible 120-character ids
    limit = 200_000
    written = write_message(store, "m", _metadata(len(ids)), ids, np.zeros(len(ids)),
                            MessageLimits(1_000_000, limit, 1 << 20))
    assert len(written.manifest.shards) > 1
    assert all(s.bytes <= limit for s in written.manifest.shards)


def test_a_message_the_inbox_cannot_take_leaves_no_object(tmp_path: Path) -> None:
    store = ObjectStore.from_url(str(tmp_path))
    ids, labels = _columns(5_000)
    with pytest.raises(PayloadTooLarge) as too_large:  # 50 shards do not fit a 2 kB manifest
        write_message(store, "m", _metadata(len(ids)), ids, labels, MessageLimits(100, 1 << 30, 2_000))
    assert too_large.value.code == "message_too_large"
    assert store.list() == []


def test_a_tampered_shard_is_refused(tmp_path: Path) -> None:
    store = ObjectStore.from_url(str(tmp_path))
    ids, labels = _columns(100)
    written = write_message(store, "m", _metadata(len(ids)), ids, labels, MessageLimits(40, 1 << 30, 1 << 20))
    manifest = written.manifest
    key = shard_key(written.manifest_key, 1)
    honest = store.get_bytes(key)
    other = write_message(store, "o", _metadata(len(ids)), ids, labels + 1, MessageLimits(40, 1 << 30, 1 << 20))
    store.put_bytes(key, store.get_bytes(shard_key(other.manifest_key, 1)))  # same rows, other labels
    with pytest.raises(InvalidInput) as refused:
        read_columns(store, written.manifest_key, manifest)
    assert refused.value.code == "digest_mismatch"
    with pytest.raises(InvalidInput):
        check_digest(manifest.shards[1], hashlib.sha256(honest[:-1]).hexdigest(), len(honest) - 1)
    # A shard whose rows break the manifest's promises is refused even where its digest is listed.
    swapped = manifest.model_copy(update={"shards": [manifest.shards[0].model_copy(update={"rows": 41})]})
    with pytest.raises(InvalidInput):
        decode_shard(io.BytesIO(store.get_bytes(shard_key(written.manifest_key, 0))), swapped.shards[0])


def test_the_shards_are_read_one_at_a_time_as_they_are_asked_for_each_digest_checked(tmp_path: Path) -> None:
    """What a streamed training's stage reads: a shard is fetched and verified only when its turn comes."""
    store = ObjectStore.from_url(str(tmp_path))
    ids, labels = _columns(100)
    written = write_message(store, "m", _metadata(len(ids)), ids, labels, MessageLimits(40, 1 << 30, 1 << 20))
    shards = iter_columns(store, written.manifest_key, written.manifest)
    first_ids, first_labels = next(shards)
    assert first_ids.to_pylist() == ids[:40] and np.array_equal(first_labels, labels[:40])
    key = shard_key(written.manifest_key, 1)
    store.put_bytes(key, store.get_bytes(key)[:-1])  # changed after the first shard was read: caught on reading it
    with pytest.raises(InvalidInput) as refused:
        next(shards)
    assert refused.value.code == "digest_mismatch"


@pytest.mark.parametrize(
    "change",
    [
        {"row_count": 101},  # not the sum of the shards' rows
        {"shards": "reversed"},  # ranges not increasing, indices out of order
        {"schema_version": "1"},
        {"shard_format": "csv"},
    ],
)
def test_an_inconsistent_manifest_is_refused(tmp_path: Path, change: dict) -> None:
    store = ObjectStore.from_url(str(tmp_path))
    ids, labels = _columns(100)
    written = write_message(store, "m", _metadata(len(ids)), ids, labels, MessageLimits(40, 1 << 30, 1 << 20))
    body = json.loads(store.get_bytes(written.manifest_key))
    for name, value in change.items():
        body[name] = body[name][::-1] if value == "reversed" else value
    with pytest.raises(InvalidInput) as refused:
        parse_manifest(json.dumps(body).encode())
    assert refused.value.code == "invalid_message"
    assert all(set(d) == {"loc", "type"} for d in refused.value.details)  # never an id or a label


def _greedy_rows(ids: list[str], limits: MessageLimits) -> list[int]:
    """The shard sizes the writer must cut, the plain way: from each start, shard_rows rows halved until
    their ids' bytes plus 12 a row fit the request budget."""
    budget, sizes, start = limits.max_shard_bytes - 64 * 1024, [], 0
    while start < len(ids):
        rows = min(limits.shard_rows, len(ids) - start)
        while rows > 1 and sum(len(i.encode()) for i in ids[start : start + rows]) + 12 * rows > budget:
            rows = max(rows // 2, 1)
        sizes.append(rows)
        start += rows
    return sizes


@pytest.mark.parametrize("cuts", [[1], [7, 8, 999], [250, 500, 4_000], [3_000]])
def test_a_message_written_chunk_by_chunk_is_the_same_message(tmp_path: Path, cuts: list[int]) -> None:
    """The release job streams its rows a stored chunk at a time: the shards, their bytes and the
    manifest are those of the whole arrays, whatever the chunks (shards cut by size too)."""
    rng = np.random.default_rng(4)
    ids = sorted({rng.bytes(int(rng.integers(4, 40))).hex() for _ in range(5_000)})  # ids of mixed length
    labels = rng.uniform(0, 1, len(ids))
    store = ObjectStore.from_url(str(tmp_path))
    limits = MessageLimits(700, 64 * 1024 + 20_000, 1 << 20)
    whole = write_message(store, "m/whole", _metadata(len(ids)), ids, labels, limits)
    assert [s.rows for s in whole.manifest.shards] == _greedy_rows(ids, limits)
    assert len({s.rows for s in whole.manifest.shards}) > 1  # some shards were halved for their bytes
    at = [c for c in cuts if c < len(ids)]
    chunks = [(pa.array(i, pa.string()), v) for i, v in zip(np.split(np.array(ids, dtype=object), at),
                                                             np.split(labels, at), strict=True)]
    chunked = write_message_chunks(store, "m/chunked", _metadata(len(ids)), iter(chunks), limits)
    assert chunked.manifest_sha256 == whole.manifest_sha256 and chunked.total_bytes == whole.total_bytes
    with pytest.raises(ValueError, match="row_count"):
        write_message_chunks(store, "m/short", _metadata(len(ids) + 1), iter(chunks), limits)
    assert store.list("m/short") == []
