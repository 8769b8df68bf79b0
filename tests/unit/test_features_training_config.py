"""One training configuration: what ``POST /v1/trainings`` with no options runs is the benchmark's default.

The README's default-configuration numbers come from the benchmark's ``default`` column:
Liu & Huang's recipe, trained by the ``private`` learner (10 % held out, the default
``LearningConfig``). A training requested with no options must run exactly that.
"""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from tests.local_settings import TRANSPORT_KEY
from tests.unit.test_features_app import API_KEY, AUTH, PUBLIC_KEY, SMALL_CSV, post_release, release_body, upload

from features_party import store
from features_party.app import create_app
from features_party.training_request import TrainingOrder, TrainingRequest
from labeldp.learning.config import DEFAULT_OPTIONS, PLAIN, LearningConfig, TrainingConfig, TrainingOptions
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
