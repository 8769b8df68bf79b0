"""What labeldp's epoch loop costs per step, against a plain PyTorch loop over the same shapes.

    python bench/bench_step_overhead.py --device cuda --n 1000000 --out bench/results/step_overhead_cuda.md

Issue 23 asks one process to train within 10 % of a plain PyTorch loop over the same tensors.
Both sides train the default MLP (8 numeric + 3 categorical columns) for one epoch with Adam at
each batch size, once with PyTorch's default Adam kernels and once with the fused kernel
(``fused=True``, one launch for all parameters). ``plain``: tensors already on the device, a
shuffled index per epoch, forward, MSE, backward, step: nothing else — the loop of
``bench_training.py``'s ``plain`` mode (``bench_training.plain_epochs``), here over random
tensors of the table's shapes. ``labeldp``:
``fit_regressor`` (its own preprocessing, validation split and epoch loop; its rows/s counts the
optimizer passes only, as ``plain`` does). Each pair runs side by side in one process.
"""

from __future__ import annotations

import argparse
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from labeldp.learning import loop
from labeldp.learning.config import TrainingConfig
from labeldp.learning.networks import MLPRegressor
from labeldp.learning.regression import fit_regressor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_training import plain_epochs  # the one plain loop of both baselines

VOCAB = 20


def make_table(n: int) -> tuple[pa.Table, np.ndarray]:
    rng = np.random.default_rng(0)
    cols: dict[str, object] = {f"x{i}": rng.normal(size=n) for i in range(8)}
    for j in range(3):
        cols[f"g{j}"] = pa.array(rng.choice([f"v{k}" for k in range(VOCAB)], size=n))
    return pa.table(cols), rng.normal(size=n) + np.asarray(cols["x0"])


def plain(n_train: int, batch: int, fused: bool, device: str) -> float:
    torch.manual_seed(0)
    model = MLPRegressor(8, [VOCAB] * 3).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=fused or None)
    x = torch.randn(n_train, 8, device=device)
    c = torch.randint(0, VOCAB + 1, (n_train, 3), device=device)
    y = torch.randn(n_train, device=device)
    (seconds,) = plain_epochs(model, optimizer, x, c, y, batch, 1, torch.Generator().manual_seed(0))
    return n_train / seconds


def ours(table: pa.Table, y: np.ndarray, batch: int, fused: bool, device: str) -> float:
    def adam(model: torch.nn.Module, config: TrainingConfig) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay,
                                fused=fused or None)

    default, loop.make_optimizer = loop.make_optimizer, adam
    try:
        config = TrainingConfig(epochs=1, batch_size=batch, seed=0, device=device, validation_fraction=0.1)
        model = fit_regressor(table, y, config)
    finally:
        loop.make_optimizer = default
    return float(model.config_["rows_per_second"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--batches", default="256,8192")
    parser.add_argument("--out", default="bench/results/step_overhead.md")
    args = parser.parse_args()
    table, y = make_table(args.n)
    n_train = int(args.n * 0.9)
    plain(n_train, 256, False, args.device)  # warm-up: CUDA context, kernels
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        for fused in (False, True):
            p, o = plain(n_train, batch, fused, args.device), ours(table, y, batch, fused, args.device)
            rows.append(f"| {batch} | {'fused' if fused else 'default'} | {p:,.0f} | {o:,.0f} | {o / p:.2f}× |")
            print(rows[-1], flush=True)
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    command = "python " + " ".join(sys.argv)
    text = "\n".join([
        f"# Step overhead: labeldp's loop vs a plain PyTorch loop ({name})", "",
        f"`{command}` — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, torch {torch.__version__}.",
        "", f"One epoch over {n_train:,} training rows, default MLP, Adam; rows/s over the optimizer passes.", "",
        "| batch | Adam kernels | plain rows/s | labeldp rows/s | labeldp ÷ plain |",
        "|---:|---|---:|---:|---:|", *rows, "",
    ])
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
