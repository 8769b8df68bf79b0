"""Orphaned files (a crash between writing a file and committing its row) are swept, named ones never."""

from __future__ import annotations

import os
import time
from pathlib import Path

from labels_party.sweep import sweep_orphans

from .test_ledger import labeled_set, make_ctx, new_domain, release


def test_only_old_unreferenced_files_are_swept(tmp_path: Path) -> None:
    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    new_domain(ctx, "d", 5)
    kept = release(ctx, labeled_set(ctx, tmp_path, "d", ["a", "b"]), 1)
    messages = ctx.data_dir / "messages"  # the default object store is the data dir itself
    messages.mkdir(parents=True, exist_ok=True)
    ctx.spool_dir.mkdir(parents=True, exist_ok=True)
    orphan = messages / "rel_orphan.json"
    fresh = messages / "rel_being_committed.json"
    spool = ctx.spool_dir / "body-abandoned"
    for p in (orphan, fresh, spool):
        p.write_bytes(b"x")
    old = time.time() - 7200
    for p in [orphan, spool, *messages.glob("rel_*.json")]:
        if p != fresh:
            os.utime(p, (old, old))
    assert sweep_orphans(ctx, min_age_seconds=3600) == 2
    assert not orphan.exists() and not spool.exists() and fresh.exists()
    assert (messages / f"{kept['id']}.json").exists()
