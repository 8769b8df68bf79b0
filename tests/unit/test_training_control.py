"""Trainings as plain functions: the bounded queue, cancel, batch-level progress, lists.

A real SQLite database, real feature table files and real PyTorch training; no HTTP
(tests/integration/test_training_control.py drives the same over real processes).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from features_party import feature_tables, inbox, leases, models, store, training_request, training_run, trainings
from features_party.progress import LiveProgress, ProgressBoard
from features_party.training_context import JobContext
from labeldp.errors import LabelDPError
from labeldp.learning.config import TrainingConfig
from labeldp.learning.loop import EpochReport
from labeldp.learning.regression import fit_regressor
from labeldp.schema import EpsilonPart, LabelRelease, LaplaceSpec, PrivacyAccounting, encode_payload, payload_digest
from labeldp.service.database import make_engine, make_session_factory
from labeldp.specs.base import LabelDomainSpec
from labeldp.storage import ObjectStore

N = 300
CONFIG = {"epochs": 5, "batch_size": 64, "learning_rate": 1e-3, "weight_decay": 0.0, "validation_fraction": 0.1,
          "seed": 1}


def _data(n: int = N) -> tuple[pa.Table, np.ndarray, list[str]]:
    rng = np.random.default_rng(0)
    x1, x2 = rng.normal(size=n), rng.uniform(-1, 1, size=n)
    ids = [f"r{i:04d}" for i in range(n)]
    return pa.table({"id": ids, "x1": x1, "x2": x2}), 3.0 * x1 - 2.0 * x2, ids


@pytest.fixture
def sessions(tmp_path: Path):
    engine = make_engine(f"sqlite:///{tmp_path / 'f.db'}")
    store.create_all(engine)
    table, y, ids = _data()
    (tmp_path / "tables").mkdir()
    pq.write_table(table, tmp_path / "tables" / "t.parquet")
    message = LabelRelease(
        release_id="rel",
        label_set_id="ls",
        feature_table="t",
        created_at=datetime.now(UTC),
        mechanism=LaplaceSpec(epsilon=1, domain=LabelDomainSpec(low=-10, high=10), step=0.01, scale=20),
        accounting=PrivacyAccounting(parts=[EpsilonPart(name="r", epsilon_micro=10)], total_epsilon_micro=10),
        row_count=N,
        payload_digest=payload_digest(ids, y),
        payload=encode_payload(ids, y),
    )
    factory = make_session_factory(engine)
    with factory.begin() as s:
        s.add(store.FeatureTable(name="t", id_column="id", n_rows=N, columns=[], path="tables/t.parquet"))
        s.add(
            store.Release(
                release_id="rel", label_set_id="ls", feature_table="t", mechanism_name="laplace",
                mechanism=message.mechanism.model_dump(mode="json"), prior=None,
                accounting=message.accounting.model_dump(mode="json"), total_epsilon_micro=10, row_count=N,
                created_at=message.created_at, body=message.model_dump_json().encode(), body_sha256="x",
            )
        )
    yield factory
    engine.dispose()


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _queue(factory: sessionmaker[Session], training_id: str, *, status: str = "queued", minute: int = 0,
           config: dict | None = None) -> None:
    with factory.begin() as s:
        s.add(
            store.Training(
                training_id=training_id, release_id="rel", feature_table="t", status=status, epoch=0,
                epochs=(config or CONFIG)["epochs"], history=[], config=config or CONFIG,
                created_at=T0 + timedelta(minutes=minute),
            )
        )


def _row(factory: sessionmaker[Session], training_id: str) -> store.Training:
    with factory() as s:
        row = s.get(store.Training, training_id)
        assert row is not None
        return row


def _models(factory: sessionmaker[Session]) -> int:
    with factory() as s:
        return int(s.scalar(select(func.count()).select_from(store.Model)) or 0)


# --------------------------------------------------------------------------- progress arithmetic


def test_live_progress_counts_batches_across_epochs_and_extrapolates_the_eta() -> None:
    live = LiveProgress(epochs=4)
    assert live.fraction() == 0.0 and live.eta_seconds(10.0) is None
    live.batches, live.first_batch_at = 10, 100.0
    live.epoch, live.batch = 1, 1  # batch 1 of epoch 2: 11 of 40 done
    assert live.fraction() == pytest.approx(11 / 40)
    # 10 batches after the first took 20 s: 2 s a batch, 29 to go
    assert live.eta_seconds(120.0) == pytest.approx(58.0)
    live.epoch, live.batch = 4, 0
    assert live.fraction() == 1.0 and live.eta_seconds(200.0) == 0.0


def test_board_reports_retry_after_from_the_running_training() -> None:
    board = ProgressBoard()
    assert board.retry_after_seconds(default=17) == 17
    board.start("a", epochs=2)
    board.batch("a", 1, 1, 5)
    assert board.retry_after_seconds(default=17) == 17  # one batch: no rate yet
    live = board._live["a"]
    live.first_batch_at -= 9.0  # nine seconds ago: ~3 s a batch after 4 more
    for step in range(2, 5):
        board.batch("a", 1, step, 5)
    assert 15 <= board.retry_after_seconds() <= 20  # 6 batches left at ~3 s
    board.request_cancel("a")
    assert board.cancel_requested("a")
    board.finish("a")
    assert board.get("a") is None and not board.cancel_requested("a")


def test_the_loop_reports_every_batch_to_a_batch_listener() -> None:
    table, y, _ids = _data(200)

    class Listener:
        def __init__(self) -> None:
            self.batches: list[tuple[int, int, int]] = []
            self.epochs: list[int] = []

        def __call__(self, report: EpochReport) -> None:
            self.epochs.append(report.epoch)

        def on_batch(self, epoch: int, step: int, steps: int) -> None:
            self.batches.append((epoch, step, steps))

    listener = Listener()
    config = TrainingConfig(epochs=2, batch_size=64, validation_fraction=0.1, seed=3, device="cpu", threads=1)
    fit_regressor(table.drop(["id"]), y, config, listener)
    # 180 training rows in batches of 64: 3 a epoch, in order, before each epoch's report
    assert listener.batches == [(e, s, 3) for e in (1, 2) for s in (1, 2, 3)]
    assert listener.epochs == [1, 2]


# --------------------------------------------------------------------------- cancel


def _ctx(factory: sessionmaker[Session], tmp_path: Path, board: ProgressBoard, statuses: list[str]) -> JobContext:
    return JobContext(
        session_factory=factory, data_dir=tmp_path, device="cpu", threads=1, on_status=statuses.append, board=board
    )


def test_a_running_training_stops_at_the_next_batch_and_leaves_no_model(sessions, tmp_path: Path) -> None:
    """Cancel lands during epoch 2: the training stops at that batch, writes no model file and no
    model row, keeps the epoch it finished, and says ``cancelled``."""
    seen: list[tuple[int, int]] = []

    class CancelInEpochTwo(ProgressBoard):
        def batch(self, training_id: str, epoch: int, step: int, steps: int) -> None:
            super().batch(training_id, epoch, step, steps)
            seen.append((epoch, step))
            if (epoch, step) == (2, 2):
                status, body = trainings.cancel_training(sessions, self, training_id)  # as the API does
                assert status == 202 and body["status"] == "cancelling"

    _queue(sessions, "t1")
    statuses: list[str] = []
    training_run.run_training(_ctx(sessions, tmp_path, CancelInEpochTwo(), statuses), "t1")

    row = _row(sessions, "t1")
    assert row.status == "cancelled" and row.finished_at is not None and row.model_id is None
    assert row.epoch == 1 and len(row.history) == 1
    assert seen[-1] == (2, 2)  # not one batch more
    assert _models(sessions) == 0 and list(tmp_path.glob("models/*")) == []
    assert statuses == ["running", "cancelled"]
    with pytest.raises(LabelDPError) as finished:
        trainings.cancel_training(sessions, ProgressBoard(), "t1")
    assert finished.value.status_code == 409 and finished.value.code == "training_finished"


def test_a_cancel_after_the_last_batch_still_wins_over_success(sessions, tmp_path: Path) -> None:
    """Another process marks the row cancelling once the last epoch is written: the worker must not
    record success (its final write is conditional on running) and removes the model file it saved."""

    class CancelAfterLastEpoch(ProgressBoard):
        def epoch(self, training_id: str, epoch: int) -> None:
            super().epoch(training_id, epoch)
            if epoch == CONFIG["epochs"]:
                with sessions.begin() as s:  # the cancel of another replica: no flag on this board
                    s.get(store.Training, training_id).status = "cancelling"

    _queue(sessions, "t1")
    training_run.run_training(_ctx(sessions, tmp_path, CancelAfterLastEpoch(), []), "t1")
    row = _row(sessions, "t1")
    assert row.status == "cancelled" and row.model_id is None
    assert _models(sessions) == 0 and list(tmp_path.glob("models/*")) == []


def test_a_queued_training_is_cancelled_at_once_and_never_runs(sessions, tmp_path: Path) -> None:
    _queue(sessions, "t1")
    status, body = trainings.cancel_training(sessions, ProgressBoard(), "t1")
    assert status == 200 and body["status"] == "cancelled" and body["queue_position"] is None
    statuses: list[str] = []
    training_run.run_training(_ctx(sessions, tmp_path, ProgressBoard(), statuses), "t1")
    row = _row(sessions, "t1")
    assert row.status == "cancelled" and row.started_at is None and statuses == []
    with pytest.raises(LabelDPError) as missing:
        trainings.cancel_training(sessions, ProgressBoard(), "nope")
    assert missing.value.status_code == 404


def test_a_restart_finishes_what_its_dead_worker_was_cancelling(sessions) -> None:
    """Leases replace "mark running as interrupted at start": only an expired lease is acted on."""
    _queue(sessions, "c", status="cancelling")
    _queue(sessions, "q", minute=2)
    with sessions.begin() as s:
        s.get(store.Training, "c").lease_expires_at = datetime.now(UTC) - timedelta(seconds=1)
    assert leases.reap_expired(sessions, 3, "{}") == []
    assert (_row(sessions, "c").status, _row(sessions, "q").status) == ("cancelled", "queued")


# --------------------------------------------------------------------------- the bounded queue


def test_a_full_queue_is_a_429_with_retry_after_and_creates_nothing(sessions, tmp_path: Path) -> None:
    request = training_request.TrainingRequest(release_id="rel", epochs=1)
    for _ in range(2):
        trainings.create_training(sessions, _objects(tmp_path), request, queue_max=2, retry_after=lambda: 42)
    with sessions() as s:
        before = s.scalar(select(func.count()).select_from(store.Training))
    with pytest.raises(LabelDPError) as full:
        trainings.create_training(sessions, _objects(tmp_path), request, queue_max=2, retry_after=lambda: 42)
    assert full.value.status_code == 429 and full.value.code == "training_queue_full"
    assert full.value.headers == {"Retry-After": "42"}
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(store.Training)) == before == 2
    # a running training is not in the queue; a cancelled one leaves it
    with sessions() as s:
        first = s.scalars(select(store.Training.training_id).order_by(store.Training.created_at)).first()
    trainings.cancel_training(sessions, ProgressBoard(), first)
    assert trainings.create_training(sessions, _objects(tmp_path), request, queue_max=2).status_code == 202


def test_queue_positions_follow_creation_order(sessions) -> None:
    for k, name in enumerate(["a", "b", "c"]):
        _queue(sessions, name, minute=k)
    _queue(sessions, "running", status="running", minute=-1)

    def positions() -> list[int | None]:
        with sessions() as s:
            return [trainings.training_status(s, s.get(store.Training, t), ProgressBoard())["queue_position"]
                    for t in ("running", "a", "b", "c")]

    assert positions() == [None, 1, 2, 3]
    trainings.cancel_training(sessions, ProgressBoard(), "a")
    assert positions() == [None, None, 1, 2]


def test_status_shows_live_batches_elapsed_and_eta_while_running(sessions) -> None:
    _queue(sessions, "t1", status="running")
    with sessions.begin() as s:
        s.get(store.Training, "t1").started_at = datetime.now(UTC) - timedelta(seconds=30)
    board = ProgressBoard()
    board.start("t1", epochs=5)
    board.batch("t1", 1, 1, 4)
    board._live["t1"].first_batch_at -= 8.0
    board.batch("t1", 2, 1, 4)  # epoch 2 running, 5 of 20 batches done
    with sessions() as s:
        progress = trainings.training_status(s, s.get(store.Training, "t1"), board)["progress"]
    assert (progress["epoch"], progress["batch"], progress["batches"]) == (1, 1, 4)
    assert progress["fraction"] == pytest.approx(5 / 20)
    assert 29 <= progress["elapsed_seconds"] <= 60
    assert progress["eta_seconds"] == pytest.approx(2.0 * 15, rel=0.1)  # 2 s a batch, 15 to go


# --------------------------------------------------------------------------- lists


def _page_through(list_page, limit: int) -> list[dict]:  # type: ignore[no-untyped-def]
    items, cursor = [], None
    while True:
        page = list_page(limit, cursor)
        assert len(page["items"]) <= limit
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items


def test_trainings_list_in_creation_order_with_filters(sessions) -> None:
    for k in range(5):
        _queue(sessions, f"t{k}", minute=k % 3 * 10 + k)  # creation order differs from id order
    _queue(sessions, "same-a", minute=100)
    _queue(sessions, "same-b", minute=100)  # a tie on created_at: the id decides
    trainings.cancel_training(sessions, ProgressBoard(), "t1")
    with sessions() as s:
        everything = _page_through(lambda limit, cursor: trainings.list_trainings(s, limit, cursor), 2)
        expected = [r.training_id for r in s.scalars(select(store.Training).order_by(store.Training.created_at,
                                                                                     store.Training.training_id))]
        assert [t["id"] for t in everything] == expected
        assert everything[0]["progress"]["elapsed_seconds"] is None and everything[0]["queue_position"] == 1
        assert [t["id"] for t in trainings.list_trainings(s, 10, None, status="cancelled")["items"]] == ["t1"]
        assert trainings.list_trainings(s, 10, None, release_id="other")["items"] == []
        for bad in (lambda: trainings.list_trainings(s, 10, None, status="done"),
                    lambda: trainings.list_trainings(s, 10, "garbage"),
                    lambda: trainings.list_trainings(s, 0, None)):
            with pytest.raises(LabelDPError) as refused:
                bad()
            assert refused.value.status_code == 422


def test_feature_tables_releases_and_models_page_through_once(sessions) -> None:
    with sessions.begin() as s:
        for k in range(4):
            s.add(store.FeatureTable(name=f"f{k}", id_column="id", n_rows=1, columns=[], path=f"tables/{k}",
                                     created_at=T0 + timedelta(seconds=k)))
        for k in range(3):
            s.add(store.Release(
                release_id=f"rel_{k}", label_set_id="ls", feature_table=None, mechanism_name="laplace",
                mechanism={"name": "laplace"}, prior=None, accounting={}, total_epsilon_micro=1, row_count=1,
                created_at=T0, received_at=T0 + timedelta(seconds=k), body=b"{}", body_sha256="x"))
        for k in range(3):
            s.add(store.Training(training_id=f"tm{k}", release_id="rel", feature_table="t", status="succeeded",
                                 epoch=1, epochs=1, history=[], config={}))
            s.add(store.Model(
                model_id=f"m{k}", training_id=f"tm{k}", release_id="rel", label_set_id="ls", feature_table="t",
                mechanism_name="laplace", mechanism_spec={"name": "laplace"}, total_epsilon_micro=1, accounting={},
                n_train=1, n_validation=0, train_loss=1.0, val_loss=None, device="cpu", epochs=1,
                architecture="mlp", path=f"models/{k}.pt", created_at=T0 + timedelta(seconds=k)))
    with sessions() as s:
        tables = _page_through(lambda limit, cursor: feature_tables.list_feature_tables(s, limit, cursor), 3)
        assert [t["name"] for t in tables] == ["f0", "f1", "f2", "f3", "t"]  # "t" was created now, after T0
        releases = _page_through(lambda limit, cursor: inbox.list_releases(s, limit, cursor), 2)
        assert [r["id"] for r in releases] == ["rel_0", "rel_1", "rel_2", "rel"]
        assert inbox.list_releases(s, 10, None, label_set_id="nobody")["items"] == []
        cards = _page_through(lambda limit, cursor: models.list_models(s, limit, cursor), 2)
        assert [c["id"] for c in cards] == ["m0", "m1", "m2"]
        assert cards[0]["training_id"] == "tm0" and cards[0]["epsilon"] == 1e-6


def test_the_queue_gauge_counts_the_catalogue_at_each_scrape(sessions) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from features_party.context import trainings_by_status
    from labeldp.service.metrics import StatusCounts

    registry = CollectorRegistry()
    registry.register(StatusCounts("labeldp_trainings_in_queue", "now", lambda: trainings_by_status(sessions),
                                   (store.QUEUED, store.RUNNING, store.CANCELLING)))

    def gauge() -> dict[str, float]:
        return {s: registry.get_sample_value("labeldp_trainings_in_queue", {"status": s}) or 0.0
                for s in ("queued", "running", "cancelling")}

    assert gauge() == {"queued": 0, "running": 0, "cancelling": 0}
    for minute, status in enumerate(("queued", "queued", "running", "succeeded", "failed")):
        _queue(sessions, f"t{minute}", status=status, minute=minute)
    assert gauge() == {"queued": 2, "running": 1, "cancelling": 0}  # finished ones are not in the queue
    assert b"labeldp_trainings_in_queue" in generate_latest(registry)


def _objects(folder: Path) -> ObjectStore:
    """The object store a service with no LABELDP_STORAGE_URL has: its data folder."""
    return ObjectStore.from_url(str(folder))
