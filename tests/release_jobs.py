"""Release jobs in tests: run the queued ones in this process, or wait over HTTP for a state.

``POST …/releases`` answers 202 with a queued job (services/labels_party/release_worker.py);
these helpers bring a job to its end so a test can look at the charge it made, or at the
stable code it failed with (nothing charged).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from labeldp.errors import LabelDPError
from labels_party.context import LabelsContext
from labels_party.release_worker import ReleaseWorker
from labels_party.releases import describe
from labels_party.store import RELEASE_JOB_STATES, ReleaseRow

CHARGED = ("pending", "delivered", "rejected")


class JobFailed(LabelDPError):
    """A release job that ended ``failed``: its stable code and message, nothing charged."""

    status_code: ClassVar[int] = 409


def settle(ctx: LabelsContext, release_id: str, timeout: float = 60.0) -> dict[str, Any]:
    """Run release jobs here (any queued one: another thread may be running this one) until
    ``release_id`` is charged; its body. Raises :class:`JobFailed` if its job failed."""
    worker = ReleaseWorker(ctx)
    deadline = time.monotonic() + timeout
    while True:
        with ctx.sessions() as s:
            row = s.get(ReleaseRow, release_id)
            assert row is not None
            body = describe(row).model_dump()
        if body["status"] == "failed":
            raise JobFailed(body["error"]["code"], body["error"]["message"])
        if body["status"] not in RELEASE_JOB_STATES:
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"release {release_id} stayed {body['status']}")
        if not worker.step():
            time.sleep(0.01)


def wait_release(
    client: Any, release_id: str, *states: str, timeout: float = 60.0, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """Poll ``GET /v1/releases/{id}`` (an httpx or TestClient client) until its status is one of
    ``states`` (default: charged, i.e. past the job); its body. A failed job fails the test."""
    wanted = states or CHARGED
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        r = client.get(f"/v1/releases/{release_id}", headers=headers)
        assert r.status_code == 200, r.text
        last = r.json()
        if last["status"] in wanted:
            return last
        if last["status"] == "failed":
            raise AssertionError(f"release {release_id} failed: {last['error']}")
        time.sleep(0.05)
    raise AssertionError(f"release {release_id} stayed {last.get('status')}, wanted {wanted}")


__all__ = ["CHARGED", "JobFailed", "settle", "wait_release"]
