"""Both services' OpenAPI contracts are worth generating a client from (issue 10, item 3).

For every operation of both apps: tags, summary, description, the security scheme that
really guards it, a typed body and an example for every 2xx, the real error envelope with
an example on every error status, a documented request body with examples for every upload
type, and no trace of FastAPI's default 422 schema. Also: 405s carry ``Allow``, the docs pages
load nothing from a CDN, and real bodies of every resource validate against their models.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from tests.contract.conftest import FEATURES_AUTH, LABELS_AUTH, Parties, features_app, labels_app

from labeldp import __version__

UPLOAD_TYPES = {"application/json", "application/octet-stream"}  # a file's format: the `format` query value
PUBLIC = {("get", "/healthz"), ("get", "/readyz"), ("get", "/metrics")}
SIGNED = {("post", "/v1/releases")}  # the features party's inbox: a release's signed manifest
DIGESTED = {("put", "/v1/releases/{release_id}/shards/{index}"), ("post", "/v1/releases/{release_id}/complete")}
"""The inbox's other steps: only the outbox's transport key (checked before the body); a shard is
taken only if its digest is one its signed manifest lists, and complete only completes a release
whose every such shard is held."""


@pytest.fixture(scope="module", params=["labels", "features"])
def app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    make = labels_app if request.param == "labels" else features_app
    return make(tmp_path_factory.mktemp(request.param))


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(m, p, op) for p, item in spec["paths"].items() for m, op in item.items()]


def _resolve(spec: dict[str, Any], ref: str) -> dict[str, Any]:
    node: Any = spec
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def test_every_operation_is_described_tagged_secured_and_typed(app: FastAPI) -> None:
    spec = app.openapi()
    assert spec["info"]["version"] == __version__ and spec["info"]["description"]
    declared_tags = {t["name"] for t in spec["tags"]}
    assert "HTTPValidationError" not in json.dumps(spec)  # FastAPI's default 422 body is not what we send
    ops = _operations(spec)
    assert len(ops) >= 10
    for method, path, op in ops:
        where = f"{method.upper()} {path}"
        assert op.get("summary") and op.get("description"), where
        assert op.get("tags") and set(op["tags"]) <= declared_tags, where
        schemes = {name for requirement in op.get("security", []) for name in requirement}
        features = spec["info"]["title"].endswith("features party")
        if (method, path) in PUBLIC or ((method, path) in DIGESTED and features):
            assert not schemes, where
        elif (method, path) in SIGNED and spec["info"]["title"].endswith("features party"):
            assert schemes == {"exchange_signature"}, where
        else:
            assert schemes == {"bearer"}, where
            bearer = spec["components"]["securitySchemes"]["bearer"]
            assert (bearer["type"], bearer["scheme"]) == ("http", "bearer"), where
        statuses = op["responses"]
        assert any(s.startswith("2") for s in statuses), where
        for status, response in statuses.items():
            media = response.get("content", {})
            assert media, f"{where} {status}: no body documented"
            for kind, content in media.items():  # a stream (text/event-stream) documents its own type
                assert "example" in content, f"{where} {status} {kind}: no example"
            content = media.get("application/json")
            if content is None:
                assert status.startswith("2"), f"{where} {status}: errors are JSON"
                continue
            ref = content["schema"].get("$ref")
            assert ref, f"{where} {status}: untyped body"
            if status.startswith("2"):
                model = _resolve(spec, ref)
                assert model.get("additionalProperties") is False, f"{where} {status}: {ref} admits any field"
            else:
                assert ref.endswith("/ErrorBody"), f"{where} {status}: not the error envelope"
                assert set(content["example"]) == {"code", "message", "details"}, where
        errors = {s for s in statuses if not s.startswith("2")}
        if (method, path) not in PUBLIC | DIGESTED:
            assert "401" in errors, where
            assert "503" in errors, where  # every guarded route reads the database
        if "{" in path:
            assert "404" in errors, where
        if method == "post" and not path.endswith(("/redeliver", "/cancel", "/complete", "/retry")):  # no body
            body = op.get("requestBody")
            assert body and body.get("content"), where
            assert {"413", "422"} <= errors, where
            for kind, media in body["content"].items():
                binary = media["schema"].get("format") == "binary"
                assert binary or "example" in media, f"{where}: {kind} body without an example"
            if set(body["content"]) - {"application/json"}:
                assert "415" in errors, where


def test_operation_ids_are_unique_names_and_links_point_at_real_operations(app: FastAPI) -> None:
    spec = app.openapi()
    ids = [op["operationId"] for _, _, op in _operations(spec)]
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"[a-z][a-z_]*", i) for i in ids), ids
    links = [
        (op["operationId"], link)
        for _, _, op in _operations(spec)
        for response in op["responses"].values()
        for link in response.get("links", {}).values()
    ]
    assert links, "no links: schemathesis's stateful phase would have nothing to follow"
    params_of = {
        op["operationId"]: {p["name"] for p in op.get("parameters", [])} for _, _, op in _operations(spec)
    }
    for source, link in links:
        assert link["operationId"] in params_of, (source, link)
        assert set(link["parameters"]) <= params_of[link["operationId"]], (source, link)


def test_every_response_example_is_a_valid_body_of_its_model(app: FastAPI) -> None:
    from features_party import responses as fr
    from labeldp.service.health import Ready
    from labeldp.service.openapi import ErrorBody
    from labels_party import responses as lr

    spec = app.openapi()
    models = fr if spec["info"]["title"].endswith("features party") else lr
    for method, path, op in _operations(spec):
        for status, response in op["responses"].items():
            content = response["content"].get("application/json")
            if content is None:
                continue
            name = content["schema"]["$ref"].rsplit("/", 1)[-1]
            shared = {"ErrorBody": ErrorBody, "Ready": Ready}
            model = shared[name] if name in shared else getattr(models, name)
            try:  # a client reading the docs sees a real body
                model.model_validate(content["example"])
            except ValueError as exc:
                raise AssertionError(f"{method.upper()} {path} {status}: {exc}") from None


def test_every_upload_type_is_a_documented_request_body(app: FastAPI) -> None:
    spec = app.openapi()
    paths = spec["paths"]
    if spec["info"]["title"].endswith("labels party"):
        for path in ("/v1/label-sets/{label_set_id}/ids", "/v1/label-sets/{label_set_id}/labels"):
            op = paths[path]["post"]
            assert set(op["requestBody"]["content"]) == UPLOAD_TYPES, path
            assert op["requestBody"]["content"]["application/octet-stream"]["schema"]["format"] == "binary", path
            (fmt,) = (p for p in op["parameters"] if p["name"] == "format")
            enum = spec["components"]["schemas"]["UploadFormat"]["enum"]
            assert set(enum) == {"csv", "parquet", "arrow"} and "UploadFormat" in json.dumps(fmt["schema"]), path
    else:
        for path in ("/v1/feature-tables", "/v1/models/{model_id}/predictions"):
            content = paths[path]["post"]["requestBody"]["content"]
            assert set(content) == {"application/octet-stream"}, path
            assert content["application/octet-stream"]["schema"]["format"] == "binary", path
        inbox = paths["/v1/releases"]["post"]
        assert set(inbox["responses"]) >= {"200", "201", "401", "409", "413", "422", "503"}


def test_a_405_says_which_methods_the_path_has(app: FastAPI) -> None:
    spec = app.openapi()
    # With the key: an anonymous caller gets 401 from the headers alone, whatever the method.
    auth = LABELS_AUTH if "labels" in app.title else FEATURES_AUTH
    with TestClient(app) as client:
        for path, item in spec["paths"].items():
            concrete = re.sub(r"\{[^}]+\}", "x", path)
            allowed = {m.upper() for m in item}
            wrong = next(m for m in ("PUT", "PATCH", "DELETE", "POST") if m not in allowed)
            r = client.request(wrong, concrete, headers=auth)
            assert r.status_code == 405, (wrong, path)
            assert set(r.headers["allow"].replace(" ", "").split(",")) >= allowed, (path, r.headers["allow"])
            assert r.json() == {"code": "method_not_allowed", "message": "Method Not Allowed", "details": []}


def test_docs_pages_load_their_assets_from_the_service(app: FastAPI) -> None:
    with TestClient(app) as client:
        for page in ("/docs", "/redoc"):
            html = client.get(page)
            assert html.status_code == 200
            urls = re.findall(r"""(?:src|href|url)\s*[:=]\s*['"]([^'"]+)['"]""", html.text)
            assert urls, page
            for url in urls:
                assert not re.match(r"(https?:)?//", url), f"{page} loads {url} from elsewhere"
                if not url.endswith(".json"):
                    assert client.get(url).status_code == 200, url


def test_real_bodies_of_every_resource_match_their_models(parties: Parties) -> None:
    from features_party import responses as fr
    from labels_party import responses as lr

    flow, labels, features = parties.flow, parties.labels, parties.features
    lr.PrivacyDomain.model_validate(flow.privacy_domain)
    lr.LabelSet.model_validate(flow.label_set)
    lr.Release.model_validate(flow.release)
    lr.LabelSetPage.model_validate(labels.get("/v1/label-sets", headers=LABELS_AUTH).json())
    lr.ReleasePage.model_validate(labels.get("/v1/releases", headers=LABELS_AUTH).json())
    lr.Health.model_validate(labels.get("/healthz").json())
    fr.FeatureTable.model_validate(flow.feature_table)
    fr.ReceivedRelease.model_validate(flow.received)
    columns = features.get(f"/v1/releases/{flow.release['id']}/labels", headers=FEATURES_AUTH)
    fr.ReleaseLabels.model_validate(columns.json())
    fr.Training.model_validate(flow.training)
    fr.ModelCard.model_validate(flow.model)
    fr.Health.model_validate(features.get("/healthz").json())
    predicted = features.post(
        f"/v1/models/{flow.model['id']}/predict", json={"ids": ["u001", "u002"]}, headers=FEATURES_AUTH
    )
    assert predicted.status_code == 200, predicted.text
    fr.Predictions.model_validate(predicted.json())


def _schemas_with_properties(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for name, schema in spec["components"]["schemas"].items():
        for prop, value in schema.get("properties", {}).items():
            out.append((name, prop, value))
    return out


def _types_of(value: dict[str, Any]) -> list[dict[str, Any]]:
    return value.get("anyOf", [value])


def test_codes_timestamps_and_mechanisms_are_typed_for_generators(app: FastAPI) -> None:
    """Error codes and mechanism names are enums, every ``*_at`` a ``date-time`` (issue 26, item 1)."""
    from labeldp.error_codes import ERROR_CODES
    from labeldp.mechanisms.registry import NAMES

    spec = app.openapi()
    code = spec["components"]["schemas"]["ErrorBody"]["properties"]["code"]
    assert sorted(code["enum"]) == sorted(ERROR_CODES)
    stamps = mechanisms = 0
    for name, prop, value in _schemas_with_properties(spec):
        strings = [t for t in _types_of(value) if t.get("type") == "string"]
        if prop.endswith("_at"):
            stamps += 1
            assert strings and all(t.get("format") == "date-time" for t in strings), f"{name}.{prop}"
        if prop == "mechanism":
            mechanisms += 1
            assert strings and set(NAMES) <= set(strings[0]["enum"]), f"{name}.{prop}"
    assert stamps >= 3 and mechanisms >= 1
    for method, path, op in _operations(spec):
        for status, response in op["responses"].items():
            example = response.get("content", {}).get("application/json", {}).get("example")
            if status.startswith(("4", "5")) and isinstance(example, dict):
                assert example["code"] in ERROR_CODES, f"{method} {path} {status}: {example['code']}"
                if example["code"] in ("budget_exhausted", "training_finished", "privacy_domain_exists"):
                    assert example["message"] == ERROR_CODES[example["code"]]


def test_slow_bodies_and_a_full_disk_are_in_the_contract_where_they_can_occur(app: FastAPI) -> None:
    """408 ``request_timeout`` on every operation that reads a body (the edge times a slow one out),
    507 ``insufficient_storage`` on every operation that writes (issue 24): each with the envelope,
    an example of its own code and, for 507, ``Retry-After``."""
    spec = app.openapi()
    bodies = writes = 0
    for method, path, op in _operations(spec):
        where = f"{method.upper()} {path}"
        responses = op["responses"]
        expected = set()
        if "requestBody" in op:
            expected.add("408")
            bodies += 1
        if method in ("post", "put", "patch", "delete"):
            expected.add("507")
            writes += 1
        for status in expected:
            assert status in responses, f"{where} lacks {status}"
        for status in {"408", "507"} & set(responses):
            media = responses[status]["content"]["application/json"]
            assert media["example"]["code"] == {"408": "request_timeout", "507": "insufficient_storage"}[status], where
            ref = media.get("schema", {}).get("$ref", "")
            assert ref.endswith("/ErrorBody"), where
            if status == "507":
                assert responses[status]["headers"]["Retry-After"]["required"], where
        if method == "get" and "requestBody" not in op:
            assert "408" not in responses, where
    assert bodies >= 3 and writes >= 3
    if spec["info"]["title"].startswith("labeldp features"):
        export = spec["paths"]["/v1/models/{model_id}/export"]["get"]["responses"]
        assert "507" in export  # a read that stores the export the first time
        for route in ("/v1/releases", "/v1/releases/{release_id}/shards/{index}", "/v1/releases/{release_id}/complete"):
            op = next(iter(spec["paths"][route].values()))
            assert op["responses"]["403"]["content"]["application/json"]["example"]["code"] == \
                "client_certificate_required"
