"""Debiasing, shrinkage and private model selection: post-processing of the one message."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pytest

from labeldp.learning.config import PLAIN, LearningConfig, TrainingConfig
from labeldp.learning.debiasing import (
    IDENTITY,
    Debias,
    LabelLaw,
    MonotoneLaw,
    PostProcessing,
    best_shrinkage,
    cautious_shrinkage,
    label_law,
    law_from_dict,
    prediction_parts,
    shrink,
)
from labeldp.learning.loop import _split, learning_rate_at
from labeldp.learning.persistence import TrainedRegressor, load_model
from labeldp.learning.regression import fit_private_and_oracle, fit_private_regressor, fit_regressor
from labeldp.learning.selection import Selector, private_reference
from labeldp.mechanisms import LabelDomain
from labeldp.mechanisms.additive import Exponential, Laplace
from labeldp.mechanisms.contract import Prior
from labeldp.mechanisms.rp_with_prior import RPWithPrior
from labeldp.mechanisms.rr_on_bins import RROnBins
from labeldp.mechanisms.unbiased import UnbiasedRandomizer
from labeldp.specs.categorical import RandomizedResponseSpec

DOMAIN = LabelDomain("real", 0.0, 5.0)


def prior(n: int = 101) -> tuple[np.ndarray, np.ndarray]:
    grid = np.linspace(0.0, 5.0, n)
    probs = np.exp(-0.5 * ((grid - 2.0) / 1.0) ** 2)
    return grid, probs / probs.sum()


def mechanisms(epsilon: float = 1.0) -> dict[str, object]:
    """Fitted mechanisms of each law kind (small lattices keep the tests fast)."""
    grid, probs = prior()
    return {
        "rr_on_bins": RROnBins(epsilon).fit_to(Prior(grid, probs)),
        "unbiased": UnbiasedRandomizer(epsilon, DOMAIN, grid_size=9).fit_to(),
        "rp_with_prior": RPWithPrior(epsilon, DOMAIN, step=5.0 / 200).fit_to(Prior(grid, probs)),
        "laplace": Laplace(epsilon, DOMAIN, variant="discrete", step=5.0 / 200).fit_to(),
        "laplace_unclipped": Laplace(epsilon, DOMAIN, variant="discrete", step=5.0 / 200, clip=False).fit_to(),
        "exponential": Exponential(epsilon, DOMAIN, variant="discrete", step=5.0 / 200).fit_to(),
    }


def exact_first_two_moments(mech: object, y: float) -> tuple[float, float]:
    """(E[ŷ | y], E[ŷ² | y]) from the mechanism's exact output law."""
    probs = mech.output_probabilities(y)
    if isinstance(mech, Laplace) and not mech.clip:
        idx = np.arange(-20_000, mech.n_steps_ + 20_001)  # unclipped: outputs beyond the domain
        probs = mech.output_probabilities(y, idx)
        values = mech.lattice_value(idx)
    elif isinstance(mech, (Laplace, Exponential)):
        values = mech.lattice_
    else:
        values = mech.outputs_
    return float(probs @ values), float(probs @ values**2)


# --------------------------------------------------------------------------- laws


@pytest.mark.parametrize("name", ["rr_on_bins", "unbiased", "rp_with_prior", "laplace_unclipped"])
def test_debiased_targets_have_the_right_conditional_mean(name: str) -> None:
    """E[(ŷ − b)/a | y] = t(y), from the exact output law, at labels across the domain."""
    mech = mechanisms()[name]
    law = label_law(mech.to_spec())
    assert law.linear
    for y in np.linspace(0.0, 5.0, 23):
        mean, _ = exact_first_two_moments(mech, y)
        assert law.mean(np.array([y]))[0] == pytest.approx(mean, abs=1e-9)
        assert (mean - law.b) / law.a == pytest.approx(law.target(np.array([y]))[0], abs=1e-8)
    if name == "rr_on_bins":
        np.testing.assert_array_equal(law.target(np.array([0.0, 5.0])), mech.outputs_[[0, -1]])
        assert (law.a, law.b) == (mech.debias_a_, mech.debias_b_)
    if name == "unbiased":
        assert (law.a, law.b) == (1.0, 0.0)


def test_debiased_targets_by_simulation() -> None:
    """The same, by Monte Carlo through privatize: mean of (ŷ − b)/a over many draws at fixed y."""
    mech = mechanisms()["rr_on_bins"]
    law = label_law(mech.to_spec())
    rng = np.random.default_rng(0)
    for y in (0.3, 2.0, 4.6):
        draws = law.debias_labels(mech.privatize(np.full(200_000, y), rng))
        se = draws.std() / np.sqrt(draws.size)
        assert abs(draws.mean() - law.target(np.array([y]))[0]) < 4 * se


@pytest.mark.parametrize("name", ["laplace", "exponential"])
def test_monotone_laws_invert_their_conditional_mean(name: str) -> None:
    mech = mechanisms()[name]
    law = label_law(mech.to_spec())
    assert isinstance(law, MonotoneLaw) and not law.linear
    lattice = mech.lattice_
    np.testing.assert_allclose(law.mean(lattice), mech.conditional_mean(lattice), atol=1e-12)
    assert np.all(np.diff(law.mean(lattice)) > 0)
    np.testing.assert_allclose(law.debias_predictions(mech.conditional_mean(lattice)), lattice, atol=1e-9)
    # beyond the range of m: clamped to the domain
    np.testing.assert_array_equal(law.debias_predictions(np.array([-100.0, 100.0])), [0.0, 5.0])
    restored = law_from_dict(law.to_dict())
    np.testing.assert_allclose(restored.debias_predictions(law.mean(lattice)), lattice, atol=1e-9)
    # targets of a non-linear law: its least-squares line, unbiased for the linearized mean
    y = np.array([2.5])
    assert law.target(y)[0] == pytest.approx((mech.conditional_mean(y)[0] - law.b) / law.a)


def test_label_law_from_stored_dicts_and_refusals() -> None:
    spec = mechanisms()["rr_on_bins"].to_spec()
    from_dict = label_law(spec.model_dump(mode="json"))
    assert (from_dict.a, from_dict.b, from_dict.low, from_dict.high) == (
        label_law(spec).a, label_law(spec).b, label_law(spec).low, label_law(spec).high,
    )
    assert label_law(None) is IDENTITY
    with pytest.raises(ValueError, match="categorical"):
        label_law(RandomizedResponseSpec(epsilon=1.0, classes=["a", "b"], keep_probability=0.7, other_probability=0.3))
    with pytest.raises(ValueError):
        label_law(spec.model_copy(update={"debias_a": spec.debias_a * 1.01}))  # inconsistent with ε
    with pytest.raises(ValueError):
        LabelLaw("bad", 0.0, 1.0, 0.0, 1.0)


def test_linear_law_restores_without_its_label_map() -> None:
    law = label_law(mechanisms()["rr_on_bins"].to_spec())
    restored = law_from_dict(law.to_dict())
    f = np.linspace(law.b, law.a * 5 + law.b, 7)
    np.testing.assert_array_equal(restored.debias_predictions(f), law.debias_predictions(f))
    assert law_from_dict(IDENTITY.to_dict()) is IDENTITY
    with pytest.raises(ValueError):
        restored.target(np.array([1.0]))


# --------------------------------------------------------------------------- the selection estimate


def synthetic_rr_release(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, LabelLaw, RROnBins]:
    """x ~ U(0, 1), y = 5·x² + noise clipped to the domain, ŷ from RR-on-Bins at ε = 1."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=n)
    y = np.clip(5 * x**2 + rng.normal(scale=0.5, size=n), 0.0, 5.0)
    mech = mechanisms()["rr_on_bins"]
    return x, y, mech.privatize(y, rng), label_law(mech.to_spec()), mech


def test_private_estimate_is_unbiased_up_to_a_model_independent_constant() -> None:
    """E[(g − ỹ)²] − E[(g − t(y))²] is the same for every predictor g.

    Exactly (from the output law, per row): E[(g − ỹ)² | x, y] = (g − t)² + Var(ỹ | y).
    By simulation: the private estimate minus the true-label MSE agrees across very
    different predictors within Monte Carlo error.
    """
    x, y, yhat, law, mech = synthetic_rr_release(200_000, 1)
    t = law.target(y)
    predictors = {
        "truth": 5 * x**2,
        "linear": 5 * x - 0.8,
        "constant": np.full_like(x, 2.0),
        "wild": 4 * np.sin(9 * x) + 2,
    }
    # exact per-row expectation of the estimate, from the mechanism's output law
    moments = np.array([exact_first_two_moments(mech, v) for v in mech.outputs_])  # per bin
    bins = mech.bin_index(y)
    var_debiased = (moments[bins, 1] - moments[bins, 0] ** 2) / law.a**2
    for g in predictors.values():
        expected = np.mean((g - t) ** 2 + var_debiased)
        exact_gap = expected - np.mean((g - t) ** 2)
        assert exact_gap == pytest.approx(np.mean(var_debiased), rel=1e-12)
    # Monte Carlo: the gap between estimate and true-label MSE does not depend on g
    ref = private_reference(law, yhat)
    gaps = {k: np.mean((g - ref) ** 2) - np.mean((g - t) ** 2) for k, g in predictors.items()}
    constant = float(np.mean(var_debiased))
    for name, g in predictors.items():
        # the gap's fluctuation: mean of (t − ỹ)² − E[...] − 2(g − t)(ỹ − t); sd from the rows
        terms = (t - ref) ** 2 + 2 * (g - t) * (t - ref)
        se = terms.std() / np.sqrt(terms.size)
        assert abs(gaps[name] - constant) < 4 * se, name
    # and it ranks the predictors as the true-label MSE does
    private_rank = sorted(predictors, key=lambda k: np.mean((predictors[k] - ref) ** 2))
    true_rank = sorted(predictors, key=lambda k: np.mean((predictors[k] - t) ** 2))
    assert private_rank == true_rank


def test_best_shrinkage_is_the_exact_minimizer_over_the_unit_interval() -> None:
    rng = np.random.default_rng(2)
    grid = np.linspace(0, 1, 2_001)
    for mix in (-0.5, 0.0, 0.3, 0.8, 1.0, 1.7):  # optimum below, inside and above [0, 1]
        p, d = rng.normal(size=(2, 200))
        r = mix * d + (1 - mix) * p + rng.normal(scale=0.1, size=200)
        lam, loss = best_shrinkage(p, d, r)
        losses = np.array([np.mean((g * d + (1 - g) * p - r) ** 2) for g in grid])
        assert lam == pytest.approx(grid[losses.argmin()], abs=1e-3)
        assert loss <= losses.min() + 1e-12
    assert best_shrinkage(p, p, r)[0] == 1.0  # no difference between the two: λ does not matter


def test_cautious_shrinkage_discounts_lambda_by_its_noise() -> None:
    """Clean references keep λ ≈ λ*; references that are mostly noise pull λ to the plain estimate."""
    rng = np.random.default_rng(3)
    p = rng.normal(size=2000)
    d = p + rng.normal(size=2000)
    truth = 0.6 * d + 0.4 * p
    lam, lam_star, _se = cautious_shrinkage(p, d, truth + rng.normal(scale=0.01, size=2000))
    assert lam_star == pytest.approx(0.6, abs=0.01) and lam == pytest.approx(lam_star, rel=1e-3)
    picks = [cautious_shrinkage(p, d, truth + rng.normal(scale=200.0, size=2000)) for _ in range(200)]
    lams = np.array([c[0] for c in picks])
    stars = np.array([c[1] for c in picks])
    assert np.all(lams <= stars + 1e-15)
    # the exact minimizer wanders over [0, 1]; the cautious one mostly stays at or near 0
    assert np.mean(stars > 0.5) > 0.3 and np.mean(lams > 0.5) < 0.1
    # where the plain estimate is best (λ° = 0), caution loses far less than chasing the noise
    noisy = [cautious_shrinkage(p, d, p + rng.normal(scale=200.0, size=2000)) for _ in range(200)]
    assert np.mean([c[0] ** 2 for c in noisy]) < 0.3 * np.mean([c[1] ** 2 for c in noisy])
    assert cautious_shrinkage(p, p, truth)[0] == 1.0  # nothing to choose between


def test_shrinkage_zero_and_one_are_plain_and_debiased() -> None:
    law = label_law(mechanisms()["rr_on_bins"].to_spec())
    f = np.linspace(0.5, 3.5, 13)  # reaches beyond t's range [low, high]
    plain, debiased = prediction_parts(f, law, "predictions")
    assert f.min() < law.low and f.max() > law.high
    np.testing.assert_array_equal(plain, np.clip(f, law.low, law.high))
    np.testing.assert_allclose(debiased, np.clip((f - law.b) / law.a, law.low, law.high))
    np.testing.assert_array_equal(shrink(plain, debiased, 0.0), plain)
    np.testing.assert_array_equal(shrink(plain, debiased, 1.0), debiased)
    np.testing.assert_allclose(shrink(plain, debiased, 0.25), 0.25 * debiased + 0.75 * plain)
    g = np.linspace(0.0, 5.0, 9)  # a model trained on debiased targets
    plain_t, debiased_t = prediction_parts(g, law, "targets")
    np.testing.assert_allclose(plain_t, np.clip(law.a * g + law.b, law.low, law.high))
    np.testing.assert_array_equal(debiased_t, np.clip(g, law.low, law.high))
    with pytest.raises(ValueError):
        shrink(plain, debiased, 1.5)


# --------------------------------------------------------------------------- training with a release


def table_of(x: np.ndarray, extra: int, seed: int) -> pa.Table:
    """x plus ``extra`` pure-noise columns (room to overfit)."""
    rng = np.random.default_rng(seed)
    columns = {"x": x}
    columns.update({f"z{i}": rng.normal(size=x.size) for i in range(extra)})
    return pa.table(columns)


FAST = dict(batch_size=64, learning_rate=1e-2, weight_decay=0.0, seed=0, device="cpu", threads=1)


def learn(debias: Debias, shrinkage: float | Literal["auto"], select_epoch: bool) -> LearningConfig:
    return LearningConfig(debias=debias, shrinkage=shrinkage, select_epoch=select_epoch)


def test_fit_private_regressor_plain_reproduces_fit_regressor_and_parts() -> None:
    x, _y, yhat, law, mech = synthetic_rr_release(800, 3)
    table = table_of(x, 0, 3)
    config = TrainingConfig(epochs=3, **FAST)
    reference = fit_regressor(table, yhat, config).predict(table)
    spec = mech.to_spec()
    np.testing.assert_allclose(fit_private_regressor(table, yhat, spec, config, PLAIN).predict(table), reference)
    lam0 = fit_private_regressor(table, yhat, spec, config, learn("predictions", 0.0, False))
    lam1 = fit_private_regressor(table, yhat, spec, config, learn("predictions", 1.0, False))
    np.testing.assert_allclose(lam0.predict(table), np.clip(reference, law.low, law.high))
    np.testing.assert_allclose(lam1.predict(table), law.debias_predictions(reference))
    plain, debiased = lam1.predict_parts(table)
    np.testing.assert_allclose(plain, lam0.predict(table))
    np.testing.assert_allclose(debiased, lam1.predict(table))
    # debiased targets = debiased predictions for an affine law (standardization absorbs the map)
    targets = fit_private_regressor(table, yhat, spec, config, learn("targets", 1.0, False))
    np.testing.assert_allclose(targets.predict(table), lam1.predict(table), atol=1e-4)
    assert lam1.selection_["selected_epoch"] == 3 and lam1.selection_["shrinkage"] == 1.0


def test_selection_picks_the_best_epoch_when_training_overfits_the_noise() -> None:
    """Few rows, noise columns, a large learning rate: the privatized validation loss turns up."""
    x, y, yhat, law, mech = synthetic_rr_release(400, 4)
    table = table_of(x, 20, 4)
    config = TrainingConfig(epochs=25, validation_fraction=0.3, **{**FAST, "learning_rate": 2e-2, "batch_size": 16})
    learning = LearningConfig(debias="predictions", shrinkage="auto", select_epoch=True)
    model = fit_private_regressor(table, yhat, mech.to_spec(), config, learning)
    estimates = [e["estimate"] for e in model.selection_["epochs"]]
    assert [h["selection_loss"] for h in model.history_] == pytest.approx(estimates)
    best = int(np.argmin(estimates)) + 1
    assert model.selection_["selected_epoch"] == best < config.epochs
    assert estimates[-1] > min(estimates)  # it did overfit
    # the returned weights are that epoch's: retraining for `best` epochs gives the same network
    shorter = TrainingConfig(**{**config.__dict__, "epochs": best})
    again = fit_private_regressor(table, yhat, mech.to_spec(), shorter, learn("predictions", 0.0, False))
    np.testing.assert_allclose(model.network_outputs(table), again.network_outputs(table), rtol=1e-5, atol=1e-6)
    last = fit_private_regressor(table, yhat, mech.to_spec(), config, learn("predictions", "auto", False))
    assert last.selection_["selected_epoch"] == config.epochs
    true_mse = lambda m: float(np.mean((m.predict(table) - law.target(y)) ** 2))  # noqa: E731
    assert true_mse(model) < true_mse(last)


def test_oracle_selection_uses_true_validation_labels(tmp_path: Path) -> None:
    x, y, yhat, law, mech = synthetic_rr_release(400, 5)
    table = table_of(x, 20, 5)
    config = TrainingConfig(epochs=15, validation_fraction=0.3, **{**FAST, "batch_size": 16})
    learning = LearningConfig()
    oracle = fit_private_regressor(table, yhat, mech.to_spec(), config, learning, oracle_validation_labels=y)
    private, oracle_pair = fit_private_and_oracle(table, yhat, mech.to_spec(), config, learning, y)
    assert oracle.selection_["criterion"] == "oracle" and private.selection_["criterion"] == "private"
    assert oracle_pair.selection_["selected_epoch"] == oracle.selection_["selected_epoch"]
    np.testing.assert_allclose(oracle_pair.predict(table), oracle.predict(table), rtol=1e-6)
    alone = fit_private_regressor(table, yhat, mech.to_spec(), config, learning)
    np.testing.assert_allclose(private.predict(table), alone.predict(table), rtol=1e-6)  # oracle labels never train
    # the oracle's estimate is the true validation MSE of its pick, which no private pick beats there
    _, val = _split(len(y), config.validation_fraction, np.random.default_rng(config.seed))
    assert oracle.n_validation_ == val.size == 120
    true_val_mse = lambda m: float(np.mean((m.predict(table)[val] - y[val]) ** 2))  # noqa: E731
    assert oracle.selection_["estimate"] == pytest.approx(true_val_mse(oracle))
    assert oracle.selection_["estimate"] == pytest.approx(min(e["estimate"] for e in oracle.selection_["epochs"]))
    assert true_val_mse(private) >= true_val_mse(oracle) - 1e-12
    private_val_mse = float(np.mean((private.predict(table)[val] - law.debias_labels(yhat[val])) ** 2))
    assert private.selection_["estimate"] == pytest.approx(private_val_mse)
    with pytest.raises(ValueError):
        fit_private_regressor(table, yhat, mech.to_spec(), config, learning, oracle_validation_labels=y[:10])
    # save/load keeps the post-processing (weights_only=True)
    private.save(tmp_path / "p.pt")
    loaded = load_model(tmp_path / "p.pt")
    assert isinstance(loaded, TrainedRegressor)
    np.testing.assert_allclose(loaded.predict(table), private.predict(table), rtol=1e-6, atol=1e-6)
    assert loaded.selection_ == private.selection_ and loaded.learning_ == learning.to_dict()


def test_monotone_law_models_save_and_load(tmp_path: Path) -> None:
    mech = mechanisms()["laplace"]
    rng = np.random.default_rng(6)
    x = rng.uniform(size=300)
    yhat = mech.privatize(np.clip(5 * x, 0, 5), rng)
    table = table_of(x, 0, 6)
    model = fit_private_regressor(table, yhat, mech.to_spec(), TrainingConfig(epochs=2, **FAST), LearningConfig())
    model.save(tmp_path / "m.pt")
    loaded = TrainedRegressor.load(tmp_path / "m.pt")
    np.testing.assert_allclose(loaded.predict(table), model.predict(table), rtol=1e-6, atol=1e-6)
    assert np.all((model.predict(table) >= 0) & (model.predict(table) <= 5))


def test_learning_config_validation_and_validation_split() -> None:
    for bad in (dict(debias="both"), dict(shrinkage=1.5), dict(shrinkage="half"), dict(shrinkage=True)):
        with pytest.raises(ValueError):
            LearningConfig(**bad)
    table, y = table_of(np.linspace(0, 1, 50), 0, 0), np.linspace(0, 1, 50)
    no_val = TrainingConfig(epochs=1, validation_fraction=0.0, **FAST)
    with pytest.raises(ValueError, match="validation"):
        fit_private_regressor(table, y, None, no_val, LearningConfig())
    model = fit_private_regressor(table, y, None, no_val, learn("predictions", 1.0, False))
    assert model.selection_ is None and model.postprocessing_.shrinkage == 1.0


def test_selector_with_fixed_shrinkage_and_no_debiasing() -> None:
    ref = np.array([0.0, 1.0, 2.0])
    s = Selector(IDENTITY, "none", ref, "auto", True)
    assert s.observe(1, np.array([0.0, 1.0, 3.0])) and not s.observe(2, np.array([5.0, 5.0, 5.0]))
    assert s.epoch_ == 1 and s.shrinkage_ == 0.0 and s.estimate_ == pytest.approx(1 / 3)
    fixed = Selector(IDENTITY, "predictions", ref, 0.5, False)
    fixed.observe(1, ref)
    fixed.observe(2, ref + 1)
    assert fixed.epoch_ == 2 and fixed.shrinkage_ == 0.5
    # "auto": the private criterion discounts λ by its noise, the oracle takes the exact best
    halving = LabelLaw("halving", 0.5, 0.0, -np.inf, np.inf)  # debiased = 2·plain
    outputs = np.ones(400)
    noisy = 1.0 + 0.3 + np.random.default_rng(4).normal(scale=30.0, size=400)
    private, oracle = (Selector(halving, "predictions", noisy, "auto", True, c) for c in ("private", "oracle"))
    plain, debiased = prediction_parts(outputs, halving, "predictions")
    assert private.score(outputs)[0] == cautious_shrinkage(plain, debiased, noisy)[0] == 0.0
    assert oracle.score(outputs)[0] == best_shrinkage(plain, debiased, noisy)[0] > 0.0
    with pytest.raises(ValueError):
        Selector(IDENTITY, "none", np.array([]))
    post = PostProcessing("predictions", 0.5, IDENTITY)
    assert PostProcessing.from_dict(post.to_dict()) == post
    assert PostProcessing.from_dict(None) == PostProcessing()


# --------------------------------------------------------------------------- optimizer and schedules


def test_learning_rate_schedules() -> None:
    step = TrainingConfig(epochs=50, learning_rate=1e-3, schedule="step", step_epoch=25, step_factor=0.1)
    assert learning_rate_at(step, 1, 0, 10) == 1e-3 and learning_rate_at(step, 25, 9, 10) == 1e-3
    assert learning_rate_at(step, 26, 0, 10) == pytest.approx(1e-4)
    cosine = TrainingConfig(epochs=4, learning_rate=1e-3, schedule="cosine")
    assert learning_rate_at(cosine, 1, 0, 10) == pytest.approx(1e-3)
    assert learning_rate_at(cosine, 3, 0, 10) == pytest.approx(5e-4)
    assert learning_rate_at(cosine, 4, 9, 10) == pytest.approx(1e-3 * 0.5 * (1 + np.cos(np.pi * 39 / 40)))
    assert learning_rate_at(TrainingConfig(), 7, 3, 10) == 1e-3


def test_rmsprop_and_cosine_train_and_bad_options_are_refused() -> None:
    table, y = table_of(np.linspace(0, 1, 200), 0, 0), 3 * np.linspace(0, 1, 200)
    config = TrainingConfig(epochs=3, optimizer="rmsprop", schedule="cosine", **{**FAST, "learning_rate": 1e-3})
    model = fit_regressor(table, y, config)
    assert model.config_["optimizer"] == "rmsprop"
    assert model.history_[-1]["train_loss"] < model.history_[0]["train_loss"]
    for bad in (dict(optimizer="sgd"), dict(schedule="linear"), dict(step_epoch=0), dict(step_factor=0.0)):
        with pytest.raises(ValueError):
            fit_regressor(table, y, TrainingConfig(epochs=1, **{**FAST, **bad}))
