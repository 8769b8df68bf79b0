"""The bodies of the list, cancel and event-stream routes match their contract models
(issue 10 items 4 and 6); tests/integration/test_training_control.py checks their events for
planted canary labels."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient
from tests.contract.conftest import FEATURES_AUTH, LABELS_AUTH, features_app, labels_app
from tests.contract.flow import run_flow

from features_party import responses as fr
from labeldp.service.events import Event, parse_events
from labels_party import responses as lr


def _events(client: TestClient, path: str, auth: dict[str, str]) -> list[Event]:
    with client.stream("GET", path, headers=auth) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        lines = list(response.iter_lines())
    return list(parse_events(lines))


def test_lists_cancel_and_events_match_their_models(tmp_path: Path) -> None:
    with TestClient(labels_app(tmp_path / "l")) as labels, TestClient(features_app(tmp_path / "f")) as features:
        flow = run_flow(labels, features)
        pages = {
            "/v1/feature-tables": fr.FeatureTablePage,
            "/v1/releases": fr.ReceivedReleasePage,
            "/v1/trainings": fr.TrainingPage,
            "/v1/models": fr.ModelPage,
        }
        for path, model in pages.items():
            page = features.get(path, headers=FEATURES_AUTH).json()
            model.model_validate(page)
            assert len(page["items"]) == 1 and page["next_cursor"] is None, path

        events = _events(features, f"/v1/trainings/{flow.training['id']}/events", FEATURES_AUTH)
        assert [e.event for e in events] == ["end"]
        # An event is the training as GET shows it, its history replaced by the last entry.
        event = dict(events[0].data)
        assert event.pop("last_epoch") == flow.training["history"][-1]
        fr.Training.model_validate({**event, "history": []})
        events = _events(labels, f"/v1/releases/{flow.release['id']}/events", LABELS_AUTH)
        assert events[-1].event == "end"
        for event in events:
            lr.Release.model_validate(event.data)

        started = features.post("/v1/trainings", json={"release_id": flow.release["id"], "epochs": 1000,
                                                      "batch_size": 1}, headers=FEATURES_AUTH)
        cancel = features.post(f"/v1/trainings/{started.json()['id']}/cancel", headers=FEATURES_AUTH)
        assert cancel.status_code in (200, 202)
        fr.Training.model_validate(cancel.json())
        deadline = time.monotonic() + 60
        while features.get(f"/v1/trainings/{started.json()['id']}", headers=FEATURES_AUTH).json()["status"] != \
                "cancelled":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        finished = features.post(f"/v1/trainings/{flow.training['id']}/cancel", headers=FEATURES_AUTH)
        assert finished.status_code == 409 and finished.json()["code"] == "training_finished"
