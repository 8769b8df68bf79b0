"""Exactly once over real HTTP: a retried release with the same Idempotency-Key is charged once.

The labels service runs as a real process; the kill -9 test crashes it at random points
of a release (the request, or its in-process release worker's job) and checks that retrying
with the same key ends in exactly one charge and one release, whose id every retry returns.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from labeldp_tools.local_stack import LocalStack

from .conftest import domain_id, upload_csv, wait_charged


def _labeled_set(labels: httpx.Client, domain: str, n: int, seed: int = 0) -> str:
    ids = [f"x{i:06d}" for i in range(n)]
    r = labels.post("/v1/label-sets", json={"name": "once", "domain": {"low": 0, "high": 1},
                                            "privacy_domain": domain_id(labels, domain), "ids": ids})
    assert r.status_code == 201, r.text
    values = np.random.default_rng(seed).uniform(0, 1, n)
    assert upload_csv(labels, r.json()["id"], [(i, float(v)) for i, v in zip(ids, values)]).status_code == 200
    return str(r.json()["id"])


def _domain(labels: httpx.Client, name: str, epsilon: float) -> None:
    r = labels.post("/v1/privacy-domains", json={"name": name, "id_source": name, "epsilon": epsilon})
    assert r.status_code == 201, r.text


def test_same_key_replays_the_release_and_charges_once(stack: LocalStack) -> None:
    with stack.labels_client() as labels:
        _domain(labels, "once-a", 5)
        ls = _labeled_set(labels, "once-a", 50)
        url = f"/v1/label-sets/{ls}/releases"
        body = {"mechanism": "laplace", "epsilon": 1}
        first = labels.post(url, json=body, headers={"idempotency-key": "order-1"})
        again = labels.post(url, json=body, headers={"idempotency-key": "order-1"})
        assert first.status_code == again.status_code == 202
        assert again.headers["idempotent-replay"] == "true" and again.json()["id"] == first.json()["id"]
        assert again.headers["location"] == f"/v1/releases/{first.json()['id']}"
        assert first.json()["status"] == "queued"  # a job: answered before the work
        other = labels.post(url, json={**body, "epsilon": 2}, headers={"idempotency-key": "order-1"})
        assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"
        charged = wait_charged(labels, first.json()["id"])
        late = labels.post(url, json=body, headers={"idempotency-key": "order-1"})
        # The same job, as it stands now: charged, its digest known; no second job.
        assert (late.status_code, late.json()["id"]) == (202, charged["id"])
        assert late.json()["status"] in ("pending", "delivered")
        assert late.json()["message_sha256"] == charged["message_sha256"]
        summary = labels.get(f"/v1/label-sets/{ls}").json()
        assert summary["budget"]["spent_micro"] == 1_000_000 and len(summary["releases"]) == 1
        assert labels.get(f"/v1/privacy-domains/{domain_id(labels, 'once-a')}").json()["max_spent_epsilon"] == 1.0


def test_concurrent_duplicates_make_one_release(stack: LocalStack) -> None:
    with stack.labels_client() as labels:
        _domain(labels, "once-b", 5)
        ls = _labeled_set(labels, "once-b", 20_000)
    url = f"/v1/label-sets/{ls}/releases"
    answers: list[httpx.Response] = []

    def send() -> None:
        with stack.labels_client() as c:
            answers.append(c.post(url, json={"mechanism": "laplace", "epsilon": 1},
                                  headers={"idempotency-key": "dup"}))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    created = [a for a in answers if a.status_code == 202 and "idempotent-replay" not in a.headers]
    assert len(created) == 1
    for a in answers:
        assert a.status_code == 202 or (a.status_code == 409 and a.json()["code"] == "idempotency_in_progress")
        if a.status_code == 202:
            assert a.json()["id"] == created[0].json()["id"]
        else:
            assert int(a.headers["retry-after"]) >= 1
    with stack.labels_client() as labels:
        wait_charged(labels, created[0].json()["id"])
        summary = labels.get(f"/v1/label-sets/{ls}").json()
    assert summary["budget"]["spent_micro"] == 1_000_000 and len(summary["releases"]) == 1


def _retry_until_answered(stack: LocalStack, url: str, key: str) -> httpx.Response:
    deadline = time.monotonic() + 60
    while True:
        try:
            with stack.labels_client(timeout=30) as c:
                r = c.post(url, json={"mechanism": "laplace", "epsilon": 0.5}, headers={"idempotency-key": key})
            if r.status_code == 202:
                return r
            assert r.status_code == 409 and r.json()["code"] == "idempotency_in_progress", r.text
            time.sleep(float(r.headers.get("retry-after", "1")))
        except httpx.TransportError:
            time.sleep(0.2)
        assert time.monotonic() < deadline, "the retry never got an answer"


def test_kill_9_at_any_point_of_a_release_ends_in_one_charge(tmp_path: Path) -> None:
    # A killed API's in-process release worker leaves its job's lease: short, so the next one
    # resumes it. Kills come faster than a job here, so one job may be killed several times:
    # enough attempts that none fails as worker_lost (that end is tests/ledger/test_release_jobs.py).
    stack = LocalStack(tmp_path, extra_env={"LABELDP_IDEMPOTENCY_LEASE_SECONDS": "1",
                                            "LABELDP_RELEASE_LEASE_SECONDS": "2",
                                            "LABELDP_RELEASE_MAX_ATTEMPTS": "20"})
    stack.start("labels")
    try:
        with stack.labels_client() as labels:
            _domain(labels, "crash", 100)
            ls = _labeled_set(labels, "crash", 100_000)
        url = f"/v1/label-sets/{ls}/releases"
        rng = random.Random(8)
        released: dict[str, str] = {}
        outcomes: list[str] = []
        for k in range(6):
            key = f"crash-{k}"

            def fire(key: str = key) -> None:
                try:
                    with stack.labels_client(timeout=30) as c:
                        c.post(url, json={"mechanism": "laplace", "epsilon": 0.5}, headers={"idempotency-key": key})
                except httpx.TransportError:
                    pass  # the server died under it: the client never learns the answer

            t = threading.Thread(target=fire)
            t.start()
            time.sleep(rng.uniform(0.0, 1.2))
            stack.kill("labels")
            t.join()
            stack.start("labels")
            first = _retry_until_answered(stack, url, key)
            outcomes.append("committed before the kill" if first.headers.get("idempotent-replay") else "not committed")
            again = _retry_until_answered(stack, url, key)
            assert again.json()["id"] == first.json()["id"]
            released[key] = first.json()["id"]
        with stack.labels_client() as labels:
            for release_id in released.values():
                wait_charged(labels, release_id)
            summary = labels.get(f"/v1/label-sets/{ls}").json()
            domain = labels.get(f"/v1/privacy-domains/{domain_id(labels, 'crash')}").json()
        assert sorted(r["id"] for r in summary["releases"]) == sorted(released.values())
        assert summary["budget"]["spent_micro"] == 6 * 500_000
        assert domain["max_spent_epsilon"] == 3.0
        print("kill -9 outcomes:", outcomes)
    finally:
        stack.stop()
