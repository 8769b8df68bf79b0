"""Both apps count and log every answer under its route's template, the path the contract names.

The route modules (services/*/routes/) carry their ``/v1`` prefix themselves: the metrics and
the access log label an answer with the matched route's own path
(labeldp.service.metrics.route_label), and a prefix added only when a router is included
would be missing there.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.datastructures import DefaultPlaceholder
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from tests.contract.conftest import FEATURES_AUTH, LABELS_AUTH, features_app, labels_app

SERIES = re.compile(r'labeldp_http_request_duration_seconds_count\{[^}]*route="([^"]+)"')


@pytest.fixture(scope="module", params=["labels", "features"])
def app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    make = labels_app if request.param == "labels" else features_app
    return make(tmp_path_factory.mktemp(request.param))


def test_every_operation_is_measured_under_its_contract_path(app: FastAPI) -> None:
    spec = app.openapi()
    # With the key (an anonymous call is refused from its headers, before routing: `unmatched`);
    # then any answer, a 404 or a 422, is enough to be routed and measured.
    auth = LABELS_AUTH if "labels" in app.title else FEATURES_AUTH
    with TestClient(app) as client:
        for path, item in spec["paths"].items():
            concrete = re.sub(r"\{[^}]+\}", "x", path)
            for method, op in item.items():
                # A stream that ends only when asked (the inbox's events): asked to end at once.
                endless = any(p["name"] == "max_seconds" for p in op.get("parameters", []))
                params = {"max_seconds": 0.05} if endless else None
                client.request(method.upper(), concrete, headers=auth, params=params)
        measured = set(SERIES.findall(client.get("/metrics").text))
    assert set(spec["paths"]) <= measured, sorted(set(spec["paths"]) - measured)


def test_a_body_that_drifts_from_its_model_is_refused(labels: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The response_model is the body's one definition: an answer with a field the model lacks
    is never sent (500 ``internal_error``), so a drift cannot reach a client unnoticed."""
    from labels_party import privacy_domains

    created = labels.post(
        "/v1/privacy-domains", json={"name": "drift", "id_source": "drift", "epsilon": 1}, headers=LABELS_AUTH
    )
    assert created.status_code == 201, created.text
    path = f"/v1/privacy-domains/{created.json()['id']}"
    assert labels.get(path, headers=LABELS_AUTH).json() == created.json()
    real = privacy_domains.get_privacy_domain
    monkeypatch.setattr(
        privacy_domains, "get_privacy_domain", lambda ctx, name: {**real(ctx, name).model_dump(), "extra": 1}
    )
    served = TestClient(labels.app, raise_server_exceptions=False)  # what a client sees, not the traceback
    drifted = served.get(path, headers=LABELS_AUTH)
    assert drifted.status_code == 500 and drifted.json()["code"] == "internal_error", drifted.text


@pytest.mark.parametrize("service", ["labels_party", "features_party"])
def test_every_json_route_declares_its_model_from_responses(service: str) -> None:
    """A JSON answer (the default response class; streams and files set their own) is typed by
    a model of its service's responses.py, the body's one definition."""
    package = importlib.import_module(f"{service}.routes")
    models = importlib.import_module(f"{service}.responses")
    checked = 0
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for router in (v for v in vars(module).values() if isinstance(v, APIRouter)):
            for route in (r for r in router.routes if isinstance(r, APIRoute)):
                if isinstance(route.response_class, DefaultPlaceholder):
                    model = route.response_model
                    assert model is not None and getattr(models, model.__name__, None) is model, route.path
                    checked += 1
    assert checked >= 10, checked
