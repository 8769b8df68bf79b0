"""Both apps count and log every answer under its route's template, the path the contract names.

The route modules (services/*/routes/) carry their ``/v1`` prefix themselves: the metrics and
the access log label an answer with the matched route's own path
(labeldp.service.metrics.route_label), and a prefix added only when a router is included
would be missing there.
"""

from __future__ import annotations

import re

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from tests.contract.conftest import features_app, labels_app

SERIES = re.compile(r'labeldp_http_request_duration_seconds_count\{[^}]*route="([^"]+)"')


@pytest.fixture(scope="module", params=["labels", "features"])
def app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    make = labels_app if request.param == "labels" else features_app
    return make(tmp_path_factory.mktemp(request.param))


def test_every_operation_is_measured_under_its_contract_path(app: FastAPI) -> None:
    spec = app.openapi()
    with TestClient(app) as client:
        for path, item in spec["paths"].items():
            concrete = re.sub(r"\{[^}]+\}", "x", path)
            for method in item:  # unauthenticated: a 401 is enough to be routed and measured
                client.request(method.upper(), concrete)
        measured = set(SERIES.findall(client.get("/metrics").text))
    assert set(spec["paths"]) <= measured, sorted(set(spec["paths"]) - measured)
