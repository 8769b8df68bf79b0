"""The streamed message writer is byte-identical to the pydantic message, and Arrow ids hash like lists."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest

from labeldp.mechanisms import LabelDomain
from labeldp.mechanisms.additive import Laplace
from labeldp.schema import (
    EpsilonPart,
    JsonPayload,
    LabelRelease,
    PrivacyAccounting,
    encode_payload,
    payload_digest,
    write_message,
)


@pytest.mark.parametrize("n", [3, 9_999, 10_000, 300_001])
def test_written_bytes_equal_the_model_dump(n: int) -> None:
    ids = [f"id{i:08d}" for i in range(n)]
    labels = np.random.default_rng(n).uniform(0, 1, n)
    skeleton = LabelRelease(
        release_id="rel_x", label_set_id="ls_x", created_at=datetime(2026, 1, 1, tzinfo=UTC),
        mechanism=Laplace(1.0, LabelDomain("real", 0, 1)).fit_to().to_spec(),
        accounting=PrivacyAccounting(parts=[EpsilonPart(name="randomizer", epsilon_micro=1)], total_epsilon_micro=1),
        row_count=n, payload_digest=payload_digest(ids, labels), payload=JsonPayload(ids=[], labels=[]),
    )
    reference = skeleton.model_copy(update={"payload": encode_payload(ids, labels)}).model_dump_json().encode()
    out = io.BytesIO()
    write_message(out, skeleton, pa.array(ids, pa.string()), labels)
    assert out.getvalue() == reference
    decoded_ids, decoded = LabelRelease.model_validate_json(out.getvalue()).columns()
    assert decoded_ids == ids and np.array_equal(decoded, labels)
    assert payload_digest(pa.array(ids, pa.string()), labels) == payload_digest(ids, labels)
