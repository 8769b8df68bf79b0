"""Lists, cancel, the bounded queue and the event streams, over real HTTP between real processes.

The stack's training queue holds two: a long training runs, two wait, a fourth is refused
with 429 and Retry-After; cancels free the queue; the event streams show batch-level
progress and end when each job does, carrying no raw label.
"""

from __future__ import annotations

import re
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from labeldp.service.events import Event, parse_events
from labeldp.synthetic import make_conversions
from labeldp_tools.local_stack import LocalStack

from .conftest import create_label_set, upload_csv

pytestmark = pytest.mark.integration

CANARIES = [12.3456789012, 7.6543210987]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    s = LocalStack(
        tmp_path_factory.mktemp("control"),
        extra_env={"LABELDP_TRAINING_QUEUE_MAX": "2", "LABELDP_TRAINING_THREADS": "1"},
    )
    s.start()
    yield s
    s.stop()


class Stream:
    """An SSE stream read a little at a time; ``raw`` keeps every line for the canary check."""

    def __init__(self, client: httpx.Client, path: str) -> None:
        self._cm = client.stream("GET", path)
        self.response = self._cm.__enter__()
        assert self.response.status_code == 200, self.response.read()
        assert self.response.headers["content-type"].startswith("text/event-stream")
        self.raw: list[str] = []
        self._events = parse_events(self._lines())

    def _lines(self) -> Iterator[str]:
        for line in self.response.iter_lines():
            self.raw.append(line)
            yield line

    def until(self, done) -> Event:  # type: ignore[no-untyped-def]
        for event in self._events:
            if done(event):
                return event
        raise AssertionError("the stream ended first")

    def rest(self) -> list[Event]:
        events = list(self._events)
        self._cm.__exit__(None, None, None)
        return events


def _has_canary(text: str) -> bool:
    forms = [f for c in CANARIES for f in (repr(c), f"{c:.6f}", f"{c:.8g}")]
    blob = text.encode()
    return any(f in text for f in forms) or any(struct.pack("<d", c) in blob for c in CANARIES)


def _pages(client: httpx.Client, path: str, limit: int, **params: str) -> list[dict]:
    items, cursor = [], None
    while True:
        page = client.get(path, params={**params, "limit": limit, **({"cursor": cursor} if cursor else {})})
        assert page.status_code == 200, page.text
        items += page.json()["items"]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            return items


@pytest.fixture(scope="module")
def release(stack: LocalStack) -> dict:
    """A feature table and a release over it, with canary labels planted in the label set."""
    data = make_conversions(1500, seed=11)
    values = [float(v) for v in data.labels]
    for k in range(20):
        values[k] = CANARIES[k % 2]
    with stack.labels_client() as labels, stack.features_client() as features:
        assert features.post(
            "/v1/feature-tables", params={"name": "clicks", "categorical": "advertiser,campaign,device,site"},
            content=data.to_csv(), headers={"content-type": "text/csv"},
        ).status_code == 201
        ls = create_label_set(labels, data.ids, budget=5.0, high=data.clip)
        assert upload_csv(labels, ls["id"], list(zip(data.ids, values))).status_code == 200
        response = labels.post(f"/v1/label-sets/{ls['id']}/releases",
                               json={"mechanism": "laplace", "epsilon": 1, "feature_table": "clicks"})
        assert response.status_code == 202, response.text
        return response.json()


def test_queue_cancel_progress_and_lists(stack: LocalStack, release: dict) -> None:
    streamer = httpx.Client(base_url=stack.features_url, timeout=120,
                            headers={"authorization": f"Bearer {stack.features_key}"})
    with stack.labels_client() as labels, stack.features_client() as features, streamer:
        # The release, followed on the labels party's stream to its end: its job, then its delivery.
        delivery = Stream(labels, f"/v1/releases/{release['id']}/events")
        events = delivery.rest()
        assert events[-1].event == "end" and events[-1].data["status"] == "delivered"
        stages = [e.data["stage"] for e in events]
        assert set(stages) <= {"accepted", "privatizing", "queued", "sending", "retrying", "delivered"}
        job = [s for s in stages if s in ("accepted", "privatizing")]
        assert stages[: len(job)] == job  # the job's stages, if the stream saw them, come first
        assert not _has_canary("\n".join(delivery.raw))
        assert labels.get("/v1/releases/rel_missing/events").json()["code"] == "release_not_found"

        def start(epochs: int, batch_size: int, **headers: str) -> httpx.Response:
            return features.post("/v1/trainings", headers=headers,
                                 json={"release_id": release["id"], "epochs": epochs, "batch_size": batch_size})

        # A long training runs; its stream shows batches, elapsed time and an ETA.
        a = start(500, 8).json()["id"]
        a_stream = Stream(streamer, f"/v1/trainings/{a}/events")
        running = a_stream.until(lambda e: e.data["status"] == "running" and (e.data["progress"]["batch"] or 0) >= 2
                                 and e.data["progress"]["eta_seconds"] is not None)
        progress = running.data["progress"]
        assert progress["batches"] == 169 and progress["epochs"] == 500  # 1350 training rows in batches of 8
        assert progress["elapsed_seconds"] > 0 and progress["eta_seconds"] > 0 and 0 < progress["fraction"] < 0.01
        assert "history" not in running.data

        # Two wait; a third is refused and creates nothing.
        b, c = (start(1, 512).json()["id"] for _ in range(2))
        assert [features.get(f"/v1/trainings/{t}").json()["queue_position"] for t in (a, b, c)] == [None, 1, 2]
        full = start(1, 512, **{"idempotency-key": "fourth"})
        assert full.status_code == 429 and full.json()["code"] == "training_queue_full"
        assert int(full.headers["retry-after"]) >= 1
        assert len(_pages(features, "/v1/trainings", 10)) == 3

        # Cancel a queued one: at once, and the queue moves up.
        cancelled = features.post(f"/v1/trainings/{b}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        assert features.get(f"/v1/trainings/{c}").json()["queue_position"] == 1
        d = start(1, 512, **{"idempotency-key": "fourth"})  # the refused key was not kept
        assert d.status_code == 202 and "idempotent-replay" not in d.headers
        d_id = d.json()["id"]

        # Cancel the running one: it stops at the next batch and leaves no model.
        stopping = features.post(f"/v1/trainings/{a}/cancel")
        assert stopping.status_code == 202 and stopping.json()["status"] == "cancelling"
        final = a_stream.rest()[-1]
        assert final.event == "end" and final.data["status"] == "cancelled" and final.data["model_id"] is None
        # Both cancels are counted: the queued one by the route, the running one by the worker.
        metrics = features.get("/metrics").text
        assert re.search(r'^labeldp_trainings_total\{status="cancelled"\} 2\.0$', metrics, re.M), metrics

        # The queued ones run next, each stream ending with its model.
        for t in (c, d_id):
            end = Stream(streamer, f"/v1/trainings/{t}/events").rest()[-1]
            assert end.data["status"] == "succeeded", end.data
            assert end.data["progress"]["fraction"] == 1.0 and end.data["model_id"]
        assert features.post(f"/v1/trainings/{c}/cancel").json()["code"] == "training_finished"
        assert features.get("/v1/trainings/nope/events").status_code == 404

        # Lists, oldest first, page by page.
        assert [t["id"] for t in _pages(features, "/v1/trainings", 1)] == [a, b, c, d_id]
        assert [t["id"] for t in _pages(features, "/v1/trainings", 5, status="cancelled")] == [a, b]
        cards = _pages(features, "/v1/models", 1)
        assert [m["training_id"] for m in cards] == [c, d_id]
        assert len(list((stack.workdir / "features-data" / "models").glob("*"))) == 2  # none for a
        assert [t["name"] for t in _pages(features, "/v1/feature-tables", 1)] == ["clicks"]
        assert [r["id"] for r in _pages(features, "/v1/releases", 1)] == [release["id"]]
        assert features.get("/v1/models", params={"cursor": "x"}).json()["code"] == "invalid_cursor"
        assert features.get("/v1/trainings", params={"limit": 501}).status_code == 422
        assert not _has_canary("\n".join(a_stream.raw))

    # `labeldp watch` draws the bar from the same streams; its exit status says how the job ended.
    def watch(kind: str, job: str, url: str, key: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "labeldp_tools.cli", "watch", kind, job, "--url", url, "--key", key]
        return subprocess.run(command,
                              capture_output=True, text=True, timeout=120)

    done = watch("training", c, stack.features_url, stack.features_key)
    assert done.returncode == 0 and "succeeded" in done.stderr and "[####" in done.stderr and "epoch 1/1" in done.stderr
    assert watch("training", a, stack.features_url, stack.features_key).returncode == 1
    sent = watch("release", release["id"], stack.labels_url, stack.labels_key)
    assert sent.returncode == 0 and "delivered" in sent.stderr
    assert watch("training", c, stack.features_url, "wrong-key").returncode == 1


def test_a_stopping_server_closes_its_streams_instead_of_waiting_for_the_job(stack: LocalStack, release: dict) -> None:
    """An open stream must not hold a graceful shutdown until the training ends: SIGTERM ends it
    with ``closing``, the process exits without being killed, and its worker hands the training
    back to the queue (it no longer fails it): the restarted API's worker resumes it."""
    streamer = httpx.Client(base_url=stack.features_url, timeout=120,
                            headers={"authorization": f"Bearer {stack.features_key}"})
    with stack.labels_client() as labels, stack.features_client() as features, streamer:
        assert Stream(labels, f"/v1/releases/{release['id']}/events").rest()[-1].data["status"] == "delivered"
        job = features.post("/v1/trainings", json={"release_id": release["id"], "epochs": 1000, "batch_size": 64})
        assert job.status_code == 202, job.text
        training = job.json()["id"]
        stream = Stream(streamer, f"/v1/trainings/{training}/events")
        stream.until(lambda e: e.data["status"] == "running" and (e.data["progress"]["batch"] or 0) >= 1)
        proc = stack.processes["features"]
        started = time.monotonic()
        stack.stop_process("features", timeout=20.0)
        assert time.monotonic() - started < 15 and proc.returncode != -signal.SIGKILL
        assert stream.rest()[-1].event == "closing"
    stack.start("features")
    with stack.features_client() as features:
        after = features.get(f"/v1/trainings/{training}").json()
        assert after["status"] in ("queued", "running") and after["error"] is None, after
        assert after["progress"]["epoch"] >= 1  # the epoch it stopped after is kept (and checkpointed)
        deadline = time.monotonic() + 60
        while after["status"] != "running" and time.monotonic() < deadline:
            time.sleep(0.1)
            after = features.get(f"/v1/trainings/{training}").json()
        assert after["status"] == "running" and after["attempt"] == 1, after  # a hand-back is not an attempt
        assert features.post(f"/v1/trainings/{training}/cancel").status_code in (200, 202)
