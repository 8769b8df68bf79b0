"""The inbox's manifest parser under signed garbage (issue 10, item 1).

Schemathesis cannot sign, so against the running service it only ever reaches the inbox's
signature check. Here every generated body is signed with the exchange secret, so it goes
past the signature into the schema and consistency checks: random JSON, and a real release
manifest with one field (top-level or nested) replaced by random JSON or removed. Every answer
must be one the contract documents for the inbox, with the error envelope; never a 500.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.contract.conftest import LABELS_AUTH, SIGNING_KEY, features_app, labels_app
from tests.local_settings import TRANSPORT_AUTH
from tests.release_jobs import wait_release

from labeldp.schema import SIGNATURE_HEADER
from labeldp.signing import sign

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def message(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real release's manifest, as the labels party wrote it."""
    from labels_party.context import message_key

    with TestClient(labels_app(tmp_path_factory.mktemp("labels"))) as labels:
        ids = [f"u{i}" for i in range(20)]
        ls = labels.post(
            "/v1/label-sets", json={"name": "s", "domain": {"low": 0, "high": 10}, "ids": ids}, headers=LABELS_AUTH
        ).json()
        labels.post(
            f"/v1/label-sets/{ls['id']}/labels", json={"ids": ids, "labels": [1.0] * 20}, headers=LABELS_AUTH
        )
        rel = labels.post(
            f"/v1/label-sets/{ls['id']}/releases", json={"mechanism": "rr_on_bins", "epsilon": 1}, headers=LABELS_AUTH
        ).json()
        wait_release(labels, rel["id"], "pending", headers=LABELS_AUTH)
        store = labels.app.state.ctx.store  # type: ignore[attr-defined]
        return json.loads(store.get_bytes(message_key(f"{rel['id']}/manifest.json")))


@pytest.fixture(scope="module")
def inbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with TestClient(features_app(tmp_path_factory.mktemp("features"))) as client:
        yield client


@st.composite
def mutated(draw: st.DrawFn, message: dict[str, Any]) -> Any:
    body = json.loads(json.dumps(message))
    parent = body
    key = draw(st.sampled_from(sorted(body)))
    if isinstance(body[key], dict) and body[key] and draw(st.booleans()):
        parent, key = body[key], draw(st.sampled_from(sorted(body[key])))
    if draw(st.booleans()):
        del parent[key]
    else:
        parent[key] = draw(JSON)
    return body


def test_signed_garbage_gets_a_documented_answer(inbox: TestClient, message: dict[str, Any]) -> None:
    spec = inbox.get("/openapi.json").json()
    documented = {int(s) for s in spec["paths"]["/v1/releases"]["post"]["responses"]}
    seen: set[int] = set()

    @given(body=st.one_of(JSON, mutated(message)))
    @settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def post(body: Any) -> None:
        raw = json.dumps(body).encode()
        r = inbox.post(
            "/v1/releases",
            content=raw,
            headers={"content-type": "application/json", SIGNATURE_HEADER: sign(raw, SIGNING_KEY), **TRANSPORT_AUTH},
        )
        seen.add(r.status_code)
        assert r.status_code in documented, (r.status_code, r.text)
        if r.status_code >= 400:
            assert set(r.json()) == {"code", "message", "details"}, r.text

    post()
    assert 422 in seen  # past the signature: the parser answered, not the signature check


def test_the_unmutated_message_is_accepted(features: TestClient, message: dict[str, Any]) -> None:
    # The control: the same message unmutated goes through (on a fresh inbox), so the 422s
    # above come from the mutations, not from a message the inbox could never accept.
    raw = json.dumps(message).encode()
    headers = {"content-type": "application/json", SIGNATURE_HEADER: sign(raw, SIGNING_KEY), **TRANSPORT_AUTH}
    r = features.post("/v1/releases", content=raw, headers=headers)
    assert r.status_code == 201 and r.json()["id"] == message["release_id"], r.text


def test_garbage_shards_of_a_signed_manifest_get_a_documented_answer(
    features: TestClient, message: dict[str, Any]
) -> None:
    # Past the manifest's signature, every shard is checked against the manifest's digest before
    # it is parsed: random bytes under any index get a documented refusal, never a 500, never stored.
    raw = json.dumps(message).encode()
    headers = {"content-type": "application/json", SIGNATURE_HEADER: sign(raw, SIGNING_KEY), **TRANSPORT_AUTH}
    assert features.post("/v1/releases", content=raw, headers=headers).status_code == 201
    path = "/v1/releases/{release_id}/shards/{index}"
    documented = {int(s) for s in features.get("/openapi.json").json()["paths"][path]["put"]["responses"]}
    seen: set[int] = set()

    @given(body=st.binary(max_size=3000), index=st.integers(-1, 3))
    @settings(max_examples=60, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def put(body: bytes, index: int) -> None:
        r = features.put(f"/v1/releases/{message['release_id']}/shards/{index}", content=body,
                         headers=TRANSPORT_AUTH)
        seen.add(r.status_code)
        assert r.status_code in documented and r.status_code >= 400, (r.status_code, r.text)
        assert set(r.json()) == {"code", "message", "details"}, r.text

    put()
    assert 422 in seen
    complete = features.post(f"/v1/releases/{message['release_id']}/complete", headers=TRANSPORT_AUTH)
    assert complete.status_code == 409 and complete.json()["code"] == "shards_missing"
