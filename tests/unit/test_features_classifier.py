"""Classification on categorical releases: the same MLP body with a softmax head.

A release is stored here directly (``store_categorical_release``) under a real categorical
spec of the registry: training reads its ``classes`` and, for forward correction, the
transition matrix the mechanism rebuilt from the spec states (one matrix for every row,
so a split-prior release, whose first-stage rows follow plain RR, has none).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker
from tests.local_settings import TRANSPORT_KEY

from features_party import store
from features_party.app import create_app
from features_party.training_fit import fit_for_release
from labeldp.errors import LabelDPError
from labeldp.learning.classifier import cross_entropy, fit_classifier, forward_corrected
from labeldp.learning.config import TrainingConfig
from labeldp.learning.networks import MLPClassifier, MLPRegressor
from labeldp.learning.persistence import TrainedClassifier, TrainedRegressor, load_model
from labeldp.learning.regression import fit_regressor
from labeldp.learning.tasks import CLASSIFICATION, REGRESSION, LabelTask, check_transition_matrix, to_class_indices
from labeldp.mechanisms.categorical import RandomizedResponse, RRWithPrior, SplitPriorRandomizer
from labeldp.schema import (
    EpsilonPart,
    LabelRelease,
    LaplaceSpec,
    PrivacyAccounting,
    encode_payload,
    payload_digest,
)
from labeldp.service.settings import Settings
from labeldp.signing import generate_keypair
from labeldp.specs.base import LabelDomainSpec, MechanismSpecBase

API_KEY = "test-features-key"
_, PUBLIC_KEY = generate_keypair()  # the advertiser's public key the inbox trusts
AUTH = {"Authorization": f"Bearer {API_KEY}"}
CLASSES = ["cat", "dog", "emu"]


def rr_spec(epsilon: float) -> MechanismSpecBase:
    """A real randomized-response spec over ``CLASSES``: every row follows one matrix."""
    return RandomizedResponse(epsilon, CLASSES).fit_to().to_spec()


def split_spec(epsilon: float, n_rows: int) -> MechanismSpecBase:
    """A real RRWithPrior spec with Alg. 2's split prior: its rows follow two matrices."""
    split = SplitPriorRandomizer(RRWithPrior, epsilon, CLASSES, prior_fraction=0.1)
    split.privatize(np.arange(n_rows, dtype=np.float64) % len(CLASSES), np.random.default_rng(0))
    return split.to_spec()


def rr_matrix(epsilon: float, k: int) -> np.ndarray:
    """Randomized response: keep with e^ε/(e^ε+k−1), else each other class with 1/(e^ε+k−1)."""
    off = 1.0 / (np.exp(epsilon) + k - 1)
    return np.full((k, k), off) + np.eye(k) * (np.exp(epsilon) * off - off)


def three_classes(n: int = 1500, seed: int = 0) -> tuple[pa.Table, np.ndarray]:
    """Separable: the class is the argmax of three linear scores, shifted by a categorical column."""
    rng = np.random.default_rng(seed)
    x1 = rng.normal(size=n)
    x2 = rng.normal(size=n)
    group = rng.choice(["a", "b"], size=n)
    shift = np.where(group == "a", 0.5, -0.5)
    scores = np.stack([x1 + shift, -x1 + x2, -x2 - shift], axis=1)
    y = scores.argmax(axis=1)
    return pa.table({"x1": x1, "x2": x2, "group": pa.array(group, pa.string())}), y


def flip(y: np.ndarray, matrix: np.ndarray, seed: int) -> np.ndarray:
    """Sample ŷ ~ T[y, ·] (test-side noise; the real mechanisms live with the labels party)."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(matrix[y], axis=1)
    return np.minimum((rng.uniform(size=(len(y), 1)) > cdf).sum(axis=1), matrix.shape[0] - 1)


FAST = dict(epochs=12, batch_size=64, learning_rate=1e-2, seed=0, device="cpu", threads=1)


# --------------------------------------------------------------------------- training functions


def test_fit_classifier_learns_separable_three_classes() -> None:
    table, y = three_classes()
    reports = []
    model = fit_classifier(table, y.astype(np.float64), 3, TrainingConfig(**FAST), reports.append, classes=CLASSES)
    assert isinstance(model, TrainedClassifier) and model.task == CLASSIFICATION
    assert [r.epoch for r in reports] == list(range(1, 13))
    assert all(r.train_accuracy is not None and r.val_accuracy is not None for r in reports)
    assert model.history_[-1] == reports[-1].as_history()
    assert reports[-1].val_accuracy > 0.9  # chance is about 1/3
    assert reports[-1].train_loss < reports[0].train_loss and reports[-1].val_loss < 0.5 * np.log(3)
    assert np.mean(model.predict(table) == np.asarray(CLASSES, dtype=object)[y]) > 0.9
    assert "Linear 3 -> softmax" in model.architecture and "cross-entropy" in model.architecture


def test_predict_proba_rows_are_distributions_and_predict_is_their_argmax() -> None:
    table, y = three_classes(300)
    model = fit_classifier(table, y, 3, TrainingConfig(**{**FAST, "epochs": 2}), classes=CLASSES)
    probs = model.predict_proba(table)
    assert probs.shape == (300, 3) and probs.dtype == np.float64
    assert np.all(probs >= 0)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert list(model.predict(table)) == [CLASSES[i] for i in probs.argmax(axis=1)]
    empty = model.predict_proba(table.slice(0, 0))
    assert empty.shape == (0, 3)


def test_forward_correction_recovers_true_classes_under_asymmetric_noise() -> None:
    """Class 0 is released as class 1 with probability 0.6: plain cross-entropy then learns to say 1
    on class-0 rows, the forward-corrected loss still says 0 (Patrini et al. 2017)."""
    table, y = three_classes(2400, seed=1)
    matrix = np.array([[0.4, 0.6, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    noisy = flip(y, matrix, seed=2)
    config = TrainingConfig(**{**FAST, "epochs": 10, "batch_size": 128})
    plain = fit_classifier(table, noisy, 3, config)
    corrected = fit_classifier(table, noisy, 3, config, transition_matrix=matrix)
    truth, zero = y.astype(str), y == 0
    plain_recall = float(np.mean(plain.predict(table)[zero] == "0"))
    corrected_recall = float(np.mean(corrected.predict(table)[zero] == "0"))
    assert corrected_recall > 0.9 and plain_recall < 0.5, (plain_recall, corrected_recall)
    assert np.mean(corrected.predict(table) == truth) > 0.9
    assert corrected.forward_correction and not plain.forward_correction
    assert "forward correction" in corrected.architecture


def test_forward_corrected_loss_matches_numpy_and_reduces_to_cross_entropy() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 3))
    y = np.array([0, 1, 2, 2, 1, 0])
    matrix = rr_matrix(1.0, 3)
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    expected = -np.log((p @ matrix)[np.arange(6), y])
    got = forward_corrected(torch.tensor(matrix))(torch.tensor(logits), torch.tensor(y))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10)
    identity = forward_corrected(torch.eye(3, dtype=torch.float64))(torch.tensor(logits), torch.tensor(y))
    np.testing.assert_allclose(identity.numpy(), cross_entropy(torch.tensor(logits), torch.tensor(y)).numpy())


def test_classifier_save_load_round_trip_and_regressor_files_still_load(tmp_path: Path) -> None:
    table, y = three_classes(300)
    config = TrainingConfig(**{**FAST, "epochs": 2})
    clf = fit_classifier(table, y, 3, config, classes=CLASSES, transition_matrix=rr_matrix(2.0, 3))
    clf.save(tmp_path / "c.pt")
    for loaded in (load_model(tmp_path / "c.pt"), TrainedClassifier.load(tmp_path / "c.pt")):
        assert isinstance(loaded, TrainedClassifier) and loaded.classes_ == CLASSES
        np.testing.assert_allclose(loaded.predict_proba(table), clf.predict_proba(table), atol=1e-6)
        assert loaded.history_ == clf.history_ and loaded.forward_correction
    # the file holds plain types only: weights_only loading is what load_model does
    assert torch.load(tmp_path / "c.pt", weights_only=True)["task"] == CLASSIFICATION
    with pytest.raises(ValueError):
        TrainedRegressor.load(tmp_path / "c.pt")

    reg = fit_regressor(table, y.astype(float), config)
    reg.save(tmp_path / "r.pt")
    state = torch.load(tmp_path / "r.pt", weights_only=True)
    del state["task"]  # a file written before classifiers existed
    torch.save(state, tmp_path / "old.pt")
    for path in ("r.pt", "old.pt"):
        loaded = load_model(tmp_path / path)
        assert isinstance(loaded, TrainedRegressor) and loaded.task == REGRESSION
        np.testing.assert_allclose(loaded.predict(table), reg.predict(table), atol=1e-5)


def test_networks_share_one_body() -> None:
    reg, clf = MLPRegressor(2, [2]), MLPClassifier(2, [2], 3)
    assert list(reg.state_dict()) == list(clf.state_dict())
    assert clf(torch.zeros(4, 2), torch.zeros(4, 1, dtype=torch.long)).shape == (4, 3)
    assert reg(torch.zeros(4, 2), torch.zeros(4, 1, dtype=torch.long)).shape == (4,)


def test_label_checks() -> None:
    np.testing.assert_array_equal(to_class_indices(np.array([0.0, 2.0, 1.0]), 3), [0, 2, 1])
    for bad in ([0.0, 3.0], [-1.0], [0.5], [np.nan]):
        with pytest.raises(ValueError) as info:
            to_class_indices(np.array(bad), 3)
        assert "0.5" not in str(info.value)  # messages quote no label value
    table, y = three_classes(30)
    with pytest.raises(ValueError):
        fit_classifier(table, y[:10], 3, TrainingConfig(device="cpu"))
    with pytest.raises(ValueError):
        fit_classifier(table, y, 1, TrainingConfig(device="cpu"))
    with pytest.raises(ValueError):
        fit_classifier(table, y, 3, TrainingConfig(device="cpu"), classes=["a", "a", "b"])
    check_transition_matrix(rr_matrix(1.0, 3), 3)
    for bad in (np.eye(2), np.full((3, 3), 0.5), [[1.5, -0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]):
        with pytest.raises(ValueError):
            check_transition_matrix(bad, 3)


def test_label_task_from_spec_objects_and_stored_dicts() -> None:
    spec = rr_spec(1.0)
    for source in (spec, spec.model_dump(mode="json")):
        task = LabelTask.of(source)
        assert task.task == CLASSIFICATION and task.classes == tuple(CLASSES) and task.n_classes == 3
        np.testing.assert_allclose(task.transition_matrix, rr_matrix(1.0, 3), rtol=1e-12)
    without = LabelTask.of(split_spec(1.0, 50))  # two stages: no one matrix for every row
    assert without.classes == tuple(CLASSES) and without.transition_matrix is None
    laplace = LaplaceSpec(epsilon=1.0, domain=LabelDomainSpec(low=0, high=1), step=0.01, scale=1.0)
    assert LabelTask.of(laplace).task == REGRESSION
    assert LabelTask.of(laplace.model_dump(mode="json")) == LabelTask(REGRESSION)


def test_fit_for_release_picks_the_task() -> None:
    table, y = three_classes(200)
    config = TrainingConfig(**{**FAST, "epochs": 1})
    task = LabelTask.of(split_spec(1.0, 200))
    assert isinstance(fit_for_release(task, table, y.astype(float), config), TrainedClassifier)
    assert isinstance(fit_for_release(LabelTask(REGRESSION), table, y.astype(float), config), TrainedRegressor)
    with pytest.raises(LabelDPError) as info:
        fit_for_release(task, table, y.astype(float) + 0.5, config)
    assert info.value.code == "invalid_class_labels"
    with pytest.raises(LabelDPError) as info:
        fit_for_release(task, table, y.astype(float), config, forward_correction=True)
    assert info.value.code == "forward_correction_unavailable"


# --------------------------------------------------------------------------- the service


@pytest.fixture
def client(tmp_path: Path, request: pytest.FixtureRequest):
    """The features app; ``indirect`` parametrization with True streams its trainings (LABELDP_TRAINING_STREAMING),
    with ``"torchrun"`` runs them as torchrun jobs of two workers (LABELDP_TRAINING_WORKERS=2)."""
    mode = getattr(request, "param", False)
    settings = Settings(
        features_database_url=f"sqlite:///{tmp_path / 'features.db'}",
        features_data_dir=tmp_path / "data",
        features_api_key=API_KEY, inbox_transport_key=TRANSPORT_KEY,
        signing_public_keys=PUBLIC_KEY,
        device="cpu",
        training_threads=1,  # a shared CPU: more threads only contend
        training_streaming=mode is True,
        training_workers=2 if mode == "torchrun" else 1,
        training_join_partition_rows=1024,  # 1200 rows: the streamed join runs on two partitions
    )
    with TestClient(create_app(settings)) as c:
        yield c


def store_categorical_release(
    sessions: sessionmaker[Session], release_id: str, ids: list[str], labels: np.ndarray, spec: MechanismSpecBase
) -> None:
    """Store a release as the inbox would, with ``spec`` as its mechanism (see the module docstring)."""
    labels = np.asarray(labels, dtype=np.float64)
    body = LabelRelease(
        release_id=release_id,
        label_set_id="ls",
        feature_table="animals",
        created_at=datetime(2024, 1, 1, tzinfo=UTC),
        mechanism=spec,
        accounting=PrivacyAccounting(
            parts=[EpsilonPart(name="randomizer", epsilon_micro=2_000_000)], total_epsilon_micro=2_000_000
        ),
        row_count=len(ids),
        payload_digest=payload_digest(ids, labels),
        payload=encode_payload(ids, labels),
    )
    with sessions.begin() as s:
        s.add(
            store.Release(
                release_id=release_id, label_set_id="ls", feature_table="animals", mechanism_name=spec.name,
                mechanism=spec.model_dump(mode="json"), prior=None,
                accounting=body.accounting.model_dump(mode="json"), total_epsilon_micro=2_000_000,
                row_count=len(ids), created_at=body.created_at, body=body.model_dump_json().encode(),
                body_sha256=release_id,
            )
        )


def wait_for(client: TestClient, training_id: str, timeout: float = 45.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(f"/v1/trainings/{training_id}", headers=AUTH).json()
        if body["status"] in ("succeeded", "failed"):
            return body
        time.sleep(0.05)
    raise AssertionError("training did not finish in time")


@pytest.fixture
def animals(client: TestClient) -> dict:
    """A feature table and an RR(ε=2) release of its 3-class labels (a real randomized-response spec)."""
    table, y = three_classes(1200, seed=3)
    ids = [f"a{i:05d}" for i in range(table.num_rows)]
    cols = {name: table.column(name).to_pylist() for name in table.column_names}
    lines = ["id,x1,x2,group"] + [
        f"{ids[i]},{cols['x1'][i]:.6f},{cols['x2'][i]:.6f},{cols['group'][i]}" for i in range(len(ids))
    ]
    response = client.post(
        "/v1/feature-tables", params={"name": "animals"}, content=("\n".join(lines) + "\n").encode(),
        headers={**AUTH, "content-type": "text/csv"},
    )
    assert response.status_code == 201
    matrix = rr_matrix(2.0, 3)
    noisy = flip(y, matrix, seed=4)
    spec = rr_spec(2.0)
    np.testing.assert_allclose(LabelTask.of(spec).transition_matrix, matrix, rtol=1e-12)  # what it was drawn from
    store_categorical_release(client.app.state.ctx.sessions, "rel-cat", ids, noisy.astype(np.float64), spec)
    return {"ids": ids, "y": y, "noisy": noisy, "rows": cols}


@pytest.mark.parametrize("client", [False, True], ids=["in_memory", "streamed"], indirect=True)
@pytest.mark.parametrize("forward_correction", [False, True])
def test_categorical_release_trains_a_classifier_end_to_end(
    client: TestClient, animals: dict, forward_correction: bool
) -> None:
    """In memory and streamed from staged row groups (LABELDP_TRAINING_STREAMING; docs/architecture.md,
    "Training at scale"), a categorical release trains a classifier that learns the true classes."""
    response = client.post(
        "/v1/trainings",
        json={"release_id": "rel-cat", "epochs": 8, "batch_size": 64, "learning_rate": 0.01, "seed": 0,
              "forward_correction": forward_correction},
        headers=AUTH,
    )
    assert response.status_code == 202
    training = wait_for(client, response.json()["id"])
    assert training["status"] == "succeeded", training["error"]
    last = training["history"][-1]
    assert {"train_loss", "val_loss", "train_accuracy", "val_accuracy"} <= set(last)

    card = client.get(f"/v1/models/{training['model_id']}", headers=AUTH).json()
    assert card["task"] == "classification" and card["classes"] == CLASSES
    assert card["mechanism"] == "randomized_response" and card["epsilon"] == 2.0
    assert card["metrics"]["val_loss"] == last["val_loss"]
    assert card["metrics"]["val_accuracy"] == last["val_accuracy"]
    # ŷ agrees with y w.p. e²/(e²+2) ≈ 0.79, the ceiling for accuracy on privatized labels
    assert 0.6 < card["metrics"]["val_accuracy"] < 0.9
    assert "cross-entropy" in card["metrics_note"]
    assert ("forward correction" in card["metrics_note"]) is forward_correction
    assert "softmax" in card["architecture"]
    assert ("forward correction" in card["architecture"]) is forward_correction  # what was trained, not asked

    out = client.post(f"/v1/models/{training['model_id']}/predict", json={"ids": animals["ids"]}, headers=AUTH).json()
    assert out["classes"] == CLASSES
    assert len(out["predictions"]) == len(animals["ids"]) and set(out["predictions"]) <= set(CLASSES)
    probs = np.array(out["probabilities"])
    assert probs.shape == (len(animals["ids"]), 3)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-9)
    assert out["predictions"] == [CLASSES[i] for i in probs.argmax(axis=1)]
    truth = np.asarray(CLASSES, dtype=object)[animals["y"]]
    assert np.mean(np.array(out["predictions"], dtype=object) == truth) > 0.85  # true classes, from noisy labels
    streamed = client.app.state.ctx.settings.training_streaming
    assert client.app.state.ctx.runner.ctx.join_partition_rows == 1024
    data_dir = client.app.state.ctx.data_dir
    assert (data_dir / "work").is_dir() is streamed and not list(data_dir.glob("work/*"))  # staged, then removed

    rows = client.post(
        f"/v1/models/{training['model_id']}/predict",
        json={"rows": [{"x1": 2.0, "x2": 0.5, "group": "a"}, {"x1": None, "x2": None, "group": None}]},
        headers=AUTH,
    ).json()
    assert len(rows["predictions"]) == 2 and rows["classes"] == CLASSES
    empty = client.post(f"/v1/models/{training['model_id']}/predict", json={"ids": []}, headers=AUTH).json()
    assert empty == {"predictions": [], "probabilities": [], "classes": CLASSES}


@pytest.mark.parametrize("client", ["torchrun"], indirect=True)
def test_a_categorical_release_trains_as_a_torchrun_job_of_two_workers(client: TestClient, animals: dict) -> None:
    """LABELDP_TRAINING_WORKERS=2: the classifier trains as a torchrun job (docs/architecture.md, "Training
    at scale"), its card says so, and it learns the true classes from the noisy ones."""
    response = client.post(
        "/v1/trainings", json={"release_id": "rel-cat", "epochs": 8, "batch_size": 64, "learning_rate": 0.01,
                               "seed": 0, "forward_correction": True}, headers=AUTH,
    )
    assert response.status_code == 202
    training = wait_for(client, response.json()["id"], timeout=120)
    assert training["status"] == "succeeded", training["error"]
    assert len(training["history"]) == 8 and "val_accuracy" in training["history"][-1]
    card = client.get(f"/v1/models/{training['model_id']}", headers=AUTH).json()
    assert card["task"] == "classification" and card["runtime"]["workers"] == 2
    out = client.post(f"/v1/models/{training['model_id']}/predict", json={"ids": animals["ids"]}, headers=AUTH).json()
    truth = np.asarray(CLASSES, dtype=object)[animals["y"]]
    assert np.mean(np.array(out["predictions"], dtype=object) == truth) > 0.85


def test_forward_correction_request_needs_one_transition_matrix(client: TestClient, animals: dict) -> None:
    """A split-prior release's rows follow two laws: forward correction by one matrix is refused."""
    spec = split_spec(2.0, len(animals["ids"]))
    sessions = client.app.state.ctx.sessions
    store_categorical_release(sessions, "rel-split", animals["ids"], animals["noisy"].astype(float), spec)
    response = client.post("/v1/trainings", json={"release_id": "rel-split", "forward_correction": True}, headers=AUTH)
    assert response.status_code == 422 and response.json()["code"] == "forward_correction_unavailable"


def test_learning_options_are_refused_for_categorical_releases(client: TestClient, animals: dict) -> None:
    """debias / shrinkage / select_epoch are regression options; asking for them on classes is a 422."""
    for option in ({"debias": "predictions"}, {"shrinkage": 0.5}, {"select_epoch": False}):
        response = client.post("/v1/trainings", json={"release_id": "rel-cat", **option}, headers=AUTH)
        assert response.status_code == 422 and response.json()["code"] == "learning_unavailable", option
    response = client.post("/v1/trainings", json={"release_id": "rel-cat", "epochs": 1, "seed": 0}, headers=AUTH)
    training = wait_for(client, response.json()["id"])
    card = client.get(f"/v1/models/{training['model_id']}", headers=AUTH).json()
    assert card["learning"] is None and card["training"]["optimizer"] == "adam"


def test_out_of_range_class_labels_fail_the_training_without_values(client: TestClient, animals: dict) -> None:
    labels = animals["noisy"].astype(float)
    labels[7] = 3.0  # not a class index of a 3-class spec
    spec = rr_spec(2.0)
    store_categorical_release(client.app.state.ctx.sessions, "rel-oob", animals["ids"], labels, spec)
    response = client.post("/v1/trainings", json={"release_id": "rel-oob", "epochs": 1}, headers=AUTH)
    training = wait_for(client, response.json()["id"])
    assert training["status"] == "failed" and training["model_id"] is None
    assert training["error"]["code"] == "invalid_class_labels" and "3.0" not in json.dumps(training["error"])
