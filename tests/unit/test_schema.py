from datetime import UTC, datetime

import numpy as np
import pytest
from pydantic import ValidationError

from labeldp.schema import (
    ARROW_THRESHOLD_ROWS,
    ArrowPayload,
    EpsilonPart,
    JsonPayload,
    LabelRelease,
    LaplaceSpec,
    PrivacyAccounting,
    RROnBinsSpec,
    decode_payload,
    encode_payload,
    payload_digest,
)
from labeldp.signing import generate_keypair, sign, verify


def _release(n: int) -> LabelRelease:
    ids = [f"id{i:06d}" for i in range(n)]
    labels = np.linspace(0, 1, n)
    return LabelRelease(
        release_id="rel_1",
        label_set_id="ls_1",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        mechanism=RROnBinsSpec(
            epsilon=1.0, outputs=[0.0, 1.0], cut_points=[0.5], keep_probability=0.73, debias_a=0.46, debias_b=0.27
        ),
        accounting=PrivacyAccounting(
            parts=[EpsilonPart(name="randomizer", epsilon_micro=1_000_000)], total_epsilon_micro=1_000_000
        ),
        row_count=n,
        payload_digest=payload_digest(ids, labels),
        payload=encode_payload(ids, labels),
    )


@pytest.mark.parametrize("n", [5, ARROW_THRESHOLD_ROWS + 1])
def test_message_round_trips_through_json_bytes(n):
    msg = _release(n)
    assert isinstance(msg.payload, JsonPayload if n < ARROW_THRESHOLD_ROWS else ArrowPayload)
    back = LabelRelease.model_validate_json(msg.model_dump_json())
    ids, labels = back.columns()
    assert payload_digest(ids, labels) == msg.payload_digest
    assert back == msg


def test_mechanism_union_is_discriminated_on_name():
    msg = _release(3).model_dump()
    msg["mechanism"] = {
        "name": "laplace",
        "epsilon": 1.0,
        "domain": {"kind": "real", "low": 0, "high": 1},
        "step": 0.01,
        "scale": 1.0,
    }
    assert isinstance(LabelRelease.model_validate(msg).mechanism, LaplaceSpec)
    msg["mechanism"] = {"name": "no_such_mechanism", "epsilon": 1.0}
    with pytest.raises(ValidationError):
        LabelRelease.model_validate(msg)


def test_digest_changes_with_any_label_or_id():
    ids, labels = ["a", "b"], np.array([1.0, 2.0])
    base = payload_digest(ids, labels)
    assert payload_digest(ids, np.array([1.0, 2.0000001])) != base
    assert payload_digest(["a", "c"], labels) != base
    assert decode_payload(encode_payload(ids, labels))[0] == ids


def test_signature_covers_every_byte():
    body = _release(3).model_dump_json().encode()
    private, public = generate_keypair()
    header = sign(body, private)
    assert verify(body, public, header)
    assert not verify(body + b" ", public, header)
    assert not verify(body, generate_keypair()[1], header)
    assert not verify(body, public, None)
