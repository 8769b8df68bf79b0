"""One training configuration: what ``POST /v1/trainings`` with no options runs is the benchmark's default.

The README's default-configuration numbers come from the benchmark's ``default`` column:
Liu & Huang's recipe, trained by the ``private`` learner (10 % held out, the default
``LearningConfig``). A training requested with no options must run exactly that.
"""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from tests.unit.test_features_app import API_KEY, AUTH, PUBLIC_KEY, SMALL_CSV, post_release, release_body, upload

from features_party import store
from features_party.app import create_app
from features_party.jobs import TrainingRequest
from labeldp.learning.config import DEFAULT_OPTIONS, LearningConfig, TrainingConfig, TrainingOptions
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
        features_api_key=API_KEY, signing_public_keys=PUBLIC_KEY, device="cpu", training_threads=1,
    )
    with TestClient(create_app(settings)) as client:
        assert upload(client, "clicks", SMALL_CSV).status_code == 201
        assert post_release(client, release_body(["007", "008", "009"], [1.0, 2.0, 3.0])).status_code == 201
        response = client.post("/v1/trainings", json={"release_id": "rel-1"}, headers=AUTH)
        assert response.status_code == 202, response.text
        with client.app.state.ctx.sessions() as session:
            stored = dict(session.get(store.Training, response.json()["id"]).config)

    learning = LearningConfig(stored.pop("debias"), stored.pop("shrinkage"), stored.pop("select_epoch"))
    assert stored.pop("forward_correction") is False
    expected_config, expected_learning = benchmark_default(seed=7)
    service_config = TrainingConfig(**{**stored, "seed": 7}, device="cpu", threads=0)
    assert service_config == expected_config
    assert learning == expected_learning


def test_the_one_definition_is_shared() -> None:
    # Every consumer is the one model or derives from it: no second list of fields or defaults.
    assert issubclass(TrainingRequest, TrainingOptions) and issubclass(TrainingConfig, TrainingOptions)
    assert issubclass(utility.TrainingRecipe, TrainingOptions)
    request = TrainingRequest(release_id="r")
    assert request.options() == DEFAULT_OPTIONS.model_dump() == TrainingConfig().options()
    assert utility.LIU_HUANG_TRAINING.options() == DEFAULT_OPTIONS.model_dump()
    assert utility.PrivateRegressor().validation_fraction == DEFAULT_OPTIONS.validation_fraction
    assert utility.LIU_HUANG_TRAINING.describe() == (
        "Adam, lr 0.001, lr ×0.1 after epoch 25, 50 epochs, batch 256, weight decay 0.0001 (Liu & Huang §5.3)"
    )
