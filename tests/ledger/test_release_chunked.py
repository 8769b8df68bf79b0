"""A release job over many stored chunks and many bucket groups (services/labels_party/releases.py:run_job).

The job reads a set twice through ``iter_labelled_chunks`` and charges it a bucket group at a
time (``ledger.spill_ids``): here the chunks are re-cut to a few dozen rows and the groups to a
few ids, so a small set crosses every boundary. Every id is charged exactly once, the message
holds every row once in id order, the set's remaining budget is read group by group, a stale
group is recomputed (not committed), and no work object is left behind. Shown red by planting a
plan that skips the last group (ids left uncharged) and a pass two that drops a chunk.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from sqlalchemy import select
from tests.release_jobs import JobFailed, settle

from labeldp.errors import Conflict
from labeldp.message_shards import parse_manifest, read_columns
from labels_party import label_sets, ledger, releases
from labels_party.context import LabelsContext, message_key
from labels_party.label_sets import get_label_set, load_label_set
from labels_party.store import PrivacyDomainRow, ReleaseRow

from .test_ledger import labeled_set, make_ctx, new_domain, release, spent_per_id

ROWS = 37


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of ROWS rows and bucket groups of about 16 ids."""
    whole = label_sets.iter_labelled_chunks

    def recut(ctx: LabelsContext, row: object) -> Iterator[tuple[pa.Array, np.ndarray]]:
        for ids, labels in whole(ctx, row):  # type: ignore[arg-type]
            for a in range(0, len(ids), ROWS):
                yield ids.slice(a, ROWS), labels[a : a + ROWS]

    monkeypatch.setattr(releases, "iter_labelled_chunks", recut)
    monkeypatch.setattr(ledger, "GROUP_IDS", 16)


def _domain(ctx: LabelsContext, name: str) -> PrivacyDomainRow:
    with ctx.sessions() as s:
        row = s.scalar(select(PrivacyDomainRow).where(PrivacyDomainRow.name == name))
        assert row is not None
        s.expunge(row)
        return row


def _message(ctx: LabelsContext, release_id: str) -> tuple[list[str], np.ndarray]:
    with ctx.sessions() as s:
        row = s.get(ReleaseRow, release_id)
        assert row is not None and row.message_file is not None
        key = message_key(row.message_file)
    manifest = parse_manifest(ctx.store.get_bytes(key))
    ids, labels = read_columns(ctx.store, key, manifest)
    return ids.to_pylist(), labels


def test_a_release_in_chunks_and_groups_charges_each_id_once_and_sends_each_row(
    database_url: str, tmp_path: Path, small_chunks: None
) -> None:
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "chunks", epsilon=1)
    a_ids = [f"a{i:04d}" for i in range(300)]
    b_ids = a_ids[::2] + [f"b{i:03d}" for i in range(50)]
    a, b = labeled_set(ctx, tmp_path, "chunks", a_ids), labeled_set(ctx, tmp_path, "chunks", b_ids)
    domain = _domain(ctx, "chunks")
    assert ledger.bucket_groups(domain.n_buckets, domain.n_ids, ledger.GROUP_IDS).max() >= 10  # many groups
    first = release(ctx, a, 0.4, mechanism="rr_on_bins", epsilon_prior=0.1)
    release(ctx, b, 0.4)
    spent = spent_per_id(ctx, "chunks")
    shared = set(a_ids[::2])
    assert spent == {i: 800_000 if i in shared else 400_000 for i in set(a_ids) | set(b_ids)}
    ids, labels = _message(ctx, first["id"])
    assert ids == sorted(a_ids) and labels.size == 300 and np.all(np.isfinite(labels))
    # the set's remaining budget, read group by group: 0.2 where A shares ids with B
    assert get_label_set(ctx, a).budget.remaining_micro == 200_000
    with pytest.raises(Conflict) as refused:  # refused at acceptance, nothing queued
        release(ctx, a, 0.3)
    assert refused.value.code == "budget_exhausted"
    assert not [k for k in ctx.store.list("label_sets") if "/work-" in k]  # every work object removed


def test_a_job_over_budget_in_a_later_group_fails_and_charges_nothing(
    database_url: str, tmp_path: Path, small_chunks: None
) -> None:
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "late", epsilon=1)
    ids = [f"x{i:04d}" for i in range(200)]
    whole = labeled_set(ctx, tmp_path, "late", ids)
    few = labeled_set(ctx, tmp_path, "late", ids[-3:])
    release(ctx, few, 0.8)
    before = spent_per_id(ctx, "late")
    job = releases.ReleaseCreate.model_validate({"mechanism": "laplace", "epsilon": 0.5})
    with ctx.sessions.begin() as s:  # queued past the acceptance check (as a racing job would be)
        ls = load_label_set(s, whole)
        s.add(ReleaseRow(
            id="rel_late", label_set_id=whole, mechanism="laplace", epsilon_micro=500_000, delta_units=0,
            row_count=ls.n_ids, status="queued", request_json=job.model_dump_json(), job_lease_until=0.0,
            job_attempts=0, attempts=0, next_attempt_at=0.0, lease_until=0.0, created_at=ls.created_at,
        ))
    with pytest.raises(JobFailed) as failed:
        settle(ctx, "rel_late")
    assert failed.value.code == "budget_exhausted"
    assert spent_per_id(ctx, "late") == before
    assert not [k for k in ctx.store.list("messages") if k.startswith("messages/rel_late")]


def test_a_stale_group_is_recomputed_not_committed(database_url: str, tmp_path: Path) -> None:
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "stale", epsilon=1)
    ids = pa.array([f"s{i:03d}" for i in range(120)])
    domain = _domain(ctx, "stale")
    ledger.register_ids(ctx, domain.id, ids)
    chunks = [ids.slice(a, 25) for a in range(0, 120, 25)]
    with ledger.spill_ids(ctx.store, "work/one", chunks, domain.n_buckets, 120, group_ids=8) as one, \
            ledger.spill_ids(ctx.store, "work/two", chunks, domain.n_buckets, 120, group_ids=8) as two:
        assert len(one.keys) > 5 and one.n == 120 and one.buckets == set(ledger._groups(ids, domain.n_buckets))
        first = ledger.plan_charge(ctx, domain.id, one, 300_000, 0)
        second = ledger.plan_charge(ctx, domain.id, two, 300_000, 0)  # read the same versions
        with ctx.sessions.begin() as s:
            ledger.commit_charge(s, ledger.lock_domain(s, domain.id), first)
        with pytest.raises(ledger.StaleBuckets) as stale, ctx.sessions.begin() as s:
            ledger.commit_charge(s, ledger.lock_domain(s, domain.id), second)
        assert stale.value.buckets == set(second.next)
        ledger.replan(ctx, second, stale.value.buckets)
        with ctx.sessions.begin() as s:
            ledger.commit_charge(s, ledger.lock_domain(s, domain.id), second)
        third = ledger.plan_charge(ctx, domain.id, one, 300_000, 0)
        with pytest.raises(ledger.BudgetExhausted) as exhausted:
            ledger.plan_charge(ctx, domain.id, two, 500_000, 0)
        assert exhausted.value.ids_over == 120  # counted over every group, not the first only
        assert ledger.remaining_for_spilled(ctx, None, _domain(ctx, "stale"), one) == (400_000, 0)
        del third
    assert set(spent_per_id(ctx, "stale").values()) == {600_000}
    assert ctx.store.list("work") == []
