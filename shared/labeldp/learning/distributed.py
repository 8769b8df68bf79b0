"""Data-parallel training as a torchrun job, on one host or several: the launchers, and the worker every process runs.

One host (the default): the launcher writes ``job.json`` next to the staged release and starts
``python -m torch.distributed.run --standalone --nproc_per_node N -m labeldp.learning.distributed job.json``
(gloo on the CPU, NCCL on GPUs; loopback rendezvous).

Several hosts (:class:`Hosts`: ``LABELDP_TORCHRUN_RDZV_ENDPOINT`` set): torchrun's c10d rendezvous
at that endpoint, ``--nnodes`` = 1 + the peers; the hosts share only it and the process group. The
training rows are dealt into one data shard per process (:mod:`labeldp.learning.loader`); the home
host (its launcher owns the training) delivers each peer its ``job.json`` — to its mailbox in the
object store, which :func:`host` there waits for, or into its folder. Through the store no row
passes the launcher: the job names the stage's prefix, and each peer rank reads its own shard from
the stage's partition objects (:func:`~labeldp.learning.loader.fetch_own_shards`; the store from
``STORE_ENV``). Into a folder, the launcher copies the peer's shards and fitted statistics.

Every worker fits its shards (``fit_staged_regressor`` or ``fit_staged_classifier``). The
*lead* — local rank 0 of the home host — alone evaluates the validation rows, runs private
model selection, checkpoints into the home folder after each epoch, appends each epoch's
report to ``progress.jsonl`` and saves the model. When a worker dies torchrun restarts the
group (up to ``MAX_RESTARTS`` times); the lead broadcasts the checkpoint to every rank.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from labeldp.learning.classifier import fit_staged_classifier
from labeldp.learning.config import LearningConfig, TrainingConfig
from labeldp.learning.debiasing import LabelLaw, label_law, law_from_dict
from labeldp.learning.loader import copy_shards, fetch_own_shards, stage_layout
from labeldp.learning.loop import EpochReport, Plan, Workers
from labeldp.learning.persistence import TrainedClassifier, TrainedModel, TrainedRegressor
from labeldp.learning.regression import fit_staged_regressor
from labeldp.learning.staging import META_FILE, StagedRelease
from labeldp.storage import ObjectStore

log = logging.getLogger("labeldp.features")

JOB_FILE, PROGRESS_FILE, CHECKPOINT_FILE, MODEL_FILE, LOG_FILE, STAGE_DIR = (
    "job.json", "progress.jsonl", "checkpoint.pt", "model.pt", "torchrun.log", "stage",
)
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
HOST_WAIT_SECONDS = 600.0
"""How long a peer host waits for the home launcher to deliver its copy of the job."""
POLL_SECONDS = 0.2
LOG_TAIL_LINES = 30
STORE_TIMEOUT = datetime.timedelta(minutes=5)
MAILBOX = "torchrun/hosts"
"""Under the object store: one folder per peer host name, holding the job delivered to it."""
MAX_RESTARTS = 2
STORE_ENV = "LABELDP_TORCHRUN_STORE"
"""In a peer's torchrun environment: the object store (URL and options, JSON) its ranks read their shards from."""
"""torchrun restarts the whole worker group this often after a worker dies; it resumes from the checkpoint."""


class TorchrunFailed(RuntimeError):
    """The torchrun job exited without a model (its log is ``torchrun.log`` in the work directory)."""


@dataclass(frozen=True)
class Rendezvous:
    """Where the hosts of one job meet: torchrun's c10d rendezvous (``run_id`` names the job there)."""

    endpoint: str
    nnodes: int
    run_id: str

    @property
    def loopback(self) -> bool:
        host = self.endpoint.rsplit(":", 1)[0]
        return host in LOOPBACK or host.startswith("127.")

    def args(self, local_addr: str | None = None) -> list[str]:
        """``local_addr``: this host's address as the others reach it (default: its hostname)."""
        args = ["--rdzv-backend=c10d", f"--rdzv-endpoint={self.endpoint}", f"--rdzv-id={self.run_id}",
                f"--nnodes={self.nnodes}"]
        return args + ([f"--local-addr={local_addr}"] if local_addr else [])

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Hosts:
    """A multi-node job as its home launcher sees it: the rendezvous endpoint (``host:port``) and each
    peer host, reached through the object store (``objects`` set: ``peers`` are host names, each with
    its mailbox :func:`mailbox_key`) or, without one, through that host's own working folder (a path)."""

    endpoint: str
    peers: tuple[Path | str, ...]
    local_addr: str | None = None
    """The home host's address as the others reach it (default: its hostname)."""
    objects: ObjectStore | None = None
    """The store the home launcher and every peer share; None: deliver to the peers' folders."""

    def __post_init__(self) -> None:
        host, _, port = self.endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError("the rendezvous endpoint must be host:port")

    def rendezvous(self) -> Rendezvous:
        """A fresh rendezvous id per job: a restarted service never joins a dead job's round."""
        return Rendezvous(self.endpoint, 1 + len(self.peers), uuid.uuid4().hex)


def torchrun_command(
    job_path: Path, workers: int, rendezvous: Rendezvous | None = None, local_addr: str | None = None
) -> list[str]:
    """torchrun for one host's part of a job: ``--standalone`` alone, else the c10d rendezvous."""
    where = ["--standalone", "--nnodes=1"] if rendezvous is None else rendezvous.args(local_addr)
    return [
        sys.executable, "-m", "torch.distributed.run", *where,
        f"--nproc_per_node={workers}", f"--max-restarts={MAX_RESTARTS}",
        "-m", "labeldp.learning.distributed", str(job_path),
    ]


def torchrun_env(
    config_threads: int, rendezvous: Rendezvous | None, objects: ObjectStore | None = None
) -> dict[str, str]:
    """The launcher's environment for torchrun; with ``objects``, the store its ranks read from (``STORE_ENV``)."""
    env = dict(os.environ)
    if objects is not None:
        env[STORE_ENV] = json.dumps({"url": objects.url, "options": objects.options})
    if rendezvous is None or rendezvous.loopback:
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the workers talk over loopback only
    if rendezvous is not None:
        # Each round gets a store of its own, hosted by its rank 0: the agents of several hosts
        # count their restarts apart, so a key prefix by restart count could differ between ranks.
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    env.setdefault("OMP_NUM_THREADS", str(config_threads or 1))
    return env


def run_torchrun(
    staged: StagedRelease,
    spec: Any,
    law: LabelLaw,
    config: TrainingConfig,
    learning: LearningConfig,
    workers: int,
    work_dir: Path,
    on_epoch: Callable[[EpochReport], None] | None = None,
    hosts: Hosts | None = None,
    *,
    prior: Any = None,
) -> TrainedRegressor:
    """Train ``staged`` with ``workers`` processes (on each of ``hosts``); relay progress; return the lead's model.

    ``spec`` (the release's mechanism spec, JSON) rebuilds the law exactly in every
    worker; ``None`` sends ``law`` as its plain dict. ``prior`` (the release's DP prior, spec or
    JSON dict) travels as JSON to the lead, whose selection puts its mean in the anchor as in memory.
    ``config.seed`` must be set (the split of the stage was drawn from it). If ``on_epoch`` raises (a stop request), the
    job's processes are terminated and the exception goes on.
    """
    job = {
        "task": "regression",
        "spec": spec,
        "law": law.to_dict() if spec is None else None,
        "learning": learning.to_dict(),
        "prior": prior.model_dump(mode="json") if hasattr(prior, "model_dump") else prior,
    }
    model = _launch(staged, job, config, workers, work_dir, on_epoch, hosts)
    return TrainedRegressor.load(model, device=config.device)


def run_torchrun_classifier(
    staged: StagedRelease,
    n_classes: int,
    classes: list[str],
    transition_matrix: Any,
    config: TrainingConfig,
    workers: int,
    work_dir: Path,
    on_epoch: Callable[[EpochReport], None] | None = None,
    hosts: Hosts | None = None,
) -> TrainedClassifier:
    """:func:`run_torchrun` for a categorical release staged with its class indices as targets: every
    worker trains the classifier (cross-entropy, or forward correction through ``transition_matrix``)."""
    matrix = None if transition_matrix is None else np.asarray(transition_matrix, dtype=np.float64).tolist()
    job = {"task": "classification", "n_classes": n_classes, "classes": list(classes), "transition_matrix": matrix}
    model = _launch(staged, job, config, workers, work_dir, on_epoch, hosts)
    return TrainedClassifier.load(model, device=config.device)


def _launch(
    staged: StagedRelease,
    task: dict[str, Any],
    config: TrainingConfig,
    workers: int,
    work_dir: Path,
    on_epoch: Callable[[EpochReport], None] | None,
    hosts: Hosts | None = None,
) -> Path:
    """Write the job file (``task``: what to train), deliver each peer host its copy, and run this host's
    torchrun; the model file the lead wrote."""
    if config.seed is None:
        raise ValueError("a torchrun job needs the seed its stage was split with")
    job: dict[str, Any] = {
        **task,
        "stage": str(staged.directory),
        "config": config.model_dump(),
        "progress": PROGRESS_FILE,
        "checkpoint": CHECKPOINT_FILE,
        "model": MODEL_FILE,
        "home": True,
        "shards": None,
        "rendezvous": None,
    }
    rendezvous = hosts.rendezvous() if hosts is not None else None
    try:
        if hosts is not None and rendezvous is not None:
            job = _deal_hosts(staged, job, config, workers, work_dir, hosts, rendezvous)
        job_path = work_dir / JOB_FILE
        _write_atomic(job_path, json.dumps(job))
        (work_dir / PROGRESS_FILE).unlink(missing_ok=True)
        return _run_home(job_path, work_dir, config, workers, on_epoch, hosts, rendezvous)
    finally:
        if hosts is not None and rendezvous is not None:
            _withdraw(hosts, rendezvous.run_id)


def _run_home(
    job_path: Path,
    work_dir: Path,
    config: TrainingConfig,
    workers: int,
    on_epoch: Callable[[EpochReport], None] | None,
    hosts: Hosts | None,
    rendezvous: Rendezvous | None,
) -> Path:
    """This host's torchrun, its progress relayed; the model file the lead wrote."""
    progress = work_dir / PROGRESS_FILE
    env = torchrun_env(config.threads, rendezvous)
    with open(work_dir / LOG_FILE, "wb") as logfile:
        proc = subprocess.Popen(
            torchrun_command(job_path, workers, rendezvous, hosts.local_addr if hosts else None), stdout=logfile,
            stderr=subprocess.STDOUT, env=env,
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
    if proc.returncode != 0 or not (work_dir / MODEL_FILE).exists():
        # The work directory goes with the training: keep the end of the workers' log in the service's.
        lines = (work_dir / LOG_FILE).read_text(errors="replace").splitlines()
        workers_lines = [line for line in lines if line.startswith("[rank")]  # the workers' own tracebacks
        tail = (workers_lines or lines)[-LOG_TAIL_LINES:]
        log.error("torchrun job exited with status %s; last lines of its log:\n%s", proc.returncode, "\n".join(tail))
        raise TorchrunFailed(f"torchrun job exited with status {proc.returncode}")
    return work_dir / MODEL_FILE


def _deal_hosts(
    staged: StagedRelease,
    job: dict[str, Any],
    config: TrainingConfig,
    workers: int,
    work_dir: Path,
    hosts: Hosts,
    rendezvous: Rendezvous,
) -> dict[str, Any]:
    """Cut the training rows into one data shard per process of the job and deliver each peer host
    (node ``h`` ≥ 1, in ``hosts.peers`` order) its job file. Through the store the job names the stage
    there and the peer's shards, which its ranks read themselves; into a peer's folder, the launcher
    copies its shards and the fitted statistics (no validation rows or labels: the lead, beside this
    launcher, alone evaluates) and writes the job file last. The home host reads its own shards from
    its cache of the stage; the home job."""
    shards = rendezvous.nnodes * workers
    job = {**job, "config": config.replace(data_shards=shards).model_dump(), "rendezvous": rendezvous.to_dict()}
    if hosts.objects is not None and staged.store_prefix is None:
        raise ValueError("a job across hosts through the object store needs its stage there (stage_to_store)")
    layout = stage_layout(staged.directory, shards) if hosts.objects is None else None
    for node, folder in enumerate(hosts.peers, start=1):
        own = [node * workers + i for i in range(workers)]
        if hosts.objects is not None:  # through the store: no folder of the peer is reached from here
            peer = {**job, "stage": STAGE_DIR, "stage_store": staged.store_prefix, "shards": own, "home": False}
            hosts.objects.put_bytes(mailbox_key(str(folder)), json.dumps(peer).encode())
            continue
        assert layout is not None
        stage = Path(folder) / STAGE_DIR
        copy_shards(layout, own, stage)
        dataclasses.replace(staged, directory=stage, val_labels=np.empty((0,))).save()
        peer = {**job, "stage": STAGE_DIR, "shards": own, "home": False}
        _write_atomic(Path(folder) / JOB_FILE, json.dumps(peer))
    return {**job, "shards": list(range(workers))}


def mailbox_key(name: str) -> str:
    """Where a peer host called ``name`` finds the job delivered to it (one at a time): its job file."""
    return f"{MAILBOX}/{name}/{JOB_FILE}"


def _withdraw(hosts: Hosts, run_id: str) -> None:
    """After a job through the store: every delivery no peer took, removed (the stage stays: the training owns it)."""
    objects = hosts.objects
    if objects is None:
        return
    for name in hosts.peers:
        key = mailbox_key(str(name))
        try:
            if objects.exists(key) and json.loads(objects.get_bytes(key))["rendezvous"]["run_id"] == run_id:
                objects.delete(key)
        except Exception as exc:  # cleaning up is best effort: the job's outcome is decided
            log.warning("torchrun job %s: delivery to %s not withdrawn (%s)", run_id, name, type(exc).__name__)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def host(
    folder: str | Path,
    local_addr: str | None = None,
    wait_seconds: float = HOST_WAIT_SECONDS,
    objects: ObjectStore | None = None,
    name: str | None = None,
) -> int:
    """A peer host's part of a multi-node job: wait for the home launcher's delivery of ``job.json`` to
    ``folder`` (this host's own working folder) or, with ``objects``, to this host's mailbox in the store
    (``name``: the host's name in the home's peers; its ranks then read their shards from the store into
    ``folder``), run its torchrun (log in ``torchrun.log``; ``local_addr``: this host's address as the
    others reach it), then remove the copy of the stage and the job file (the folder is ready for the
    next delivery); torchrun's exit status."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    job_path = folder / JOB_FILE
    if objects is not None:
        if not name:
            raise ValueError("a peer host reached through the store needs its name")
        _take_delivery(objects, name, folder, wait_seconds)
    deadline = time.monotonic() + wait_seconds
    while not job_path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no job was delivered to {folder} in {wait_seconds:.0f} s")
        time.sleep(POLL_SECONDS)
    job = json.loads(job_path.read_text())
    rendezvous = Rendezvous(**job["rendezvous"])
    config = TrainingConfig.model_validate(job["config"])
    with open(folder / LOG_FILE, "wb") as logfile:
        proc = subprocess.Popen(
            torchrun_command(job_path, len(job["shards"]), rendezvous, local_addr), stdout=logfile,
            stderr=subprocess.STDOUT, env=torchrun_env(config.threads, rendezvous, objects), start_new_session=True,
        )
        try:
            proc.wait()
        except BaseException:
            _terminate(proc)
            raise
    shutil.rmtree(folder / STAGE_DIR, ignore_errors=True)
    job_path.unlink(missing_ok=True)
    return proc.returncode


def _take_delivery(objects: ObjectStore, name: str, folder: Path, wait_seconds: float) -> None:
    """Wait for the job in this host's mailbox, take it (remove it there) and write it into ``folder``."""
    key = mailbox_key(name)
    deadline = time.monotonic() + wait_seconds
    while not objects.exists(key):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no job was delivered to {name!r} in {wait_seconds:.0f} s")
        time.sleep(POLL_SECONDS)
    job = json.loads(objects.get_bytes(key))
    objects.delete(key)
    _write_atomic(folder / JOB_FILE, json.dumps(job))


def _own_stage(folder: Path, job: dict[str, Any], shards: int, local_rank: int) -> StagedRelease:
    """This rank's stage: the host's copy, or (``stage_store`` in the job) its own shard read straight from
    the stage in the store named by ``STORE_ENV`` into a folder of its own (kept for a restarted group)."""
    if not job.get("stage_store"):
        return StagedRelease.open(folder / job["stage"])
    directory = folder / job["stage"] / f"rank-{local_rank}"
    if (directory / META_FILE).exists():  # written last: a complete copy
        return StagedRelease.open(directory)
    spec = json.loads(os.environ[STORE_ENV])
    objects = ObjectStore.from_url(spec["url"], **spec["options"])
    return fetch_own_shards(objects, str(job["stage_store"]), [int(job["shards"][local_rank])], shards, directory)


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


def _resumable(path: Path, world: int) -> dict[str, Any] | None:
    """The checkpoint a restarted worker group continues from (one of this world size), if any: read by
    the lead (on the CPU: it is broadcast to every rank next)."""
    if not path.exists():
        return None
    state = torch.load(path, map_location="cpu", weights_only=True)
    if int(state.get("world", 0)) != world:
        log.warning("checkpoint of %s workers ignored by a job of %s", state.get("world"), world)
        return None
    log.info("resuming after epoch %s from the lead's checkpoint", state["epoch"])
    return state


def _atomic_save(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _join_group(rank: int, world: int, backend: str) -> None:
    """Join the process group through the store torchrun's agents prepared for this round."""
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True):
        # One host: its agent hosts the store for every round; a restarted group gets its own key
        # prefix, so it never reads the addresses its dead predecessor published there.
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        agent = dist.TCPStore(addr, port, world, is_master=False, timeout=STORE_TIMEOUT)
        store: dist.Store = dist.PrefixStore(f"labeldp/attempt-{attempt}", agent)
    else:  # several hosts: this round's rank 0 hosts a fresh store at the port its agent chose
        store = dist.TCPStore(addr, port, world, is_master=rank == 0, timeout=STORE_TIMEOUT)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world)


def _find_lead(is_lead: bool, world: int) -> int:
    """The rank of the one process that says it leads (local rank 0 beside the home launcher)."""
    flags: list[Any] = [None] * world
    dist.all_gather_object(flags, is_lead)
    leads = [r for r, flag in enumerate(flags) if flag]
    if len(leads) != 1:
        raise RuntimeError(f"a job needs exactly one lead process, found {len(leads)}")
    return leads[0]


def worker(job_path: str | Path) -> None:
    """What each torchrun process runs (RANK, WORLD_SIZE, LOCAL_RANK come from torchrun); the job's
    relative paths are its host folder's (the folder of ``job_path``)."""
    folder = Path(job_path).parent
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
    _join_group(rank, world, "nccl" if device.startswith("cuda") else "gloo")
    try:
        lead = _find_lead(bool(job.get("home", True)) and local_rank == 0, world)
        shards = None if job.get("shards") is None else (int(job["shards"][local_rank]),)
        workers = Workers(rank, world, lead, shards)
        staged = _own_stage(folder, job, config.data_shards or world, local_rank)
        seed = int(config.seed if config.seed is not None else 0)
        plan = Plan(seed, device, np.empty(0, np.int64), np.empty(0, np.int64))
        main = workers.is_main
        progress = folder / job["progress"]
        checkpoint_path = folder / job["checkpoint"]

        def on_epoch(report: EpochReport) -> None:
            with progress.open("a") as out:
                out.write(json.dumps(dataclasses.asdict(report)) + "\n")

        def checkpoint(state: dict[str, Any]) -> None:
            _atomic_save(state, checkpoint_path)

        shared: list[Any] = [_resumable(checkpoint_path, world) if main else None]
        dist.broadcast_object_list(shared, src=lead)  # hosts without the checkpoint resume from it too
        resume = shared[0]
        (folder / f"worker-{local_rank}.pid").write_text(str(os.getpid()))
        trained: TrainedModel
        run = config.replace(device=device)
        if job.get("task", "regression") == "classification":
            trained = fit_staged_classifier(
                staged, int(job["n_classes"]), run, plan, on_epoch if main else None,
                classes=list(job["classes"]), transition_matrix=job["transition_matrix"],
                workers=workers, checkpoint=checkpoint if main else None, resume=resume,
            )
        else:
            law = label_law(job["spec"]) if job["spec"] is not None else law_from_dict(job["law"])
            trained = fit_staged_regressor(
                staged, law, run, plan, LearningConfig(**job["learning"]),
                on_epoch if main else None, workers, checkpoint if main else None, resume, job.get("prior"),
            )
        if main:
            trained.device_ = config.device
            trained.save(folder / job["model"])
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
    if sys.argv[1] == "host":  # a peer host: python -m labeldp.learning.distributed host DIR [LOCAL_ADDR]
        sys.exit(host(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
    worker(sys.argv[1])
    exit_without_teardown()
