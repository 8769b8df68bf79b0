"""An ids upload sorted externally (runs as objects, merged by ranges) and registered a bucket group
at a time stores and registers exactly what the in-memory path does, with the same errors.

Run sizes here are a few hundred ids, so a few thousand ids make many runs, ranges and groups.
Shown red by planting bugs (see the commit message): a range that does not start one batch
early loses ids that sort between a batch head and the splitter; a group split that drops the
last group leaves ids unregistered.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from sqlalchemy import select
from tests.s3_server import S3Server

from labeldp.errors import InvalidInput
from labeldp.storage import ObjectStore
from labels_party import ledger
from labels_party.context import LabelsContext, label_set_prefix
from labels_party.external_sort import SortedRuns
from labels_party.label_sets import (
    LabelSetCreate,
    canonical_ids,
    create_label_set,
    load_label_set,
    read_ids,
    set_ids,
)
from labels_party.store import LedgerBucketRow, PrivacyDomainRow

from .test_ledger import domain_id, labeled_set, make_ctx, new_domain, release, spent_per_id


def _ids(n: int, seed: int) -> list[str]:
    """Distinct ids of unequal lengths, multi-byte UTF-8 among them, in random order."""
    rng = np.random.default_rng(seed)
    stems = ["a", "ab", "Z", "é", "日本", "a\u00ff", "zz", ""]
    ids = {f"{stems[int(rng.integers(len(stems)))]}{int(rng.integers(10**6))}" for _ in range(n)}
    out = sorted(ids)
    rng.shuffle(out)
    return out


def _chunks(ids: list[str], size: int = 137) -> Iterator[pa.Array]:
    for at in range(0, len(ids), size):
        yield pa.array(ids[at : at + size], pa.string())


def test_the_merged_runs_are_the_sorted_ids_with_duplicates_adjacent(tmp_path: Path) -> None:
    store = ObjectStore.from_url(str(tmp_path / "store"))
    ids = _ids(6000, seed=1)
    ids += ids[::50]  # duplicates, in other runs than their twins
    runs = SortedRuns(store, "work/runs", run_rows=500, batch_rows=16)
    for chunk in _chunks(ids):
        runs.add(chunk)
    parts = list(runs.merged(per_range=5))
    assert len(runs.runs) == 13 and len(parts) > 40  # many runs and ranges
    assert max(len(p) for p in parts) <= (5 + len(runs.runs)) * 16  # the bound a range keeps
    merged = [x for p in parts for x in p.to_pylist()]
    assert merged == sorted(ids, key=lambda s: s.encode("utf-8"))
    runs.close()
    assert store.list("work") == []


def test_payload_columns_travel_with_their_ids_through_runs_and_ranges(tmp_path: Path) -> None:
    store = ObjectStore.from_url(str(tmp_path / "store"))
    ids = _ids(4000, seed=6)
    payload = pa.schema([pa.field("row", pa.int64()), pa.field("value", pa.float64())])
    runs = SortedRuns(store, "work/runs", run_rows=450, batch_rows=16, payload=payload)
    for at in range(0, len(ids), 137):
        part = ids[at : at + 137]
        runs.add(pa.array(part), {"row": np.arange(at, at + len(part)), "value": np.arange(at, at + len(part)) / 2})
    parts = list(runs.merged_tables(per_range=5))
    assert len(runs.runs) == 9 and len(parts) > 30
    rows = [r for p in parts for r in p.to_pylist()]
    assert [r["id"] for r in rows] == sorted(ids, key=lambda s: s.encode("utf-8"))
    assert all(ids[r["row"]] == r["id"] and r["value"] == r["row"] / 2 for r in rows)
    runs.close()
    assert store.list("work") == []


def _domain(ctx: LabelsContext, name: str) -> PrivacyDomainRow:
    with ctx.sessions() as s:
        row = s.scalar(select(PrivacyDomainRow).where(PrivacyDomainRow.name == name))
        assert row is not None
        s.expunge(row)
        return row


def _buckets(ctx: LabelsContext, domain_id: str) -> dict[int, tuple[int, int]]:
    with ctx.sessions() as s:
        rows = s.execute(
            select(LedgerBucketRow.bucket, LedgerBucketRow.n_ids, LedgerBucketRow.max_epsilon_micro).where(
                LedgerBucketRow.domain_id == domain_id
            )
        )
        return {int(b): (int(n), int(m)) for b, n, m in rows}


def _empty_set(ctx: LabelsContext, domain: str) -> str:
    body = {"name": "s", "domain": {"low": 0, "high": 10}, "privacy_domain": domain_id(ctx, domain)}
    return str(create_label_set(ctx, LabelSetCreate.model_validate(body), None).body["id"])


def _same_as_in_memory(ctx: LabelsContext, tmp_path: Path) -> None:
    earlier = _ids(1500, seed=2)
    fresh = _ids(3000, seed=3)
    ids = fresh + sorted(set(earlier[:700]) - set(fresh))  # some already in the domain, with ε spent
    for name in ("memory", "streamed"):
        new_domain(ctx, name, epsilon=4)
        release(ctx, labeled_set(ctx, tmp_path, name, earlier), 1.5)
    inline = create_label_set(
        ctx, LabelSetCreate.model_validate(
            {"name": "s", "domain": {"low": 0, "high": 10}, "privacy_domain": domain_id(ctx, "memory"), "ids": ids}
        ), None,
    ).body
    streamed_id = _empty_set(ctx, "streamed")
    streamed = set_ids(ctx, streamed_id, _chunks(ids), None, run_rows=300, group_ids=400).body
    assert streamed["budget"]["remaining_epsilon"] == inline["budget"]["remaining_epsilon"] == 2.5
    assert streamed["counts"] == inline["counts"]
    with ctx.sessions() as s:
        a, b = read_ids(ctx, load_label_set(s, inline["id"])), read_ids(ctx, load_label_set(s, streamed_id))
    assert b.column("id").to_pylist() == a.column("id").to_pylist() == canonical_ids(pa.array(ids)).to_pylist()
    assert max(len(c) for c in b.column("id").chunks) <= 1 << 20
    memory, stream = _domain(ctx, "memory"), _domain(ctx, "streamed")
    assert memory.n_ids == stream.n_ids == len(set(ids) | set(earlier))
    # the same ids in the same buckets, the same spends, bucket by bucket
    assert _buckets(ctx, stream.id) == _buckets(ctx, memory.id)
    assert spent_per_id(ctx, "streamed") == spent_per_id(ctx, "memory")
    with ctx.sessions() as s:
        ids_m, _, _ = ledger.spent_by_id(ctx, s, memory)
        ids_s, _, _ = ledger.spent_by_id(ctx, s, stream)
    assert ids_s.to_pylist() == ids_m.to_pylist()  # bucket order, sorted within each bucket
    assert not [k for k in ctx.store.list(label_set_prefix(streamed_id)) if "/upload-" in k]


def test_a_streamed_ids_upload_stores_and_registers_what_the_in_memory_path_does(
    database_url: str, tmp_path: Path
) -> None:
    _same_as_in_memory(make_ctx(database_url, tmp_path), tmp_path)


def test_the_streamed_upload_is_the_same_on_an_s3_store(s3_server: S3Server, tmp_path: Path) -> None:
    options = {
        "storage_url": s3_server.url(), "storage_s3_endpoint": s3_server.endpoint, "storage_s3_region": "us-east-1",
        "storage_s3_access_key": s3_server.options()["access_key"],
        "storage_s3_secret_key": s3_server.options()["secret_key"],
    }
    _same_as_in_memory(make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path, **options), tmp_path)


@pytest.mark.parametrize("fault", ["duplicate", "invalid"])
def test_a_refused_upload_gives_the_in_memory_error_and_leaves_nothing(
    database_url: str, tmp_path: Path, fault: str
) -> None:
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "d", epsilon=1)
    ids = _ids(2000, seed=4)
    ids += ids[5:300:7] if fault == "duplicate" else ["", "x" * 200, "ok\x01"]
    ids = list(np.random.default_rng(5).permutation(np.array(ids, dtype=object)))
    with pytest.raises(InvalidInput) as memory:
        canonical_ids(pa.array(ids, pa.string()))
    label_set_id = _empty_set(ctx, "d")
    with pytest.raises(InvalidInput) as streamed:
        set_ids(ctx, label_set_id, _chunks(ids), None, run_rows=250, group_ids=300)
    assert (streamed.value.code, str(streamed.value), streamed.value.details) == (
        memory.value.code, str(memory.value), memory.value.details
    )
    assert memory.value.code == ("duplicate_ids" if fault == "duplicate" else "invalid_ids")
    assert ctx.store.list(label_set_prefix(label_set_id)) == []
    assert _domain(ctx, "d").n_ids == 0
    with ctx.sessions() as s:
        assert not load_label_set(s, label_set_id).ids_ready
