"""torchrun across hosts: two "hosts" on loopback (separate working folders, separate torchrun launchers,
one c10d rendezvous endpoint), against one process trained on the same seed and data order."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.s3_server import S3Server
from tests.training.data import write_table

from labeldp.learning.config import DEFAULT_LEARNING, TrainingConfig
from labeldp.learning.debiasing import label_law
from labeldp.learning.distributed import JOB_FILE, PROGRESS_FILE, STAGE_DIR, Hosts, run_torchrun
from labeldp.learning.loop import EpochReport, make_plan
from labeldp.learning.persistence import TrainedRegressor
from labeldp.learning.regression import fit_staged_regressor
from labeldp.learning.staging import StagedRelease, stage_release
from labeldp.schema import LaplaceSpec
from labeldp.specs.base import LabelDomainSpec
from labeldp.storage import ObjectStore

SPEC = LaplaceSpec(epsilon=4, domain=LabelDomainSpec(low=-12, high=12), step=0.01, scale=6)
CONFIG = TrainingConfig(epochs=4, batch_size=128, seed=21, device="cpu", threads=1, row_group_rows=250)


def same_network(a: TrainedRegressor, b: TrainedRegressor) -> None:
    """Bit for bit: every parameter equal. One process owning both data shards runs each shard's batch
    as a micro-batch and adds their gradients, as the two hosts' DDP all-reduce adds them (each rank's
    loss scaled by world / step rows: a power of 2 here, exact), so no float sum is rounded in
    another order. (With one 128-row batch instead, the parameters differed by 8.5e-4 after 4 epochs:
    Adam carries a rounding difference far.)"""
    pa_, pb = a.model_.state_dict(), b.model_.state_dict()
    assert pa_.keys() == pb.keys()
    diffs = {k: float((pa_[k] - pb[k]).abs().max()) for k in pa_}
    assert all(d == 0.0 for d in diffs.values()), diffs


def _stage(
    tmp_path: Path, n: int, config: TrainingConfig, objects: ObjectStore | None = None, partition_rows: int = 1 << 18
) -> tuple[StagedRelease, Any, TrainingConfig]:
    """Staged for this process alone, or with ``objects`` into that store under ``stages/trn_m/s1``."""
    ids, y, features = write_table(tmp_path / "f.parquet", n)
    labels = np.round(np.clip(y, -12, 12) + np.random.default_rng(9).laplace(scale=SPEC.scale, size=n), 2)
    plan = make_plan(n, config)
    is_val = np.zeros(n, bool)
    is_val[plan.val_idx] = True
    staged = stage_release(
        tmp_path / "f.parquet", "id", ids, labels, labels, is_val, tmp_path / "stage", config.row_group_rows,
        partition_rows, objects=objects, prefix="stages/trn_m/s1",
    )
    return staged, features, config.replace(seed=plan.seed)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _one_process(staged: StagedRelease, run: TrainingConfig) -> TrainedRegressor:
    """The reference: this process alone, reading both data shards of the two-host job."""
    plan = make_plan(staged.n_train + staged.n_validation, run)
    return fit_staged_regressor(staged, label_law(SPEC.model_dump(mode="json")), run.replace(data_shards=2), plan,
                                DEFAULT_LEARNING)


class TwoHosts:
    """The home launcher (``run_torchrun`` with :class:`Hosts`) in a thread, the peer's launcher
    (``python -m labeldp.learning.distributed host DIR``) as a process of its own."""

    def __init__(self, tmp_path: Path, staged: StagedRelease, run: TrainingConfig, home_addr: str) -> None:
        self.home, self.peer = tmp_path / "host-a", tmp_path / "host-b"
        self.home.mkdir()
        self.peer.mkdir()
        self.reports: list[EpochReport] = []
        self.result: dict[str, Any] = {}
        spec = SPEC.model_dump(mode="json")
        hosts = Hosts(f"127.0.0.1:{_free_port()}", (self.peer,), local_addr=home_addr)

        def home() -> None:
            try:
                self.result["model"] = run_torchrun(
                    staged, spec, label_law(spec), run, DEFAULT_LEARNING, 1, self.home, self.reports.append, hosts
                )
            except BaseException as exc:  # reported by the test
                self.result["error"] = exc

        self.thread = threading.Thread(target=home)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not (self.peer / JOB_FILE).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.delivered = sorted(p.name for p in (self.peer / STAGE_DIR).iterdir())
        self.process = subprocess.Popen(
            [sys.executable, "-m", "labeldp.learning.distributed", "host", str(self.peer), "127.0.0.1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=dict(os.environ),
        )

    def finish(self, timeout: float) -> TrainedRegressor:
        self.thread.join(timeout=timeout)
        assert self.process.wait(timeout=60) == 0, (self.peer / "torchrun.log").read_text()[-3000:]
        assert "model" in self.result, self.result.get("error")
        model: TrainedRegressor = self.result["model"]
        return model


def test_two_hosts_train_the_model_one_process_trains_on_the_same_data_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each host reads only its own data shard (the peer is delivered shard 1 of 2 and the fitted
    statistics, not the stage's other rows or the validation labels); the lead is the home host's
    process although the rendezvous ranks it 1 (its address sorts after the peer's), and the model
    is one process's, bit for bit. Planted once: dividing each rank's loss by its own rows instead
    of the step's (the shards' last steps are uneven: 1850 and 1750 rows) moved the predictions by
    0.24."""
    monkeypatch.setenv("LOGLEVEL", "INFO")  # torchrun's agents log their rendezvous ranks
    staged, features, run = _stage(tmp_path, 4000, CONFIG)
    one = _one_process(staged, run)
    hosts = TwoHosts(tmp_path, staged, run, home_addr="127.0.0.2")
    assert hosts.delivered == ["shards.json", "staged.json", "train-shard-00001-of-00002.parquet", "val.npz"]
    two = hosts.finish(timeout=110)
    assert [r.epoch for r in hosts.reports] == list(range(1, CONFIG.epochs + 1))
    assert "global_ranks=[1]" in (hosts.home / "torchrun.log").read_text()  # the lead is not rank 0
    same_network(two, one)
    assert np.array_equal(two.predict(features), one.predict(features))
    assert two.selection_ is not None and one.selection_ is not None
    assert two.selection_["selected_epoch"] == one.selection_["selected_epoch"]
    assert two.config_["workers"] == 2 and two.config_["data_shards"] == 2
    assert not (hosts.peer / STAGE_DIR).exists() and not (hosts.peer / JOB_FILE).exists()  # gone with the job


def test_a_killed_worker_on_the_peer_host_resumes_every_host_from_the_lead_checkpoint(tmp_path: Path) -> None:
    """SIGKILL the peer host's worker after the first checkpoint: both agents restart their workers in
    a new rendezvous round, the lead broadcasts its checkpoint (the peer host never had it), the
    job resumes after a finished epoch rather than from epoch 0 and ends with one process's model,
    bit for bit (the checkpoint holds model, optimizer, selection and data order; each epoch's
    order comes from (seed, epoch, shard))."""
    config = CONFIG.replace(epochs=4, row_group_rows=1000)
    staged, features, run = _stage(tmp_path, 8000, config)
    one = _one_process(staged, run)
    hosts = TwoHosts(tmp_path, staged, run, home_addr="127.0.0.1")
    progress = hosts.home / PROGRESS_FILE
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and hosts.thread.is_alive():
        if progress.exists() and len(progress.read_text().splitlines()) >= 1:
            break
        time.sleep(0.005)
    victim = int((hosts.peer / "worker-0.pid").read_text())
    os.kill(victim, signal.SIGKILL)
    resumed = hosts.finish(timeout=110)
    assert int((hosts.peer / "worker-0.pid").read_text()) != victim  # a new worker group ran on the peer
    assert [r.epoch for r in hosts.reports] == list(range(1, config.epochs + 1))  # each epoch relayed once
    assert resumed.config_["resumed_after_epoch"] >= 1, resumed.config_["resumed_after_epoch"]
    assert [h["epoch"] for h in resumed.history_] == list(range(1, config.epochs + 1))
    same_network(resumed, one)
    assert np.array_equal(resumed.predict(features), one.predict(features))


def test_one_host_stays_standalone_and_an_endpoint_makes_a_c10d_job_of_every_host(tmp_path: Path) -> None:
    """Without LABELDP_TORCHRUN_RDZV_ENDPOINT the launch is the single-host one; with it, the c10d
    rendezvous at that endpoint with one node per host (this one and each peer folder) and a fresh id."""
    from features_party.context import torchrun_hosts
    from labeldp.learning.distributed import torchrun_command
    from labeldp.service.settings import Settings

    assert torchrun_hosts(Settings()) is None
    alone = torchrun_command(tmp_path / JOB_FILE, 2)
    assert "--standalone" in alone and "--nnodes=1" in alone
    settings = Settings(torchrun_rdzv_endpoint="10.0.0.5:29400", torchrun_peer_dirs=f"{tmp_path}/b, {tmp_path}/c")
    hosts = torchrun_hosts(settings)
    assert hosts is not None and hosts.peers == (tmp_path / "b", tmp_path / "c")
    first, second = hosts.rendezvous(), hosts.rendezvous()
    assert first.nnodes == 3 and first.run_id != second.run_id and not first.loopback
    command = torchrun_command(tmp_path / JOB_FILE, 2, first, "10.0.0.4")
    assert "--standalone" not in command
    assert {"--rdzv-backend=c10d", "--rdzv-endpoint=10.0.0.5:29400", "--nnodes=3", f"--rdzv-id={first.run_id}",
            "--local-addr=10.0.0.4", "--nproc_per_node=2"} <= set(command)
    with pytest.raises(ValueError):
        Hosts("no-port", ())


def test_two_hosts_through_the_s3_store_share_no_folder_and_train_one_process_model(
    tmp_path: Path, s3_server: S3Server
) -> None:
    """Named peers (LABELDP_TORCHRUN_PEER_NAMES): the stage lies in the object store (moto's S3 here,
    ~8 id-hash partitions); the home launcher puts only the peer's job in its mailbox, and the peer
    (``labeldp torchrun-host``, a process with only its own folder and the store's settings) takes it;
    its rank reads its own data shard straight from the stage's partition objects. The model is one
    process's, bit for bit; nothing but the stage is left in the store, and no row passed through
    the launcher (the job is the one object it wrote). Planted once: the peer rank reading shard 0
    instead of its own made the job fail (its rows dealt wrong: test_stage_store checks them)."""
    config = CONFIG.replace(epochs=2)
    url = s3_server.url()
    objects = s3_server.store(url)
    staged, features, run = _stage(tmp_path, 2000, config, objects, partition_rows=256)
    assert staged.store_prefix == "stages/trn_m/s1"
    stage_objects = set(objects.list(""))
    one = _one_process(staged, run)
    home, peer = tmp_path / "host-a", tmp_path / "host-b"
    home.mkdir()
    hosts = Hosts(f"127.0.0.1:{_free_port()}", ("b",), local_addr="127.0.0.1", objects=objects)
    spec = SPEC.model_dump(mode="json")
    env = {**os.environ, **s3_server.env(url), "LABELDP_FEATURES_DATA_DIR": str(tmp_path / "peer-data")}
    process = subprocess.Popen(
        [sys.executable, "-m", "labeldp_tools.cli", "torchrun-host", "b", str(peer), "--local-addr", "127.0.0.1",
         "--once"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
    )
    written = _record_writes(objects)
    try:
        two = run_torchrun(staged, spec, label_law(spec), run, DEFAULT_LEARNING, 1, home, None, hosts)
        output = process.communicate(timeout=60)[0]
        assert process.returncode == 0, output.decode(errors="replace")[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
    same_network(two, one)
    assert np.array_equal(two.predict(features), one.predict(features))
    assert set(written) == {"torchrun/hosts/b/job.json"}  # the job alone: no shard went through the launcher
    assert set(objects.list("")) == stage_objects  # the delivery taken; the stage stays the training's
    assert not (peer / STAGE_DIR).exists() and not (peer / JOB_FILE).exists()
    assert not (home / STAGE_DIR).exists()  # nothing was delivered to a folder


def _record_writes(objects: ObjectStore) -> list[str]:
    """The keys the home launcher writes from now on (every way of writing an object, still done)."""
    written: list[str] = []
    for name in ("put_bytes", "put_file", "open_output_stream"):
        method = getattr(objects, name)

        def recorded(key: str, *args: Any, _method: Any = method) -> Any:
            written.append(key)
            return _method(key, *args)

        setattr(objects, name, recorded)
    return written


def test_a_job_through_the_store_needs_its_stage_there(tmp_path: Path, s3_server: S3Server) -> None:
    """A stage kept for one process (not in the store) cannot be read by a peer's ranks: refused before
    any job is delivered."""
    staged, _, run = _stage(tmp_path, 300, CONFIG)
    objects = s3_server.store()
    hosts = Hosts(f"127.0.0.1:{_free_port()}", ("b",), local_addr="127.0.0.1", objects=objects)
    spec = SPEC.model_dump(mode="json")
    with pytest.raises(ValueError, match="needs its stage"):
        run_torchrun(staged, spec, label_law(spec), run, DEFAULT_LEARNING, 1, tmp_path, None, hosts)
    assert objects.list("") == []


def test_named_peers_are_reached_through_the_store(tmp_path: Path) -> None:
    from features_party.context import torchrun_hosts
    from labeldp.service.settings import Settings

    settings = Settings(torchrun_rdzv_endpoint="10.0.0.5:29400", torchrun_peer_names="b, c",
                        torchrun_peer_dirs=f"{tmp_path}/x", features_data_dir=tmp_path / "data")
    hosts = torchrun_hosts(settings)
    assert hosts is not None and hosts.peers == ("b", "c") and hosts.objects is not None
    assert hosts.objects.url == str(tmp_path / "data") and hosts.rendezvous().nnodes == 3
