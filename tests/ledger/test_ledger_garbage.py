"""Superseded ledger objects are collected after the grace period, and never before it.

A bucket's compare-and-swap records the objects its old version named (ledger_garbage);
the sweep deletes them once the grace period (LABELDP_LEDGER_GRACE_SECONDS) has passed and
no row names them: a reader that loaded the old version before the swap reads it meanwhile.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from sqlalchemy import select

from labeldp.errors import NotFound
from labels_party import ledger
from labels_party.context import LabelsContext
from labels_party.store import LedgerBucketRow, LedgerGarbageRow, PrivacyDomainRow
from labels_party.sweep import sweep_orphans

from .test_ledger import labeled_set, make_ctx, new_domain, release, spent_per_id
from .test_ledger_buckets import domain_row

GRACE = 3600.0


def named_now(ctx: LabelsContext, domain_id: str) -> set[str]:
    with ctx.sessions() as s:
        return ledger._named_by_rows(s, [domain_id])


def small_domain(ctx: LabelsContext, name: str, n_buckets: int) -> str:
    new_domain(ctx, name, epsilon=1000)
    with ctx.sessions.begin() as s:
        row = s.scalar(select(PrivacyDomainRow).where(PrivacyDomainRow.name == name))
        assert row is not None
        row.n_buckets = n_buckets
    return domain_row(ctx, name).id


def charge(ctx: LabelsContext, domain_id: str, ids: list[str], eps: int) -> None:
    plan = ledger.plan_charge(ctx, domain_id, pa.array(ids), eps, 0)
    with ctx.sessions.begin() as s:
        ledger.commit_charge(s, ledger.lock_domain(s, domain_id), plan)


def test_after_many_releases_and_the_grace_period_only_current_versions_remain(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger, "MAX_CHAIN", 3)  # folds often: every few releases supersede bases and chains
    ctx = make_ctx(database_url, tmp_path)
    domain_id = small_domain(ctx, "gc", n_buckets=4)
    universe = [f"id{i:03d}" for i in range(120)]
    ledger.register_ids(ctx, domain_id, pa.array(universe))
    rng = np.random.default_rng(7)
    model: dict[str, int] = {}
    for _ in range(30):  # the same four buckets, over and over
        ids = sorted(rng.choice(universe, size=int(rng.integers(1, 60)), replace=False).tolist())
        eps = int(rng.integers(1, 1000))
        charge(ctx, domain_id, ids, eps)
        for i in ids:
            model[i] = model.get(i, 0) + eps
    stored = set(ledger.object_keys(ctx, domain_id))
    current = named_now(ctx, domain_id)
    assert current < stored and len(stored) > 2 * len(current)  # versions piled up
    # Within the grace period nothing goes.
    assert ledger.collect_garbage(ctx, GRACE) == 0
    assert set(ledger.object_keys(ctx, domain_id)) == stored
    # After it, exactly the superseded versions go, and the ledger reads as before.
    removed = ledger.collect_garbage(ctx, GRACE, now=time.time() + GRACE + 1)
    assert removed == len(stored - current)
    assert set(ledger.object_keys(ctx, domain_id)) == current
    ledger.CACHE._items.clear()  # read from the store, not from this process's cache
    spent = spent_per_id(ctx, "gc")
    assert {i: e for i, e in spent.items() if e} == model
    with ctx.sessions() as s:
        assert s.scalars(select(LedgerGarbageRow)).all() == []


def test_a_reader_that_began_before_the_swap_reads_its_version_during_the_grace_period(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger, "MAX_CHAIN", 1)
    ctx = make_ctx(database_url, tmp_path)
    domain_id = small_domain(ctx, "reader", n_buckets=2)
    ids = sorted(f"u{i}" for i in range(40))
    ledger.register_ids(ctx, domain_id, pa.array(ids))
    charge(ctx, domain_id, ids, 5)
    with ctx.sessions() as s:  # a reader loads the current version of every bucket…
        states = ledger._states(s, domain_id, range(2))
    before = set().union(*(ledger._named(domain_id, st.key or "", "[]") | set(st.chain) for st in states.values()))
    for _ in range(3):  # …then releases swap every bucket to new objects (folds: MAX_CHAIN 1)
        charge(ctx, domain_id, ids, 7)
    assert not before & named_now(ctx, domain_id)  # nothing the reader holds is current any more
    ledger.collect_garbage(ctx, GRACE)  # a sweep within the grace period
    ledger.CACHE._items.clear()
    with ledger._Reader(ctx) as reader:
        for st in states.values():
            _, eps, _ = reader.full(st)
            assert eps.size and set(eps.tolist()) == {5}  # its version, whole
    # Once the grace period has passed the old version is gone (the sweep is not a no-op).
    ledger.collect_garbage(ctx, GRACE, now=time.time() + GRACE + 1)
    ledger.CACHE._items.clear()
    with pytest.raises(NotFound), ledger._Reader(ctx) as reader:
        for st in states.values():
            reader.full(st)


def test_objects_no_row_ever_named_go_once_as_old(tmp_path: Path) -> None:
    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    domain_id = small_domain(ctx, "orphans", n_buckets=2)
    ids = [f"u{i}" for i in range(10)]  # sorted
    ledger.register_ids(ctx, domain_id, pa.array(ids))
    lost = ledger.plan_charge(ctx, domain_id, pa.array(ids), 5, 0)  # a plan that never commits (lost swap, crash)
    charge(ctx, domain_id, ids, 5)
    written = {v.values["object_key"] for v in lost.next.values()} | {
        ledger._charge_key(domain_id, name) for v in lost.next.values() for name in
        json.loads(v.values["chain_json"])
    }
    orphans = written - named_now(ctx, domain_id)
    assert orphans and orphans <= set(ledger.object_keys(ctx, domain_id))
    assert ledger.collect_garbage(ctx, GRACE) == 0  # young: may be a plan about to commit
    ledger.collect_garbage(ctx, GRACE, now=time.time() + GRACE + 1)
    assert set(ledger.object_keys(ctx, domain_id)) == named_now(ctx, domain_id)


def test_the_sweep_collects_superseded_ledger_objects_of_real_releases(tmp_path: Path) -> None:
    ctx = make_ctx(
        f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path,
        ledger_grace_seconds=0.2, idempotency_lease_seconds=0.1, release_lease_seconds=0.1,
    )
    new_domain(ctx, "d", 100)
    ls = labeled_set(ctx, tmp_path, "d", [f"u{i}" for i in range(30)])
    for _ in range(ledger.MAX_CHAIN + 2):  # past one fold
        release(ctx, ls, 1)
    domain_id = domain_row(ctx, "d").id
    assert set(ledger.object_keys(ctx, domain_id)) > named_now(ctx, domain_id)
    time.sleep(0.3)
    sweep_orphans(ctx, min_age_seconds=3600)
    assert set(ledger.object_keys(ctx, domain_id)) == named_now(ctx, domain_id)
    with ctx.sessions() as s:
        assert s.scalar(select(LedgerBucketRow.version).limit(1)) is not None
