"""Both services and the sender as real processes on loopback, talking real HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from labeldp.synthetic import make_conversions
from labeldp_tools.local_stack import LocalStack

pytestmark = pytest.mark.integration

MAX_BODY = 2_000_000


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """One labels API, outbox and features API for every module that does not start its own.

    Shared by the whole session (starting the three processes is seconds per module on a loaded
    machine): a test takes fresh names (privacy domains, feature tables, label sets) and looks
    only at what it made, never at a count of everything the stack holds. A module that needs
    other settings or a clean stack defines its own ``stack`` fixture, which takes precedence.
    """
    # Many label sets over the same ids below: the default domain gets room for all of them
    # (the per-id ledger itself is tested in test_ledger.py with budgets that run out).
    # Shards of 500 rows: the 1500-row releases below reach the inbox in 3 shards each.
    s = LocalStack(
        tmp_path_factory.mktemp("stack"),
        extra_env={"LABELDP_MAX_BODY_BYTES": str(MAX_BODY), "LABELDP_DEFAULT_DOMAIN_EPSILON": "1000",
                   "LABELDP_MESSAGE_SHARD_ROWS": "500"},
    )
    s.start()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def data():
    return make_conversions(1500, seed=7)


@pytest.fixture(scope="session")
def feature_table(stack: LocalStack, data) -> str:
    with stack.features_client() as f:
        r = f.post(
            "/v1/feature-tables",
            params={"name": "clicks", "id_column": "id", "categorical": "advertiser,campaign,device,site"},
            content=data.to_csv(),
            headers={"content-type": "text/csv"},
        )
        assert r.status_code == 201, r.text
    return "clicks"


def domain_id(labels: httpx.Client, name: str) -> str:
    """The ``pd_`` id of the domain ``name``, found as a client finds it: the list's ``?name=`` filter
    (every path and field takes the id only)."""
    (domain,) = labels.get("/v1/privacy-domains", params={"name": name}).json()["items"]
    return str(domain["id"])


def create_label_set(
    labels: httpx.Client, ids: list[str], budget: float, high: float, label_type: str = "real"
) -> dict:
    r = labels.post(
        "/v1/label-sets",
        json={
            "name": "test",
            "label_type": label_type,
            "domain": {"low": 0.0, "high": high},
            "total_epsilon": budget,
            "ids": ids,
        },
    )
    assert r.status_code == 201, r.text
    return r.json()


def upload_csv(labels: httpx.Client, label_set_id: str, pairs: list[tuple[str, float]], **headers) -> httpx.Response:
    body = "id,label\n" + "".join(f"{i},{v!r}\n" for i, v in pairs)
    return labels.post(
        f"/v1/label-sets/{label_set_id}/labels",
        content=body.encode(),
        headers={"content-type": "text/csv", **headers},
    )


def wait_for_status(labels: httpx.Client, release_id: str, *status: str, timeout: float = 60.0) -> dict:
    """Poll the release until one of ``status``; ``wait_charged`` for "its job charged it"."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        r = labels.get(f"/v1/releases/{release_id}")
        if r.status_code == 503:  # the catalogue is out for a moment (an outage test): the service says retry
            time.sleep(0.1)
            continue
        assert r.status_code == 200, r.text
        last = r.json()
        if last["status"] in status:
            return last
        if last["status"] == "failed":  # a release job ends there, nothing charged: no use waiting
            raise AssertionError(f"release {release_id} failed: {last['error']}")
        time.sleep(0.1)
    raise AssertionError(f"release {release_id} stayed {last and last['status']}, wanted {status}")


def wait_charged(labels: httpx.Client, release_id: str, timeout: float = 60.0) -> dict:
    """Poll the release until a release worker charged it (pending, or already delivered or rejected)."""
    return wait_for_status(labels, release_id, "pending", "delivered", "rejected", timeout=timeout)


def shuffled(ids: list[str], seed: int) -> list[str]:
    out = list(ids)
    np.random.default_rng(seed).shuffle(out)
    return out


def read_tree_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())
