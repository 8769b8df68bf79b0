"""Removing what no committed row names: what a crash or a refused request leaves behind.

Message and labels objects are written before the transaction that names them
(docs/architecture.md, "Storage"), so a process killed in between, a release refused at the
last check or an upload that lost its compare-and-swap leaves an object no row refers to;
labels an upload replaced are left for readers that loaded the row before. They are
harmless — nothing sends or reads them — but take space. Unfinished writes (the store's
``.incoming/`` temporaries), abandoned request spools and request scratch folders (local) are the same.
Anything is only swept once it is older than ``min_age_seconds``: another replica may be
between writing it and committing its row right now. The labels API sweeps every
``LABELDP_SWEEP_INTERVAL_SECONDS`` (:func:`run_sweeper`), objects once they are older than
twice the request lease (``LABELDP_IDEMPOTENCY_LEASE_SECONDS``: the request that wrote one has
committed or died by then), spools and replaced labels once older than an hour as well (a huge
upload is parsed from its spool long after its last byte was written; a reader may hold replaced
labels), so a crash's leftover messages and temporaries go when their lease expires, not at the
next start-up. Ledger objects a bucket's swap superseded go after ``LABELDP_LEDGER_GRACE_SECONDS``
(:func:`ledger_grace_sweep`, services/labels_party/ledger.py "Collection").
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from pathlib import Path

from sqlalchemy import select

from labeldp.errors import NotFound
from labeldp.service import sweeping
from labeldp.service.sweeping import delete_if_older

from . import ledger
from .context import LABEL_SETS, MESSAGES, SCRATCH_PREFIX, LabelsContext, message_key
from .label_sets import current_labels_key, is_ids_object, is_labels_key
from .resumable import UPLOADS
from .store import RELEASE_JOB_STATES, LabelSetRow, ReleaseRow

log = logging.getLogger("labeldp.labels")


SPOOL_MIN_AGE_SECONDS = 3600.0
WORK_MIN_AGE_SECONDS = 86400.0
"""Sorted ids no row names yet (``label_sets/<id>/ids-<uuid>.arrow``), the working objects older
versions left in the store (``…/upload-…``, ``…/upload-labels-…``, ``…/work-…``) and a crashed
request's scratch folder (its sort runs and bucket groups, now local) are swept once a day old: a
live upload of 10⁹ rows may read its first run an hour after writing it."""


def lease_age(ctx: LabelsContext) -> float:
    """How old an unreferenced object must be to be swept: twice the request lease."""
    return 2 * ctx.settings.idempotency_lease_seconds


def sweep_orphans(ctx: LabelsContext, min_age_seconds: float, spool_min_age_seconds: float | None = None) -> int:
    """Delete unreferenced message and labels objects, the objects of label sets no row names (a
    deleted set's, when deleting them failed) and abandoned upload spools; returns how many."""
    cutoff = time.time() - min_age_seconds
    spool_cutoff = time.time() - max(min_age_seconds, spool_min_age_seconds or 0.0)
    removed = 0
    with ctx.sessions() as s:
        named = {message_key(name) for name in s.scalars(select(ReleaseRow.message_file)) if name is not None}
        labeled = s.scalars(select(LabelSetRow).where(LabelSetRow.labels_version > 0))
        named |= {current_labels_key(row) for row in labeled}
        named |= {key for key in s.scalars(select(LabelSetRow.ids_object)) if key is not None}
        sets = set(s.scalars(select(LabelSetRow.id)))
        # A running job writes its message before the row names it, for as long as its rows take:
        # its attempts' prefixes (``messages/<release id>[.<attempt>]/``) are its own until it ends.
        running = set(s.scalars(select(ReleaseRow.id).where(ReleaseRow.status == RELEASE_JOB_STATES[1])))
    # A message is its manifest and the shards next to it: all kept while a row names the manifest.
    # Replaced labels may still be read by a request that loaded its row before: they wait as
    # long as spools do; messages are read by nothing before their row commits.
    named_messages = {key.rpartition("/")[0] for key in named if key.count("/") == 2 and key.startswith(MESSAGES)}
    candidates = [(k, cutoff) for k in ctx.store.list(MESSAGES)]
    work_cutoff = min(spool_cutoff, time.time() - WORK_MIN_AGE_SECONDS)
    for key in ctx.store.list(LABEL_SETS):
        if "/upload-" in key or "/work-" in key or is_ids_object(key):  # a crashed upload's or job's
            candidates.append((key, work_cutoff))
        elif key.split("/")[1] not in sets:  # a deleted set's objects, if deleting them failed (or a set never created)
            candidates.append((key, cutoff))
        elif is_labels_key(key):
            candidates.append((key, spool_cutoff))
    for key, older_than in candidates:
        if key in named or (key.startswith(MESSAGES + "/") and key.rpartition("/")[0] in named_messages):
            continue
        if key.startswith(MESSAGES + "/") and key.split("/")[1].split(".")[0] in running:
            continue
        removed += delete_if_older(ctx.store, key, older_than)
    for path in _old_files(ctx.spool_dir, "body-*", spool_cutoff):
        path.unlink(missing_ok=True)
        removed += 1
    removed += sweep_scratch(ctx.scratch_dir, time.time() - max(min_age_seconds, WORK_MIN_AGE_SECONDS))
    removed += sweep_uploads(ctx, time.time() - ctx.settings.upload_retention_seconds)
    removed += ledger_grace_sweep(ctx)
    return removed + ctx.store.remove_unfinished(min_age_seconds)


def ledger_grace_sweep(ctx: LabelsContext) -> int:
    """Superseded ledger objects past ``LABELDP_LEDGER_GRACE_SECONDS`` (never under twice the longest
    lease, whatever it is set to: a reader holding the old version is within its lease)."""
    settings = ctx.settings
    leases = max(settings.idempotency_lease_seconds, settings.release_lease_seconds)
    grace = max(settings.ledger_grace_seconds, 2 * leases)
    return ledger.collect_garbage(ctx, grace)


def sweep_uploads(ctx: LabelsContext, started_before: float) -> int:
    """Remove every object of the resumable uploads started before ``started_before`` (POSIX seconds).

    An upload's age is its session object's; its parts go with it, completed or abandoned. An
    upload being completed right now is older than the retention only if the client took
    that long, and then its completion fails (its parts are gone) without a half-written row.
    """
    removed = 0
    keys = ctx.store.list(UPLOADS)
    sessions = [k for k in keys if k.endswith("/session.json")]
    for session in sessions:
        with contextlib.suppress(NotFound):
            if ctx.store.modified(session) >= started_before:
                continue
            prefix = session.rsplit("/", 1)[0] + "/"
            # the session last: a sweep that stops halfway is finished by the next one
            for key in sorted((k for k in keys if k.startswith(prefix)), key=lambda k: k == session):
                ctx.store.delete(key)
                removed += 1
    return removed


def sweep_scratch(folder: Path, cutoff: float) -> int:
    """Remove the request scratch folders (``LabelsContext.scratch``) a crash left: those in which
    nothing changed since ``cutoff`` (POSIX seconds); returns how many."""
    removed = 0
    for path in folder.glob(SCRATCH_PREFIX + "*") if folder.exists() else ():
        with contextlib.suppress(OSError):  # its request may end, and remove it, right now
            newest = max([path.stat().st_mtime, *(p.stat().st_mtime for p in path.rglob("*"))])
            if path.is_dir() and newest < cutoff:
                shutil.rmtree(path)
                removed += 1
    return removed


def _old_files(folder: Path, pattern: str, cutoff: float) -> list[Path]:
    if not folder.exists():
        return []
    return [p for p in folder.glob(pattern) if p.is_file() and p.stat().st_mtime < cutoff]


def run_sweeper(ctx: LabelsContext, stop: threading.Event, interval_seconds: float) -> None:
    """Sweep every ``interval_seconds`` until ``stop`` (a thread of the labels API); never raises."""
    sweeping.run_sweeper(lambda: sweep_orphans(ctx, lease_age(ctx), SPOOL_MIN_AGE_SECONDS), stop, interval_seconds,
                         log)
