"""The release's DP prior reaches every training path's anchor (issue 27): in memory, streamed, torchrun.

One definition computes the anchor (``labeldp.learning.regression.Selection``); these tests check
that the streamed and torchrun paths hand it the release's prior as the in-memory path does, so all
three state the same private mean on the same release. Planted once: ``fit_release_streamed`` not
passing ``prior`` on (the streamed and torchrun anchors fell back to the prior-free one and went red),
and the torchrun job dropping it (the torchrun anchor went red).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.training.data import write_table

from labeldp.epsilon import to_micro_floor
from labeldp.learning.config import DEFAULT_LEARNING, TrainingConfig
from labeldp.learning.persistence import TrainedRegressor
from labeldp.learning.regression import fit_private_regressor
from labeldp.learning.streamed import fit_release_streamed
from labeldp.mechanisms import LabelDomain
from labeldp.release.randomizer import randomize

N = 800
DOMAIN = LabelDomain("real", -12.0, 12.0)
CONFIG = TrainingConfig(epochs=2, batch_size=64, seed=5, device="cpu", threads=1, row_group_rows=100)


def _anchors(model: TrainedRegressor) -> tuple[float, float]:
    """(the selection's anchor, the anchor the model's predictions are pulled toward)."""
    assert model.selection_ is not None
    anchor = model.postprocessing_.anchor
    assert anchor is not None
    return float(model.selection_["private_mean"]), float(anchor)


def test_streamed_and_torchrun_anchors_equal_the_in_memory_one_with_the_prior(tmp_path: Path) -> None:
    ids, y, features = write_table(tmp_path / "f.parquet", N)
    out = randomize(np.clip(y, -12, 12), DOMAIN, "rp_with_prior", to_micro_floor(1), np.random.default_rng(0))
    assert out.prior is not None
    spec = out.mechanism.model_dump(mode="json")
    prior = out.prior.model_dump(mode="json")
    memory = fit_private_regressor(features, out.labels, spec, CONFIG, DEFAULT_LEARNING, prior=prior)
    without = fit_private_regressor(features, out.labels, spec, CONFIG, DEFAULT_LEARNING)
    moved = zip(_anchors(memory), _anchors(without), strict=True)
    assert all(a != pytest.approx(b, rel=1e-3) for a, b in moved)  # on this release the prior moves both anchors
    streamed = fit_release_streamed(
        tmp_path / "f.parquet", "id", ids, out.labels, spec, CONFIG, tmp_path / "s", DEFAULT_LEARNING, prior=out.prior
    )
    torchrun = fit_release_streamed(
        tmp_path / "f.parquet", "id", ids, out.labels, spec, CONFIG, tmp_path / "t", DEFAULT_LEARNING, prior=prior,
        workers=2,
    )
    # Same sums in another order (the stage's row groups): equal to rounding.
    np.testing.assert_allclose(_anchors(streamed), _anchors(memory), rtol=1e-9)
    np.testing.assert_allclose(_anchors(torchrun), _anchors(memory), rtol=1e-9)
