"""Liu & Huang's learner, for comparing absolute numbers with their Table 4 (issue 12, item 3).

Their §5.3 trains "a 3-layer fully-connected neural network" on California Housing with
Adam 1e-3, 50 epochs, batch 256, lr ÷ 10 after epoch 25, weight decay 1e-4, and says of
the data "we use the data directly". The features party always standardizes features
and targets (``labeldp.learning.preprocessing``), which halves the non-private test MSE
(≈ 0.29 against their 0.585–0.611). Trained on the features as they are, the same network
reaches their number (``research/studies/housing_learner.py`` → ``research/results/housing_learner.md``).
This learner is that network: a benchmark yardstick, not something the features party
offers (docs/architecture.md, "Benchmark protocol").
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from labeldp_research.utility import FitJob

PAPER = "paper"


def _numeric(table: pa.Table) -> np.ndarray:
    columns = []
    for name in table.column_names:
        col = table.column(name)
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            raise ValueError(f"the paper's learner takes numeric features only; {name!r} is {col.type}")
        columns.append(col.to_numpy(zero_copy_only=False).astype(np.float32))
    return np.column_stack(columns)


@dataclass(frozen=True)
class RawFeatureMLP:
    """Their network and recipe on the privatized labels as they are, every training row, last
    epoch, features and targets unscaled; widths those of the features party's MLP (128, 64),
    since the paper does not state its own."""

    name: str = PAPER
    task: str = "regression"

    @property
    def outputs(self) -> tuple[str, ...]:
        return (self.name,)

    def fingerprint(self) -> dict[str, Any]:
        source = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
        return {"learner": "raw_feature_mlp", "source": source}

    def fit_predict(self, job: FitJob) -> dict[str, np.ndarray]:
        import torch
        from torch import nn

        from labeldp.learning.networks import HIDDEN

        cfg = job.config
        if cfg.schedule == "cosine":
            raise ValueError("the paper's learner follows Liu & Huang's step (or constant) schedule, not cosine")
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        device = torch.device("cuda" if cfg.device == "cuda" else "cpu")
        seed = int(cfg.seed or 0) % 2**31
        torch.manual_seed(seed)
        x = torch.tensor(_numeric(job.train_table), device=device)
        y = torch.tensor(np.asarray(job.labels, dtype=np.float32), device=device)
        model = nn.Sequential(
            nn.Linear(x.shape[1], HIDDEN[0]), nn.ReLU(), nn.Linear(HIDDEN[0], HIDDEN[1]), nn.ReLU(),
            nn.Linear(HIDDEN[1], 1),
        ).to(device)
        opt: torch.optim.Optimizer = (
            torch.optim.Adam(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
            if cfg.optimizer == "adam"
            else torch.optim.RMSprop(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
        )
        step = cfg.step_epoch if cfg.schedule == "step" else cfg.epochs + 1
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=step, gamma=cfg.step_factor)
        gen = torch.Generator().manual_seed(seed)
        for _ in range(cfg.epochs):
            order = torch.randperm(len(x), generator=gen).to(device)
            for start in range(0, len(x), cfg.batch_size):
                idx = order[start : start + cfg.batch_size]
                opt.zero_grad()
                nn.functional.mse_loss(model(x[idx]).squeeze(1), y[idx]).backward()
                opt.step()
            sched.step()
        with torch.no_grad():
            test = torch.tensor(_numeric(job.test_table), device=device)
            return {self.name: model(test).squeeze(1).cpu().numpy().astype(np.float64)}
