"""What the outbox records about a failed delivery attempt: a word from a fixed list, never receiver text.

Nothing flows back from the features party (docs/architecture.md, privacy invariant 1). An
answer is classified by its status class and, only where its ``code`` is one of the inbox's
own published error codes (:data:`INBOX_CODES`, with the status that code is declared under),
by that code; any other body is never stored, shown or logged. A receiver can at most pick
one of these values: it cannot write a string into the labels party's database, API or logs.
"""

from __future__ import annotations

from enum import StrEnum

import httpx


class DeliveryOutcome(StrEnum):
    """Why an attempt did not deliver (the release's ``last_error``)."""

    SIGNATURE_REFUSED = "signature_refused"  # 401 bad_signature
    INVALID_MESSAGE = "invalid_message"  # 422 invalid_message
    DIGEST_MISMATCH = "digest_mismatch"  # 422 digest_mismatch
    RELEASE_CONFLICT = "release_conflict"  # 409 release_conflict
    PAYLOAD_TOO_LARGE = "payload_too_large"  # 413 payload_too_large
    INBOX_BUSY = "inbox_busy"  # 503 inbox_busy
    REJECTED_4XX = "rejected_4xx"  # any other 4xx that is not retried
    THROTTLED_4XX = "throttled_4xx"  # 408, 425, 429: retried
    SERVER_ERROR_5XX = "server_error_5xx"
    UNEXPECTED_STATUS = "unexpected_status"  # 1xx, 3xx, a 2xx other than 200/201
    UNEXPECTED_ANSWER = "unexpected_answer"  # a 2xx to the manifest whose body is not the contract's: retried
    SHARDS_MISSING = "shards_missing"  # 409 shards_missing (complete before every shard arrived): retried
    MANIFEST_UNKNOWN = "manifest_unknown"  # 404 manifest_unknown (a shard before its manifest): retried
    TIMEOUT = "timeout"
    CONNECTION_ERROR = "connection_error"
    TRANSPORT_ERROR = "transport_error"  # any other httpx error (protocol, a redirect loop, ...)
    UNRECORDED = "unrecorded"  # a row written before this list existed: its stored text is not shown


RETRYABLE_4XX = frozenset({408, 425, 429})

INBOX_CODES: dict[tuple[int, str], DeliveryOutcome] = {
    (401, "bad_signature"): DeliveryOutcome.SIGNATURE_REFUSED,
    (422, "invalid_message"): DeliveryOutcome.INVALID_MESSAGE,
    (422, "digest_mismatch"): DeliveryOutcome.DIGEST_MISMATCH,
    (409, "release_conflict"): DeliveryOutcome.RELEASE_CONFLICT,
    (413, "payload_too_large"): DeliveryOutcome.PAYLOAD_TOO_LARGE,
    (503, "inbox_busy"): DeliveryOutcome.INBOX_BUSY,
    (409, "shards_missing"): DeliveryOutcome.SHARDS_MISSING,
    (404, "manifest_unknown"): DeliveryOutcome.MANIFEST_UNKNOWN,
}
"""The features party inbox's published error codes (its OpenAPI ``POST /v1/releases`` and the
shard and complete routes), by status."""

RETRIED = frozenset({
    DeliveryOutcome.INBOX_BUSY, DeliveryOutcome.THROTTLED_4XX, DeliveryOutcome.SERVER_ERROR_5XX,
    DeliveryOutcome.UNEXPECTED_STATUS, DeliveryOutcome.UNEXPECTED_ANSWER, DeliveryOutcome.SHARDS_MISSING,
    DeliveryOutcome.MANIFEST_UNKNOWN, DeliveryOutcome.TIMEOUT, DeliveryOutcome.CONNECTION_ERROR,
    DeliveryOutcome.TRANSPORT_ERROR,
})
"""Outcomes tried again with backoff; every other one is a 4xx that marks the release ``rejected``."""
REJECTING = frozenset(DeliveryOutcome) - RETRIED - {DeliveryOutcome.UNRECORDED}


def _code(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    code = body.get("code") if isinstance(body, dict) else None
    return code if isinstance(code, str) else None


def classify_response(response: httpx.Response) -> DeliveryOutcome:
    """The outcome of an answer that is not 200/201; the body is only compared with known codes."""
    status = response.status_code
    known = INBOX_CODES.get((status, _code(response) or ""))
    if known is not None:
        return known
    if status in RETRYABLE_4XX:
        return DeliveryOutcome.THROTTLED_4XX
    if 400 <= status < 500:
        return DeliveryOutcome.REJECTED_4XX
    if 500 <= status < 600:
        return DeliveryOutcome.SERVER_ERROR_5XX
    return DeliveryOutcome.UNEXPECTED_STATUS


def classify_error(exc: httpx.HTTPError) -> DeliveryOutcome:
    """The outcome of an attempt that got no answer."""
    if isinstance(exc, httpx.TimeoutException):
        return DeliveryOutcome.TIMEOUT
    if isinstance(exc, httpx.NetworkError):
        return DeliveryOutcome.CONNECTION_ERROR
    return DeliveryOutcome.TRANSPORT_ERROR


def shown(stored: str | None) -> DeliveryOutcome | None:
    """A stored ``last_error`` as the API shows it: a value of the list, never older free text."""
    if stored is None:
        return None
    try:
        return DeliveryOutcome(stored)
    except ValueError:
        return DeliveryOutcome.UNRECORDED
