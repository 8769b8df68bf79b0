"""Removing what no committed row names: what a crash or a refused request leaves behind.

Message objects are written before the transaction that names them (docs/architecture.md,
"The per-id ledger"), so a process killed in between, or a release refused at the last
check, leaves an object no row refers to. It is harmless — nothing sends or reads it — but
it takes space. Unfinished writes (the store's ``.incoming/`` temporaries) and abandoned
request spools (local scratch) are the same. Anything is only swept once it is older than
``min_age_seconds``: another replica may be between writing it and committing its row
right now.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from sqlalchemy import select

from labeldp.errors import NotFound

from .context import MESSAGES, LabelsContext
from .store import ReleaseRow


def sweep_orphans(ctx: LabelsContext, min_age_seconds: float) -> int:
    """Delete unreferenced message objects and abandoned upload spools; returns how many."""
    cutoff = time.time() - min_age_seconds
    removed = 0
    with ctx.sessions() as s:
        named = set(s.scalars(select(ReleaseRow.message_file)))
    for key in ctx.store.list(MESSAGES):
        name = key[len(MESSAGES) + 1:]
        if name in named or not name.endswith(".json"):
            continue
        with contextlib.suppress(NotFound):  # another replica swept it first
            if ctx.store.modified(key) < cutoff:
                ctx.store.delete(key)
                removed += 1
    for path in _old_files(ctx.spool_dir, "body-*", cutoff):
        path.unlink(missing_ok=True)
        removed += 1
    return removed + ctx.store.remove_unfinished(min_age_seconds)


def _old_files(folder: Path, pattern: str, cutoff: float) -> list[Path]:
    if not folder.exists():
        return []
    return [p for p in folder.glob(pattern) if p.is_file() and p.stat().st_mtime < cutoff]
