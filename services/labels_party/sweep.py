"""Removing what no committed row names: what a crash or a refused request leaves behind.

Message and labels objects are written before the transaction that names them
(docs/architecture.md, "Storage"), so a process killed in between, a release refused at the
last check or an upload that lost its compare-and-swap leaves an object no row refers to;
labels an upload replaced are left for readers that loaded the row before. They are
harmless — nothing sends or reads them — but take space. Unfinished writes (the store's
``.incoming/`` temporaries) and abandoned request spools (local scratch) are the same.
Anything is only swept once it is older than ``min_age_seconds``: another replica may be
between writing it and committing its row right now.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from sqlalchemy import select

from labeldp.errors import NotFound

from .context import LABEL_SETS, MESSAGES, LabelsContext, message_key
from .label_sets import current_labels_key, is_labels_key
from .store import LabelSetRow, ReleaseRow


def sweep_orphans(ctx: LabelsContext, min_age_seconds: float) -> int:
    """Delete unreferenced message and labels objects and abandoned upload spools; returns how many."""
    cutoff = time.time() - min_age_seconds
    removed = 0
    with ctx.sessions() as s:
        named = {message_key(name) for name in s.scalars(select(ReleaseRow.message_file)) if name is not None}
        labeled = s.scalars(select(LabelSetRow).where(LabelSetRow.labels_version > 0))
        named |= {current_labels_key(row) for row in labeled}
    candidates = [k for k in ctx.store.list(MESSAGES) if k.endswith(".json")]
    candidates += [k for k in ctx.store.list(LABEL_SETS) if is_labels_key(k)]
    for key in candidates:
        if key in named:
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
