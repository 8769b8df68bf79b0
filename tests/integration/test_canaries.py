"""Invariant 5: planted canary labels never reach the message, the features party or any log."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

from .conftest import create_label_set, read_tree_bytes, upload_csv, wait_for_status

# Values nobody would produce by accident, each inside the domain.
CANARIES = [12.3456789012, 7.6543210987, 3.1415926535]


def _forms(value: float) -> list[bytes]:
    return [
        repr(value).encode(),
        f"{value:.6f}".encode(),
        f"{value:.8g}".encode(),
        struct.pack("<d", value),
        struct.pack(">d", value),
    ]


def _leaves(doc: Any) -> Iterator[str]:
    """Every value of a JSON log line as text: a label could hide in any field, escaped or not."""
    if isinstance(doc, dict):
        for value in doc.values():
            yield from _leaves(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from _leaves(value)
    else:
        yield doc if isinstance(doc, str) else json.dumps(doc)


def test_canary_labels_never_leave_the_labels_party(stack, data, feature_table):
    assert data.clip > max(CANARIES)
    ids = data.ids[:400]
    values = [float(v) for v in data.labels[:400]]
    planted = {ids[k]: CANARIES[k % len(CANARIES)] for k in range(30)}
    values = [planted.get(i, v) for i, v in zip(ids, values)]
    with stack.labels_client() as labels, stack.features_client() as features:
        ls = create_label_set(labels, ids, budget=10.0, high=data.clip)
        # A rejected upload must not echo the offending value either.
        bad = labels.post(
            f"/v1/label-sets/{ls['id']}/labels",
            content=f"id,label\n{ids[0]},{CANARIES[0]}\n{ids[1]},-{CANARIES[1]}\n".encode(),
            headers={"content-type": "text/csv"},
        )
        assert bad.status_code == 422
        assert not any(f in bad.content for c in CANARIES for f in _forms(c))
        assert upload_csv(labels, ls["id"], list(zip(ids, values))).status_code == 200
        messages = []
        for mech in ("rr_on_bins", "laplace"):
            r = labels.post(
                f"/v1/label-sets/{ls['id']}/releases",
                json={"mechanism": mech, "epsilon": 4.0, "feature_table": feature_table},
            )
            assert r.status_code == 202, r.text
            wait_for_status(labels, r.json()["id"], "delivered")
            cols = features.get(f"/v1/releases/{r.json()['id']}/labels").json()
            messages.append(np.asarray(cols["labels"]))
            assert not set(CANARIES) & set(cols["labels"])

    stored = read_tree_bytes(stack.workdir / "features-data")
    for suffix in ("", "-wal", "-shm"):
        p = stack.workdir / f"features.db{suffix}"
        if p.exists():
            stored += p.read_bytes()
    logs = b"".join(stack.log_path(n).read_bytes() for n in ("labels", "outbox", "features"))
    assert len(stored) > 0 and len(logs) > 0
    for c in CANARIES:
        for form in _forms(c):
            assert form not in stored, f"canary {c} found in the features party's storage"
            assert form not in logs, f"canary {c} found in a service log"
    # The canary check has power: the labels party's own label files do hold them.
    labels_store = read_tree_bytes(stack.workdir / "labels-data")
    assert any(f in labels_store for c in CANARIES for f in _forms(c))


def test_canary_labels_are_in_no_json_log_field_and_no_metric(stack, data, feature_table):
    """The same canaries through upload, a rejected upload and a release, over every field of every
    JSON log line (decoded, so an escaped value cannot slip past) and both /metrics pages."""
    ids = data.ids[400:700]
    values = [CANARIES[k % len(CANARIES)] if k < 60 else float(v) for k, v in enumerate(data.labels[400:700])]
    with stack.labels_client() as labels, stack.features_client() as features:
        ls = create_label_set(labels, ids, budget=10.0, high=data.clip)
        traced = {"X-Request-ID": "canary-trace"}
        bad = labels.post(
            f"/v1/label-sets/{ls['id']}/labels",
            content=f"id,label\n{ids[0]},{data.clip + CANARIES[2]}\n".encode(),
            headers={"content-type": "text/csv", **traced},
        )
        assert bad.status_code == 422
        assert upload_csv(labels, ls["id"], list(zip(ids, values)), **traced).status_code == 200
        r = labels.post(
            f"/v1/label-sets/{ls['id']}/releases",
            json={"mechanism": "rr_on_bins", "epsilon": 2.0, "feature_table": feature_table},
            headers=traced,
        )
        assert r.status_code == 202, r.text
        wait_for_status(labels, r.json()["id"], "delivered")
        scraped = labels.get("/metrics").text + features.get("/metrics").text
    texts = []
    for name in ("labels", "outbox", "features"):
        for line in stack.log_path(name).read_text().splitlines():
            texts.extend(_leaves(json.loads(line)))  # every line is one JSON object
    assert any("canary-trace" in t for t in texts)  # the traced requests were logged
    haystack = "\n".join(texts) + scraped
    for c in CANARIES + [data.clip + CANARIES[2]]:
        for form in _forms(c)[:3]:
            assert form.decode() not in haystack, f"canary {c} found in a log field or a metric"
