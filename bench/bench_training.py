"""Features-party training throughput: in memory, streamed, and as a torchrun job of 2 CPU processes.

    .venv/bin/python bench/bench_training.py --sizes 100000,1000000 --out bench/results/training.md

For each n a synthetic feature table (8 numeric + 3 categorical columns, a nonlinear
target with noise) is written as Parquet, and each mode runs in its own process so its
peak resident memory (``ru_maxrss``; for torchrun, the largest of its processes) is its own:

- ``memory``: the default training (``fit_private_regressor``, rows in memory, 1 process);
- ``stream``: the same training streamed from row groups in 1 process (``LABELDP_TRAINING_STREAMING``);
- ``torchrun2``: streamed, DistributedDataParallel with 2 gloo processes (``LABELDP_TRAINING_WORKERS=2``);
- ``loader``: the row-group loader alone (stage, then iterate one epoch's batches, no model);
- ``plain``: the baseline, no labeldp loop: the same MLP, Adam, batch, learning rate and training
  rows, preprocessed once into in-memory tensors and trained by a plain PyTorch loop (shuffle,
  forward, MSE, backward, step); the goal is the 1-process streamed training within 10 % of it
  (issue 23 item 5), the "÷ plain" columns.

The phases of a streamed training, each in its own process so each has its own peak RSS (the
growth table's 10⁸ row, ``--modes stage,loaded,step``): ``stage`` stages the release into an
object store (``stage_rows_to_store``, a local ``ObjectStore``; the release read chunk by chunk);
``loaded`` fetches that stage into a local cache and runs the loader alone over one whole epoch;
``step`` runs the training loop (``labeldp.learning.loop.train``: loader + forward, loss, backward,
Adam) on the cached stage, over the first ``--step-rows`` training rows (whole steps; 0, the
default: the whole epoch, with its validation pass). Neither ``loaded`` nor ``step`` holds the release's ids or labels.

All use the default options (Adam, batch 256, default learning with private selection on
10 %) with one torch thread per process; the machine has the cores it says. rows/s counts
training rows over the optimizer passes only; s/epoch includes the validation pass.
The goal: throughput limited by the model's arithmetic, not by loading (loader ≫ loader + step).
``--device cuda`` runs every mode on the GPU (``torchrun2`` needs two: one per process).

``--procs 1,2`` compares instead streamed training with 1 and 2 processes (1: in this
process; more: a torchrun job), each with three recipes: ``default`` (what a request with no
options gets: the default batch for 1 process, a larger one for several, record 0038);
``scaled``, ``--scale`` × that batch with the learning rate × √scale (Adam's square-root
rule; ``--scale`` × fewer all-reduces per epoch), one batch per process and step; ``accum``,
the same optimization as ``scaled`` by gradient accumulation: ``--scale`` × as many data
shards, so each process runs ``--scale`` micro-batches of the default per-process size per
step, all-reducing after the last. It reports rows/s and the test MSE on a held-out set
beside the 1-process default's, so a faster recipe shows what it costs in accuracy.

The ``--procs`` table also has a ``plain`` row (the baseline above) and every row's rows/s ÷ it.

    python bench/bench_training.py --procs 1,2 --sizes 50000 --epochs 3 --scale 8 --out /tmp/procs.md
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

MODES = ("memory", "stream", "torchrun2", "loader", "plain", "memory_bf16", "memory_fp16", "stage", "loaded", "step")
PHASES = ("stage", "loaded", "step")
"""The modes that stage once into ``<work>/stage_<n>`` and read that stage (see the docstring)."""
PRECISION_MODES = {"memory": "fp32", "memory_bf16": "bf16", "memory_fp16": "fp16"}
CHUNK = 1_000_000


def labels_of(data: Path) -> Path:
    """Beside a training table: its targets (``id``, ``y``), kept out of the table the trainings stage."""
    return data.with_name(data.stem + "_labels.parquet")


def write_data(path: Path, n: int, seed: int = 0, labels: Path | None = None) -> None:
    """n rows of features (chunk by chunk) and the target as column ``y``; with ``labels``, the target
    goes to that file (``id``, ``y``) instead, so that a training staging ``path`` never sees it."""
    rng = np.random.default_rng(seed)
    writer: pq.ParquetWriter | None = None
    label_writer: pq.ParquetWriter | None = None
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        x = rng.normal(size=(m, 8))
        cats = rng.integers(0, [20, 100, 5], size=(m, 3))
        y = np.sin(x[:, 0]) * 2 + x[:, 1] * x[:, 2] + 0.1 * cats[:, 0] + rng.normal(size=m)
        columns: dict[str, Any] = {"id": pa.array([f"r{i:09d}" for i in range(start, start + m)], pa.string())}
        columns.update({f"x{j}": x[:, j] for j in range(8)})
        columns.update({f"c{j}": pa.array(cats[:, j].astype(str)) for j in range(3)})
        if labels is None:
            columns["y"] = y
        else:
            targets = pa.table({"id": columns["id"], "y": y})
            label_writer = label_writer or pq.ParquetWriter(labels, targets.schema)
            label_writer.write_table(targets, row_group_size=CHUNK)
        table = pa.table(columns)
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table, row_group_size=CHUNK)
    assert writer is not None
    if label_writer is not None:
        label_writer.close()
    writer.close()


def peak_mb(children: bool = False) -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return usage.ru_maxrss / 1024  # KiB on Linux


def held_out_mse(model: Any, data: Path) -> float | None:
    """Test MSE on the held-out table beside ``data`` (written when a mode reports accuracy)."""
    test = data.with_name(data.stem + "_test.parquet")
    if not test.exists():
        return None
    held_out = pq.read_table(test)
    predictions = model.predict(held_out.drop_columns(["id", "y"]))
    return float(np.mean((predictions - held_out.column("y").to_numpy()) ** 2))


def run_mode(
    mode: str, data: Path, epochs: int, work: Path, batch: int, device: str = "cpu", lr: float = 1e-3,
    data_shards: int = 0, shards_max: int = 1, stage_dir: Path | None = None, step_rows: int = 0,
) -> dict[str, Any]:
    """One mode in this process; returns its measurements. ``stage_dir``: the phases' stage (store and
    cache); ``step_rows``: ``step``'s prefix of training rows (0: the whole epoch)."""
    import torch

    from labeldp.learning.config import DEFAULT_LEARNING, TrainingConfig
    from labeldp.learning.loop import make_plan
    from labeldp.learning.regression import fit_private_regressor
    from labeldp.learning.staging import stage_release
    from labeldp.learning.streamed import fit_release_streamed

    torch.set_num_threads(1)
    if mode in ("loaded", "step"):  # the stage only: no release ids or labels in this process
        assert stage_dir is not None
        config = TrainingConfig(epochs=1, seed=1, device=device, threads=1, batch_size=batch, learning_rate=lr)
        return run_loaded(stage_dir, config) if mode == "loaded" else run_step(stage_dir, config, step_rows)
    config = TrainingConfig(epochs=epochs, seed=1, device=device, threads=1, batch_size=batch, learning_rate=lr,
                            data_shards=data_shards)
    if mode == "stage":  # the release read chunk by chunk, as the service reads its shards: never held whole
        assert stage_dir is not None
        return run_stage(data, config, stage_dir, work)
    source = pq.read_table(labels_of(data), columns=["id", "y"])
    ids, y = source.column("id").combine_chunks(), source.column("y").to_numpy()
    del source
    if procs_of(mode):  # every recipe the same row groups, at least 4 per data shard of the most sharded one
        config = config.replace(row_group_rows=max(1, min(config.row_group_rows, len(y) // (4 * shards_max))))
    reports: list[Any] = []
    started = time.perf_counter()
    if mode in PRECISION_MODES:
        features = pq.read_table(data).drop_columns(["id"])
        loaded = time.perf_counter() - started
        config = config.replace(precision=PRECISION_MODES[mode])
        model = fit_private_regressor(features, y, None, config, DEFAULT_LEARNING, reports.append)
        result = {"prepare_s": loaded, **summary(model, reports, time.perf_counter() - started)}
        mse = held_out_mse(model, data)
        if mse is not None:
            result["test_mse"] = mse
        return result
    if mode == "plain":
        return plain_loop(data, y, config)
    if mode == "loader":
        plan = make_plan(len(y), config)
        is_val = np.zeros(len(y), bool)
        is_val[plan.val_idx] = True
        staged = stage_release(data, "id", ids, y, y, is_val, work / "stage", config.row_group_rows)
        staged_s = time.perf_counter() - started
        return {"prepare_s": staged_s, **loader_epoch(staged, config)}
    workers = procs_of(mode) or (2 if mode == "torchrun2" else 1)
    model = fit_release_streamed(data, "id", ids, y, None, config, work, DEFAULT_LEARNING, reports.append,
                                 workers=workers)
    result = summary(model, reports, time.perf_counter() - started)
    if procs_of(mode):
        result["test_mse"] = held_out_mse(model, data)
    return result


STAGE_PREFIX = "stage"
"""The phases' stage: under this prefix of the object store ``<stage dir>/store``; cached in ``<stage dir>/cache``."""


def run_stage(data: Path, config: Any, stage_dir: Path, work: Path) -> dict[str, Any]:
    """``stage``: the release (``y`` as labels and targets, the split of ``make_plan``) read from its file chunk
    by chunk, joined with the feature table and staged into a local object store, as a streamed training
    stages the release it reads shard by shard (``streamed.stage_rows``, ``stage_rows_to_store``)."""
    from labeldp.learning.loop import make_split_bits
    from labeldp.learning.staging import stage_rows_to_store
    from labeldp.learning.streamed import ReleaseChunks, stage_rows
    from labeldp.parquet_batches import open_for_batches
    from labeldp.storage import ObjectStore

    started = time.perf_counter()
    labels = open_for_batches(labels_of(data))
    n = labels.metadata.num_rows
    _, bits = make_split_bits(n, config)
    batches = labels.iter_batches(batch_size=65_536, columns=["id", "y"])
    chunks = ((batch.column(0), batch.column(1).to_numpy()) for batch in batches)
    release = stage_rows(ReleaseChunks(n, chunks), lambda values: values, "labels", bits)
    store = ObjectStore.from_url(str(stage_dir / "store"))
    held = status_mb("VmRSS")  # what the caller holds of the release before the stage's work: the split's bits
    reading = status_mb("VmHWM")  # the process's peak so far: drawing the split (the reset below clears it)
    reset = reset_peak()  # so that VmHWM after the stage is the stage's peak, not drawing the split's
    meta = stage_rows_to_store(data, "id", release, store, STAGE_PREFIX, work / "join", config.row_group_rows,
                               config.join_partition_rows)
    seconds = time.perf_counter() - started
    staging_peak = status_mb("VmHWM") if reset else None
    return {"prepare_s": seconds, "rows_per_s": n / seconds, "rows": n, "n_train": meta["n_train"],
            "partitions": len(meta["partitions"]), "held_mb": held, "staging_peak_mb": staging_peak,
            "reading_peak_mb": reading}


def status_mb(field: str) -> float | None:
    """A memory field of /proc/self/status in MB (VmRSS: resident now; VmHWM: its peak since the last
    :func:`reset_peak`); None where /proc does not say."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    return next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith(field + ":")), None)


def reset_peak() -> bool:
    """Reset this process's VmHWM to its resident memory now (Linux's clear_refs 5); whether it could.
    Linux's ``ru_maxrss`` of a live process follows VmHWM: read the peak before resetting it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def cached_stage(stage_dir: Path) -> tuple[Any, float]:
    """The phases' stage in its local cache (fetched from the store unless a phase before did) and the
    seconds the fetch took (0 when cached)."""
    from labeldp.learning.staging import META_FILE, StagedRelease, fetch_stage
    from labeldp.storage import ObjectStore

    cache = stage_dir / "cache"
    if (cache / META_FILE).exists():
        return StagedRelease.open(cache), 0.0
    t0 = time.perf_counter()
    staged = fetch_stage(ObjectStore.from_url(str(stage_dir / "store")), STAGE_PREFIX, cache)
    return staged, time.perf_counter() - t0


def run_loaded(stage_dir: Path, config: Any) -> dict[str, Any]:
    """``loaded``: the stage fetched from the store into the cache (``prepare_s``), then the row-group loader
    alone over one whole epoch's batches, no model."""

    staged, fetched = cached_stage(stage_dir)
    return {"prepare_s": fetched, **loader_epoch(staged, config), "n_train": staged.n_train}


def loader_epoch(staged: Any, config: Any) -> dict[str, Any]:
    """The row-group loader alone over one whole epoch of ``staged``'s training rows, no model."""
    from labeldp.learning.loader import RowGroupLoader

    loader = RowGroupLoader(staged.train_path, staged.preprocessor, config.batch_size,
                            target_mean=staged.target_mean, target_std=staged.target_std,
                            buffer_row_groups=config.buffer_row_groups, seed=1)
    t0 = time.perf_counter()
    batches = sum(1 for _ in loader.batches(1))
    seconds = time.perf_counter() - t0
    return {"s_per_epoch": seconds, "rows_per_s": staged.n_train / seconds, "batches": batches,
            "rows": staged.n_train}


def run_step(stage_dir: Path, config: Any, step_rows: int) -> dict[str, Any]:
    """``step``: the training loop (loader + forward, loss, backward, Adam) over the cached stage, over the
    first ``step_rows`` training rows in whole steps (0 or more than the epoch: the whole epoch, validated
    as a training validates it). rows/s as the trainings count it: the rows stepped over their seconds."""
    from labeldp.learning.device import resolve_device
    from labeldp.learning.loop import Objective, Plan, StreamedData, Workers, squared_error, train
    from labeldp.learning.networks import MLPRegressor

    class Prefix(StreamedData):
        """The stage's data, its epoch cut after the steps that hold ``step_rows`` training rows. A cut
        epoch is not validated: its seconds are the steps' alone, as its rows/s counts them."""

        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            steps = self.loader.steps_per_epoch()
            self.max_steps = steps if step_rows <= 0 else min(steps, math.ceil(step_rows / config.batch_size))
            self.cut = self.max_steps < steps
            self.n_train = sum(self.loader.step_rows(k) for k in range(self.max_steps))
            self.stepped = [0, 0]  # steps and rows the loop was given

        def steps(self, epoch: int) -> Any:
            stream = super().steps(epoch)
            try:
                for _, parts in zip(range(self.max_steps), stream):
                    self.stepped[0] += 1
                    self.stepped[1] += sum(len(y) for _, _, y in parts)
                    yield parts
            finally:
                stream.close()  # type: ignore[attr-defined]

        def validate(self, model: Any, objective: Any, outputs: bool) -> Any:
            return (np.empty(0), None, None) if self.cut else super().validate(model, objective, outputs)

    staged, fetched = cached_stage(stage_dir)
    objective = Objective(MLPRegressor, squared_error, loss_scale=staged.target_std**2)
    plan = Plan(1, resolve_device(config.device), np.empty(0, np.int64), np.empty(0, np.int64))  # staged split
    data = Prefix(staged, objective, config, plan, Workers())
    reports: list[Any] = []
    fitted = train(data, objective, config, plan, reports.append, workers=Workers())
    steps, rows = data.stepped
    if rows != data.n_train:  # rows/s divides n_train by the seconds: it must be the rows stepped
        raise RuntimeError(f"stepped {rows} rows, not the {data.n_train} counted")
    return {"prepare_s": fetched, "s_per_epoch": reports[0].seconds, "rows_per_s": fitted.config["rows_per_second"],
            "rows": rows, "n_train": staged.n_train, "steps": steps, "prefix": data.cut}


def plain_epochs(model: Any, optimizer: Any, x: Any, c: Any, t: Any, batch: int, epochs: int,
                 generator: Any) -> list[float]:
    """The plain PyTorch loop both baselines time (``plain`` here, and in ``bench_step_overhead.py``):
    per epoch a permutation drawn from ``generator``, then per ``batch`` rows of the tensors ``x``,
    ``c``, ``t`` (already on the device) forward, MSE, backward and the optimizer's step; nothing
    else. The seconds of each epoch, the permutation included, the device synchronized."""
    import torch
    from torch.nn import functional

    device, n = t.device, len(t)
    seconds = []
    for _ in range(epochs):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        order = torch.randperm(n, generator=generator, device=generator.device).to(device)
        for start in range(0, n, batch):
            rows = order[start : start + batch]
            optimizer.zero_grad(set_to_none=True)
            functional.mse_loss(model(x[rows], c[rows]), t[rows]).backward()
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - t0)
    return seconds


def plain_loop(data: Path, y: np.ndarray, config: Any) -> dict[str, Any]:
    """The baseline: the training's MLP on the training's rows as in-memory tensors, a plain PyTorch loop.

    The same split (``make_plan``), preprocessing and target standardization as the trainings, then per
    epoch a permutation and ``batch_size`` steps of forward, MSE, backward and Adam; no validation,
    selection, progress, checkpoint or loader. rows/s: training rows over the epochs' loops.
    """
    import torch

    from labeldp.learning.loop import make_optimizer, make_plan
    from labeldp.learning.networks import MLPRegressor
    from labeldp.learning.preprocessing import Preprocessor

    started = time.perf_counter()
    plan = make_plan(len(y), config)
    device = torch.device(plan.device)
    features = pq.read_table(data).drop_columns(["id"]).take(pa.array(plan.train_idx))
    pre = Preprocessor.fit(features)
    numeric, categorical = pre.transform(features)
    del features
    target = y[plan.train_idx]
    scaled = ((target - target.mean()) / (target.std() or 1.0)).astype(np.float32)
    x = torch.from_numpy(numeric).to(device)
    c = torch.from_numpy(categorical).to(device)
    t = torch.from_numpy(scaled).to(device)
    torch.manual_seed(plan.seed)
    model = MLPRegressor(numeric.shape[1], [len(v) for v in pre.vocabularies]).to(device)
    optimizer = make_optimizer(model, config)  # the same Adam kernels as the loop (fused on CUDA, decision 0019)
    generator = torch.Generator(device=device).manual_seed(plan.seed)
    n = len(scaled)
    prepare = time.perf_counter() - started
    epoch_seconds = plain_epochs(model, optimizer, x, c, t, config.batch_size, config.epochs, generator)
    total = sum(epoch_seconds)
    result = {"prepare_s": prepare, "s_per_epoch": total / len(epoch_seconds),
              "rows_per_s": n * len(epoch_seconds) / total, "n_train": n}
    test = data.with_name(data.stem + "_test.parquet")
    if test.exists():  # the last epoch's model (no selection) on the held-out set, as the other rows report
        held_out = pq.read_table(test)
        num, cat = pre.transform(held_out.drop_columns(["id", "y"]))
        with torch.no_grad():
            out = model(torch.from_numpy(num).to(device), torch.from_numpy(cat).to(device)).cpu().numpy()
        predictions = out * (target.std() or 1.0) + target.mean()
        result["test_mse"] = float(np.mean((predictions - held_out.column("y").to_numpy()) ** 2))
    return result


def procs_of(mode: str) -> int:
    """Processes of a ``--procs`` mode (``procs2:scaled`` → 2); 0 for the other modes."""
    return int(mode[len("procs"):].split(":")[0]) if mode.startswith("procs") else 0


def summary(model: Any, reports: list[Any], total: float) -> dict[str, Any]:
    epochs = [r.seconds for r in reports]
    return {
        "s_per_epoch": float(np.mean(epochs)),
        "rows_per_s": model.config_["rows_per_second"],
        "total_s": total,
        "n_train": model.n_train_,
    }


def child(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(dir=args.work) as work:
        result = run_mode(
        args.mode, Path(args.data), args.epochs, Path(work), args.batch, args.device, args.lr, args.data_shards,
        args.shards_max, Path(args.stage) if args.stage else None, args.step_rows,
    )
    # ru_maxrss follows VmHWM, which the stage phase resets: its peak before the reset counts too
    result["peak_mb"] = max(peak_mb(), peak_mb(children=True), result.get("reading_peak_mb") or 0)
    print("RESULT " + json.dumps(result))


def measure(
    mode: str, data: Path, epochs: int, work: Path, batch: int, device: str, lr: float = 1e-3, data_shards: int = 0,
    shards_max: int = 1, stage_dir: Path | None = None, step_rows: int = 0,
) -> dict[str, Any] | None:
    """One mode in a child process: its measurements, with the 1-minute load average before and after."""
    cmd = [sys.executable, __file__, "--child", mode, "--data", str(data), "--epochs", str(epochs),
           "--work", str(work), "--batch", str(batch), "--device", device, "--lr", repr(lr),
           "--data-shards", str(data_shards), "--shards-max", str(shards_max), "--step-rows", str(step_rows)]
    if stage_dir is not None:
        cmd += ["--stage", str(stage_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    load = os.getloadavg()[0]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return {**json.loads(line[len("RESULT "):]), "load": [load, os.getloadavg()[0]]}
    sys.stderr.write(done.stderr[-3000:])
    return None


def device_name(device: str) -> str:
    """The device as the results name it (the GPU's model on CUDA)."""
    if device == "cpu":
        return "CPU"
    import torch

    return f"CUDA: {torch.cuda.get_device_name(0)}"


def fmt(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def ratio(a: float | None, b: float | None) -> str:
    return "—" if not a or not b else f"{a / b:.2f}×"


def recipe(mode: str, args: argparse.Namespace, n: int) -> tuple[int, float, int]:
    """(batch, learning rate, data shards) of a ``--procs`` mode over ``n`` rows: the default, what a training
    of that many processes gets when its request leaves the batch and the rate unset (record 0038: one process,
    ``--batch``; several, a larger batch); or ``--scale`` × ``--batch`` with lr × √scale, in one batch per
    process (``scaled``) or ``--scale`` micro-batches (``accum``)."""
    from labeldp.learning.config import TrainingOptions, recipe_for_processes

    if mode == "plain":
        return args.batch, 1e-3, 0
    name = mode.split(":")[1]
    if name == "default":
        options = recipe_for_processes(TrainingOptions(batch_size=args.batch), procs_of(mode), n)
        return options.batch_size, options.learning_rate, 0
    shards = procs_of(mode) * args.scale if name == "accum" else 0
    return args.batch * args.scale, 1e-3 * math.sqrt(args.scale), shards


def render_procs(results: dict[int, dict[str, dict[str, Any] | None]], args: argparse.Namespace, wall: float) -> str:
    """The ``--procs`` table: rows/s and test MSE of each (processes, recipe) beside 1 process's default."""
    lines = [
        f"# Training with 1 vs more processes (features party, {device_name(args.device)})",
        "",
        f"`{' '.join(['python', 'bench/bench_training.py', *sys.argv[1:]])}` — "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} cores, wall {wall:.0f} s.",
        "",
        "Streamed training, one torch thread per process; test MSE on a held-out synthetic set against the noisy "
        "target. default: what a training of that many processes runs when its request leaves the batch and the "
        f"learning rate unset (record 0038). scaled: batch × {args.scale}, learning rate × √{args.scale}; accum: "
        f"the same by {args.scale} micro-batches per process and step (data shards).",
        "",
        "plain: the baseline, a plain PyTorch loop (same MLP, Adam, batch, training rows) over in-memory "
        "tensors, no labeldp loop; the goal is 1 process's default within 10 % of it (÷ plain ≥ 0.90×).",
        "",
        "| n | processes | recipe | batch | lr | data shards | rows/s | ÷ plain | ÷ 1 process default | test MSE "
        "| ÷ 1 process default | peak RSS MB |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, modes in results.items():
        base = modes.get("procs1:default") or {}
        plain = modes.get("plain") or {}
        for mode, r in modes.items():
            batch, lr, shards = recipe(mode, args, n)
            procs = procs_of(mode) or 1
            head = f"| {n:,} | {procs} | {mode.split(':')[-1]} | {batch} | {lr:.2g} | {shards or procs}"
            if r is None:
                lines.append(f"{head} | failed | | | | | |")
                continue
            lines.append(
                f"{head} | {fmt(r['rows_per_s'])} | {ratio(r['rows_per_s'], plain.get('rows_per_s'))} "
                f"| {ratio(r['rows_per_s'], base.get('rows_per_s'))} | {fmt(r.get('test_mse'), 4)} "
                f"| {ratio(r.get('test_mse'), base.get('test_mse'))} | {fmt(r['peak_mb'])} |"
            )
    return "\n".join(lines) + "\n"


PHASES_TEXT = [
    "Phases, each in its own process (its peak RSS its own): stage: the release joined with the feature table "
    "and staged into a local object store (prepare s: the staging; rows/s: rows staged per second); loaded: the "
    "stage fetched into a local cache (prepare s), then the loader alone over one whole epoch; step: the "
    "training loop (loader + forward, loss, backward, Adam) over the cached stage — over the first rows of the "
    "epoch when rows timed says \"prefix\" (no validation pass then: s/epoch is the prefix's seconds). In the "
    "side-by-side table, loader alone ÷ loader + step is loaded ÷ step where both ran.",
]


def rows_timed(r: dict[str, Any]) -> str:
    """The rows a mode's rows/s is over: a step prefix says so, and of how many."""
    rows = r.get("rows")
    if rows is None:
        rows = r["n_train"] * r.get("epochs", 1) if r.get("n_train") else None
    if rows is None:
        return "—"
    return f"{rows:,} (prefix of {r['n_train']:,})" if r.get("prefix") else f"{rows:,}"


def load_text(args: argparse.Namespace) -> str:
    loads = getattr(args, "loads", None)
    if not loads:
        return "load average unknown"
    before, after = loads
    return ("load average (1, 5, 15 min) before " + ", ".join(f"{v:.2f}" for v in before)
            + "; after " + ", ".join(f"{v:.2f}" for v in after))


def phase_memory(results: dict[int, dict[str, dict[str, Any] | None]]) -> list[str]:
    """Peak RSS of each phase's process per n, and its change from the n before (memory flat as n grows)."""
    sizes = [n for n, modes in results.items() if any(m in PHASES for m in modes)]
    if not sizes:
        return []
    lines = ["", "## Peak RSS per phase (MB; in brackets: the change from the size above)", "",
             "stage: the staging's peak (VmHWM, reset when staging began: `stage_rows_to_store` reading the "
             "release chunk by chunk); held: what the process held then (VmRSS: the split as one bit per row), "
             "as its caller holds it; the staging's own work is the difference. stage process: the whole "
             "process's peak (ru_maxrss), drawing the split included. The other two: their process's peak "
             "(ru_maxrss).", "",
             "| n | stage | held before staging | stage's own work | stage process | fetch + loader alone "
             "| loader + step |", "|---:|---:|---:|---:|---:|---:|---:|"]
    before: dict[str, float] = {}

    def cell(key: str, value: float | None) -> str:
        change = "" if value is None or key not in before else f" ({value - before[key]:+,.0f})"
        if value is not None:
            before[key] = value
        return fmt(value) + change

    for n in sizes:
        stage = results[n].get("stage") or {}
        staging, held = stage.get("staging_peak_mb"), stage.get("held_mb")
        own = None if staging is None or held is None else staging - held
        cells = [cell("staging", staging), cell("held", held), cell("own", own), cell("stage", stage.get("peak_mb"))]
        for mode in PHASES[1:]:
            r = results[n].get(mode)
            cells.append(cell(mode, None if r is None else r["peak_mb"]))
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    return lines


def render(results: dict[int, dict[str, dict[str, Any] | None]], args: argparse.Namespace, wall: float) -> str:
    lines = [
        f"# Training throughput (features party, {device_name(args.device)})",
        "",
        f"`{' '.join(['python', 'bench/bench_training.py', *sys.argv[1:]])}` — "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores (shared with other jobs while this ran), Python {platform.python_version()}, "
        f"wall {wall:.0f} s, {load_text(args)}.",
        "",
        f"Default options (Adam, batch {args.batch}, private selection on 10 % of rows), synthetic table of 8 "
        "numeric and 3 categorical columns, one torch thread per process, epochs as listed. rows/s: training "
        "rows over the optimizer passes; s/epoch includes the validation pass; peak RSS: the largest process "
        "of the mode "
        "(ru_maxrss; host memory)."
        + (" No GPU was lent to this session: no GPU rows." if args.device == "cpu" else ""),
        *([""] + PHASES_TEXT if any(m in PHASES for modes in results.values() for m in modes) else []),
        "",
        "| n | mode | epochs | s/epoch | rows/s | rows timed | peak RSS MB | prepare s | load 1 min (start → end) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, modes in results.items():
        for mode in MODES:
            r = modes.get(mode)
            if r is None:
                if mode in modes:
                    lines.append(f"| {n:,} | {mode} | | failed | | | | | |")
                continue
            load = r.get("load") or [None, None]
            lines.append(
                f"| {n:,} | {mode} | {r.get('epochs', '')} | {fmt(r.get('s_per_epoch'), 2)} | {fmt(r['rows_per_s'])} | "
                f"{rows_timed(r)} | {fmt(r['peak_mb'])} | {fmt(r.get('prepare_s'), 1)} | "
                f"{fmt(load[0], 2)} → {fmt(load[1], 2)} |"
            )
    lines += ["", "## Side by side", "",
              "| n | loader alone ÷ loader + step (rows/s) | 2 torchrun ÷ 1 streamed (rows/s) | "
              "streamed ÷ in memory (rows/s) | streamed ÷ plain (rows/s) | in memory ÷ plain (rows/s) | "
              "in-memory ÷ streamed (peak RSS) |",
              "|---:|---:|---:|---:|---:|---:|---:|"]
    for n, modes in results.items():
        def get(mode: str, key: str, modes: dict[str, dict[str, Any] | None] = modes) -> float | None:
            r = modes.get(mode)
            return None if r is None else r.get(key)

        alone, step = ("loaded", "step") if "loaded" in modes and "step" in modes else ("loader", "stream")
        lines.append(
            f"| {n:,} | {ratio(get(alone, 'rows_per_s'), get(step, 'rows_per_s'))} | "
            f"{ratio(get('torchrun2', 'rows_per_s'), get('stream', 'rows_per_s'))} | "
            f"{ratio(get('stream', 'rows_per_s'), get('memory', 'rows_per_s'))} | "
            f"{ratio(get('stream', 'rows_per_s'), get('plain', 'rows_per_s'))} | "
            f"{ratio(get('memory', 'rows_per_s'), get('plain', 'rows_per_s'))} | "
            f"{ratio(get('memory', 'peak_mb'), get('stream', 'peak_mb'))} |"
        )
    lines += phase_memory(results)
    precision_rows = [
        (n, mode, r) for n, modes in results.items() for mode, r in modes.items()
        if mode in PRECISION_MODES and r is not None and "test_mse" in r
    ]
    if precision_rows:
        autocast = "CUDA autocast" if args.device == "cuda" else "CPU autocast"
        lines += ["", f"## Mixed precision (in memory, {autocast})", "",
                  "Test MSE on a held-out synthetic set (n/4 rows, another seed) against the noisy target.", "",
                  "| n | precision | rows/s | ÷ fp32 rows/s | test MSE | ÷ fp32 test MSE |",
                  "|---:|---|---:|---:|---:|---:|"]
        for n, mode, r in precision_rows:
            base = results[n].get("memory") or {}
            lines.append(
                f"| {n:,} | {PRECISION_MODES[mode]} | {fmt(r['rows_per_s'])} "
                f"| {ratio(r['rows_per_s'], base.get('rows_per_s'))} | {r['test_mse']:.4f} "
                f"| {ratio(r['test_mse'], base.get('test_mse'))} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--epochs", default="", help="epochs per size, e.g. 3,1 (default: 3 below 10^6, else 1)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--batch", type=int, default=256, help="batch size (default: the default option, 256)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cuda: one GPU per process")
    parser.add_argument("--skip", default="", help="n:mode pairs to leave out, e.g. 10000000:memory")
    parser.add_argument("--out", default="bench/results/training.md")
    parser.add_argument("--work", default=None, help="scratch folder (default: the system's)")
    parser.add_argument("--procs", default="", help="compare 1 vs N processes instead, e.g. 1,2 (see the docstring)")
    parser.add_argument("--scale", type=int, default=8, help="--procs: the scaled recipe's batch multiplier")
    parser.add_argument("--step-rows", type=int, default=0,
                        help="step mode: time only the first N training rows of the epoch (0: the whole epoch)")
    parser.add_argument("--lr", type=float, default=1e-3, help=argparse.SUPPRESS)
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    parser.add_argument("--data-shards", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--shards-max", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.mode = args.child
        args.epochs = int(args.epochs)
        child(args)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    epochs = [int(e) for e in args.epochs.split(",")] if args.epochs else [3 if n < 1_000_000 else 1 for n in sizes]
    skip = {tuple(p.split(":")) for p in args.skip.split(",") if p}
    started = time.perf_counter()
    load_before = os.getloadavg()
    results: dict[int, dict[str, dict[str, Any] | None]] = {}
    modes = args.modes.split(",")
    if args.work:  # a scratch folder named on the command line need not exist yet
        Path(args.work).mkdir(parents=True, exist_ok=True)
    if args.procs:
        modes = ["plain"] + [f"procs{p}:{r}" for p in args.procs.split(",") for r in ("default", "scaled", "accum")]
    with tempfile.TemporaryDirectory(dir=args.work) as scratch:
        for n, e in zip(sizes, epochs):
            data = Path(scratch) / f"data_{n}.parquet"
            stage_dir = Path(scratch) / f"stage_{n}"
            write_data(data, n, labels=labels_of(data))  # the target never in the staged table
            if args.procs or any(m in PRECISION_MODES for m in modes):
                write_data(data.with_name(data.stem + "_test.parquet"), min(n // 4, 200_000), seed=99)
            results[n] = {}
            for mode in modes:
                if (str(n), mode) in skip:
                    continue
                batch, lr, shards = recipe(mode, args, n) if args.procs else (args.batch, 1e-3, 0)
                shards_max = max(int(p) for p in args.procs.split(",")) * args.scale if args.procs else 1
                phase = mode in PHASES
                if phase and mode != "stage" and not (stage_dir / "store").exists():
                    raise SystemExit(f"--modes {mode} reads the stage the stage mode writes: list stage before it")
                r = measure(mode, data, e, Path(scratch), batch, args.device, lr, shards, shards_max,
                            stage_dir if phase else None, args.step_rows if mode == "step" else 0)
                if r is not None:
                    r["epochs"] = e if mode not in ("loader", *PHASES) else 1
                results[n][mode] = r
                print(n, mode, r, flush=True)
                if mode == "stage" and all(m in PHASES for m in modes[modes.index(mode) + 1:]):  # not read again
                    data.unlink()
                    labels_of(data).unlink()
            data.unlink(missing_ok=True)
            labels_of(data).unlink(missing_ok=True)
            shutil.rmtree(stage_dir, ignore_errors=True)
    wall = time.perf_counter() - started
    args.loads = (load_before, os.getloadavg())
    text = render_procs(results, args, wall) if args.procs else render(results, args, wall)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
