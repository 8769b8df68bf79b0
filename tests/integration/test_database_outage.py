"""The services survive their database: a SQLite write lock held past the busy timeout, and a
PostgreSQL server stopped under running services. The outbox keeps running (at start and in its
loop) and delivers afterwards; /readyz goes 503 while the database is away, /healthz stays 200.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from tests.postgres_server import PostgresServer

from labeldp.synthetic import ConversionData, make_conversions
from labeldp_tools.local_stack import LocalStack

from .conftest import create_label_set, upload_csv, wait_for_status

pytestmark = pytest.mark.integration

FAST_RETRIES = {
    "LABELDP_SQLITE_BUSY_TIMEOUT_SECONDS": "0.3",
    "LABELDP_DATABASE_CONNECT_TIMEOUT_SECONDS": "2",
    "LABELDP_OUTBOX_TIMEOUT_SECONDS": "5",  # a lease left by a delivery cut short ends after 10 s
    "LABELDP_DEFAULT_DOMAIN_EPSILON": "100",
    # A release job that meets the lock cannot hand itself back (that write is locked out too):
    # it waits for its lease to expire, 30 s by default.
    "LABELDP_RELEASE_LEASE_SECONDS": "5",
}


def _feature_table(stack: LocalStack, csv: bytes) -> None:
    with stack.features_client() as f:
        r = f.post("/v1/feature-tables", params={"name": "clicks", "id_column": "id"}, content=csv,
                   headers={"content-type": "text/csv"})
        assert r.status_code == 201, r.text


def _labelled_set(labels: httpx.Client, data: ConversionData) -> str:
    ls = create_label_set(labels, data.ids, budget=10.0, high=data.clip)
    assert upload_csv(labels, ls["id"], list(zip(data.ids, map(float, data.labels)))).status_code == 200
    return str(ls["id"])


def _release(labels: httpx.Client, label_set_id: str) -> str:
    r = labels.post(f"/v1/label-sets/{label_set_id}/releases",
                    json={"mechanism": "laplace", "epsilon": 1.0, "feature_table": "clicks"})
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


@contextmanager
def _write_locked(path: Path) -> Iterator[None]:
    """Hold SQLite's write lock from another connection, as a long transaction would."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def _wait_for_log(stack: LocalStack, name: str, text: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in stack.log_path(name).read_text(errors="replace"):
        assert stack.processes[name].poll() is None, f"{name} exited"
        assert time.monotonic() < deadline, f"{name} never logged {text!r}"
        time.sleep(0.1)


def _assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["code"] == "database_unavailable"
    assert int(response.headers["retry-after"]) > 0


def test_outbox_and_api_survive_a_locked_sqlite_database(tmp_path: Path) -> None:
    data = make_conversions(300, seed=11)
    with LocalStack(tmp_path, extra_env=FAST_RETRIES) as stack:
        stack.start("features", "labels")
        _feature_table(stack, data.to_csv())
        with stack.labels_client() as labels:
            label_set = _labelled_set(labels, data)
            first = _release(labels, label_set)  # no sender yet: it waits in the outbox

            with _write_locked(stack.workdir / "labels.db"):
                stack.start("outbox")  # its schema check needs the write lock: it must wait, not exit
                _wait_for_log(stack, "outbox", "database unavailable at start")
                _assert_unavailable(labels.post(f"/v1/label-sets/{label_set}/releases",
                                                json={"mechanism": "laplace", "epsilon": 1.0}))
                assert labels.get("/healthz").status_code == 200
                assert labels.get("/metrics").status_code == 200  # a scrape never waits for the lock
                assert stack.processes["outbox"].poll() is None
            wait_for_status(labels, first, "delivered", timeout=30)

            with _write_locked(stack.workdir / "labels.db"):  # now under the running loop
                time.sleep(1.0)  # several passes, each past the busy timeout
                _wait_for_log(stack, "outbox", "outbox pass failed (OperationalError)")
                assert stack.processes["outbox"].poll() is None
            second = _release(labels, label_set)
            wait_for_status(labels, second, "delivered", timeout=30)
            assert stack.processes["outbox"].poll() is None


def test_services_survive_a_stopped_postgresql(tmp_path: Path, postgres_server: PostgresServer) -> None:
    data = make_conversions(300, seed=12)
    labels_db, features_db = postgres_server.create_database(), postgres_server.create_database()
    env = {
        **FAST_RETRIES,
        "LABELDP_LABELS_DATABASE_URL": postgres_server.url(labels_db),
        "LABELDP_FEATURES_DATABASE_URL": postgres_server.url(features_db),
    }
    stopped = False
    try:
        with LocalStack(tmp_path, extra_env=env) as stack:
            stack.start("features", "labels", "outbox")
            _feature_table(stack, data.to_csv())
            with stack.labels_client() as labels, stack.features_client() as features:
                label_set = _labelled_set(labels, data)
                for client in (labels, features):
                    assert client.get("/readyz").status_code == 200

                postgres_server.stop()
                stopped = True
                for client in (labels, features):
                    _assert_unavailable(client.get("/readyz"))
                    assert client.get("/healthz").status_code == 200
                _assert_unavailable(labels.get(f"/v1/label-sets/{label_set}"))
                _wait_for_log(stack, "outbox", "outbox pass failed (OperationalError)")
                # /metrics reads no database: both answer, and the outbox's failed passes show up.
                assert features.get("/metrics").status_code == 200
                deadline = time.monotonic() + 20
                while "labeldp_outbox_pass_failures_total{error=\"OperationalError\"" not in (
                    scrape := labels.get("/metrics")
                ).text:
                    assert scrape.status_code == 200, scrape.text
                    assert time.monotonic() < deadline, "the outbox's failed passes never reached /metrics"
                    time.sleep(0.3)
                time.sleep(2.0)  # a few backoff rounds
                assert stack.processes["outbox"].poll() is None

                postgres_server.start()
                stopped = False
                deadline = time.monotonic() + 30
                while labels.get("/readyz").status_code != 200 or features.get("/readyz").status_code != 200:
                    assert time.monotonic() < deadline, "not ready after the database came back"
                    time.sleep(0.2)
                release = _release(labels, label_set)
                wait_for_status(labels, release, "delivered", timeout=30)
                assert features.get(f"/v1/releases/{release}").status_code == 200
                for name in ("labels", "outbox", "features"):
                    assert stack.processes[name].poll() is None, name
    finally:
        if stopped:
            postgres_server.start()
        postgres_server.drop_database(labels_db)
        postgres_server.drop_database(features_db)
