"""Removing feature-table objects no row names: what a failed delete or a crash leaves behind.

A feature table's Parquet object is written before the transaction that names it, and a replaced
or deleted table's old object is deleted after the transaction that stopped naming it; a failure
in between (a crash, a refused row, the store away when deleting) leaves an object under
``tables/`` that no ``feature_tables`` row names. Nothing reads it, but it takes space. The
features API sweeps them when it starts and every ``LABELDP_SWEEP_INTERVAL_SECONDS``
(:func:`run_sweeper`), once older than :data:`TABLE_MIN_AGE_SECONDS`: a younger one may be
another replica's upload, between writing its object and committing its row (the same rule as
the labels party's ``sweep.py``, built from ``labeldp.service.sweeping``).
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from features_party import store
from features_party.feature_tables import TABLES_DIR
from labeldp.service import sweeping
from labeldp.storage import ObjectStore

log = logging.getLogger("labeldp.features")

TABLE_MIN_AGE_SECONDS = 3600.0
"""An unnamed table object is swept once this old: an upload stores its object, then commits its row
in one short transaction, so an hour is far past any writer's window."""


def sweep_orphans(
    sessions: sessionmaker[Session], objects: ObjectStore, min_age_seconds: float = TABLE_MIN_AGE_SECONDS
) -> int:
    """Delete the table objects no row names that are older than ``min_age_seconds``; how many."""
    with sessions() as s:
        named = set(s.scalars(select(store.FeatureTable.path)))
    return sweeping.sweep_unnamed(objects, TABLES_DIR, named, min_age_seconds)


def run_sweeper(
    sessions: sessionmaker[Session], objects: ObjectStore, stop: threading.Event, interval_seconds: float
) -> None:
    """Sweep every ``interval_seconds`` until ``stop`` (a thread of the features API); never raises."""
    sweeping.run_sweeper(lambda: sweep_orphans(sessions, objects), stop, interval_seconds, log)
