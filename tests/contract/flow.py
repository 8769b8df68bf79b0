"""One whole two-party flow in-process: every kind of resource both services hold, created
through their APIs, so contract tests can read real bodies of every route.

The release reaches the features party the way the outbox sends it (``outbox.deliver_one``,
the exact message bytes, signed), only over the ASGI interface instead of a socket.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from fastapi.testclient import TestClient
from tests.contract.conftest import FEATURES_AUTH, LABELS_AUTH
from tests.release_jobs import wait_release

N = 40
IDS = [f"u{i:03d}" for i in range(N)]
LABELS = [float(i % 7) for i in range(N)]
TABLE_CSV = "id,age,city\n" + "".join(f"{u},{20 + i % 30},{'paris' if i % 2 else 'lyon'}\n" for i, u in enumerate(IDS))


@dataclass
class Flow:
    privacy_domain: dict
    label_set: dict
    release: dict
    feature_table: dict
    received: dict
    training: dict
    model: dict


def run_flow(labels: TestClient, features: TestClient) -> Flow:
    from labels_party import outbox

    domain = labels.post(
        "/v1/privacy-domains",
        json={"name": "conversions", "id_source": "crm:customer_id", "epsilon": 10, "delta": 1e-6},
        headers=LABELS_AUTH,
    )
    assert domain.status_code == 201, domain.text
    label_set = labels.post(
        "/v1/label-sets",
        json={"name": "spend", "domain": {"low": 0, "high": 10}, "privacy_domain": domain.json()["id"], "ids": IDS},
        headers=LABELS_AUTH,
    )
    assert label_set.status_code == 201, label_set.text
    ls_id = label_set.json()["id"]
    up = labels.post(f"/v1/label-sets/{ls_id}/labels", json={"ids": IDS, "labels": LABELS}, headers=LABELS_AUTH)
    assert up.status_code == 200, up.text
    release = labels.post(
        f"/v1/label-sets/{ls_id}/releases",
        json={"mechanism": "laplace", "epsilon": 1, "feature_table": "clicks"},
        headers=LABELS_AUTH,
    )
    assert release.status_code == 202, release.text
    rel_id = release.json()["id"]
    assert wait_release(labels, rel_id, "pending", headers=LABELS_AUTH)["stage"] == "queued"  # charged

    table = features.post(
        "/v1/feature-tables",
        params={"name": "clicks"},
        content=TABLE_CSV.encode(),
        headers={**FEATURES_AUTH, "content-type": "text/csv"},
    )
    assert table.status_code == 201, table.text
    ctx = labels.app.state.ctx  # type: ignore[attr-defined]
    settings = ctx.settings.model_copy(update={"features_url": str(features.base_url)})
    assert outbox.deliver_one(ctx.sessions, features, settings, rel_id, random.Random(0)) == "delivered"

    order = {"release_id": rel_id, "feature_table_id": table.json()["id"], "epochs": 1, "batch_size": 16}
    training = features.post("/v1/trainings", json=order, headers=FEATURES_AUTH)
    assert training.status_code == 202, training.text
    trn_id = training.json()["id"]
    deadline = time.monotonic() + 120
    while True:
        done = features.get(f"/v1/trainings/{trn_id}", headers=FEATURES_AUTH).json()
        if done["status"] in ("succeeded", "failed") or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert done["status"] == "succeeded", done
    model = features.get(f"/v1/models/{done['model_id']}", headers=FEATURES_AUTH)
    assert model.status_code == 200, model.text
    return Flow(
        privacy_domain=labels.get(f"/v1/privacy-domains/{domain.json()['id']}", headers=LABELS_AUTH).json(),
        label_set=labels.get(f"/v1/label-sets/{ls_id}", headers=LABELS_AUTH).json(),
        release=labels.get(f"/v1/releases/{rel_id}", headers=LABELS_AUTH).json(),
        feature_table=table.json(),
        received=features.get(f"/v1/releases/{rel_id}", headers=FEATURES_AUTH).json(),
        training=done,
        model=model.json(),
    )
