"""Several outbox processes on one PostgreSQL ledger: each release is sent once.

Issue 24 measured four senders pushing 14 of 150 releases twice (the inbox deduplicated): two
senders read the same due rows and both leased them. Here the releases are charged while no
sender runs, then four start at once; the inbox's own count of what it received says how many
times each was sent.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from tests.postgres_server import PostgresServer

from labeldp_tools.local_stack import LocalStack

from .conftest import create_label_set, upload_csv

SENDERS = 4
RELEASES = 40


def _inbox_counts(text: str) -> dict[str, float]:
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(r'^labeldp_inbox_messages_total\{result="([a-z_]+)"\} (\S+)$', text, re.M)
    }


def test_four_senders_send_each_release_once(tmp_path: Path, postgres_server: PostgresServer) -> None:
    env = {
        "LABELDP_LABELS_DATABASE_URL": postgres_server.url(postgres_server.create_database()),
        "LABELDP_DEFAULT_DOMAIN_EPSILON": "1000",
        "LABELDP_OUTBOX_POLL_SECONDS": "0.05",
    }
    senders: list[subprocess.Popen[bytes]] = []
    with LocalStack(tmp_path, extra_env=env) as stack:
        stack.start("labels", "features", timeout=180)
        with stack.labels_client() as labels, stack.features_client() as features:
            ids = [f"c{i:03d}" for i in range(10)]
            ls = create_label_set(labels, ids, 1000.0, 1.0)
            assert upload_csv(labels, ls["id"], [(i, 0.5) for i in ids]).status_code == 200
            released = []
            for _ in range(RELEASES):
                r = labels.post(
                    f"/v1/label-sets/{ls['id']}/releases",
                    json={"mechanism": "laplace", "epsilon": 1.0, "feature_table": "clicks"},
                )
                assert r.status_code == 202, r.text
                released.append(r.json()["id"])
            try:
                for k in range(SENDERS):
                    log = open(stack.log_path(f"outbox-{k}"), "ab")  # noqa: SIM115 -- closed with the process
                    senders.append(subprocess.Popen(
                        stack._command("outbox"), env=stack.env, stdout=log, stderr=subprocess.STDOUT,
                        cwd=stack.workdir,
                    ))
                deadline = time.monotonic() + 120
                while True:
                    listed = labels.get("/v1/releases", params={"limit": 100}).json()["items"]
                    if sum(r["status"] == "delivered" for r in listed) == RELEASES:
                        break
                    assert time.monotonic() < deadline, [r["status"] for r in listed]
                    time.sleep(0.2)
            finally:
                for proc in senders:
                    proc.terminate()
                for proc in senders:
                    proc.wait(15)
            counts = _inbox_counts(features.get("/metrics").text)
            assert counts.get("manifest_new") == counts.get("complete") == RELEASES, counts
            # no release was sent twice: no manifest arrived again, no shard was a duplicate
            assert counts.get("manifest_complete", 0) == counts.get("shard_duplicate", 0) == 0, counts
            assert {r["id"] for r in listed} == set(released)
