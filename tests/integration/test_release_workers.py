"""Release jobs across processes: the API answers 202 before any work, and a release worker
killed with -9 in the middle of a job leaves it to another worker, which charges it once.

The labels API runs with its in-process worker off (as a deployment would); release workers
are ``labeldp worker labels`` processes on the same SQLite catalogue and local object store.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import numpy as np

from labeldp_tools.local_stack import LocalStack

from .conftest import upload_csv, wait_charged


def _job_owner(stack: LocalStack, release_id: str) -> str | None:
    with sqlite3.connect(stack.workdir / "labels.db") as db:
        return db.execute("SELECT job_owner FROM releases WHERE id = ?", (release_id,)).fetchone()[0]


N = 60_000  # enough that privatizing and writing the message outlast the poll that sees it running


def test_a_worker_killed_mid_job_leaves_it_to_another_that_charges_once(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path, extra_env={
        "LABELDP_RELEASE_IN_PROCESS_WORKER": "false", "LABELDP_RELEASE_LEASE_SECONDS": "2",
        "LABELDP_RELEASE_POLL_SECONDS": "0.1",
    })
    stack.start("labels")
    try:
        with stack.labels_client() as labels:
            domain = labels.post("/v1/privacy-domains", json={"name": "jobs", "id_source": "jobs", "epsilon": 5})
            assert domain.status_code == 201, domain.text
            ids = [f"j{i:07d}" for i in range(N)]
            r = labels.post("/v1/label-sets", json={"name": "jobs", "domain": {"low": 0, "high": 1},
                                                    "privacy_domain": domain.json()["id"], "ids": ids})
            assert r.status_code == 201, r.text
            ls = r.json()["id"]
            values = np.random.default_rng(3).uniform(0, 1, N)
            assert upload_csv(labels, ls, list(zip(ids, map(float, values)))).status_code == 200

            url = f"/v1/label-sets/{ls}/releases"
            body, key = {"mechanism": "laplace", "epsilon": 1}, {"idempotency-key": "job-1"}
            started = time.monotonic()
            first = labels.post(url, json=body, headers=key)
            answered = time.monotonic() - started
            # 202 before the work: no release worker runs yet, so nothing can have been done.
            assert first.status_code == 202, first.text
            release_id = first.json()["id"]
            assert (first.json()["status"], first.json()["stage"], first.json()["job_attempts"]) == (
                "queued", "accepted", 0
            )
            assert answered < 10, answered
            assert labels.get(f"/v1/label-sets/{ls}").json()["budget"]["spent_micro"] == 0
            replay = labels.post(url, json=body, headers=key)
            assert (replay.status_code, replay.json()["id"]) == (202, release_id)
            assert replay.headers["idempotent-replay"] == "true"

            workers = ("release-worker-1", "release-worker-2", "release-worker-3")
            stack.start(*workers)  # several may run: one claims the job
            deadline = time.monotonic() + 90
            while labels.get(f"/v1/releases/{release_id}").json()["status"] == "queued":
                assert time.monotonic() < deadline, "no worker claimed the job"
                time.sleep(0.02)
            owner = _job_owner(stack, release_id)  # host:pid:random, written by the claim
            (claimer,) = [w for w in workers if stack.processes[w].pid == int(owner.split(":")[1])]
            stack.kill(claimer)  # mid-job: it had claimed it and is privatizing
            running = labels.get(f"/v1/releases/{release_id}").json()
            assert (running["status"], running["stage"], running["job_attempts"]) == ("running", "privatizing", 1)
            assert labels.get(f"/v1/label-sets/{ls}").json()["budget"]["spent_micro"] == 0

            charged = wait_charged(labels, release_id, timeout=90)
            assert (charged["status"], charged["job_attempts"]) == ("pending", 2)
            summary = labels.get(f"/v1/label-sets/{ls}").json()
            assert summary["budget"]["spent_micro"] == 1_000_000
            assert [x["id"] for x in summary["releases"]] == [release_id]
            assert labels.get(f"/v1/privacy-domains/{domain.json()['id']}").json()["max_spent_epsilon"] == 1.0
            again = labels.post(url, json=body, headers=key)  # the same job, as it stands now
            assert (again.json()["id"], again.json()["status"]) == (release_id, "pending")
        logs = "".join(stack.log_path(w).read_text() for w in workers if w != claimer)
        assert f"release {release_id} re-queued: its worker's lease expired" in logs
        assert _job_owner(stack, release_id) is None
    finally:
        stack.stop()
