"""A release's stage (its job's, then its delivery's), as its status read and its event stream show it."""

from __future__ import annotations

import pytest

from labels_party.releases import STAGES, stage
from labels_party.store import ReleaseRow

NOW = 1_000_000.0


@pytest.mark.parametrize(
    ("status", "attempts", "lease_until", "expected"),
    [
        ("queued", 0, 0.0, "accepted"),  # a job waiting for a release worker
        ("running", 0, NOW + 30, "privatizing"),  # the outbox lease plays no part before the charge
        ("failed", 0, 0.0, "failed"),
        ("pending", 0, 0.0, "queued"),
        ("pending", 0, NOW + 30, "sending"),  # the outbox holds its lease: a push is under way
        ("pending", 1, NOW + 30, "sending"),
        ("pending", 2, NOW - 1, "retrying"),  # a failed attempt, lease over, waiting for its backoff
        ("delivered", 1, 0.0, "delivered"),
        ("rejected", 1, 0.0, "rejected"),
    ],
)
def test_stage_follows_status_attempts_and_the_outbox_lease(status, attempts, lease_until, expected) -> None:
    row = ReleaseRow(status=status, attempts=attempts, lease_until=lease_until)
    assert stage(row, now=NOW) == expected and expected in STAGES
