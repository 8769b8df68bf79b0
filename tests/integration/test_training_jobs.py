"""Trainings as jobs with owners and leases, over real processes on loopback (issue 23, item 1).

Several features APIs and ``labeldp worker features`` processes share one catalogue (SQLite
file, or a PostgreSQL database) and one data folder. Starting, stopping or killing any of
them must never fail another's training: a worker holds a lease it renews; a training whose
worker died is re-queued when its lease expires and resumed by another worker from its last
checkpoint; cancel and progress go through the database rows.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from features_party import store
from labeldp.service.database import make_engine
from labeldp.service.events import parse_events
from labeldp.synthetic import make_conversions
from labeldp_tools.local_stack import LocalStack, free_port

from .conftest import create_label_set, upload_csv, wait_for_status

pytestmark = pytest.mark.integration

LEASE_SECONDS = 3.0
START_SECONDS = 180.0  # a process imports torch before it answers; slow on a busy machine


class Fleet:
    """A LocalStack (labels API, outbox, features API "A") plus more features APIs and workers
    started from the same environment: one catalogue, one data folder."""

    def __init__(self, workdir: Path, extra_env: dict[str, str]) -> None:
        self.stack = LocalStack(workdir, extra_env=extra_env)
        self.extra: dict[str, tuple[subprocess.Popen[bytes], Any]] = {}

    def start(self) -> None:
        self.stack.start(timeout=START_SECONDS)

    def spawn(self, name: str, command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = open(self.stack.log_path(name), "ab")  # noqa: SIM115 -- open while the process runs
        proc = subprocess.Popen(
            [sys.executable, "-m", "labeldp_tools.cli", *command], env={**self.stack.env, **(env or {})},
            stdout=log, stderr=subprocess.STDOUT, cwd=self.stack.workdir,
        )
        self.extra[name] = (proc, log)
        return proc

    def api(self, name: str, env: dict[str, str] | None = None) -> str:
        """Another features API on a free port; its URL once healthy."""
        return self.wait_api(name, self.spawn_api(name, env))

    def spawn_api(self, name: str, env: dict[str, str] | None = None) -> str:
        """Start another features API on a free port without waiting for it; its URL (see wait_api)."""
        port = free_port()
        self.spawn(name, ["serve", "features", "--port", str(port)], env)
        return f"http://127.0.0.1:{port}"

    def wait_api(self, name: str, url: str) -> str:
        """``url`` once the features API ``name`` answers /healthz."""
        proc = self.extra[name][0]
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            assert proc.poll() is None, self.stack.log_path(name).read_text()[-3000:]
            try:
                if httpx.get(url + "/healthz", timeout=1.0).status_code == 200:
                    return url
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"{name} did not start")

    def worker(self, name: str) -> subprocess.Popen[bytes]:
        return self.spawn(name, ["worker", "features"])

    def client(self, url: str) -> httpx.Client:
        return httpx.Client(base_url=url, headers={"authorization": f"Bearer {self.stack.features_key}"}, timeout=60)

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        proc, log = self.extra.pop(name)
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()

    def close(self) -> None:
        for name in list(self.extra):
            self.stop(name)
        self.stack.stop()


def _release(stack: LocalStack) -> str:
    data = make_conversions(1200, seed=5)
    with stack.labels_client() as labels, stack.features_client() as features:
        r = features.post(
            "/v1/feature-tables", params={"name": "clicks", "categorical": "advertiser,campaign,device,site"},
            content=data.to_csv(), headers={"content-type": "text/csv"},
        )
        assert r.status_code == 201, r.text
        ls = create_label_set(labels, data.ids, budget=5.0, high=data.clip)
        assert upload_csv(labels, ls["id"], list(zip(data.ids, [float(v) for v in data.labels]))).status_code == 200
        response = labels.post(f"/v1/label-sets/{ls['id']}/releases",
                               json={"mechanism": "laplace", "epsilon": 1, "feature_table": "clicks"})
        assert response.status_code == 202, response.text
        release_id = response.json()["id"]
        wait_for_status(labels, release_id, "delivered")
    return str(release_id)


def _wait(client: httpx.Client, training_id: str, done, timeout: float = 240.0) -> dict:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    body: dict = {}
    while time.monotonic() < deadline:
        body = client.get(f"/v1/trainings/{training_id}").json()
        if done(body):
            return body
        time.sleep(0.1)
    raise AssertionError(f"training {training_id} never got there: {body}")


@pytest.fixture
def single_api(tmp_path: Path, database_url: str) -> Iterator[Fleet]:
    """The defaults of `make demo`: one features API whose in-process worker trains."""
    fleet = Fleet(tmp_path, {"LABELDP_FEATURES_DATABASE_URL": database_url, "LABELDP_TRAINING_THREADS": "1"})
    fleet.start()
    yield fleet
    fleet.close()


def test_starting_a_second_api_keeps_the_running_training(single_api: Fleet) -> None:
    """The measured problem of issue 23: replica B's start-up marked A's running training
    ``failed / interrupted``. Now B starts, the training keeps running and finishes."""
    fleet = single_api
    release_id = _release(fleet.stack)
    with fleet.stack.features_client() as a:
        job = a.post("/v1/trainings", json={"release_id": release_id, "epochs": 50, "batch_size": 16})
        assert job.status_code == 202, job.text
        training = job.json()["id"]
        _wait(a, training, lambda b: b["status"] == "running" and b["progress"]["epoch"] >= 1)
        b_url = fleet.api("features-b")
        with fleet.client(b_url) as b:
            assert b.get(f"/v1/trainings/{training}").json()["status"] == "running"
            end = _wait(b, training, lambda body: body["status"] in ("succeeded", "failed", "cancelled"))
        assert end["status"] == "succeeded", end
        assert end["model_id"] and end["error"] is None


@pytest.fixture
def fleet(tmp_path: Path, database_url: str) -> Iterator[Fleet]:
    """A deployment's shape: APIs without an in-process worker, trainings run by worker processes,
    short leases so a dead worker's training is picked up within seconds."""
    fleet = Fleet(tmp_path, {
        "LABELDP_FEATURES_DATABASE_URL": database_url,
        "LABELDP_TRAINING_IN_PROCESS_WORKER": "false",
        "LABELDP_TRAINING_LEASE_SECONDS": str(LEASE_SECONDS),
        "LABELDP_TRAINING_POLL_SECONDS": "0.3",
        "LABELDP_TRAINING_PROGRESS_SECONDS": "0.3",
        "LABELDP_TRAINING_THREADS": "1",
    })
    fleet.start()
    yield fleet
    fleet.close()


def _owner(database_url: str, training_id: str) -> str | None:
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            return connection.execute(
                select(store.Training.owner).where(store.Training.training_id == training_id)
            ).scalar_one()
    finally:
        engine.dispose()


def test_workers_apart_from_the_apis_run_resume_and_cancel(fleet: Fleet, database_url: str) -> None:
    """Two APIs and worker processes on one catalogue: a training queued through A runs on a worker
    and is read through B; a worker killed with SIGKILL mid-training leaves it to another worker,
    which resumes it from its checkpoint (attempt 2) to a model; a cancel sent to B stops a
    training a worker runs."""
    # B and the first worker import torch while the release is made and delivered.
    b_url = fleet.spawn_api("features-b")
    first = fleet.worker("worker-1")
    release_id = _release(fleet.stack)
    fleet.wait_api("features-b", b_url)
    with fleet.stack.features_client() as a, fleet.client(b_url) as b:
        # Queued through A while no worker of A's process exists; run by the worker, seen through B.
        quick = a.post("/v1/trainings", json={"release_id": release_id, "epochs": 2, "batch_size": 64}).json()["id"]
        done = _wait(b, quick, lambda body: body["status"] in ("succeeded", "failed", "cancelled"))
        assert done["status"] == "succeeded" and done["model_id"] and done["attempt"] == 1, done
        assert b.get(f"/v1/models/{done['model_id']}").status_code == 200

        # A long one, queued through B; its batch progress shows through A (written by the worker).
        long = b.post("/v1/trainings", json={"release_id": release_id, "epochs": 20, "batch_size": 16}).json()["id"]
        running = _wait(a, long, lambda body: body["status"] == "running" and body["progress"]["epoch"] >= 2
                        and body["progress"]["batch"] is not None)
        assert running["progress"]["batches"] == 68 and running["attempt"] == 1  # 1080 training rows, batches of 16
        owner = _owner(database_url, long)
        assert owner is not None and int(owner.split(":")[1]) == first.pid

        # The worker dies without a word; nobody fails the training, a second worker resumes it.
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        killed_at = _wait(a, long, lambda body: True)["progress"]["epoch"]
        assert killed_at >= 2
        fleet.worker("worker-2")
        resumed = _wait(a, long, lambda body: body["attempt"] == 2 and body["status"] == "running")
        assert resumed["error"] is None
        end = _wait(b, long, lambda body: body["status"] in ("succeeded", "failed", "cancelled"))
        assert end["status"] == "succeeded" and end["attempt"] == 2 and end["model_id"], end
        log = fleet.stack.log_path("worker-2").read_text()
        assert f"training {long} started" in log and "resuming after epoch" in log
        assert not list((fleet.stack.workdir / "features-data" / "checkpoints").glob("*.pt"))

        # B's event stream follows a training the worker runs, batch by batch; a cancel sent to B
        # reaches that worker (through the row) and the stream ends with it.
        stopped = a.post("/v1/trainings", json={"release_id": release_id, "epochs": 200, "batch_size": 16}).json()["id"]
        with b.stream("GET", f"/v1/trainings/{stopped}/events") as response:
            assert response.status_code == 200
            events = parse_events(response.iter_lines())
            batches = set()
            for event in events:
                batches.add(event.data["progress"]["batch"])
                if event.data["status"] == "running" and len(batches - {None}) >= 2:
                    break
            cancel = b.post(f"/v1/trainings/{stopped}/cancel")
            assert cancel.status_code == 202 and cancel.json()["status"] == "cancelling"
            rest = list(events)
        assert rest[-1].event == "end" and rest[-1].data["status"] == "cancelled"
        final = _wait(a, stopped, lambda body: body["status"] in ("succeeded", "failed", "cancelled"))
        assert final["status"] == "cancelled" and final["model_id"] is None and final["progress"]["epoch"] < 200
    models = sorted(p.name for p in (fleet.stack.workdir / "features-data" / "models").glob("*"))
    assert models == sorted(f"{m}.pt" for m in (done["model_id"], end["model_id"]))
