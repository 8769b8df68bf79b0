"""Label sets with inline ids created concurrently in one privacy domain: every create succeeds.

Issue 24 measured 39 of 40 creates failing with ``deadlock detected`` on PostgreSQL. The one lock
order is: the domain row (``ledger.lock_domain``, FOR UPDATE) in a transaction of its own
(``register_ids``) or first in the transaction (``set_ids``, releases), never after a row that
references the domain was written (an insert's foreign-key check holds FOR KEY SHARE on it).
Shown red by planting the reverse order (lock the domain after inserting the label set).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from tests.ledger.test_ledger import make_ctx, new_domain, spent_per_id

from labeldp.errors import LabelDPError
from labels_party.label_sets import LabelSetCreate, create_label_set


def test_40_concurrent_creates_with_inline_ids_all_succeed(database_url: str, tmp_path: Path) -> None:
    ctx = make_ctx(database_url, tmp_path)
    shared = new_domain(ctx, "shared", epsilon=1)
    rng = np.random.default_rng(3)
    pool_ids = [f"id{i:04d}" for i in range(400)]
    bodies = [
        LabelSetCreate.model_validate(
            {"name": f"s{k}", "domain": {"low": 0, "high": 1}, "privacy_domain": shared,
             "ids": sorted(rng.choice(pool_ids, 60, replace=False).tolist())}
        )
        for k in range(40)
    ]

    def create(body: LabelSetCreate) -> str:
        try:
            return str(create_label_set(ctx, body, None).status_code)
        except LabelDPError as exc:  # what a client would see: 503 database_unavailable, ...
            return exc.code
        except Exception as exc:  # a deadlock: OperationalError
            return type(exc).__name__

    with ThreadPoolExecutor(40) as pool:
        outcomes = list(pool.map(create, bodies))
    assert outcomes == ["201"] * 40, sorted(set(outcomes))
    registered = set(spent_per_id(ctx, "shared"))
    assert registered == {i for body in bodies for i in body.ids or []}
