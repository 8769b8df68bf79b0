"""Release jobs on SQLite and PostgreSQL: queued at once, charged once by whichever worker owns
the job, failed cleanly (nothing charged) when they cannot be made or their workers keep dying,
and the messages of delivered releases removed after the retention period.

The HTTP side (202 before the work, replays, two worker processes and kill -9) is in
tests/integration/test_release_workers.py.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import update
from tests.release_jobs import JobFailed, settle

from labeldp.errors import LabelDPError
from labels_party import release_worker
from labels_party.context import LabelsContext, message_key
from labels_party.label_sets import get_label_set
from labels_party.release_worker import ReleaseWorker, claim, reap_expired, remove_expired_messages
from labels_party.releases import (
    LeaseLost,
    ReleaseCreate,
    create_release,
    get_release,
    redeliver,
    release_snapshot,
    run_job,
)
from labels_party.store import ReleaseRow

from .test_ledger import labeled_set, make_ctx, new_domain, spent_per_id


def _queue(ctx: LabelsContext, label_set_id: str, epsilon: float = 0.5) -> str:
    body = ReleaseCreate.model_validate({"mechanism": "laplace", "epsilon": epsilon})
    return str(create_release(ctx, label_set_id, body, None).body["id"])


def _expire(ctx: LabelsContext, release_id: str) -> None:
    """What a dead worker leaves: its lease in the past."""
    with ctx.sessions.begin() as s:
        s.execute(update(ReleaseRow).where(ReleaseRow.id == release_id).values(job_lease_until=time.time() - 1))


def test_a_release_is_queued_uncharged_then_charged_by_a_worker(database_url: str, tmp_path: Path) -> None:
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "q", epsilon=2)
    ls = labeled_set(ctx, tmp_path, "q", ["a", "b", "c"])
    release_id = _queue(ctx, ls)
    queued = get_release(ctx, release_id).model_dump()
    assert (queued["status"], queued["stage"], queued["accounting"], queued["message_sha256"]) == (
        "queued", "accepted", None, None
    )
    snapshot = release_snapshot(ctx, release_id)  # one poll of its event stream: not over yet
    assert (snapshot.data["stage"], snapshot.terminal) == ("accepted", False)
    assert set(spent_per_id(ctx, "q").values()) == {0}  # nothing charged before the worker
    assert get_label_set(ctx, ls).budget.spent_micro == 0
    charged = settle(ctx, release_id)
    assert (charged["status"], charged["job_attempts"]) == ("pending", 1)
    assert len(charged["message_sha256"]) == 64 and ctx.store.size(message_key(f"{release_id}/manifest.json")) > 0
    assert spent_per_id(ctx, "q") == dict.fromkeys("abc", 500_000)
    assert get_label_set(ctx, ls).budget.spent_micro == 500_000


def test_queued_jobs_hold_the_label_sets_cap(database_url: str, tmp_path: Path) -> None:
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "cap", epsilon=5)
    ls = labeled_set(ctx, tmp_path, "cap", ["a", "b"], cap=1)
    first, second = _queue(ctx, ls), _queue(ctx, ls)
    with pytest.raises(LabelDPError) as exc:  # 0.5 + 0.5 queued: no room for a third, though nothing is spent
        _queue(ctx, ls)
    assert (exc.value.status_code, exc.value.code) == (409, "budget_exhausted")
    settle(ctx, first)
    settle(ctx, second)
    assert spent_per_id(ctx, "cap") == {"a": 1_000_000, "b": 1_000_000}


def test_a_job_the_ledger_refuses_fails_with_its_code_and_charges_nothing(database_url: str, tmp_path: Path) -> None:
    # Two sets over the same ids, each queued before either is charged: the catalogue cannot
    # see the conflict, the worker's exact check does. The second job fails, nothing charged.
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "tight", epsilon=1)
    a, b = labeled_set(ctx, tmp_path, "tight", ["x", "y"]), labeled_set(ctx, tmp_path, "tight", ["y", "z"])
    first, second = _queue(ctx, a, 0.8), _queue(ctx, b, 0.8)
    settle(ctx, first)
    with pytest.raises(JobFailed) as exc:
        settle(ctx, second)
    assert exc.value.code == "budget_exhausted"
    failed = get_release(ctx, second).model_dump()
    assert (failed["status"], failed["stage"], failed["error"]["code"]) == ("failed", "failed", "budget_exhausted")
    assert failed["message_sha256"] is None and failed["accounting"] is None
    assert release_snapshot(ctx, second).terminal  # its event stream ends: a failed job is final
    assert spent_per_id(ctx, "tight") == {"x": 800_000, "y": 800_000, "z": 0}
    assert get_label_set(ctx, b).budget.spent_micro == 0
    assert [k for k in ctx.store.list("messages") if second in k] == []  # its message object was removed
    with pytest.raises(LabelDPError) as refused:
        redeliver(ctx, second)
    assert refused.value.code == "release_not_charged"


def test_a_live_lease_is_never_taken_over(database_url: str, tmp_path: Path) -> None:
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "live", epsilon=2)
    release_id = _queue(ctx, labeled_set(ctx, tmp_path, "live", ["a"]))
    assert claim(ctx.sessions, "w1", lease_seconds=60) == release_id
    assert reap_expired(ctx.sessions, max_attempts=3) == []
    assert claim(ctx.sessions, "w2", lease_seconds=60) is None
    assert get_release(ctx, release_id).status == "running"


def test_a_dead_workers_job_is_resumed_and_a_late_commit_loses(database_url: str, tmp_path: Path) -> None:
    # w1 claims and "dies" (its lease expires) just before its final transaction: the job is
    # re-queued and claimed by w2; w1's commit then finds the job no longer its and commits
    # nothing; w2 charges it, once.
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "resume", epsilon=2)
    release_id = _queue(ctx, labeled_set(ctx, tmp_path, "resume", ["a", "b"]))
    assert claim(ctx.sessions, "w1", lease_seconds=60) == release_id
    calls = []

    def taken_over_now() -> bool:  # called by w1 before its message and before its commit
        calls.append(1)
        if len(calls) == 2:  # after the message is written, before the transaction
            _expire(ctx, release_id)
            assert reap_expired(ctx.sessions, max_attempts=3) == [release_id]
            assert claim(ctx.sessions, "w2", lease_seconds=60) == release_id
        return False

    with pytest.raises(LeaseLost):
        run_job(ctx, release_id, "w1", taken_over_now)
    assert set(spent_per_id(ctx, "resume").values()) == {0}
    assert [k for k in ctx.store.list("messages") if release_id in k] == []  # w1's message object is gone
    run_job(ctx, release_id, "w2")
    done = get_release(ctx, release_id).model_dump()
    assert (done["status"], done["job_attempts"]) == ("pending", 2)
    w2 = [k for k in ctx.store.list("messages") if k.startswith(f"messages/{release_id}.2/")]  # w2's own objects
    assert w2 and sum(ctx.store.size(k) for k in w2) == done["message_bytes"]
    assert spent_per_id(ctx, "resume") == {"a": 500_000, "b": 500_000}


def test_a_job_whose_workers_keep_dying_fails_cleanly(database_url: str, tmp_path: Path) -> None:
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "dying", epsilon=2)
    ls = labeled_set(ctx, tmp_path, "dying", ["a"])
    release_id = _queue(ctx, ls)
    for attempt in (1, 2):
        assert claim(ctx.sessions, f"w{attempt}", lease_seconds=60) == release_id
        _expire(ctx, release_id)
        requeued = reap_expired(ctx.sessions, max_attempts=2)
        assert requeued == ([release_id] if attempt == 1 else [])
    failed = get_release(ctx, release_id).model_dump()
    assert (failed["status"], failed["job_attempts"], failed["error"]["code"]) == ("failed", 2, "worker_lost")
    assert spent_per_id(ctx, "dying") == {"a": 0}
    assert get_label_set(ctx, ls).budget.spent_micro == 0
    assert ReleaseWorker(ctx).step() is False  # nothing left to run
    again = _queue(ctx, ls)  # its hold on the cap is gone
    assert settle(ctx, again)["status"] == "pending"


def test_retention_removes_the_messages_of_delivered_releases_only(database_url: str, tmp_path: Path) -> None:
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "keep", epsilon=10)
    ls = labeled_set(ctx, tmp_path, "keep", ["a", "b"])
    ids = [_queue(ctx, ls) for _ in range(4)]
    for release_id in ids:
        settle(ctx, release_id)
    old = datetime.now(UTC) - timedelta(days=8)
    states = {ids[0]: ("delivered", old), ids[1]: ("delivered", datetime.now(UTC)), ids[2]: ("rejected", None)}
    with ctx.sessions.begin() as s:  # what the outbox records; ids[3] stays pending
        for release_id, (status, at) in states.items():
            s.execute(update(ReleaseRow).where(ReleaseRow.id == release_id).values(status=status, delivered_at=at))
    week = 7 * 24 * 3600.0
    assert remove_expired_messages(ctx, week) == 1
    assert remove_expired_messages(ctx, week) == 0  # once
    kept = {k.split("/")[1] for k in ctx.store.list("messages")}  # messages/<release id>/<shard or manifest>
    assert kept == set(ids[1:])
    gone = get_release(ctx, ids[0]).model_dump()
    assert gone["status"] == "delivered" and gone["message_removed_at"] is not None
    assert len(gone["message_sha256"]) == 64  # the row keeps its digest
    assert all(get_release(ctx, i).message_removed_at is None for i in ids[1:])
    assert release_worker.remove_expired_messages(ctx, 0.0) == 1  # retention 0: the fresh delivery too
