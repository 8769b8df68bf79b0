"""Removing what a failed delete or a crash leaves behind: unnamed feature-table objects, unfinished writes.

A feature table's Parquet object is written before the transaction that names it, and a replaced
or deleted table's old object is deleted after the transaction that stopped naming it; a failure
in between (a crash, a refused row, the store away when deleting) leaves an object under
``tables/`` that no ``feature_tables`` row names. A write killed mid-stream (an upload, an inbox
shard, a stage, a checkpoint or a model) leaves the store's temporary (``.incoming/`` of a local
folder, ``ObjectStore.remove_unfinished``). Nothing reads either, but they take space. The
features API sweeps them when it starts and every ``LABELDP_SWEEP_INTERVAL_SECONDS``
(:func:`run_sweeper`): table objects once older than :data:`TABLE_MIN_AGE_SECONDS` (a younger one
may be another replica's upload, between writing its object and committing its row), temporaries
once older than twice the longest writer's lease (:func:`unfinished_age`), and this process's request
scratch (``<data dir>/spool``: spooled bodies, exports, downloads, table conversions) once untouched
for :data:`SPOOL_MIN_AGE_SECONDS`, as the labels party's ``sweep.py`` does; all built from
``labeldp.service.sweeping``.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from features_party import store
from features_party.feature_tables import TABLES_DIR
from labeldp.service import sweeping
from labeldp.service.settings import Settings
from labeldp.storage import ObjectStore

log = logging.getLogger("labeldp.features")

TABLE_MIN_AGE_SECONDS = 3600.0
"""An unnamed table object is swept once this old: an upload stores its object, then commits its row
in one short transaction, so an hour is far past any writer's window."""


SPOOL_MIN_AGE_SECONDS = 3600.0
"""A scratch entry untouched this long belongs to a request that died: bodies are spooled as they
arrive and processed at once, as the labels party's spools (its ``SPOOL_MIN_AGE_SECONDS``)."""


def unfinished_age(settings: Settings) -> float:
    """How long a store temporary must have gone unwritten to be swept: twice the longer of the request
    lease and the training lease. A live writer streams into it (its mtime moves with every block);
    one that stopped that long ago has died or been taken over (its request or training re-run)."""
    return 2 * max(settings.idempotency_lease_seconds, settings.training_lease_seconds)


def sweep_orphans(
    sessions: sessionmaker[Session],
    objects: ObjectStore,
    unfinished_min_age_seconds: float,
    min_age_seconds: float = TABLE_MIN_AGE_SECONDS,
    spool: Path | None = None,
) -> int:
    """Delete the table objects no row names that are older than ``min_age_seconds``, the store's
    unfinished writes older than ``unfinished_min_age_seconds`` and ``spool``'s abandoned entries; how many."""
    with sessions() as s:
        named = set(s.scalars(select(store.FeatureTable.path)))
    swept = sweeping.sweep_unnamed(objects, TABLES_DIR, named, min_age_seconds)
    if spool is not None:
        swept += sweeping.remove_old_scratch(spool, SPOOL_MIN_AGE_SECONDS)
    return swept + objects.remove_unfinished(unfinished_min_age_seconds)


def run_sweeper(
    sessions: sessionmaker[Session],
    objects: ObjectStore,
    stop: threading.Event,
    interval_seconds: float,
    unfinished_min_age_seconds: float,
    spool: Path | None = None,
) -> None:
    """Sweep every ``interval_seconds`` until ``stop`` (a thread of the features API); never raises."""
    sweeping.run_sweeper(
        lambda: sweep_orphans(sessions, objects, unfinished_min_age_seconds, spool=spool), stop, interval_seconds, log
    )
