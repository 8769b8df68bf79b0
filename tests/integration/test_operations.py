"""Operations across real processes: one outgoing request id from the outbox to the features party's
inbox (linked to the advertiser's in the labels API's log), JSON log lines in every process, and the
outbox's metrics on the labels API."""

from __future__ import annotations

import json
import time

from prometheus_client.parser import text_string_to_metric_families

from labeldp_tools.local_stack import LocalStack

from .conftest import create_label_set, upload_csv, wait_for_status


def _log_lines(stack: LocalStack, name: str) -> list[dict]:
    lines = stack.log_path(name).read_text().splitlines()
    docs = [json.loads(line) for line in lines if line.strip()]  # every line is one JSON object
    assert all(isinstance(d, dict) and {"time", "level", "service", "message"} <= d.keys() for d in docs)
    return docs


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_a_release_keeps_one_outgoing_request_id_from_the_outbox_to_the_inbox(stack, data, feature_table):
    """The client's id stays in the labels API's log, linked there to a fresh id the outbox and the
    features party's inbox both log under: the client's choice never crosses to the features party."""
    trace = f"trace-{time.monotonic_ns()}"
    with stack.labels_client() as labels:
        ls = create_label_set(labels, data.ids[:200], budget=10.0, high=data.clip)
        assert upload_csv(labels, ls["id"], list(zip(data.ids[:200], map(float, data.labels[:200])))).status_code == 200
        r = labels.post(
            f"/v1/label-sets/{ls['id']}/releases",
            json={"mechanism": "laplace", "epsilon": 1.0, "feature_table": feature_table},
            headers={"X-Request-ID": trace},
        )
        assert r.status_code == 202 and r.headers["x-request-id"] == trace
        release_id = r.json()["id"]
        wait_for_status(labels, release_id, "delivered")

    def traced(name: str, rid: str) -> list[dict]:
        return [d for d in _log_lines(stack, name) if d.get("request_id") == rid]

    assert any(d["logger"] == "labeldp.access" and d["status"] == 202 for d in traced("labels", trace))
    (link,) = [d for d in traced("labels", trace) if release_id in d["message"] and "sent to" in d["message"]]
    outgoing = link["message"].rsplit(" ", 1)[-1]
    assert outgoing.startswith("req_") and outgoing != trace
    assert any(release_id in d["message"] and "delivered" in d["message"] for d in traced("outbox", outgoing))
    inbox = traced("features", outgoing)
    assert any(release_id in d["message"] and "accepted" in d["message"] for d in inbox)
    assert any(d["logger"] == "labeldp.access" and d["route"] == "/v1/releases" and d["status"] == 201 for d in inbox)
    assert trace not in stack.log_path("features").read_text()
    assert {d["service"] for d in _log_lines(stack, "outbox")} == {"outbox"}


def test_the_labels_api_serves_the_outbox_metrics(stack, data, feature_table):
    with stack.labels_client() as labels, stack.features_client() as features:
        ls = create_label_set(labels, data.ids[:100], budget=10.0, high=data.clip)
        assert upload_csv(labels, ls["id"], list(zip(data.ids[:100], map(float, data.labels[:100])))).status_code == 200
        r = labels.post(f"/v1/label-sets/{ls['id']}/releases", json={"mechanism": "laplace", "epsilon": 1.0})
        wait_for_status(labels, r.json()["id"], "delivered")
        deadline = time.monotonic() + 20
        while True:  # the sender rewrites its file after a pass that delivered
            samples = _samples(labels.get("/metrics").text)
            attempts = samples.get("labeldp_outbox_attempts_total", [])
            delivered = [v for lab, v in attempts if lab["outcome"] == "delivered"]
            pending = [v for lab, v in samples.get("labeldp_releases", []) if lab["status"] == "pending" and v]
            if delivered and not pending:
                break
            assert time.monotonic() < deadline, samples.get("labeldp_outbox_attempts_total")
            time.sleep(0.3)
        assert [v for _, v in samples["labeldp_outbox_queue_depth"]] == [0.0]
        assert all(lab.get("sender") for lab, _ in samples["labeldp_outbox_attempts_total"])
        assert samples["labeldp_outbox_attempt_duration_seconds_count"]
        heartbeat = samples["labeldp_outbox_heartbeat_timestamp_seconds"][0][1]
        assert abs(time.time() - heartbeat) < 60
        assert {lab["service"] for lab, _ in samples["labeldp_build_info"]} == {"labels", "outbox"}

        inbox = _samples(features.get("/metrics").text)
        posted = [v for lab, v in inbox["labeldp_http_request_duration_seconds_count"]
                  if lab == {"method": "POST", "route": "/v1/releases", "status": "201"}]
        assert posted and posted[0] >= 1
