"""Data-parallel training as a torchrun job: the launcher, and the worker every process runs.

The launcher writes ``job.json`` next to the staged release and starts
``python -m torch.distributed.run --standalone --nproc_per_node N -m labeldp.learning.distributed job.json``
(gloo on the CPU, NCCL on GPUs; loopback rendezvous). Every worker opens the stage,
joins the process group and runs :func:`labeldp.learning.regression.fit_staged_regressor`
(or, for a categorical release, :func:`labeldp.learning.classifier.fit_staged_classifier`)
with its rank: DistributedDataParallel over a sampler of row groups
(:class:`~labeldp.learning.loader.RowGroupLoader`). Rank 0 alone evaluates the validation
rows and runs private model selection on them — the same rows in the same order a
single process sees, so the selection is computed as one process computes it — writes
a checkpoint after each epoch (torchrun restarts a group whose worker died, up to
``MAX_RESTARTS`` times, and the new group resumes from it), appends each epoch's report to ``progress.jsonl`` (the
launcher relays it to ``on_epoch``) and saves the model file.

Several nodes: start the same command on each with ``--nnodes``, ``--node_rank`` and a
shared ``--rdzv_endpoint`` instead of ``--standalone``, over a work directory every node
mounts (README, "Training at scale").
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from labeldp.learning.classifier import fit_staged_classifier
from labeldp.learning.config import LearningConfig, TrainingConfig
from labeldp.learning.debiasing import LabelLaw, label_law, law_from_dict
from labeldp.learning.loop import EpochReport, Plan, Workers
from labeldp.learning.persistence import TrainedClassifier, TrainedModel, TrainedRegressor
from labeldp.learning.regression import fit_staged_regressor
from labeldp.learning.staging import StagedRelease

log = logging.getLogger("labeldp.features")

JOB_FILE, PROGRESS_FILE, CHECKPOINT_FILE, MODEL_FILE, LOG_FILE = (
    "job.json", "progress.jsonl", "checkpoint.pt", "model.pt", "torchrun.log",
)
POLL_SECONDS = 0.2
LOG_TAIL_LINES = 30
STORE_TIMEOUT = datetime.timedelta(minutes=5)
MAX_RESTARTS = 2
"""torchrun restarts the whole worker group this often after a worker dies; it resumes from the checkpoint."""


class TorchrunFailed(RuntimeError):
    """The torchrun job exited without a model (its log is ``torchrun.log`` in the work directory)."""


def torchrun_command(job_path: Path, workers: int) -> list[str]:
    """The one-node launch; the multi-node form is in the module docstring."""
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
        f"--nproc_per_node={workers}", f"--max-restarts={MAX_RESTARTS}",
        "-m", "labeldp.learning.distributed", str(job_path),
    ]


def run_torchrun(
    staged: StagedRelease,
    spec: Any,
    law: LabelLaw,
    config: TrainingConfig,
    learning: LearningConfig,
    workers: int,
    work_dir: Path,
    on_epoch: Callable[[EpochReport], None] | None = None,
) -> TrainedRegressor:
    """Train ``staged`` with ``workers`` processes; relay progress; return rank 0's model.

    ``spec`` (the release's mechanism spec, JSON) rebuilds the law exactly in every
    worker; ``None`` sends ``law`` as its plain dict. ``config.seed`` must be set (the
    split of the stage was drawn from it). If ``on_epoch`` raises (a stop request), the
    job's processes are terminated and the exception goes on.
    """
    job = {
        "task": "regression",
        "spec": spec,
        "law": law.to_dict() if spec is None else None,
        "learning": learning.to_dict(),
    }
    return TrainedRegressor.load(_launch(staged, job, config, workers, work_dir, on_epoch), device=config.device)


def run_torchrun_classifier(
    staged: StagedRelease,
    n_classes: int,
    classes: list[str],
    transition_matrix: Any,
    config: TrainingConfig,
    workers: int,
    work_dir: Path,
    on_epoch: Callable[[EpochReport], None] | None = None,
) -> TrainedClassifier:
    """:func:`run_torchrun` for a categorical release staged with its class indices as targets: every
    worker trains the classifier (cross-entropy, or forward correction through ``transition_matrix``)."""
    matrix = None if transition_matrix is None else np.asarray(transition_matrix, dtype=np.float64).tolist()
    job = {"task": "classification", "n_classes": n_classes, "classes": list(classes), "transition_matrix": matrix}
    return TrainedClassifier.load(_launch(staged, job, config, workers, work_dir, on_epoch), device=config.device)


def _launch(
    staged: StagedRelease,
    task: dict[str, Any],
    config: TrainingConfig,
    workers: int,
    work_dir: Path,
    on_epoch: Callable[[EpochReport], None] | None,
) -> Path:
    """Write the job file (``task``: what to train) and run the torchrun job; the model file it wrote."""
    if config.seed is None:
        raise ValueError("a torchrun job needs the seed its stage was split with")
    job = {
        **task,
        "stage": str(staged.directory),
        "config": config.model_dump(),
        "progress": str(work_dir / PROGRESS_FILE),
        "checkpoint": str(work_dir / CHECKPOINT_FILE),
        "model": str(work_dir / MODEL_FILE),
    }
    job_path = work_dir / JOB_FILE
    job_path.write_text(json.dumps(job))
    progress = work_dir / PROGRESS_FILE
    progress.unlink(missing_ok=True)
    env = dict(os.environ)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # --standalone: the workers talk over loopback only
    env.setdefault("OMP_NUM_THREADS", str(config.threads or 1))
    with open(work_dir / LOG_FILE, "wb") as logfile:
        proc = subprocess.Popen(
            torchrun_command(job_path, workers), stdout=logfile, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )
        seen = 0
        try:
            while True:
                finished = proc.poll() is not None
                seen = _relay(progress, seen, on_epoch)
                if finished:
                    break
                time.sleep(POLL_SECONDS)
        except BaseException:
            _terminate(proc)
            raise
    if proc.returncode != 0 or not Path(job["model"]).exists():
        # The work directory goes with the training: keep the end of the workers' log in the service's.
        lines = (work_dir / LOG_FILE).read_text(errors="replace").splitlines()
        workers_lines = [line for line in lines if line.startswith("[rank")]  # the workers' own tracebacks
        tail = (workers_lines or lines)[-LOG_TAIL_LINES:]
        log.error("torchrun job exited with status %s; last lines of its log:\n%s", proc.returncode, "\n".join(tail))
        raise TorchrunFailed(f"torchrun job exited with status {proc.returncode}")
    return Path(job["model"])


def _relay(progress: Path, seen: int, on_epoch: Callable[[EpochReport], None] | None) -> int:
    """Hand new epoch reports to ``on_epoch``; ``seen`` is the last epoch handed over (a restarted
    group resumes after its checkpoint, so a report is never handed over twice)."""
    if not progress.exists():
        return seen
    for line in progress.read_text().splitlines():
        if not line.endswith("}"):
            continue  # a line still being written
        report = EpochReport(**json.loads(line))
        if report.epoch > seen:
            seen = report.epoch
            if on_epoch is not None:
                on_epoch(report)
    return seen


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _resumable(path: Path, world: int, device: str) -> dict[str, Any] | None:
    """The checkpoint a restarted worker group continues from (one of this world size), if any."""
    if not path.exists():
        return None
    state = torch.load(path, map_location=device, weights_only=True)
    if int(state.get("world", 0)) != world:
        log.warning("checkpoint of %s workers ignored by a job of %s", state.get("world"), world)
        return None
    log.info("resuming after epoch %s from the rank-0 checkpoint", state["epoch"])
    return state


def _atomic_save(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def worker(job_path: str | Path) -> None:
    """What each torchrun process runs (RANK, WORLD_SIZE, LOCAL_RANK come from torchrun)."""
    job = json.loads(Path(job_path).read_text())
    config = TrainingConfig.model_validate(job["config"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = config.device
    if device.startswith("cuda"):
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(local_rank)
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    # torchrun's agent hosts the store; a restarted group gets its own key prefix, so it never
    # reads the addresses its dead predecessor published there.
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False, timeout=STORE_TIMEOUT
    )
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group(
        "nccl" if device.startswith("cuda") else "gloo",
        store=dist.PrefixStore(f"labeldp/attempt-{attempt}", store), rank=rank, world_size=world,
    )
    try:
        staged = StagedRelease.open(job["stage"])
        seed = int(config.seed if config.seed is not None else 0)
        plan = Plan(seed, device, np.empty(0, np.int64), np.empty(0, np.int64))
        main = rank == 0
        progress = Path(job["progress"])

        def on_epoch(report: EpochReport) -> None:
            with progress.open("a") as out:
                out.write(json.dumps(dataclasses.asdict(report)) + "\n")

        def checkpoint(state: dict[str, Any]) -> None:
            _atomic_save(state, checkpoint_path)

        checkpoint_path = Path(job["checkpoint"])
        resume = _resumable(checkpoint_path, world, device)
        (progress.parent / f"worker-{rank}.pid").write_text(str(os.getpid()))
        trained: TrainedModel
        if job.get("task", "regression") == "classification":
            trained = fit_staged_classifier(
                staged, int(job["n_classes"]), config.replace(device=device), plan, on_epoch if main else None,
                classes=list(job["classes"]), transition_matrix=job["transition_matrix"],
                workers=Workers(rank, world), checkpoint=checkpoint if main else None, resume=resume,
            )
        else:
            law = label_law(job["spec"]) if job["spec"] is not None else law_from_dict(job["law"])
            trained = fit_staged_regressor(
                staged, law, config.replace(device=device), plan, LearningConfig(**job["learning"]),
                on_epoch if main else None, Workers(rank, world), checkpoint if main else None, resume,
            )
        if main:
            trained.device_ = config.device
            trained.save(job["model"])
        dist.barrier()
    finally:
        dist.destroy_process_group()


def exit_without_teardown() -> None:
    """End a worker whose group has finished: flush what it wrote, then skip the interpreter's teardown.

    Destroying gloo's and the store's C++ objects while the interpreter shuts down aborted a rank now
    and then after the job had finished ("terminate called without an active exception", exit −6: 1 in
    12 runs of the killed-worker test, always in the restarted group), and torchrun restarted a job
    whose model was already saved. Every rank has passed the final barrier and left the group here.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    worker(sys.argv[1])
    exit_without_teardown()
