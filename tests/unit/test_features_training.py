"""Training as plain functions (no HTTP): the same code trains private and non-private models."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from features_party import checkpoints, store, training_fit, training_run
from features_party.training_context import JobContext
from labeldp.learning.config import TrainingConfig
from labeldp.learning.device import resolve_device
from labeldp.learning.networks import MLPRegressor
from labeldp.learning.persistence import TrainedRegressor
from labeldp.learning.preprocessing import Preprocessor
from labeldp.learning.regression import fit_regressor
from labeldp.schema import (
    EpsilonPart,
    LabelRelease,
    LaplaceSpec,
    PrivacyAccounting,
    encode_payload,
    payload_digest,
)
from labeldp.service.database import make_engine, make_session_factory
from labeldp.specs.base import LabelDomainSpec


def linear_data(n: int = 2000, seed: int = 0) -> tuple[pa.Table, np.ndarray]:
    rng = np.random.default_rng(seed)
    x1 = rng.normal(size=n)
    x2 = rng.uniform(-1, 1, size=n)
    group = rng.choice(["a", "b", "c"], size=n)
    effect = np.select([group == "a", group == "b"], [1.0, -2.0], 0.0)
    y = 3.0 * x1 - 2.0 * x2 + effect + 0.5
    return pa.table({"x1": x1, "x2": x2, "group": pa.array(group, pa.string())}), y


def test_fit_regressor_learns_a_linear_function() -> None:
    table, y = linear_data()
    reports = []
    model = fit_regressor(
        table, y, TrainingConfig(epochs=15, batch_size=64, learning_rate=1e-2, seed=3, device="cpu"), reports.append
    )
    assert [r.epoch for r in reports] == list(range(1, 16))
    assert model.n_train_ == 1800 and model.n_validation_ == 200
    assert model.device_ == "cpu"
    assert len(model.history_) == 15
    final_val = model.history_[-1]["val_loss"]
    assert final_val < 0.02 * float(np.var(y))
    assert model.history_[-1]["train_loss"] < model.history_[0]["train_loss"]
    assert np.mean((model.predict(table) - y) ** 2) < 0.02 * float(np.var(y))


def test_seed_makes_training_reproducible_and_save_load_round_trips(tmp_path: Path) -> None:
    table, y = linear_data(400)
    config = TrainingConfig(epochs=2, batch_size=32, seed=7, device="cpu")
    a = fit_regressor(table, y, config)
    b = fit_regressor(table, y, config)
    assert a.history_ == b.history_
    np.testing.assert_array_equal(a.predict(table), b.predict(table))

    a.save(tmp_path / "m.pt")
    loaded = TrainedRegressor.load(tmp_path / "m.pt")
    np.testing.assert_allclose(loaded.predict(table), a.predict(table), rtol=1e-6, atol=1e-6)
    assert loaded.history_ == a.history_ and loaded.n_train_ == a.n_train_


def test_no_validation_split_reports_no_val_loss() -> None:
    table, y = linear_data(100)
    model = fit_regressor(table, y, TrainingConfig(epochs=1, validation_fraction=0.0, seed=1, device="cpu"))
    assert model.n_validation_ == 0 and model.n_train_ == 100
    assert model.history_[0]["val_loss"] is None


def test_preprocessor_missing_values_and_unknown_categories() -> None:
    train = pa.table({"num": pa.array([1.0, 3.0, None]), "cat": pa.array(["x", "y", None])})
    pre = Preprocessor.fit(train)
    assert pre.numeric_columns == ["num"] and pre.means == [2.0] and pre.stds == [1.0]
    assert pre.categorical_columns == ["cat"] and pre.vocabularies == [{"x": 1, "y": 2}]

    numeric, categorical = pre.transform(pa.table({"cat": pa.array(["y", "zzz", None])}))
    assert numeric.dtype == np.float32 and categorical.dtype == np.int64
    np.testing.assert_array_equal(numeric[:, 0], [0.0, 0.0, 0.0])  # absent column -> mean
    np.testing.assert_array_equal(categorical[:, 0], [2, 0, 0])  # unknown and missing -> 0

    model = MLPRegressor(len(pre.numeric_columns), pre.vocab_sizes)
    assert model.embeddings[0].num_embeddings == 3  # vocab + unknown


def test_fit_rejects_bad_inputs() -> None:
    table, y = linear_data(10)
    with pytest.raises(ValueError):
        fit_regressor(table, y[:5], TrainingConfig(device="cpu"))
    with pytest.raises(ValueError):
        fit_regressor(table, np.full(10, np.nan), TrainingConfig(device="cpu"))


def test_resolve_device() -> None:
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") in ("cpu", "cuda")
    with pytest.raises(ValueError):
        resolve_device("tpu")


def _queued_training(tmp_path: Path) -> tuple[Any, Any]:
    """A database with a 300-row feature table, its release and one queued training ``t1``: (engine, sessions)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'f.db'}")
    store.create_all(engine)
    sessions = make_session_factory(engine)
    table, y = linear_data(300)
    ids = [f"r{i:04d}" for i in range(300)]
    (tmp_path / "tables").mkdir()
    pq.write_table(table.add_column(0, "id", pa.array(ids)), tmp_path / "tables" / "t.parquet")
    message = LabelRelease(
        release_id="rel",
        label_set_id="ls",
        feature_table="t",
        created_at=datetime.now(UTC),
        mechanism=LaplaceSpec(epsilon=1, domain=LabelDomainSpec(low=-10, high=10), step=0.01, scale=20),
        accounting=PrivacyAccounting(parts=[EpsilonPart(name="r", epsilon_micro=10)], total_epsilon_micro=10),
        row_count=300,
        payload_digest=payload_digest(ids, y),
        payload=encode_payload(ids, y),
    )
    with sessions.begin() as s:
        s.add(store.FeatureTable(name="t", id_column="id", n_rows=300, columns=[], path="tables/t.parquet"))
        s.add(
            store.Release(
                release_id="rel", label_set_id="ls", feature_table="t", mechanism_name="laplace",
                mechanism=message.mechanism.model_dump(mode="json"), prior=None,
                accounting=message.accounting.model_dump(mode="json"), total_epsilon_micro=10, row_count=300,
                created_at=message.created_at, body=message.model_dump_json().encode(), body_sha256="x",
            )
        )
        s.add(
            store.Training(
                training_id="t1", release_id="rel", feature_table="t", status="queued", epoch=0, epochs=5,
                history=[], config={"epochs": 5, "batch_size": 64, "learning_rate": 1e-3, "weight_decay": 0.0,
                                    "validation_fraction": 0.1, "seed": 1},
            )
        )
    return engine, sessions


def test_job_writes_progress_after_each_epoch(tmp_path: Path) -> None:
    """A stop request after epoch 1 leaves that epoch's progress in the database: it is written as it happens;
    the training goes back to the queue and the next run resumes it."""
    engine, sessions = _queued_training(tmp_path)
    statuses: list[str] = []
    stop = threading.Event()
    stop.set()
    ctx = JobContext(session_factory=sessions, data_dir=tmp_path, device="cpu", on_status=statuses.append)
    training_run.run_training(ctx, "t1", stop)

    # A stopping worker hands the training back to the queue (no longer "failed / interrupted"):
    # the epoch it finished is in the row, its checkpoint on disk, the claim not counted.
    with sessions() as s:
        row = s.get(store.Training, "t1")
        assert row.status == "queued" and row.error is None and row.owner is None and row.attempt == 0
        assert row.epoch == 1 and len(row.history) == 1 and row.history[0]["val_loss"] is not None
        assert row.device == "cpu"
    assert statuses == ["running", "queued"]
    assert (tmp_path / "checkpoints" / "t1.pt").is_file()

    # The same job without a stop request resumes after that epoch and runs to a model on disk.
    training_run.run_training(ctx, "t1", threading.Event())
    with sessions() as s:
        row = s.get(store.Training, "t1")
        assert row.status == "succeeded" and row.epoch == 5 and len(row.history) == 5 and row.attempt == 1
        model = s.get(store.Model, row.model_id)
        assert (tmp_path / model.path).exists() and model.n_train == 270
    assert not (tmp_path / "checkpoints" / "t1.pt").exists()
    # a row queued without learning options (as before they existed) trains plainly: last epoch, no debiasing
    trained = TrainedRegressor.load(tmp_path / model.path)
    assert trained.postprocessing_.debias == "none" and trained.selection_["selected_epoch"] == 5
    assert trained.config_["resumed_after_epoch"] == 1
    engine.dispose()


def test_a_training_above_the_stream_rows_streams_by_itself(tmp_path: Path) -> None:
    """With one worker and streaming off, a release or feature table of more than ``stream_above_rows`` rows
    trains streamed (record 0036): its checkpoint says so. At the threshold it trains in memory, and the
    streamed checkpoint is not resumed by the other loop. Planted once: ``rows >= stream_above_rows``
    streamed the 300-row training at 300 and this test failed."""
    engine, sessions = _queued_training(tmp_path)
    stop = threading.Event()
    stop.set()  # hand the training back after its first epoch, with a checkpoint
    streamed = JobContext(session_factory=sessions, data_dir=tmp_path, device="cpu", stream_above_rows=299)
    training_run.run_training(streamed, "t1", stop)
    assert checkpoints.load(streamed.store, "t1")["path"] == "streamed"
    in_memory = JobContext(session_factory=sessions, data_dir=tmp_path, device="cpu", stream_above_rows=300)
    training_run.run_training(in_memory, "t1", stop)
    state = checkpoints.load(in_memory.store, "t1")
    assert state["path"] == "in_memory" and state["epoch"] == 1  # started over, not resumed at epoch 2
    engine.dispose()


def test_default_training_config_is_the_benchmarked_recipe_and_keeps_plain_history() -> None:
    config = TrainingConfig()
    assert (config.optimizer, config.schedule, config.step_epoch, config.step_factor) == ("adam", "step", 25, 0.1)
    assert (config.epochs, config.batch_size, config.learning_rate, config.weight_decay) == (50, 256, 1e-3, 1e-4)
    table, y = linear_data(200)
    model = fit_regressor(table, y, TrainingConfig(epochs=2, seed=1, device="cpu", threads=1))
    assert set(model.history_[0]) == {"epoch", "train_loss", "val_loss"}


def test_a_release_s_prior_reaches_the_regressor_s_anchor() -> None:
    """``fit_for_release`` passes the release's prior (as stored: JSON) to the learning: on features
    without signal the model predicts the private mean that uses it (issue 27)."""
    from labeldp.epsilon import to_micro_floor
    from labeldp.learning.config import LearningConfig
    from labeldp.learning.debiasing import label_law, private_mean
    from labeldp.learning.tasks import LabelTask
    from labeldp.mechanisms import LabelDomain
    from labeldp.release.randomizer import randomize

    rng = np.random.default_rng(7)
    n = 1_200
    y = rng.beta(2, 5, size=n)
    features = pa.table({f"z{i}": rng.normal(size=n) for i in range(10)})
    out = randomize(y, LabelDomain("real", 0.0, 1.0), "rp_with_prior", to_micro_floor(0.1), rng)
    assert out.prior is not None
    prior = out.prior.model_dump(mode="json")
    spec = out.mechanism.model_dump(mode="json")
    config = TrainingConfig(epochs=3, batch_size=64, validation_fraction=0.2, seed=3, device="cpu", threads=1)
    model = training_fit.fit_for_release(
        LabelTask.of(spec), features, out.labels, config, spec=spec, learning=LearningConfig(), prior=prior
    )
    law = label_law(spec)
    np.testing.assert_allclose(model.predict(features), private_mean(out.labels, law, prior=prior), rtol=1e-12)
    assert private_mean(out.labels, law, prior=prior) != private_mean(out.labels, law)
