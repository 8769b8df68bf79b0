"""Data-parallel training through real torchrun processes (gloo on the CPU), against one process."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from tests.training.data import write_table

from features_party import models, store, training_run
from features_party.training_context import JobContext
from labeldp.learning.config import DEFAULT_LEARNING, TrainingConfig
from labeldp.learning.debiasing import label_law
from labeldp.learning.distributed import CHECKPOINT_FILE, PROGRESS_FILE, TorchrunFailed, run_torchrun
from labeldp.learning.loop import EpochReport, make_plan
from labeldp.learning.persistence import TrainedRegressor
from labeldp.learning.regression import fit_staged_regressor
from labeldp.learning.staging import stage_release
from labeldp.learning.streamed import fit_release_streamed
from labeldp.schema import EpsilonPart, LabelRelease, LaplaceSpec, PrivacyAccounting, encode_payload, payload_digest
from labeldp.service.database import make_engine, make_session_factory
from labeldp.specs.base import LabelDomainSpec

N = 4000
SPEC = LaplaceSpec(epsilon=4, domain=LabelDomainSpec(low=-12, high=12), step=0.01, scale=6)
QUIET = LaplaceSpec(epsilon=40, domain=LabelDomainSpec(low=-12, high=12), step=0.01, scale=0.6)
CONFIG = TrainingConfig(epochs=6, batch_size=128, seed=21, device="cpu", threads=1, row_group_rows=250)


def privatized(y: np.ndarray, spec: LaplaceSpec = SPEC) -> np.ndarray:
    """Laplace noise of the spec's scale (the labels here span [-12, 12]: sensitivity 24, so ε is nominal)."""
    noise = np.random.default_rng(9).laplace(scale=spec.scale, size=len(y))
    return np.round(np.clip(y, -12, 12) + noise, 2)


def mse(model: TrainedRegressor, features: Any, y: np.ndarray) -> float:
    return float(np.mean((model.predict(features) - y) ** 2))


def test_one_torchrun_worker_is_the_in_process_training_and_selects_identically(tmp_path: Path) -> None:
    """The worker code path with world size 1 reproduces the in-process model and its private selection exactly."""
    ids, y, features = write_table(tmp_path / "f.parquet", N)
    labels = privatized(y)
    spec = SPEC.model_dump(mode="json")
    plan = make_plan(N, CONFIG)
    is_val = np.zeros(N, bool)
    is_val[plan.val_idx] = True
    staged = stage_release(tmp_path / "f.parquet", "id", ids, labels, labels, is_val, tmp_path / "stage", 250)
    run = CONFIG.replace(seed=plan.seed)
    local = fit_staged_regressor(staged, label_law(spec), run, plan, DEFAULT_LEARNING)
    job = run_torchrun(staged, spec, label_law(spec), run, DEFAULT_LEARNING, 1, tmp_path)
    assert np.allclose(job.predict(features), local.predict(features), rtol=0, atol=1e-6)
    assert job.selection_ is not None and local.selection_ is not None
    for key in ("selected_epoch", "shrinkage"):
        assert job.selection_[key] == local.selection_[key]
    assert np.allclose(
        [h["selection_loss"] for h in job.history_], [h["selection_loss"] for h in local.history_], rtol=1e-9
    )


def test_two_torchrun_workers_match_one_process_within_tolerance(tmp_path: Path) -> None:
    """2 gloo processes, each on half the row groups with half the batch: the same quality as one
    process on the same seed and data; rank 0 relays every epoch and writes the checkpoint.

    The workers see the rows in another order than one process (each its share of row
    groups), so the match is statistical, not bitwise: test MSE within 25 % (one process
    and two differed by 13 % when this was written; the exact path is the test above),
    the last training loss within 5 %, predictions correlated above 0.99.
    """
    ids, y, features = write_table(tmp_path / "f.parquet", N)
    labels = privatized(y, QUIET)  # little noise: the two trainings should converge to the same function
    spec = QUIET.model_dump(mode="json")
    config = CONFIG.replace(epochs=10)
    one = fit_release_streamed(tmp_path / "f.parquet", "id", ids, labels, spec, config, tmp_path / "one")
    reports: list[EpochReport] = []
    two = fit_release_streamed(
        tmp_path / "f.parquet", "id", ids, labels, spec, config, tmp_path / "two", on_epoch=reports.append, workers=2
    )
    assert [r.epoch for r in reports] == list(range(1, config.epochs + 1))
    assert all(r.val_loss is not None and r.selection_loss is not None for r in reports)
    mse_one, mse_two = mse(one, features, y), mse(two, features, y)
    assert abs(mse_two - mse_one) <= 0.25 * mse_one, (mse_one, mse_two)
    last_one, last_two = one.history_[-1]["train_loss"], two.history_[-1]["train_loss"]
    assert abs(last_two - last_one) <= 0.05 * last_one, (last_one, last_two)
    assert np.corrcoef(one.predict(features), two.predict(features))[0, 1] > 0.99
    assert two.n_train_ == one.n_train_ and two.n_validation_ == one.n_validation_ == N // 10
    assert two.config_["workers"] == 2 and two.config_["rows_per_second"] > 0
    checkpoint = torch.load(tmp_path / "two" / CHECKPOINT_FILE, weights_only=True)
    assert checkpoint["epoch"] == config.epochs and checkpoint["world"] == 2
    assert not list((tmp_path / "two").glob("*.tmp"))


def _service_state(tmp_path: Path, labels: np.ndarray, ids: list[str], prior: Any = None) -> Any:
    engine = make_engine(f"sqlite:///{tmp_path / 'f.db'}")
    store.create_all(engine)
    sessions = make_session_factory(engine)
    message = LabelRelease(
        release_id="rel", label_set_id="ls", feature_table="t", created_at=datetime.now(UTC), mechanism=SPEC,
        accounting=PrivacyAccounting(parts=[EpsilonPart(name="r", epsilon_micro=4_000_000)],
                                     total_epsilon_micro=4_000_000),
        row_count=len(ids), payload_digest=payload_digest(ids, labels), payload=encode_payload(ids, labels),
    )
    with sessions.begin() as s:
        s.add(store.FeatureTable(name="t", id_column="id", n_rows=len(ids), columns=[], path="tables/t.parquet"))
        s.add(store.Release(
            release_id="rel", label_set_id="ls", feature_table="t", mechanism_name="laplace",
            mechanism=SPEC.model_dump(mode="json"), prior=prior, accounting=message.accounting.model_dump(mode="json"),
            total_epsilon_micro=4_000_000, row_count=len(ids), created_at=message.created_at,
            body=message.model_dump_json().encode(), body_sha256="x",
        ))
        for name in ("memory", "torchrun"):
            s.add(store.Training(
                training_id=name, release_id="rel", feature_table="t", status="queued", epoch=0, epochs=4, history=[],
                config={"epochs": 4, "batch_size": 128, "seed": 4, "debias": "predictions", "shrinkage": "auto",
                        "select_epoch": True},
            ))
    return engine, sessions


def test_the_service_runs_a_training_as_a_torchrun_job_when_workers_exceed_one(tmp_path: Path) -> None:
    (tmp_path / "tables").mkdir()
    ids, y, _ = write_table(tmp_path / "tables" / "t.parquet", 2000)
    labels = privatized(y)
    # A histogram prior of the labels (as a release's ε₁ would buy): its mean joins the anchor on both paths.
    grid = np.linspace(-12, 12, 25)
    counts = np.bincount(np.abs(np.clip(y, -12, 12)[:, None] - grid).argmin(axis=1), minlength=grid.size)
    prior = {"source": "laplace_histogram", "grid": grid.tolist(), "probs": (counts / y.size).tolist(), "epsilon": 2}
    engine, sessions = _service_state(tmp_path, labels, ids.to_pylist(), prior)
    for name, workers in (("memory", 1), ("torchrun", 2)):
        ctx = JobContext(session_factory=sessions, data_dir=tmp_path, device="cpu", workers=workers)
        training_run.run_training(ctx, name, threading.Event())
    with sessions() as s:
        cards = {}
        for name in ("memory", "torchrun"):
            row = s.get(store.Training, name)
            assert row.status == "succeeded", row.error
            assert row.epoch == 4 and len(row.history) == 4
            model_row = s.get(store.Model, row.model_id)
            loaded = models.load_model(tmp_path / model_row.path)
            cards[name] = models.model_card(model_row, row, loaded).model_dump()
    assert cards["memory"]["runtime"]["workers"] == 1 and cards["torchrun"]["runtime"]["workers"] == 2
    assert cards["torchrun"]["runtime"]["device"] == "cpu" and cards["torchrun"]["runtime"]["precision"] == "fp32"
    assert cards["torchrun"]["learning"]["selected_epoch"] is not None
    assert cards["torchrun"]["n_validation"] == cards["memory"]["n_validation"] == 200
    # The release's prior reached the torchrun job's anchor as it reached the in-memory one (planted once:
    # jobs not passing it to the streamed path).
    anchors = [cards[name]["learning"]["private_mean"] for name in ("memory", "torchrun")]
    assert anchors[0] is not None and anchors[1] == pytest.approx(anchors[0], rel=1e-9)
    # The card's true-label error reaches a torchrun training's card as the in-memory one's (issue 26, item 5).
    true_label = [cards[name]["metrics"]["true_label"] for name in ("memory", "torchrun")]
    assert true_label[0] is not None and true_label[1] is not None, true_label
    assert true_label[1]["n_test"] == true_label[0]["n_test"] == 200
    assert true_label[1]["private_mean"] == pytest.approx(anchors[1], rel=1e-12)
    assert not list((tmp_path / "work").iterdir())  # the scratch folder is removed after the job
    assert pq.read_metadata(tmp_path / "tables" / "t.parquet").num_rows == 2000
    engine.dispose()


def test_a_failing_torchrun_job_raises_and_keeps_its_log_tail(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ids, y, _ = write_table(tmp_path / "f.parquet", 300)
    plan = make_plan(300, CONFIG)
    is_val = np.zeros(300, bool)
    is_val[plan.val_idx] = True
    staged = stage_release(tmp_path / "f.parquet", "id", ids, y, y, is_val, tmp_path / "stage", 100)
    staged.train_path.unlink()  # every worker fails to open its row groups
    with caplog.at_level(logging.ERROR, logger="labeldp.features"), pytest.raises(TorchrunFailed):
        run_torchrun(staged, None, label_law(None), CONFIG.replace(seed=plan.seed), DEFAULT_LEARNING, 2, tmp_path)
    assert "torchrun job exited with status 1" in caplog.text and "train.parquet" in caplog.text


def test_a_killed_worker_is_restarted_and_the_job_resumes_from_the_rank0_checkpoint(tmp_path: Path) -> None:
    """SIGKILL rank 1 after epoch 2: torchrun restarts the group, which resumes from rank 0's
    checkpoint and ends with the model of the uninterrupted job (data order comes from
    (seed, epoch), the optimizer and selection state from the checkpoint). Planted once:
    ignoring the checkpoint (the new group trains from scratch, to the same model) made the
    ``resumed_after_epoch`` assertion fail."""
    n = 20000
    ids, y, features = write_table(tmp_path / "f.parquet", n)
    labels = privatized(y)
    spec = SPEC.model_dump(mode="json")
    config = CONFIG.replace(epochs=5, row_group_rows=2000)
    plan = make_plan(n, config)
    is_val = np.zeros(n, bool)
    is_val[plan.val_idx] = True
    staged = stage_release(tmp_path / "f.parquet", "id", ids, labels, labels, is_val, tmp_path / "stage", 2000)
    run = config.replace(seed=plan.seed)
    (tmp_path / "whole").mkdir()
    whole = run_torchrun(staged, spec, label_law(spec), run, DEFAULT_LEARNING, 2, tmp_path / "whole")

    work = tmp_path / "killed"
    work.mkdir()
    reports: list[EpochReport] = []
    result: dict[str, TrainedRegressor] = {}
    job = threading.Thread(target=lambda: result.setdefault(
        "model", run_torchrun(staged, spec, label_law(spec), run, DEFAULT_LEARNING, 2, work, reports.append)
    ))
    job.start()
    deadline = time.monotonic() + 240
    # Watch rank 0's own progress file, not the relayed reports: the relay polls every 0.2 s,
    # and a fast machine trained to the end before a kill timed from the relay landed.
    progress = work / PROGRESS_FILE

    def epochs_done() -> int:
        return len(progress.read_text().splitlines()) if progress.exists() else 0

    while epochs_done() < 2 and time.monotonic() < deadline and job.is_alive():
        time.sleep(0.005)
    first_pid = int((work / "worker-1.pid").read_text())
    os.kill(first_pid, signal.SIGKILL)
    job.join(timeout=300)
    assert "model" in result, "the job did not finish after its worker was killed"
    assert int((work / "worker-1.pid").read_text()) != first_pid  # a new worker group ran
    assert [r.epoch for r in reports] == [1, 2, 3, 4, 5]  # each epoch relayed once
    resumed = result["model"]
    assert np.allclose(resumed.predict(features), whole.predict(features), rtol=1e-5, atol=1e-5)
    assert resumed.selection_ is not None and whole.selection_ is not None
    assert resumed.selection_["selected_epoch"] == whole.selection_["selected_epoch"]
    assert [h["epoch"] for h in resumed.history_] == [1, 2, 3, 4, 5]
    # Resumed from the checkpoint, not from scratch. 5: a group that dies after rank 0 saved the model is
    # restarted once more and resumes after the last epoch (seen in 1 of 12 runs, rank 1 aborting in gloo's
    # teardown, before the workers skipped the interpreter's teardown: distributed.exit_without_teardown).
    assert whole.config_["resumed_after_epoch"] == 0 and resumed.config_["resumed_after_epoch"] in (2, 3, 4, 5)


def _class_stage(tmp_path: Path, n: int) -> tuple[Any, np.ndarray, Any, Any]:
    """(ids, class indices 0..2, features, the stage with the class indices as targets)."""
    ids, y, features = write_table(tmp_path / "f.parquet", n)
    classes = np.digitize(y, [-1.0, 1.0]).astype(np.float64)
    plan = make_plan(n, CONFIG)
    is_val = np.zeros(n, bool)
    is_val[plan.val_idx] = True
    staged = stage_release(tmp_path / "f.parquet", "id", ids, classes, classes, is_val, tmp_path / "stage", 250)
    return ids, classes, features, staged


def test_one_torchrun_worker_trains_the_in_process_classifier_exactly(tmp_path: Path) -> None:
    """A categorical release through the worker code path (world size 1): the in-process classifier's
    probabilities, with forward correction through a transition matrix."""
    from labeldp.learning.classifier import fit_staged_classifier
    from labeldp.learning.distributed import run_torchrun_classifier

    _, _, features, staged = _class_stage(tmp_path, 2000)
    matrix = [[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]
    run = CONFIG.replace(epochs=3)
    plan = make_plan(2000, run)
    names = ["low", "mid", "high"]
    local = fit_staged_classifier(staged, 3, run, plan, classes=names, transition_matrix=matrix)
    job = run_torchrun_classifier(staged, 3, names, matrix, run, 1, tmp_path)
    assert job.classes_ == names and job.config_["transition_matrix"] == local.config_["transition_matrix"]
    assert np.allclose(job.predict_proba(features), local.predict_proba(features), rtol=0, atol=1e-6)
    assert [h["val_accuracy"] for h in job.history_] == [h["val_accuracy"] for h in local.history_]


def test_two_torchrun_workers_train_a_classifier_as_well_as_one_process(tmp_path: Path) -> None:
    """2 gloo processes on a categorical release: every epoch relayed with its accuracies, and the
    classifier as accurate as one streamed process on the same seed and data (within 3 points)."""
    from labeldp.learning.streamed import fit_classifier_streamed

    ids, classes, features, _ = _class_stage(tmp_path, N)
    config = CONFIG.replace(epochs=6)
    one = fit_classifier_streamed(tmp_path / "f.parquet", "id", ids, classes, 3, config, tmp_path / "one")
    reports: list[EpochReport] = []
    two = fit_classifier_streamed(tmp_path / "f.parquet", "id", ids, classes, 3, config, tmp_path / "two",
                                  reports.append, workers=2)
    assert [r.epoch for r in reports] == list(range(1, config.epochs + 1))
    assert all(r.train_accuracy is not None and r.val_accuracy is not None for r in reports)
    truth = classes.astype(np.int64)
    accuracy = [float(np.mean(m.predict_proba(features).argmax(axis=1) == truth)) for m in (one, two)]
    assert accuracy[1] > 0.85 and abs(accuracy[1] - accuracy[0]) <= 0.03, accuracy
    assert two.config_["workers"] == 2 and two.n_validation_ == one.n_validation_ == N // 10
