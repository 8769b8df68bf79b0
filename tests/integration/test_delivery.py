"""Charge, persist, then send: a delivery that fails at first arrives later, identical, charged once."""

from __future__ import annotations

import hashlib
import sqlite3
import time

import pytest

from labeldp.synthetic import make_conversions
from labeldp_tools.local_stack import LocalStack

from .conftest import create_label_set, upload_csv, wait_for_status

pytestmark = pytest.mark.integration


def test_delivery_retries_until_features_party_is_back(tmp_path):
    data = make_conversions(400, seed=3)
    # 4 shards of 100 rows: the message crosses real HTTP shard by shard.
    with LocalStack(tmp_path, extra_env={"LABELDP_MESSAGE_SHARD_ROWS": "100"}) as stack:
        stack.start("features")
        with stack.features_client() as f:
            r = f.post(
                "/v1/feature-tables",
                params={"name": "clicks", "id_column": "id"},
                content=data.to_csv(),
                headers={"content-type": "text/csv"},
            )
            assert r.status_code == 201, r.text
        stack.stop_process("features")  # the features party goes down
        stack.start("labels", "outbox")
        with stack.labels_client() as labels:
            ls = create_label_set(labels, data.ids, budget=1.0, high=data.clip)
            assert upload_csv(labels, ls["id"], list(zip(data.ids, map(float, data.labels)))).status_code == 200
            r = labels.post(
                f"/v1/label-sets/{ls['id']}/releases",
                json={"mechanism": "rr_on_bins", "epsilon": 1.0, "feature_table": "clicks"},
            )
            assert r.status_code == 202, r.text
            release_id = r.json()["id"]
            deadline = time.monotonic() + 30
            while labels.get(f"/v1/releases/{release_id}").json()["attempts"] < 2:
                assert time.monotonic() < deadline, "outbox did not retry"
                time.sleep(0.1)
            pending = labels.get(f"/v1/releases/{release_id}").json()
            assert pending["status"] == "pending" and pending["last_error"] == "connection_error"

            stack.start("features")
            delivered = wait_for_status(labels, release_id, "delivered", timeout=60)
            assert delivered["attempts"] >= 3
            assert delivered["message_sha256"] == pending["message_sha256"]
            summary = labels.get(f"/v1/label-sets/{ls['id']}").json()
            assert summary["budget"]["spent_micro"] == 1_000_000
            assert len(summary["releases"]) == 1

        with stack.features_client() as f:
            received = f.get(f"/v1/releases/{release_id}").json()
        # The receiver holds exactly the bytes stored with the charge.
        assert received["message_sha256"] == delivered["message_sha256"]
        with sqlite3.connect(tmp_path / "labels.db") as db:
            (name,) = db.execute("select message_file from releases where id = ?", (release_id,)).fetchone()
        stored = (tmp_path / "labels-data" / "messages" / name).read_bytes()
        assert hashlib.sha256(stored).hexdigest() == received["message_sha256"]  # the signed manifest
        with sqlite3.connect(tmp_path / "features.db") as db:
            shards = db.execute(
                "select shard_index, rows from release_shards where release_id = ? order by shard_index", (release_id,)
            ).fetchall()
        assert shards == [(i, 100) for i in range(4)]
        with stack.features_client() as f:
            assert f.get(f"/v1/releases/{release_id}/labels").json()["ids"] == sorted(data.ids)
