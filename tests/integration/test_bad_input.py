"""Bad input: a 4xx with a stable code, and nothing charged or stored."""

from __future__ import annotations

import json
import time

import pytest

from labeldp.schema import SIGNATURE_HEADER
from labeldp.signing import generate_keypair, sign

from .conftest import MAX_BODY, create_label_set, upload_csv


@pytest.fixture()
def label_set(stack, data):
    ids = data.ids[:50]
    with stack.labels_client() as labels:
        ls = create_label_set(labels, ids, budget=1.0, high=data.clip)
    return ls, ids


def _state(labels, label_set_id: str) -> tuple:
    s = labels.get(f"/v1/label-sets/{label_set_id}").json()
    return s["counts"]["labeled"], s["budget"]["spent_micro"], len(s["releases"])


@pytest.mark.parametrize(
    "value, code",
    [("nan", "non_finite"), ("inf", "non_finite"), ("-inf", "non_finite"), ("1e9", "out_of_domain"),
     ("-0.5", "out_of_domain"), ("abc", "not_a_number"), ("", "not_a_number")],
)
def test_bad_label_values_are_rejected_row_by_row(stack, label_set, value, code):
    ls, ids = label_set
    with stack.labels_client() as labels:
        body = "id,label\n" + f"{ids[0]},1.5\n{ids[1]},{value}\n"
        r = labels.post(f"/v1/label-sets/{ls['id']}/labels", content=body, headers={"content-type": "text/csv"})
        assert r.status_code == 422
        assert r.json()["code"] == "invalid_labels"
        assert r.json()["details"] == [
            {"row": 2, "id": ids[1], "code": code, "message": r.json()["details"][0]["message"]}
        ]
        assert _state(labels, ls["id"]) == (0, 0, 0)  # not even the valid row was stored


def test_json_nan_and_duplicate_ids_in_upload(stack, label_set):
    ls, ids = label_set
    with stack.labels_client() as labels:
        r = labels.post(
            f"/v1/label-sets/{ls['id']}/labels",
            content=b'{"ids": ["%s", "%s"], "labels": [1.0, NaN]}' % (ids[0].encode(), ids[1].encode()),
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 422 and r.json()["details"][0]["code"] == "non_finite"
        r = upload_csv(labels, ls["id"], [(ids[0], 1.0), (ids[0], 2.0)])
        assert r.status_code == 422 and r.json()["details"][0]["code"] == "duplicate_id"
        r = upload_csv(labels, ls["id"], [("not-declared", 1.0)])
        assert r.status_code == 422 and r.json()["details"][0]["code"] == "unknown_id"
        assert _state(labels, ls["id"]) == (0, 0, 0)


def test_duplicate_ids_in_label_set_and_bad_budget(stack):
    with stack.labels_client() as labels:
        base = {"name": "x", "domain": {"low": 0, "high": 1}, "total_epsilon": 1, "ids": ["a", "b", "a"]}
        r = labels.post("/v1/label-sets", json=base)
        assert r.status_code == 422 and r.json()["code"] == "duplicate_ids"
        for eps in (0, -1):
            r = labels.post("/v1/label-sets", json={**base, "ids": ["a"], "total_epsilon": eps})
            assert r.status_code == 422 and r.json()["code"] == "invalid_epsilon"
        r = labels.post("/v1/label-sets", json={**base, "ids": ["a"], "domain": {"low": 1, "high": 0}})
        assert r.status_code == 422 and r.json()["code"] == "invalid_domain"


def test_release_errors_charge_nothing(stack, data, label_set, feature_table):
    ls, ids = label_set
    with stack.labels_client() as labels:
        url = f"/v1/label-sets/{ls['id']}/releases"
        # Before every id has a label.
        assert upload_csv(labels, ls["id"], [(i, 1.0) for i in ids[:-1]]).status_code == 200
        r = labels.post(url, json={"mechanism": "rr_on_bins", "epsilon": 0.5, "feature_table": feature_table})
        assert r.status_code == 409 and r.json()["code"] == "labels_incomplete"
        assert upload_csv(labels, ls["id"], [(ids[-1], 1.0)]).status_code == 200
        cases = [
            ({"mechanism": "no_such_mechanism", "epsilon": 0.5}, 422, "unknown_mechanism"),
            ({"mechanism": "rr_on_bins", "epsilon": 0}, 422, "invalid_epsilon"),
            ({"mechanism": "rr_on_bins", "epsilon": -1}, 422, "invalid_epsilon"),
            ({"mechanism": "rr_on_bins", "epsilon": "nan"}, 422, "invalid_epsilon"),
            ({"mechanism": "rr_on_bins", "epsilon": 1.000001}, 409, "budget_exhausted"),
            ({"mechanism": "laplace"}, 422, "invalid_request"),
        ]
        for body, status, code in cases:
            r = labels.post(url, json={**body, "feature_table": feature_table})
            assert (r.status_code, r.json()["code"]) == (status, code), body
        assert _state(labels, ls["id"]) == (50, 0, 0)
        # Relabeling is refused: a stored label never changes.
        r = upload_csv(labels, ls["id"], [(ids[0], 2.0)])
        assert r.status_code == 422 and r.json()["details"][0]["code"] == "already_labeled"


def test_oversized_body_is_refused_before_parsing(stack, label_set):
    ls, _ids = label_set
    with stack.labels_client() as labels:
        body = b"id,label\n" + b"x,1\n" * (MAX_BODY // 4 + 10)
        r = labels.post(f"/v1/label-sets/{ls['id']}/labels", content=body, headers={"content-type": "text/csv"})
        assert r.status_code == 413 and r.json()["code"] == "payload_too_large"
        assert _state(labels, ls["id"]) == (0, 0, 0)


def test_unauthenticated_requests_are_refused(stack, label_set):
    ls, _ = label_set
    with stack.labels_client() as labels:
        r = labels.get(f"/v1/label-sets/{ls['id']}", headers={"authorization": "Bearer wrong"})
        assert r.status_code == 401 and r.json()["code"] == "unauthorized"


def test_inbox_refuses_a_message_with_a_bad_signature(stack):
    body = json.dumps({"release_id": "rel_forged"}).encode()
    with stack.features_client() as features:
        for header in (sign(body, generate_keypair()[0]), None):  # a key the inbox does not trust
            headers = {"content-type": "application/json", "authorization": f"Bearer {stack.transport_key}"}
            if header:
                headers[SIGNATURE_HEADER] = header
            r = features.post("/v1/releases", content=body, headers=headers)
            assert r.status_code == 401 and r.json()["code"] == "bad_signature"
        assert features.get("/v1/releases/rel_forged").status_code == 404


def test_idempotency_key_replays_and_refuses_reuse(stack, label_set):
    ls, ids = label_set
    with stack.labels_client() as labels:
        first = upload_csv(labels, ls["id"], [(ids[0], 1.0)], **{"idempotency-key": "k1"})
        again = upload_csv(labels, ls["id"], [(ids[0], 1.0)], **{"idempotency-key": "k1"})
        assert first.status_code == again.status_code == 200
        assert again.headers.get("idempotent-replay") == "true" and again.json() == first.json()
        other = upload_csv(labels, ls["id"], [(ids[1], 1.0)], **{"idempotency-key": "k1"})
        assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"
        assert _state(labels, ls["id"])[0] == 1
        r = labels.post(
            f"/v1/label-sets/{ls['id']}/labels?validate_only=true",
            content=f"id,label\n{ids[1]},1.0\n",
            headers={"content-type": "text/csv"},
        )
        assert r.status_code == 200 and r.json()["validate_only"] is True
        assert _state(labels, ls["id"])[0] == 1


def _message_files(stack) -> int:
    folder = stack.workdir / "labels-data" / "messages"
    return len([p for p in folder.rglob("*") if p.is_file()]) if folder.exists() else 0


def test_every_bad_release_request_is_refused_before_anything_is_charged_or_written(stack, data, label_set):
    ls, ids = label_set
    with stack.labels_client() as labels:
        assert upload_csv(labels, ls["id"], [(i, 1.0) for i in ids]).status_code == 200
        url = f"/v1/label-sets/{ls['id']}/releases"
        files_before = _message_files(stack)
        cases = [
            ({"mechanism": "laplace", "epsilon": 0.5, "feature_tabel": "clicks"}, 422, "invalid_request"),
            ({"mechanism": "laplace", "epsilon": True}, 422, "invalid_request"),
            ({"mechanism": "laplace", "epsilon": 1e-8}, 422, "invalid_epsilon"),
            ({"mechanism": "laplace", "epsilon": "0.00000001"}, 422, "invalid_epsilon"),
            ({"mechanism": "laplace", "epsilon": "1e400"}, 422, "invalid_epsilon"),
            ({"mechanism": "laplace", "epsilon": "1e10000000"}, 422, "invalid_epsilon"),
            ({"mechanism": "laplace", "epsilon": "1" * 5000}, 422, "invalid_epsilon"),
            ({"mechanism": "rr_on_bins", "epsilon": 0.5, "prior": {"values": [0, 1], "probs": [0.5, 0.5]}},
             422, "invalid_request"),
            ({"mechanism": "rr_on_bins", "epsilon": 0.5,
              "prior": {"values": [0, 1], "probs": [0.5, 0.5], "source": "x", "extra": 1}}, 422, "invalid_request"),
            ({"mechanism": "gaussian", "epsilon": 0.5, "params": {"delta": 0.01}}, 422, "invalid_parameters"),
        ]
        for body, status, code in cases:
            started = time.monotonic()
            r = labels.post(url, json=body)
            assert (r.status_code, r.json()["code"]) == (status, code), body
            assert time.monotonic() - started < 2, body  # no input makes the service think for long
        assert _state(labels, ls["id"]) == (50, 0, 0)
        assert _message_files(stack) == files_before


def test_bad_label_set_and_domain_requests_change_nothing(stack):
    with stack.labels_client() as labels:
        base = {"name": "x", "domain": {"low": 0, "high": 1}, "ids": ["a"]}
        cases = [
            ({**base, "total_epsilon": 1e13}, 422, "invalid_epsilon"),
            ({**base, "total_epsilon": 1.95e37}, 422, "invalid_epsilon"),
            ({**base, "total_epsilon": True}, 422, "invalid_request"),
            ({**base, "privacy_domain": "no-such-domain"}, 404, "privacy_domain_not_found"),
            ({**base, "domain": {"low": 0, "high": True}}, 422, "invalid_request"),
            ({**base, "budget": 1}, 422, "invalid_request"),
        ]
        for body, status, code in cases:
            r = labels.post("/v1/label-sets", json=body)
            assert (r.status_code, r.json()["code"]) == (status, code), body
        for body, code in [
            ({"name": "bad name!", "id_source": "s1", "epsilon": 1}, "invalid_name"),
            ({"name": "ok", "id_source": "s2", "epsilon": "1e-9"}, "invalid_epsilon"),
            ({"name": "ok", "id_source": "s3", "epsilon": 1, "delta": 0.9}, "invalid_request"),
        ]:
            r = labels.post("/v1/privacy-domains", json=body)
            assert (r.status_code, r.json()["code"]) == (422, code), body
        assert labels.get("/v1/privacy-domains", params={"name": "ok"}).json()["items"] == []


def _parquet_bytes(table) -> bytes:  # type: ignore[no-untyped-def]
    import io

    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def test_text_that_is_not_unicode_nested_columns_and_odd_epsilon_text_are_4xx_that_change_nothing(
    stack, data, label_set
):
    """Issue 24: each of these was a 500 or accepted as ε = 1; one case per route family, over real HTTP."""
    import pyarrow as pa

    ls, ids = label_set
    json_type = {"content-type": "application/json"}
    with stack.labels_client() as labels:
        sets_before = len(labels.get("/v1/label-sets", params={"limit": 500}).json()["items"])
        # label sets: a lone surrogate among inline ids (json.dumps escapes it as "\ud800")
        r = labels.post("/v1/label-sets", content=json.dumps(
            {"name": "x", "domain": {"low": 0, "high": 1}, "ids": ["a", "\ud800"]}), headers=json_type)
        assert (r.status_code, r.json()["code"], r.json()["details"]) == (
            422, "invalid_id", [{"row": 2, "code": "invalid_id"}]), r.text
        # label sets and privacy domains: ε text that Decimal() would read as 1
        r = labels.post("/v1/label-sets", json={"name": "x", "domain": {"low": 0, "high": 1}, "ids": ["a"],
                                                 "total_epsilon": " 1 "})
        assert (r.status_code, r.json()["code"]) == (422, "invalid_epsilon"), r.text
        r = labels.post("/v1/privacy-domains", content=json.dumps(
                            {"name": "arabic", "id_source": "arabic", "epsilon": "١"}),
                        headers=json_type)
        assert (r.status_code, r.json()["code"]) == (422, "invalid_epsilon"), r.text
        assert labels.get("/v1/privacy-domains", params={"name": "arabic"}).json()["items"] == []
        assert len(labels.get("/v1/label-sets", params={"limit": 500}).json()["items"]) == sets_before
        # uploads: a nested label column, an id that is not UTF-8
        nested = _parquet_bytes(pa.table({"id": ids[:2], "label": pa.array([[1.0], [2.0]])}))
        r = labels.post(f"/v1/label-sets/{ls['id']}/labels", content=nested,
                        headers={"content-type": "application/vnd.apache.parquet"})
        assert (r.status_code, r.json()["code"]) == (422, "unsupported_column_type"), r.text
        assert r.json()["details"][0]["column"] == "label"
        body = f"id,label\n{ids[0]},1.5\n".encode() + b"\xed\xa0\x80,2.5\n"
        r = labels.post(f"/v1/label-sets/{ls['id']}/labels", content=body, headers={"content-type": "text/csv"})
        assert (r.status_code, r.json()["code"]) == (422, "invalid_id") and "2.5" not in r.text, r.text
        assert _state(labels, ls["id"]) == (0, 0, 0)
        # releases: ε text with blanks, after valid labels
        assert upload_csv(labels, ls["id"], [(i, 1.0) for i in ids]).status_code == 200
        r = labels.post(f"/v1/label-sets/{ls['id']}/releases", json={"mechanism": "laplace", "epsilon": " 1 "})
        assert (r.status_code, r.json()["code"]) == (422, "invalid_epsilon"), r.text
        assert _state(labels, ls["id"]) == (50, 0, 0)
    with stack.features_client() as features:
        # feature tables: an id that is not UTF-8 (row 2)
        r = features.post("/v1/feature-tables", params={"name": "odd"}, content=b"id,x\na,1\n\xed\xa0\x80,2\n",
                          headers={"content-type": "text/csv"})
        assert (r.status_code, r.json()["code"], r.json()["details"]) == (
            422, "invalid_id", [{"row": 2, "code": "invalid_id"}]), r.text
        assert features.get("/v1/feature-tables", params={"name": "odd"}).json()["items"] == []
