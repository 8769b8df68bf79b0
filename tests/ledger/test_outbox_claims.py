"""Senders claiming due releases at the same time never claim one twice (SQLite and PostgreSQL).

Shown red on PostgreSQL with the claim that read the due rows and then leased them by id
(no re-check of the lease): concurrent claimers leased the same releases.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

from tests.ledger.test_ledger import make_ctx, new_domain

from labels_party.label_sets import LabelSetCreate, create_label_set
from labels_party.outbox import claim_due
from labels_party.store import ReleaseRow

RELEASES = 300
CLAIMERS = 8


def test_concurrent_claims_lease_each_release_once(database_url: str, tmp_path: Path) -> None:
    ctx = make_ctx(database_url, tmp_path)
    d = new_domain(ctx, "d", epsilon=1)
    body = {"name": "s", "domain": {"low": 0, "high": 1}, "privacy_domain": d, "ids": ["a"]}
    label_set_id = create_label_set(ctx, LabelSetCreate.model_validate(body), None).body["id"]
    with ctx.sessions.begin() as s:
        s.add_all(
            ReleaseRow(
                id=f"rel_{k:04d}", label_set_id=label_set_id, mechanism="laplace", epsilon_micro=1,
                accounting_json="{}", row_count=1,
                message_file="m", message_bytes=1, message_sha256="0" * 64, request_id="req_x",
            )
            for k in range(RELEASES)
        )
    claimed: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(CLAIMERS)

    def claimer() -> None:
        start.wait()
        while True:
            got = claim_due(ctx.sessions, lease_seconds=600, limit=3)
            if not got:
                return
            with lock:
                claimed.extend(got)

    threads = [threading.Thread(target=claimer) for _ in range(CLAIMERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    twice = {k: n for k, n in Counter(claimed).items() if n > 1}
    assert not twice, f"{len(twice)} releases claimed more than once"
    assert len(claimed) == RELEASES
