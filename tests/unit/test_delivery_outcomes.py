"""The outbox's delivery outcomes: a fixed list; a receiver's answer can pick a value, never write text."""

from __future__ import annotations

import inspect

import httpx
import pytest

from features_party import inbox
from features_party.routes import inbox as inbox_routes
from labeldp import message_shards
from labeldp.service import http_api, spool
from labels_party.delivery_outcomes import (
    INBOX_CODES,
    REJECTING,
    RETRIED,
    DeliveryOutcome,
    classify_error,
    classify_response,
    shown,
)
from labels_party.outbox import _needed

REQUEST = httpx.Request("POST", "http://127.0.0.1:1/v1/releases")


def _answer(status: int, body: object = None, text: str | None = None) -> httpx.Response:
    if text is not None:
        return httpx.Response(status, text=text, request=REQUEST)
    return httpx.Response(status, json=body, request=REQUEST)


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (401, {"code": "bad_signature"}, DeliveryOutcome.SIGNATURE_REFUSED),
        (422, {"code": "invalid_message"}, DeliveryOutcome.INVALID_MESSAGE),
        (422, {"code": "digest_mismatch"}, DeliveryOutcome.DIGEST_MISMATCH),
        (409, {"code": "release_conflict"}, DeliveryOutcome.RELEASE_CONFLICT),
        (503, {"code": "inbox_busy"}, DeliveryOutcome.INBOX_BUSY),
        (409, {"code": "shards_missing"}, DeliveryOutcome.SHARDS_MISSING),
        (404, {"code": "manifest_unknown"}, DeliveryOutcome.MANIFEST_UNKNOWN),
        # A known code under another status, an unknown code, a non-string code: the status class only.
        (422, {"code": "bad_signature"}, DeliveryOutcome.REJECTED_4XX),
        (422, {"code": "features_party_chosen_text_u001_income=42"}, DeliveryOutcome.REJECTED_4XX),
        (400, {"code": ["invalid_message"]}, DeliveryOutcome.REJECTED_4XX),
        (400, ["invalid_message"], DeliveryOutcome.REJECTED_4XX),
        (429, {"code": "slow_down"}, DeliveryOutcome.THROTTLED_4XX),
        (500, {"code": "u001 earns 42"}, DeliveryOutcome.SERVER_ERROR_5XX),
        (302, None, DeliveryOutcome.UNEXPECTED_STATUS),
        (204, None, DeliveryOutcome.UNEXPECTED_STATUS),
    ],
)
def test_an_answer_maps_to_a_value_of_the_list(status, body, expected):
    assert classify_response(_answer(status, body)) is expected


def test_a_body_that_is_not_json_is_classified_by_status():
    assert classify_response(_answer(422, text="u001 earns 42")) is DeliveryOutcome.REJECTED_4XX


def test_an_attempt_without_an_answer_maps_to_a_value_of_the_list():
    assert classify_error(httpx.ReadTimeout("t", request=REQUEST)) is DeliveryOutcome.TIMEOUT
    assert classify_error(httpx.ConnectError("refused", request=REQUEST)) is DeliveryOutcome.CONNECTION_ERROR
    assert classify_error(httpx.RemoteProtocolError("junk", request=REQUEST)) is DeliveryOutcome.TRANSPORT_ERROR
    assert classify_error(httpx.TooManyRedirects("loop", request=REQUEST)) is DeliveryOutcome.TRANSPORT_ERROR


def test_text_stored_before_the_list_is_never_shown():
    assert shown(None) is None
    assert shown("rejected_4xx") is DeliveryOutcome.REJECTED_4XX
    assert shown("422 features_party_chosen_text_u001_income=42") is DeliveryOutcome.UNRECORDED


def test_the_known_codes_are_the_inbox_own():
    """Every code the outbox recognizes is one the features party's inbox (or its edge) answers with."""
    source = "".join(inspect.getsource(m) for m in (inbox, inbox_routes, message_shards, http_api, spool))
    for _status, code in INBOX_CODES:
        assert f'"{code}"' in source, code


def test_every_outcome_is_retried_or_rejects():
    assert RETRIED.isdisjoint(REJECTING)
    assert RETRIED | REJECTING == set(DeliveryOutcome) - {DeliveryOutcome.UNRECORDED}
    assert DeliveryOutcome.SHARDS_MISSING in RETRIED and DeliveryOutcome.DIGEST_MISMATCH in REJECTING


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"status": "complete", "missing": []}, "complete"),
        ({"status": "receiving", "missing": [2, 0]}, [0, 2]),
        ({"status": "receiving", "missing": []}, []),
        # Anything else is not the contract's: no shard is chosen by it, nothing of it is kept.
        ({"status": "receiving", "missing": [3]}, None),  # not a shard of this message
        ({"status": "receiving", "missing": [1, 1]}, None),
        ({"status": "receiving", "missing": [True]}, None),
        ({"status": "receiving", "missing": "0,1"}, None),
        ({"status": "complete", "missing": [0]}, None),
        ({"status": "u001 earns 42", "missing": []}, None),
        (["complete"], None),
    ],
)
def test_the_manifest_answer_is_read_only_as_its_contract(body, expected):
    assert _needed(_answer(201, body), shard_count=3) == expected
