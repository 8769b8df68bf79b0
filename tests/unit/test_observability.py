"""Operations in-process: JSON log lines with a request id, HTTP metrics per route template, one
metric prefix, build info, and the outbox's metric files served by the labels API."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from tests.local_settings import both_parties

from features_party.app import create_app as create_features_app
from labeldp.service.logs import JsonFormatter, accepted_request_id, bound_request_id, current_request_id
from labeldp.service.metrics import OUTBOX_METRICS_DIR, OUTBOX_STALE_SECONDS, OutboxMetricsFile, outbox_metrics
from labeldp.service.settings import Settings
from labeldp.signing import generate_keypair
from labels_party.app import create_app as create_labels_app

LABELS_KEY = "labels-key-0123456789abcdef"
FEATURES_KEY = "features-key-0123456789abcdef"
SECRET, _ = generate_keypair()  # the labels party's signing key


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return both_parties(tmp_path, LABELS_KEY, FEATURES_KEY, SECRET, max_body_bytes=10_000)


@pytest.fixture
def labels(settings: Settings):
    with TestClient(create_labels_app(settings)) as client:
        yield client


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _key(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


# --------------------------------------------------------------------------- logs


def _format(record: logging.LogRecord) -> dict:
    line = JsonFormatter("labels").format(record)
    assert "\n" not in line
    return json.loads(line)


def test_a_log_line_is_one_json_object_with_the_bound_request_id() -> None:
    record = logging.LogRecord("labeldp.labels", logging.INFO, __file__, 1, "release %s charged", ("rel_1",), None)
    record.route = "/v1/releases"  # an `extra=` field becomes a key
    record.color_message = "\x1b[32mrelease\x1b[0m"  # uvicorn's coloured copy is not
    assert "request_id" not in _format(record)
    with bound_request_id("trace-42") as rid:
        assert rid == current_request_id() == "trace-42"
        doc = _format(record)
    assert current_request_id() is None
    assert doc["message"] == "release rel_1 charged"
    assert doc["request_id"] == "trace-42"
    assert doc["service"] == "labels" and doc["level"] == "info" and doc["logger"] == "labeldp.labels"
    assert doc["route"] == "/v1/releases"
    assert "color_message" not in doc and "\x1b" not in json.dumps(doc)
    assert doc["time"].endswith("+00:00")


def test_an_exception_is_logged_by_type_and_frames_never_by_its_message() -> None:
    try:
        raise ValueError("label 12.3456789012 out of range\nsecond line")
    except ValueError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    doc = _format(record)
    assert doc["error_type"] == "ValueError"
    assert any("test_observability.py" in frame for frame in doc["stack"])
    assert "12.3456789012" not in json.dumps(doc)


@pytest.mark.parametrize(
    ("offered", "kept"),
    [("abc-123", True), ("0f8fad5b-d9cb-469f-a165-70867728950e", True), ("a" * 128, True),
     ("a" * 129, False), ("has space", False), ("", False), ("x\ny", False), ("é", False)],
)
def test_only_a_plain_token_is_taken_as_the_request_id(offered: str | None, kept: bool) -> None:
    assert accepted_request_id(offered) == (offered if kept else None)


def test_every_answer_carries_a_request_id_and_the_access_line_logs_it(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    with TestClient(create_labels_app(settings)) as client:
        auth = {"Authorization": f"Bearer {LABELS_KEY}"}
        ok = client.get("/v1/label-sets", headers={**auth, "X-Request-ID": "client-trace-1"})
        assert ok.status_code == 200 and ok.headers["x-request-id"] == "client-trace-1"
        generated = client.get("/v1/label-sets", headers={**auth, "X-Request-ID": "bad id with spaces"})
        assert generated.headers["x-request-id"].startswith("req_")
        unauthorized = client.get("/v1/label-sets")
        assert unauthorized.status_code == 401 and unauthorized.headers["x-request-id"].startswith("req_")
        too_large = client.post("/v1/label-sets", content=b"x" * 20_000, headers=auth)
        assert too_large.status_code == 413 and too_large.headers["x-request-id"].startswith("req_")
        assert len({r.headers["x-request-id"] for r in (generated, unauthorized, too_large)}) == 3
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    access = [d for d in lines if d["logger"] == "labeldp.access"]
    traced = [d for d in access if d.get("request_id") == "client-trace-1"]
    assert len(traced) == 1
    assert traced[0]["route"] == "/v1/label-sets" and traced[0]["status"] == 200 and traced[0]["duration_ms"] >= 0
    assert any(d["status"] == 413 and d["request_id"] == too_large.headers["x-request-id"] for d in access)


# --------------------------------------------------------------------------- metrics


def test_http_metrics_are_per_route_template_with_error_codes(labels: TestClient) -> None:
    auth = {"Authorization": f"Bearer {LABELS_KEY}"}
    for name in ("ls_aaa", "ls_bbb"):
        missing = labels.get(f"/v1/label-sets/{name}", headers=auth)
        assert missing.status_code == 404
    assert labels.get("/v1/label-sets").status_code == 401
    assert labels.get("/no/such/path", headers=auth).status_code == 404
    text = labels.get("/metrics").text
    samples = _samples(text)
    route = "/v1/label-sets/{label_set_id}"
    assert samples[("labeldp_http_request_duration_seconds_count", _key(method="GET", route=route, status="404"))] == 2
    codes = {dict(k[1])["code"]: v for k, v in samples.items()
             if k[0] == "labeldp_http_errors_total" and dict(k[1])["route"] == route}
    assert codes == {missing.json()["code"]: 2}  # the envelope's code, not just the status
    unauthorized = _key(method="GET", route="/v1/label-sets", status="401", code="unauthorized")
    assert samples[("labeldp_http_errors_total", unauthorized)] == 1
    unmatched = _key(method="GET", route="unmatched", status="404")
    assert samples[("labeldp_http_request_duration_seconds_count", unmatched)] == 1
    assert "ls_aaa" not in text and "/no/such/path" not in text  # raw paths make no series


@pytest.mark.parametrize("service", ["labels", "features"])
def test_one_prefix_and_build_info_on_both_services(settings: Settings, service: str) -> None:
    app = create_labels_app(settings) if service == "labels" else create_features_app(settings)
    with TestClient(app) as client:
        client.get("/healthz")
        text = client.get("/metrics").text
    names = {family.name for family in text_string_to_metric_families(text)}
    assert names and all(name.startswith("labeldp_") for name in names), names
    info = [k for k in _samples(text) if k[0] == "labeldp_build_info"]
    assert len(info) == 1 and dict(info[0][1])["service"] == service
    assert "labeldp_http_request_duration_seconds" in names


def test_the_labels_api_serves_each_live_outbox_file_labelled_by_sender(settings: Settings, labels: TestClient) -> None:
    folder = settings.labels_data_dir / OUTBOX_METRICS_DIR
    files = []
    for delivered in (3, 5):
        metrics = outbox_metrics()
        metrics.attempts.labels("delivered").inc(delivered)
        metrics.attempt_seconds.labels("delivered").observe(0.2)
        metrics.queue_depth.set(delivered - 3)
        out = OutboxMetricsFile(folder, metrics)
        out.path = folder / f"outbox-host-{delivered}.prom"  # two senders in one test process
        out.write()
        files.append(out)
    os.utime(files[0].path, (time.time() - 10,) * 2)  # host-3 wrote before host-5
    gone = folder / "outbox-host-999.prom"
    gone.write_text(files[0].path.read_text())
    os.utime(gone, (time.time() - OUTBOX_STALE_SECONDS - 5,) * 2)

    text = labels.get("/metrics").text
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(types) == len(set(types))  # each family once, or Prometheus rejects the scrape
    samples = _samples(text)
    assert samples[("labeldp_outbox_attempts_total", _key(outcome="delivered", sender="host-3"))] == 3
    assert samples[("labeldp_outbox_attempts_total", _key(outcome="delivered", sender="host-5"))] == 5
    assert samples[("labeldp_outbox_queue_depth", ())] == 2  # the newest file's: one queue, served once
    assert not any(k[0] == "labeldp_outbox_queue_depth" and k[1] for k in samples)
    assert samples[("labeldp_outbox_attempt_duration_seconds_count", _key(outcome="delivered", sender="host-3"))] == 1
    assert not any(dict(k[1]).get("sender") == "host-999" for k in samples)  # a stale file is not served
    services = sorted(dict(k[1])["service"] for k in samples if k[0] == "labeldp_build_info")
    assert services == ["labels", "outbox", "outbox"]

    files[0].remove_stale()
    assert not gone.exists() and files[0].path.exists()
    files[0].remove()
    assert ("labeldp_outbox_attempts_total", _key(outcome="delivered", sender="host-3")) not in _samples(
        labels.get("/metrics").text
    )


def _sum(text: str, name: str) -> float:
    return sum(value for (metric, _), value in _samples(text).items() if metric == name)


def test_replicas_and_senders_together_count_each_attempt_and_the_queue_once(settings: Settings) -> None:
    """Two labels API replicas on one data folder and two senders: summed over every scrape, each
    delivery attempt counts once and the one queue's depth once (it was 2x and 4x)."""
    folder = settings.labels_data_dir / OUTBOX_METRICS_DIR
    for sender, delivered in (("host-1", 3), ("host-2", 5)):
        metrics = outbox_metrics()
        metrics.attempts.labels("delivered").inc(delivered)
        metrics.attempts.labels("retry").inc()  # one retried attempt per sender
        metrics.queue_depth.set(2)  # both measured the same shared queue
        out = OutboxMetricsFile(folder, metrics)
        out.path = folder / f"outbox-{sender}.prom"
        out.write()
    with TestClient(create_labels_app(settings)) as first, TestClient(create_labels_app(settings)) as second:
        scrapes = [first.get("/metrics").text, second.get("/metrics").text]
        assert sum(_sum(t, "labeldp_outbox_attempts_total") for t in scrapes) == 3 + 5 + 2
        assert sum(_sum(t, "labeldp_outbox_queue_depth") for t in scrapes) == 2
        assert all(_sum(t, "labeldp_http_request_duration_seconds_count") >= 0 for t in scrapes)
        assert [_sum(t, "labeldp_outbox_attempts_total") for t in scrapes] == [10, 0]  # the first serves
    with TestClient(create_labels_app(settings)) as replica:  # the server stopped: another takes over
        assert _sum(replica.get("/metrics").text, "labeldp_outbox_attempts_total") == 10


def test_a_failed_attempt_is_a_warning_with_its_code_and_counted_once(
    settings: Settings, labels: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A release whose features party refuses connections (a closed port, no fault injected)."""
    import random

    import httpx
    from tests.release_jobs import wait_release

    from labels_party import outbox

    auth = {"Authorization": f"Bearer {LABELS_KEY}"}
    ls = labels.post("/v1/label-sets", headers=auth, json={
        "name": "w", "domain": {"low": 0.0, "high": 1.0}, "ids": ["a", "b"]}).json()["id"]
    labels.post(f"/v1/label-sets/{ls}/labels", json={"ids": ["a", "b"], "labels": [0, 1]}, headers=auth)
    release = labels.post(f"/v1/label-sets/{ls}/releases", headers=auth, json={"mechanism": "laplace", "epsilon": 1})
    release_id = wait_release(labels, release.json()["id"], "pending", headers=auth)["id"]
    ctx = labels.app.state.ctx
    closed = ctx.settings.model_copy(update={"features_url": "http://127.0.0.1:9", "outbox_timeout_seconds": 2})
    metrics = outbox_metrics()
    with caplog.at_level(logging.DEBUG, logger="labeldp.outbox"), httpx.Client(timeout=2) as client:
        assert outbox.deliver_one(ctx.sessions, client, closed, release_id, random.Random(0), metrics) == "pending"
    failed = [r for r in caplog.records if r.name == "labeldp.outbox" and "attempt 1" in r.getMessage()]
    assert [r.levelno for r in failed] == [logging.WARNING], [(r.levelname, r.getMessage()) for r in failed]
    line = _format(failed[0])
    assert line["error"]["code"] == "connection_error" and set(line["error"]) == {"code", "message", "details"}
    assert line["release_id"] == release_id and line["attempt"] == 1
    value = metrics.registry.get_sample_value
    assert value("labeldp_outbox_attempts_total", {"outcome": "network"}) == 1
    assert sum(value("labeldp_outbox_attempts_total", {"outcome": o}) or 0
               for o in ("delivered", "rejected", "retry", "network")) == 1


def test_a_torn_outbox_file_is_skipped_not_a_failed_scrape(settings: Settings, labels: TestClient) -> None:
    folder = settings.labels_data_dir / OUTBOX_METRICS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "outbox-torn-1.prom").write_text("# TYPE labeldp_outbox_attempts counter\nlabeldp_outbox_attempts_total{")
    response = labels.get("/metrics")
    assert response.status_code == 200
    assert "torn" not in response.text


def test_the_metrics_scrape_reads_no_database(settings: Settings, labels: TestClient) -> None:
    """The catalogue gone from under a running API: reads fail, /metrics still answers."""
    labels.app.state.ctx.sessions.kw["bind"].dispose()
    database = Path(settings.labels_database_url.removeprefix("sqlite:///"))
    for suffix in ("", "-wal", "-shm"):
        path = database.with_name(database.name + suffix)
        if path.exists():
            path.rename(path.with_name(path.name + ".moved"))
    auth = {"Authorization": f"Bearer {LABELS_KEY}"}
    assert labels.get("/v1/label-sets", headers=auth).status_code >= 500  # the catalogue is really gone
    response = labels.get("/metrics")
    assert response.status_code == 200
    assert "labeldp_http_request_duration_seconds" in response.text


def test_the_outbox_heartbeat_is_its_healthcheck(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from labeldp.service.metrics import _main, sender_alive

    folder = tmp_path / OUTBOX_METRICS_DIR
    assert not sender_alive(folder, 300)
    out = OutboxMetricsFile(folder, outbox_metrics())
    out.write()
    assert out.path.name.startswith(f"outbox-{socket.gethostname()}-")
    assert sender_alive(folder, 300)
    assert not sender_alive(folder, 300, host="another-host")  # a replica's file says nothing about this one
    os.utime(out.path, (time.time() - 400,) * 2)
    assert not sender_alive(folder, 300)
    out.write()
    monkeypatch.setenv("LABELDP_LABELS_DATA_DIR", str(tmp_path))
    assert _main(["heartbeat", "--max-age", "300"]) == 0
    out.remove()
    assert _main(["heartbeat", "--max-age", "300"]) == 1


def test_the_outbox_measures_its_queue_from_the_catalogue(settings: Settings, labels: TestClient) -> None:
    """A release no sender has picked up yet: depth 1, its age, releases by status."""
    from tests.release_jobs import wait_release

    from labeldp.service.database import make_session_factory
    from labels_party.outbox import measure_queue

    auth = {"Authorization": f"Bearer {LABELS_KEY}", "X-Request-ID": "queue-trace"}
    ids = [f"u{i:03d}" for i in range(50)]
    ls = labels.post("/v1/label-sets", headers=auth, json={
        "name": "q", "label_type": "real", "domain": {"low": 0.0, "high": 10.0}, "ids": ids,
    }).json()
    csv = "id,label\n" + "".join(f"{i},{k % 10}\n" for k, i in enumerate(ids))
    assert labels.post(f"/v1/label-sets/{ls['id']}/labels", content=csv.encode(),
                       headers={**auth, "content-type": "text/csv"}).status_code == 200
    release = labels.post(f"/v1/label-sets/{ls['id']}/releases", headers=auth,
                          json={"mechanism": "laplace", "epsilon": 1.0})
    assert release.status_code == 202, release.text
    wait_release(labels, release.json()["id"], "pending", headers=auth)  # charged by the in-process worker
    time.sleep(0.05)

    metrics = outbox_metrics()
    engine = labels.app.state.ctx.sessions.kw["bind"]
    measure_queue(make_session_factory(engine), metrics)
    value = metrics.registry.get_sample_value
    assert value("labeldp_outbox_queue_depth") == 1
    assert 0 < value("labeldp_outbox_oldest_pending_seconds") < 60
    assert value("labeldp_releases", {"status": "pending"}) == 1

    from labels_party.store import ReleaseRow

    with make_session_factory(engine)() as s:  # what the outbox will send as X-Request-ID: a fresh id
        outgoing = s.get(ReleaseRow, release.json()["id"]).request_id
    assert outgoing is not None and outgoing.startswith("req_") and outgoing != "queue-trace"


def test_an_event_stream_is_timed_to_its_first_byte_not_its_end() -> None:
    import asyncio

    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse
    from prometheus_client import CollectorRegistry

    from labeldp.service.metrics import HttpInstrumentation, http_metrics

    app = FastAPI()

    async def slow_events():
        yield b"data: 1\n\n"
        await asyncio.sleep(0.6)  # a watcher that stays connected
        yield b"data: 2\n\n"

    @app.get("/events")
    def events() -> StreamingResponse:
        return StreamingResponse(slow_events(), media_type="text/event-stream")

    @app.get("/slow")
    async def slow() -> dict[str, int]:
        await asyncio.sleep(0.6)
        return {"ok": 1}

    registry = CollectorRegistry()
    app.add_middleware(HttpInstrumentation, metrics=http_metrics(registry))
    with TestClient(app) as client:
        assert client.get("/events").text.count("data:") == 2
        assert client.get("/slow").status_code == 200

    def seconds(route: str) -> float:
        value = registry.get_sample_value(
            "labeldp_http_request_duration_seconds_sum", {"method": "GET", "route": route, "status": "200"}
        )
        assert value is not None
        return value

    assert seconds("/events") < 0.3  # the stream's minutes do not read as a slow answer
    assert seconds("/slow") >= 0.6  # a plain answer is still timed to its end
