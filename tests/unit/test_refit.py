"""Refit: the epoch and λ chosen privately on a held-out split carry over to a training on every row."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from labeldp.learning.config import LearningConfig, TrainingConfig
from labeldp.learning.regression import fit_private_regressor
from labeldp_research.refit import fit_refit_regressor


def test_refit_trains_on_every_row_for_the_privately_selected_epochs():
    rng = np.random.default_rng(0)
    n = 800
    x = rng.normal(size=n)
    y = 2 * x + rng.normal(scale=0.1, size=n)
    noisy = y + rng.laplace(scale=2.0, size=n)
    table = pa.table({"x": x})
    config = TrainingConfig(epochs=6, batch_size=64, seed=3, validation_fraction=0.2, threads=1, device="cpu")
    learning = LearningConfig(debias="none", shrinkage=0.0, select_epoch=True)

    first = fit_private_regressor(table, noisy, None, config, learning)  # the selection run, as refit does it
    refit = fit_refit_regressor(table, noisy, None, config, learning)

    chosen = first.selection_["selected_epoch"]
    assert refit.n_train_ == n and refit.n_validation_ == 0  # every row, nothing held out
    assert refit.config_["epochs"] == chosen == refit.config_["selected_epoch"]
    assert len(refit.history_) == chosen
    # the same as training on every row for that many epochs directly
    direct = fit_private_regressor(
        table, noisy, None, config.replace(epochs=chosen, validation_fraction=0.0),
        LearningConfig(debias="none", shrinkage=0.0, select_epoch=False),
    )
    np.testing.assert_allclose(refit.predict(table), direct.predict(table), rtol=1e-6)
    assert np.mean((refit.predict(table) - y) ** 2) < np.var(y)
