"""Trainings as jobs: claims, leases, re-queue of a dead worker's training, resume from a checkpoint.

Real databases (SQLite and the suite's PostgreSQL server), real PyTorch; the processes of
tests/integration/test_training_jobs.py drive the same over HTTP.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
from sqlalchemy.orm import Session, sessionmaker
from tests.unit.test_training_control import CONFIG, _data, _row
from tests.unit.test_training_control import sessions as sessions

from features_party import checkpoints, leases, store, training_errors, training_run, trainings, worker
from features_party.progress import ProgressBoard
from features_party.training_context import JobContext
from labeldp.learning.classifier import fit_classifier
from labeldp.learning.config import LearningConfig, TrainingConfig
from labeldp.learning.loop import EpochReport
from labeldp.learning.regression import fit_private_regressor
from labeldp.service.database import make_engine, make_session_factory
from labeldp.storage import ObjectStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def catalogue(database_url: str) -> sessionmaker[Session]:
    engine = make_engine(database_url)
    store.create_all(engine)
    yield make_session_factory(engine)
    engine.dispose()


def _add(factory: sessionmaker[Session], training_id: str, minute: int = 0, **values) -> None:  # type: ignore[no-untyped-def]
    with factory.begin() as s:
        s.add(store.Training(
            training_id=training_id, release_id="rel", feature_table="t", epoch=0, epochs=5,
            history=[], created_at=T0 + timedelta(minutes=minute), **{"status": "queued", "config": CONFIG, **values},
        ))


def test_concurrent_workers_claim_each_training_once_oldest_first(catalogue: sessionmaker[Session]) -> None:
    for k in range(12):
        _add(catalogue, f"t{k:02d}", minute=k)
    claimed: dict[str, list[str]] = {}
    barrier = threading.Barrier(4)

    def work(owner: str) -> None:
        barrier.wait()
        mine = claimed.setdefault(owner, [])
        while (training_id := leases.claim(catalogue, owner, 30.0)) is not None:
            mine.append(training_id)

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    everything = [t for ids in claimed.values() for t in ids]
    assert sorted(everything) == [f"t{k:02d}" for k in range(12)]  # each once, none lost
    for owner, ids in claimed.items():
        assert ids == sorted(ids)  # each worker took them oldest first
        for training_id in ids:
            row = _row(catalogue, training_id)
            assert (row.status, row.owner, row.attempt) == ("running", owner, 1)
            assert row.lease_expires_at is not None and row.started_at is not None
    assert leases.claim(catalogue, "late", 30.0) is None


def test_an_expired_lease_is_requeued_or_failed_a_live_one_is_left_alone(catalogue: sessionmaker[Session]) -> None:
    """The measured bug at its root: nothing but an expired lease lets another process touch a
    running training (a second API's start-up used to fail it)."""
    now = datetime.now(UTC)
    _add(catalogue, "alive", status="running", owner="a", attempt=1, lease_expires_at=now + timedelta(seconds=30))
    _add(catalogue, "dead", status="running", owner="b", attempt=1, lease_expires_at=now - timedelta(seconds=1))
    _add(catalogue, "hopeless", status="running", owner="c", attempt=3, lease_expires_at=now - timedelta(seconds=1))
    _add(catalogue, "legacy", status="running", attempt=1)  # left by a process older than leases
    _add(catalogue, "stopping", status="cancelling", owner="d", attempt=1, lease_expires_at=now - timedelta(seconds=1))
    error = training_errors.stored_error(*leases.WORKER_LOST)
    assert sorted(leases.reap_expired(catalogue, 3, error)) == ["dead", "legacy"]
    assert (_row(catalogue, "alive").status, _row(catalogue, "alive").owner) == ("running", "a")
    dead = _row(catalogue, "dead")
    assert (dead.status, dead.owner, dead.lease_expires_at, dead.attempt) == ("queued", None, None, 1)
    hopeless = _row(catalogue, "hopeless")
    assert hopeless.status == "failed" and training_errors.error_body(hopeless.error)["code"] == "worker_lost"
    assert _row(catalogue, "stopping").status == "cancelled"
    # the next claim is the second attempt
    assert leases.claim(catalogue, "w2", 30.0, training_id="dead") == "dead"
    assert _row(catalogue, "dead").attempt == 2
    # the old owner can no longer renew, the new one can
    assert not leases.renew(catalogue, "dead", "b", 30.0)
    assert leases.renew(catalogue, "dead", "w2", 30.0)


def test_the_lease_keeper_renews_and_notices_a_lost_lease(sessions) -> None:
    _add(sessions, "t1")
    assert leases.claim(sessions, "me", 0.6) == "t1"
    first = _row(sessions, "t1").lease_expires_at
    with leases.LeaseKeeper(sessions, "t1", "me", 0.6) as keeper:
        time.sleep(0.5)
        assert not keeper.lost.is_set()
        assert _row(sessions, "t1").lease_expires_at > first  # renewed every 0.2 s
        with sessions.begin() as s:
            s.get(store.Training, "t1").owner = "someone else"  # re-queued and claimed elsewhere
        deadline = time.monotonic() + 5
        while not keeper.lost.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert keeper.lost.is_set()


def test_a_cancel_from_another_process_is_seen_between_batches(sessions, tmp_path: Path) -> None:
    """No flag on this worker's board: the cancel is the row's status, read with the progress write."""
    seen: list[tuple[int, int]] = []

    class OtherProcessCancels(ProgressBoard):
        def batch(self, training_id: str, epoch: int, step: int, steps: int) -> None:
            super().batch(training_id, epoch, step, steps)
            seen.append((epoch, step))
            if (epoch, step) == (2, 1):
                status, body = trainings.cancel_training(sessions, ProgressBoard(), training_id)  # API B's board
                assert status == 202 and body["status"] == "cancelling"

    _add(sessions, "t1")
    ctx = JobContext(session_factory=sessions, data_dir=tmp_path, device="cpu", threads=1,
                          board=OtherProcessCancels(), progress_seconds=0.0)
    training_run.run_training(ctx, "t1")
    row = _row(sessions, "t1")
    assert row.status == "cancelled" and row.model_id is None and row.epoch == 1
    assert seen[-1] == (2, 1)  # seen at that batch boundary: not one batch more
    assert not (tmp_path / "checkpoints" / "t1.pt").exists()


def test_progress_written_by_a_worker_shows_in_another_process(sessions, tmp_path: Path) -> None:
    """The API that did not run the training reads batch progress and an ETA from the row."""
    snapshots: list[dict] = []

    class Observer(ProgressBoard):
        def batch(self, training_id: str, epoch: int, step: int, steps: int) -> None:
            super().batch(training_id, epoch, step, steps)
            if (epoch, step) == (2, 3):
                time.sleep(0.05)  # let the clock move between the written batches
                with sessions() as s:
                    snapshots.append(trainings.training_status(s, s.get(store.Training, training_id), ProgressBoard()))

    _add(sessions, "t1")
    ctx = JobContext(session_factory=sessions, data_dir=tmp_path, device="cpu", threads=1, board=Observer(),
                          progress_seconds=0.0)
    training_run.run_training(ctx, "t1")
    (body,) = snapshots
    progress = body["progress"]
    # written at batch 2 of epoch 2 (batch 3's write comes after the board call): 5 batches an epoch
    assert (body["status"], progress["epoch"], progress["batch"], progress["batches"]) == ("running", 1, 2, 5)
    assert progress["fraction"] == pytest.approx(7 / 25)
    assert progress["eta_seconds"] is not None and progress["eta_seconds"] > 0
    assert body["attempt"] == 1
    assert _row(sessions, "t1").live is None  # cleared once over


# --------------------------------------------------------------------------- checkpoint and resume


class StopAfter(Exception):
    pass


def _interrupted_then_resumed(fit, epochs_before_kill: int):  # type: ignore[no-untyped-def]
    saved: dict[int, dict] = {}

    def checkpoint(state: dict) -> None:
        saved[state["epoch"]] = state

    def kill(report: EpochReport) -> None:
        if report.epoch == epochs_before_kill:
            raise StopAfter()

    with pytest.raises(StopAfter):
        fit(on_epoch=kill, checkpoint=checkpoint)
    return fit(on_epoch=None, resume=saved[epochs_before_kill])


def test_a_resumed_training_is_the_uninterrupted_one(tmp_path: Path) -> None:
    """The checkpoint hook of the in-memory loop: model, optimizer, data order and model selection
    after epoch 2, resumed in a fresh call, give exactly the uninterrupted run's history and model."""
    table, y, _ids = _data()
    features = table.drop(["id"])
    labels = y + np.random.default_rng(1).laplace(scale=20.0, size=len(y))
    config = TrainingConfig(epochs=5, batch_size=32, validation_fraction=0.2, seed=4, device="cpu", threads=1,
                            schedule="step", step_epoch=3)
    learning = LearningConfig(debias="none", shrinkage="auto", select_epoch=True)
    spec = {"name": "laplace", "epsilon": 1.0, "domain": {"low": -10, "high": 10}, "step": 0.01, "scale": 20.0}

    def fit(on_epoch=None, checkpoint=None, resume=None):  # type: ignore[no-untyped-def]
        return fit_private_regressor(features, labels, spec, config, learning, on_epoch,
                                     checkpoint=checkpoint, resume=resume)

    whole = fit()
    resumed = _interrupted_then_resumed(fit, 2)
    assert resumed.history_ == whole.history_
    assert resumed.selection_ == whole.selection_
    np.testing.assert_array_equal(resumed.predict(features), whole.predict(features))
    assert resumed.config_["resumed_after_epoch"] == 2

    # the checkpoint survives the trip through the store a worker uses
    state = {"epoch": 1, "model": {"w": torch.ones(2)}, "history": [{"epoch": 1}]}
    checkpoints.save(_objects(tmp_path), "trn_x", state)
    loaded = checkpoints.load(_objects(tmp_path), "trn_x")
    assert loaded is not None and loaded["epoch"] == 1 and torch.equal(loaded["model"]["w"], torch.ones(2))
    (tmp_path / "checkpoints" / "trn_y.pt").write_bytes(b"half a file")
    assert checkpoints.load(_objects(tmp_path), "trn_y") is None
    assert checkpoints.load(_objects(tmp_path), "none") is None
    checkpoints.remove(_objects(tmp_path), "trn_x")
    assert checkpoints.load(_objects(tmp_path), "trn_x") is None


def test_a_resumed_classifier_is_the_uninterrupted_one() -> None:
    table, y, _ids = _data()
    features, classes = table.drop(["id"]), (y > 0).astype(np.float64)
    config = TrainingConfig(epochs=4, batch_size=32, seed=9, device="cpu", threads=1)

    def fit(on_epoch=None, checkpoint=None, resume=None):  # type: ignore[no-untyped-def]
        return fit_classifier(features, classes, 2, config, on_epoch, checkpoint=checkpoint, resume=resume)

    whole = fit()
    resumed = _interrupted_then_resumed(fit, 3)
    assert resumed.history_ == whole.history_
    np.testing.assert_array_equal(resumed.predict_proba(features), whole.predict_proba(features))


def test_an_idle_worker_removes_the_checkpoints_of_finished_trainings(sessions, tmp_path: Path) -> None:
    for training_id, status in (("done", "failed"), ("gone", "cancelled"), ("waiting", "queued"),
                                ("busy", "running")):
        _add(sessions, training_id, status=status)
        checkpoints.save(_objects(tmp_path), training_id, {"epoch": 1})
    checkpoints.save(_objects(tmp_path), "deleted", {"epoch": 1})
    ctx = JobContext(session_factory=sessions, data_dir=tmp_path, device="cpu")
    assert worker.Worker(ctx, 3, 1.0).sweep_checkpoints() == ["deleted", "done", "gone"]
    assert checkpoints.stored(_objects(tmp_path)) == ["busy", "waiting"]


def test_a_worker_that_lost_its_lease_stops_and_writes_nothing(sessions, tmp_path: Path) -> None:
    """Its lease expired and another worker took the training: the first stops at its next
    progress write and leaves the row, now the other's, as it is (no cancel, no failure, no model)."""

    class TakenOver(ProgressBoard):
        def batch(self, training_id: str, epoch: int, step: int, steps: int) -> None:
            super().batch(training_id, epoch, step, steps)
            if (epoch, step) == (2, 1):
                with sessions.begin() as s:  # re-queued and claimed by another worker meanwhile
                    row = s.get(store.Training, training_id)
                    row.owner, row.attempt = "other:2:cd", 2

    _add(sessions, "t1")
    ctx = JobContext(session_factory=sessions, data_dir=tmp_path, device="cpu", threads=1, board=TakenOver(),
                          progress_seconds=0.0)
    training_run.run_training(ctx, "t1")
    row = _row(sessions, "t1")
    assert (row.status, row.owner, row.attempt, row.error, row.model_id) == ("running", "other:2:cd", 2, None, None)
    assert row.epoch == 1 and not list(tmp_path.glob("models/*"))
    assert (tmp_path / "checkpoints" / "t1.pt").is_file()  # the new owner resumes from it


def test_a_claimed_training_that_cannot_start_fails_instead_of_staying_held(sessions, tmp_path: Path) -> None:
    _add(sessions, "t1", config={**CONFIG, "batch_size": 0})
    statuses: list[str] = []
    ctx = JobContext(session_factory=sessions, data_dir=tmp_path, device="cpu", on_status=statuses.append)
    training_run.run_training(ctx, "t1")
    row = _row(sessions, "t1")
    assert row.status == "failed" and training_errors.error_body(row.error)["code"] == "training_failed"
    assert row.lease_expires_at is None and statuses == ["failed"]


def _objects(folder: Path) -> ObjectStore:
    """The object store a service with no LABELDP_STORAGE_URL has: its data folder."""
    return ObjectStore.from_url(str(folder))
