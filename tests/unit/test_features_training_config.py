"""One training configuration: what ``POST /v1/trainings`` with no options runs is the benchmark's default.

The README's default-configuration numbers come from the benchmark's ``default`` column:
Liu & Huang's recipe, trained by the ``private`` learner (10 % held out, the default
``LearningConfig``). A training requested with no options must run exactly that.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from tests.local_settings import TRANSPORT_KEY
from tests.unit.test_features_app import API_KEY, AUTH, PUBLIC_KEY, SMALL_CSV, post_release, release_body, upload

from features_party import store
from features_party.app import create_app
from features_party.context import training_processes
from features_party.training_request import TrainingOrder, TrainingRequest
from labeldp.learning import config as config_module
from labeldp.learning.config import (
    DEFAULT_OPTIONS,
    MAX_BATCH_SIZE,
    MIN_STEPS_PER_EPOCH,
    PLAIN,
    PROCESS_BATCH_SCALE,
    LearningConfig,
    TrainingConfig,
    TrainingOptions,
    recipe_for_processes,
)
from labeldp.service.settings import Settings
from labeldp_research import utility


def benchmark_default(seed: int) -> tuple[TrainingConfig, LearningConfig]:
    """What the benchmark's default column trains with on Housing and the simulated sets."""
    plans = utility.default_plans(housing=None)
    recipe = plans["simulated_linear"].training
    assert recipe == utility.LIU_HUANG_TRAINING
    learner = utility.learners_for("regression", ["private"])[0]
    assert isinstance(learner, utility.PrivateRegressor)
    config = utility.training_config(recipe, seed=seed, device="cpu", threads=0)
    config = config.replace(validation_fraction=learner.validation_fraction)
    return config, LearningConfig(**dict(learner.learning))


def test_post_trainings_with_no_options_runs_the_benchmarks_default_recipe(tmp_path: Path) -> None:
    settings = Settings(
        features_database_url=f"sqlite:///{tmp_path / 'f.db'}", features_data_dir=tmp_path / "data",
        features_api_key=API_KEY, inbox_transport_key=TRANSPORT_KEY, signing_public_keys=PUBLIC_KEY, device="cpu",
        training_threads=1,
    )
    with TestClient(create_app(settings)) as client:
        assert upload(client, "clicks", SMALL_CSV).status_code == 201
        assert post_release(client, release_body(["007", "008", "009"], [1.0, 2.0, 3.0])).status_code == 201
        response = client.post("/v1/trainings", json={"release_id": "rel-1"}, headers=AUTH)
        assert response.status_code == 202, response.text
        with client.app.state.ctx.sessions() as session:
            stored = dict(session.get(store.Training, response.json()["id"]).config)

    order = TrainingOrder.of_stored(stored)
    assert order.stored() == stored  # the one conversion, both ways
    assert order.forward_correction is False
    expected_config, expected_learning = benchmark_default(seed=7)
    service_config = TrainingConfig(**{**order.options.options(), "seed": 7}, device="cpu", threads=0)
    assert service_config == expected_config
    assert order.learning == expected_learning


def test_the_one_definition_is_shared() -> None:
    # Every consumer is the one model or derives from it: no second list of fields or defaults.
    assert issubclass(TrainingRequest, TrainingOptions) and issubclass(TrainingConfig, TrainingOptions)
    assert issubclass(utility.TrainingRecipe, TrainingOptions)
    assert issubclass(TrainingRequest, LearningConfig)  # the learning fields, declared once
    request = TrainingRequest(release_id="r")
    assert request.options() == DEFAULT_OPTIONS.model_dump() == TrainingConfig().options()
    assert utility.LIU_HUANG_TRAINING.options() == DEFAULT_OPTIONS.model_dump()
    assert utility.PrivateRegressor().validation_fraction == DEFAULT_OPTIONS.validation_fraction
    assert utility.LIU_HUANG_TRAINING.describe() == (
        "Adam, lr 0.001, lr ×0.1 after epoch 25, 50 epochs, batch 256, weight decay 0.0001 (Liu & Huang §5.3)"
    )


def test_a_training_row_converts_once_both_ways() -> None:
    """The row's JSON is the request's options, forward_correction and the resolved learning fields
    (none for a classification); rows from before learning options or schedules train plainly at a
    constant rate (planted once: reading a row without learning fields as the default learning
    made the legacy assertion fail)."""
    request = TrainingRequest(release_id="r", epochs=3, shrinkage=0.25, forward_correction=False)
    regression = TrainingOrder.of_request(request, request.learning())
    stored = regression.stored()
    assert list(stored) == [*TrainingOptions.model_fields, "forward_correction", *LearningConfig.model_fields]
    assert stored["shrinkage"] == 0.25 and stored["epochs"] == 3
    assert TrainingOrder.of_stored(stored) == regression
    classification = TrainingOrder.of_request(TrainingRequest(release_id="r", forward_correction=True), None)
    assert "debias" not in classification.stored()
    assert TrainingOrder.of_stored(classification.stored()) == classification
    legacy = TrainingOrder.of_stored({"epochs": 2, "batch_size": 8, "learning_rate": 0.01, "seed": 4})
    assert legacy.learning is None and legacy.forward_correction is False
    assert legacy.options.schedule == "none" and legacy.options.epochs == 2
    partial = TrainingOrder.of_stored({"epochs": 2, "debias": "predictions"})
    assert partial.learning == LearningConfig(debias="predictions", shrinkage=PLAIN.shrinkage, select_epoch=False)


def test_several_processes_step_a_larger_batch_at_a_square_root_rate() -> None:
    scaled = recipe_for_processes(DEFAULT_OPTIONS, 2, 10**7)
    assert (scaled.batch_size, scaled.learning_rate) == (256 * PROCESS_BATCH_SCALE, 1e-3 * PROCESS_BATCH_SCALE**0.5)
    assert scaled.model_dump(exclude={"batch_size", "learning_rate"}) == DEFAULT_OPTIONS.model_dump(
        exclude={"batch_size", "learning_rate"}
    )
    # Fewer rows: the batch halves until an epoch still holds MIN_STEPS_PER_EPOCH steps.
    half = 256 * PROCESS_BATCH_SCALE // 2
    fewer = recipe_for_processes(DEFAULT_OPTIONS, 2, half * MIN_STEPS_PER_EPOCH)
    assert (fewer.batch_size, fewer.learning_rate) == (half, 1e-3 * (PROCESS_BATCH_SCALE / 2) ** 0.5)
    assert recipe_for_processes(DEFAULT_OPTIONS, 2, 512 * MIN_STEPS_PER_EPOCH - 1) == DEFAULT_OPTIONS
    # One process, or a request that chose its batch or its rate, keeps the options as they are.
    assert recipe_for_processes(DEFAULT_OPTIONS, 1, 10**9) == DEFAULT_OPTIONS
    chosen = TrainingOptions(batch_size=512)
    assert recipe_for_processes(chosen, 4, 10**9, {"batch_size"}) == chosen
    assert recipe_for_processes(DEFAULT_OPTIONS, 4, 10**9, {"learning_rate"}) == DEFAULT_OPTIONS
    # Never past the largest batch a request may ask for.
    big = TrainingOptions(batch_size=16_384)
    assert recipe_for_processes(big, 2, 10**12).batch_size == MAX_BATCH_SIZE


def test_training_processes_counts_every_host() -> None:
    base = {"features_database_url": "sqlite://", "training_workers": 3}
    assert training_processes(Settings(**base)) == 3
    assert training_processes(Settings(**base, torchrun_rdzv_endpoint="h:29400",
                                       torchrun_peer_names="b, c")) == 9
    assert training_processes(Settings(**base, torchrun_rdzv_endpoint="h:29400",
                                       torchrun_peer_dirs="/w/b")) == 6


@pytest.mark.parametrize(("workers", "options", "expected"), [
    (1, {}, (256, 1e-3)),
    (2, {}, (256 * PROCESS_BATCH_SCALE, 1e-3 * PROCESS_BATCH_SCALE**0.5)),
    (2, {"batch_size": 256}, (256, 1e-3)),
])
def test_a_training_queued_for_several_workers_stores_their_recipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, options: dict[str, int],
    expected: tuple[int, float],
) -> None:
    # A test-sized release: one step per epoch is enough for the scaled batch here.
    monkeypatch.setattr(config_module, "MIN_STEPS_PER_EPOCH", 1)
    n = 256 * PROCESS_BATCH_SCALE
    ids = [f"{i:05d}" for i in range(n)]
    csv = "id,x\n" + "".join(f"{i},{k}\n" for k, i in enumerate(ids))
    settings = Settings(
        features_database_url=f"sqlite:///{tmp_path / 'f.db'}", features_data_dir=tmp_path / "data",
        features_api_key=API_KEY, inbox_transport_key=TRANSPORT_KEY, signing_public_keys=PUBLIC_KEY, device="cpu",
        training_threads=1, training_workers=workers, training_in_process_worker=False,
    )
    with TestClient(create_app(settings)) as client:
        assert upload(client, "clicks", csv).status_code == 201
        assert post_release(client, release_body(ids, np.zeros(n))).status_code == 201
        response = client.post("/v1/trainings", json={"release_id": "rel-1", **options}, headers=AUTH)
        assert response.status_code == 202, response.text
        with client.app.state.ctx.sessions() as session:
            stored = TrainingOrder.of_stored(dict(session.get(store.Training, response.json()["id"]).config))
    assert (stored.options.batch_size, stored.options.learning_rate) == pytest.approx(expected)
