"""The bucketed ledger: exact under concurrent compare-and-swap, and it costs what a release touches.

Like test_ledger.py these run the labels party's domain functions against a real database
(SQLite and PostgreSQL from ``database_url``). Shown red by planting bugs (see the commit
message): a swap that skips the version check overspends in the concurrency tests and
commits the stale plan in ``test_a_stale_plan_is_recomputed_not_committed``; a fold that
drops the chain breaks ``test_chains_and_folds_agree_with_a_plain_model``.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from sqlalchemy import select
from tests.release_jobs import CHARGED, JobFailed, settle
from tests.s3_server import S3Server

from labeldp.errors import LabelDPError
from labels_party import ledger
from labels_party.context import LabelsContext
from labels_party.privacy_domains import get_privacy_domain
from labels_party.releases import ReleaseCreate, create_release
from labels_party.store import LedgerBucketRow, PrivacyDomainRow, ReleaseRow

from .test_ledger import expected_from_releases, labeled_set, make_ctx, new_domain, release, spent_per_id


def _fnv_fmix(data: bytes) -> int:
    """The bucket hash in plain Python: FNV-1a 64, then MurmurHash3's 64-bit finalizer."""
    mask = (1 << 64) - 1
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & mask
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & mask
    h ^= h >> 33
    h = (h * 0xC4CEB93FE53EC94D) & mask
    return h ^ (h >> 33)


def domain_row(ctx: LabelsContext, name: str) -> PrivacyDomainRow:
    with ctx.sessions() as s:
        row = s.scalar(select(PrivacyDomainRow).where(PrivacyDomainRow.name == name))
        assert row is not None
        s.expunge(row)
        return row


def versions(ctx: LabelsContext, domain_id: str) -> dict[int, int]:
    with ctx.sessions() as s:
        rows = s.execute(
            select(LedgerBucketRow.bucket, LedgerBucketRow.version).where(LedgerBucketRow.domain_id == domain_id)
        )
        return {int(b): int(v) for b, v in rows}


def test_an_ids_bucket_is_pinned() -> None:
    # Stored buckets depend on this hash: changing it would lose every id's spend.
    ids = ["a", "user-123", "é", "", "x" * 128]
    assert ledger.bucket_of(pa.array(ids), 1024).tolist() == [69, 257, 900, 44, 47]
    assert ledger.bucket_of(pa.array(["a", "user-123"]), 7).tolist() == [3, 6]
    rng = np.random.default_rng(0)
    more = [bytes(rng.integers(32, 127, rng.integers(1, 40))).decode() for _ in range(300)]
    got = ledger.bucket_of(pa.chunked_array([pa.array(more[:100]), pa.array(more[100:])]), 1000)
    assert got.tolist() == [_fnv_fmix(i.encode()) % 1000 for i in more]


def test_a_release_rewrites_only_the_buckets_it_touches(database_url: str, tmp_path: Path) -> None:
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "wide", epsilon=3)
    everyone = [f"user-{i:05d}" for i in range(3000)]
    labeled_set(ctx, tmp_path, "wide", everyone)
    domain = domain_row(ctx, "wide")
    before = versions(ctx, domain.id)
    few = ["user-00007", "user-01234", "user-02999"]
    small = labeled_set(ctx, tmp_path, "wide", few)  # already registered: no bucket moves
    assert versions(ctx, domain.id) == before
    keys_before = set(ledger.object_keys(ctx, domain.id))
    release(ctx, small, 1)
    after = versions(ctx, domain.id)
    touched = set(ledger.bucket_of(pa.array(few), domain.n_buckets).tolist())
    assert {b for b in after if after[b] != before[b]} == touched
    assert all(after[b] == before[b] + 1 for b in touched)
    # One small object: the three charged positions (no base was rewritten).
    written = set(ledger.object_keys(ctx, domain.id)) - keys_before
    assert len(written) == 1
    assert sum(ctx.store.size(k) for k in written) < 2_000
    spent = spent_per_id(ctx, "wide")
    assert {i for i, e in spent.items() if e} == set(few)
    # Registering new ids moves only the buckets they fall in; known ids keep their spend.
    fresh = ["new-a", "new-b", "user-00007"]
    labeled_set(ctx, tmp_path, "wide", fresh)
    moved = {b for b, v in versions(ctx, domain.id).items() if v != after.get(b, 0)}
    assert moved == set(ledger.bucket_of(pa.array(["new-a", "new-b"]), domain.n_buckets).tolist())
    assert spent_per_id(ctx, "wide")["user-00007"] == 1_000_000


def test_chains_and_folds_agree_with_a_plain_model(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Short chains force many folds; the ledger must match a dict of every id's spend.
    monkeypatch.setattr(ledger, "MAX_CHAIN", 2)
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "model", epsilon=4, delta=1e-5)
    with ctx.sessions.begin() as s:
        row = s.scalar(select(PrivacyDomainRow).where(PrivacyDomainRow.name == "model"))
        assert row is not None
        row.n_buckets = 4  # few buckets: every release meets chains and folds
    domain = domain_row(ctx, "model")
    rng = np.random.default_rng(1)
    universe = np.array([f"id{i:03d}" for i in range(200)])
    model_eps: dict[str, int] = {}
    model_delta: dict[str, int] = {}
    for step in range(25):
        ids = sorted(set(rng.choice(universe, size=int(rng.integers(1, 120)), replace=False).tolist()))
        ledger.register_ids(ctx, domain.id, pa.array(ids))
        eps, delta = int(rng.integers(1, 400_000)), int(rng.integers(0, 3)) * 1_000_000
        fits = all(model_eps.get(i, 0) + eps <= 4_000_000 and model_delta.get(i, 0) + delta <= 10**10 for i in ids)
        try:
            plan = ledger.plan_charge(ctx, domain.id, pa.array(ids), eps, delta)
        except ledger.BudgetExhausted:
            assert not fits, step
            continue
        assert fits, step
        with ctx.sessions.begin() as s:
            ledger.commit_charge(s, ledger.lock_domain(s, domain.id), plan)
        for i in ids:
            model_eps[i] = model_eps.get(i, 0) + eps
            model_delta[i] = model_delta.get(i, 0) + delta
    with ctx.sessions() as s:
        got_ids, got_eps, got_delta = ledger.spent_by_id(ctx, s, domain_row(ctx, "model"))
    got = dict(zip(got_ids.to_pylist(), zip(got_eps.tolist(), got_delta.tolist(), strict=True), strict=True))
    assert got == {i: (model_eps.get(i, 0), model_delta.get(i, 0)) for i in got}
    assert set(model_eps) <= set(got)
    shown = get_privacy_domain(ctx, domain_row(ctx, "model").id)
    assert shown.max_spent_epsilon == max(model_eps.values()) / 1e6
    assert shown.ids_exhausted == sum(e >= 4_000_000 for e in model_eps.values())
    assert shown.ids == len(got)


def test_a_stale_plan_is_recomputed_not_committed(database_url: str, tmp_path: Path) -> None:
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "race", epsilon=1)
    ids = pa.array([f"r{i}" for i in range(50)])
    domain = domain_row(ctx, "race")
    ledger.register_ids(ctx, domain.id, ids)
    first = ledger.plan_charge(ctx, domain.id, ids, 600_000, 0)
    second = ledger.plan_charge(ctx, domain.id, ids, 600_000, 0)  # read the same versions
    with ctx.sessions.begin() as s:
        ledger.commit_charge(s, ledger.lock_domain(s, domain.id), first)
    with pytest.raises(ledger.StaleBuckets) as stale, ctx.sessions.begin() as s:
        ledger.commit_charge(s, ledger.lock_domain(s, domain.id), second)
    assert stale.value.buckets == set(second.next)
    with pytest.raises(ledger.BudgetExhausted) as exhausted:
        ledger.replan(ctx, second, stale.value.buckets)
    assert exhausted.value.ids_over == 50
    assert set(spent_per_id(ctx, "race").values()) == {600_000}


def _race(contexts: list[LabelsContext], sets: list[str], attempts: int, threads: int) -> list[str]:
    outcomes: list[str] = []
    lock = threading.Lock()

    def one(k: int) -> None:
        try:
            release(contexts[k % len(contexts)], sets[k % len(sets)], 0.1)
            result = "accepted"
        except LabelDPError as exc:
            result = exc.code
        with lock:
            outcomes.append(result)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(attempts)))
    return outcomes


def _check_exact(ctx: LabelsContext, domain: str, members: dict[str, list[str]], outcomes: list[str]) -> None:
    assert set(outcomes) <= {"accepted", "budget_exhausted"}
    spent = spent_per_id(ctx, domain)
    expected = expected_from_releases(ctx)
    assert spent == {i: expected.get(i, 0) for i in spent}
    assert max(spent.values()) <= 1_000_000
    with ctx.sessions() as s:
        charged = s.scalars(select(ReleaseRow.id).where(ReleaseRow.status.in_(CHARGED))).all()
        assert outcomes.count("accepted") == len(charged)
    # Nothing that fits was refused: every set ended with an id that cannot pay 0.1 more.
    for ids in members.values():
        assert max(spent[i] for i in ids) > 900_000


def test_many_concurrent_releases_over_overlapping_ids_stay_exact(database_url: str, tmp_path: Path) -> None:
    # 72 releases of ε = 0.1 over six overlapping sets of a domain with ε = 1 per id, 12 at a
    # time, through two "replicas" (separate engines and connection pools on one database).
    # A set is accepted at most 10 times, so 12 attempts per set end each one refused
    # (what _check_exact's last check needs, whatever the interleaving).
    ctx = make_ctx(database_url, tmp_path)
    replica = make_ctx(database_url, tmp_path)
    new_domain(ctx, "tight", epsilon=1)
    members = {f"s{k}": [f"id{i:04d}" for i in range(k * 40, k * 40 + 100)] for k in range(6)}
    sets = [labeled_set(ctx, tmp_path, "tight", ids) for ids in members.values()]
    outcomes = _race([ctx, replica], sets, attempts=72, threads=12)
    _check_exact(ctx, "tight", members, outcomes)
    # The overlap of s0..s2 (ids 80-99) spent exactly its budget.
    assert spent_per_id(ctx, "tight")["id0090"] == 1_000_000


def test_replicas_sharing_only_an_s3_store_and_a_database_stay_exact(s3_server: S3Server, tmp_path: Path) -> None:
    # The ledger's objects on a real S3-compatible server (moto, loopback): each replica has its
    # own engine; what the ledger stores, both reach only through the object store.
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    store = s3_server.url()
    options = {
        "storage_url": store, "storage_s3_endpoint": s3_server.endpoint, "storage_s3_region": "us-east-1",
        "storage_s3_access_key": s3_server.options()["access_key"],
        "storage_s3_secret_key": s3_server.options()["secret_key"],
    }
    ctx = make_ctx(url, tmp_path, **options)
    # The same prefix spelled with a trailing slash: the replica gets its own cache of ledger
    # objects, as another process would, and reads what the first writes from the server.
    replica = make_ctx(url, tmp_path, **(options | {"storage_url": store + "/"}))
    new_domain(ctx, "s3", epsilon=1)
    members = {f"s{k}": [f"u{i:03d}" for i in range(k * 15, k * 15 + 40)] for k in range(3)}
    sets = [labeled_set(ctx, tmp_path, "s3", ids) for ids in members.values()]
    outcomes = _race([ctx, replica], sets, attempts=36, threads=6)
    _check_exact(ctx, "s3", members, outcomes)
    assert not (tmp_path / "data" / "domains").exists()  # nothing of the ledger in a local folder
    assert ctx.store.list("ledger")


def _write_legacy_domain(ctx: LabelsContext, name: str, segments: list[list[str]], eps: list[int]) -> str:
    """A domain as the ledger before buckets stored it: id segments and one spent column per resource."""
    from labels_party.columnar import write_array, write_table

    domain = domain_row(ctx, name)
    folder = ctx.data_dir / "domains" / domain.id
    for k, ids in enumerate(segments, start=1):
        write_table(folder / f"ids-{k:06d}.arrow", pa.table({"id": pa.array(sorted(ids))}))
    write_array(folder / "spent-eps-000000000003.npy", np.array(eps, dtype=np.int64))
    write_array(folder / "spent-delta-000000000003.npy", np.zeros(len(eps), dtype=np.int64))
    with ctx.sessions.begin() as s:
        row = s.get(PrivacyDomainRow, domain.id)
        assert row is not None
        row.id_segments, row.n_ids, row.spent_version = len(segments), sum(map(len, segments)), 3
    return domain.id


def test_a_domain_from_before_buckets_is_bucketed_on_first_use(database_url: str, tmp_path: Path) -> None:
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "old", epsilon=1)
    first, second = ["b", "d", "f"], ["a", "c", "e", "g"]
    # Positions follow the segments: b d f, then a c e g; the spent column is shorter than the ids.
    domain_id = _write_legacy_domain(ctx, "old", [first, second], [900_000, 0, 500_000, 100_000, 0])
    with ctx.sessions() as s:
        row = s.get(PrivacyDomainRow, domain_id)
        assert row is not None
        with pytest.raises(LabelDPError) as exc:
            ledger.remaining_for(ctx, s, row, pa.array(["a"]))
    assert exc.value.code == "ledger_not_bucketed"  # a read never guesses
    ls = labeled_set(ctx, tmp_path, "old", ["a", "c", "e", "g"])  # registering buckets the domain first
    assert spent_per_id(ctx, "old") == {"b": 900_000, "d": 0, "f": 500_000, "a": 100_000, "c": 0, "e": 0, "g": 0}
    release(ctx, ls, 0.9)
    with pytest.raises(LabelDPError) as exc:
        release(ctx, ls, 0.1)  # "a" has 0 left
    assert exc.value.code == "budget_exhausted"
    assert spent_per_id(ctx, "old")["a"] == 1_000_000
    shown = get_privacy_domain(ctx, domain_row(ctx, "old").id)
    assert (shown.ids, shown.ids_exhausted, shown.max_spent_epsilon) == (7, 1, 1.0)


def test_start_up_buckets_every_old_domain(database_url: str, tmp_path: Path) -> None:
    ctx = make_ctx(database_url, tmp_path)
    for name in ("x", "y"):
        new_domain(ctx, name, epsilon=2)
        _write_legacy_domain(ctx, name, [["p", "q"]], [1_500_000, 2_000_000])
    assert ledger.bucket_legacy_domains(ctx) == 2
    assert ledger.bucket_legacy_domains(ctx) == 0
    for name in ("x", "y"):
        assert spent_per_id(ctx, name) == {"p": 1_500_000, "q": 2_000_000}
        assert get_privacy_domain(ctx, domain_row(ctx, name).id).ids_exhausted == 1


def test_the_bucket_rows_tell_when_every_id_can_pay_and_the_check_reads_them_otherwise(tmp_path: Path) -> None:
    # A release checks its ids' budget by their buckets' rows (each row's most-spent id) and reads
    # the ids' spends only when the rows cannot show that all can pay: then the refusal names the
    # exact remainder, as before.
    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    domain_id = new_domain(ctx, "d", epsilon=2)
    ids = [f"u{i:03d}" for i in range(60)]
    ls = labeled_set(ctx, tmp_path, "d", ids, cap=5)  # the domain's budget binds, not the set's cap
    with ctx.sessions() as s:
        domain = s.get(PrivacyDomainRow, domain_id)
        assert domain is not None
    buckets = set(ledger.bucket_of(pa.array(ids), domain.n_buckets).tolist())
    assert ledger.affordable_by_rows(ctx, domain, buckets, 2_000_000)
    assert not ledger.affordable_by_rows(ctx, domain, buckets, 2_000_001)
    # both queued before either job runs: the second's job finds the first's charge
    first, second = (create_release(ctx, ls, ReleaseCreate.model_validate({"mechanism": "laplace", "epsilon": e}),
                                    None).body["id"] for e in (1.5, 0.6))
    settle(ctx, first)
    with pytest.raises(JobFailed) as refused:
        settle(ctx, second)
    assert refused.value.code == "budget_exhausted"
    assert "0.5 (smallest over its ids)" in str(refused.value)  # the rows could not tell: the spends were read
    assert ledger.affordable_by_rows(ctx, domain, buckets, 500_000)
    assert not ledger.affordable_by_rows(ctx, domain, buckets, 600_000)
    other = ledger.bucket_of(pa.array(["never-seen"]), domain.n_buckets).tolist()
    assert ledger.affordable_by_rows(ctx, domain, set(other) - buckets, 2_000_000)  # no row: nothing spent
    release(ctx, ls, 0.5)
    assert set(spent_per_id(ctx, "d").values()) == {2_000_000}
