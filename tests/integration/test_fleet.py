"""The issue-22 fleet: two labels-API replicas and two release workers, as on two hosts.

Each host has its own local folder; they share one PostgreSQL catalogue and one
S3-compatible store (both the suite's own servers on loopback). Concurrent keyed releases
over overlapping label sets of one small-budget domain, sent to both APIs, while one worker
is killed with -9 mid-run (and restarted, as its supervisor would): no id ends over its
budget, the ledger holds exactly what the charged releases cost (each keyed release charged
once), and every key names one release.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from sqlalchemy import select
from tests.ledger.test_ledger import expected_from_releases, make_ctx, spent_per_id
from tests.postgres_server import PostgresServer
from tests.release_jobs import CHARGED
from tests.s3_server import S3Server

from labels_party.store import ReleaseRow

from .conftest import upload_csv, wait_for_status
from .test_replicas import replicas

pytestmark = pytest.mark.integration

BUDGET = 8  # ε per id: the domain binds long before the 40 releases end
RELEASES = 40
UNIVERSE = [f"c{i:03d}" for i in range(80)]
SETS = [UNIVERSE[0:40], UNIVERSE[20:60], UNIVERSE[40:80], UNIVERSE[0:80]]  # every id in two or three sets


def test_concurrent_releases_on_two_replicas_and_two_workers_one_killed(
    tmp_path: Path, postgres_server: PostgresServer, s3_server: S3Server
) -> None:
    database_url = postgres_server.url(postgres_server.create_database())
    storage = s3_server.url()
    fleet_env = {
        **s3_server.env(storage),
        "LABELDP_RELEASE_IN_PROCESS_WORKER": "false",  # releases run only in the two worker processes
        "LABELDP_RELEASE_LEASE_SECONDS": "2",
        "LABELDP_RELEASE_POLL_SECONDS": "0.05",
    }
    a, b = replicas(tmp_path, database_url, fleet_env)
    try:
        a.start("labels", "release-worker-a", wait=False)  # both hosts start at once
        b.start("labels", "release-worker-b", wait=False)
        a.wait_healthy("labels", 90)
        b.wait_healthy("labels", 90)
        s3 = s3_server.options()
        # the test's own view of the catalogue and the store, as a third host (once the APIs migrated it)
        ctx = make_ctx(
            database_url, tmp_path / "observer", storage_url=storage, storage_s3_endpoint=s3_server.endpoint,
            storage_s3_region=s3["region"], storage_s3_access_key=s3["access_key"],
            storage_s3_secret_key=s3["secret_key"],
        )
        with a.labels_client() as on_a, b.labels_client() as on_b:
            made = on_a.post("/v1/privacy-domains", json={"name": "fleet", "id_source": "fleet", "epsilon": BUDGET})
            assert made.status_code == 201, made.text
            fleet = made.json()["id"]
            sets = []
            for n, ids in enumerate(SETS):
                api = (on_a, on_b)[n % 2]  # made on either replica, released on both
                r = api.post("/v1/label-sets", json={
                    "name": f"s{n}", "domain": {"low": 0, "high": 1}, "privacy_domain": fleet, "ids": ids,
                })
                assert r.status_code == 201, r.text
                values = np.random.default_rng(n).uniform(0, 1, len(ids))
                assert upload_csv(api, r.json()["id"], list(zip(ids, map(float, values)))).status_code == 200
                sets.append(r.json()["id"])

            answers: dict[str, httpx.Response] = {}

            def post(k: int) -> None:
                with httpx.Client(base_url=(a, b)[k % 2].labels_url, headers=on_a.headers, timeout=60) as api:
                    answers[f"fleet-{k}"] = api.post(
                        f"/v1/label-sets/{sets[k % len(sets)]}/releases",
                        json={"mechanism": "laplace", "epsilon": 1}, headers={"idempotency-key": f"fleet-{k}"},
                    )

            threads = [threading.Thread(target=post, args=(k,)) for k in range(RELEASES)]
            for t in threads:
                t.start()
            victim = a.processes["release-worker-a"].pid
            killed_mid_job = False
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # mid-run (some jobs ended), the moment worker a holds a job
                with ctx.sessions() as s:
                    jobs = s.execute(select(ReleaseRow.status, ReleaseRow.job_owner)).all()
                ended_so_far = sum(1 for status, _ in jobs if status not in ("queued", "running"))
                running_on_a = any(st == "running" and o and o.split(":")[1] == str(victim) for st, o in jobs)
                if ended_so_far >= 3 and running_on_a:
                    a.kill("release-worker-a")
                    killed_mid_job = True
                    break
                time.sleep(0.005)
            assert killed_mid_job, "worker a never ran a job mid-run"
            a.start("release-worker-a2", wait=False)  # its supervisor restarts it: two workers race on
            for t in threads:
                t.join(60)

            accepted = {k: r.json()["id"] for k, r in answers.items() if r.status_code == 202}
            refused = [r for r in answers.values() if r.status_code != 202]
            assert all(r.status_code == 409 and r.json()["code"] == "budget_exhausted" for r in refused)
            ended = {k: wait_for_status(on_b, rid, *CHARGED, "failed", timeout=60) for k, rid in accepted.items()}
            charged = {k for k, r in ended.items() if r["status"] in CHARGED}
            for job in ended.values():
                assert job["status"] in CHARGED or job["error"]["code"] == "budget_exhausted", job
            # every key names one release, as it stands: a replay never queues another
            for k, rid in accepted.items():
                again = (on_a, on_b)[int(k.split("-")[1]) % 2].post(
                    f"/v1/label-sets/{sets[int(k.split('-')[1]) % len(sets)]}/releases",
                    json={"mechanism": "laplace", "epsilon": 1}, headers={"idempotency-key": k},
                )
                assert again.json()["id"] == rid
        with ctx.sessions() as s:
            rows = s.execute(select(ReleaseRow.id, ReleaseRow.status)).all()
        assert len(rows) == len(accepted)  # one row per accepted key, whatever was killed
        spent = spent_per_id(ctx, "fleet")
        expected = expected_from_releases(ctx)
        # exactly what the charged releases cost, each charged once (a twice-charged key would show)
        assert spent == {i: expected.get(i, 0) for i in UNIVERSE}
        assert max(spent.values()) <= BUDGET * 1_000_000  # no id over its budget
        assert max(spent.values()) == BUDGET * 1_000_000  # and the budget did bind
        assert len(charged) == sum(1 for _, status in rows if status in CHARGED) and charged
    finally:
        a.stop()
        b.stop()
