"""What both parties' sweeps share: delete objects no committed row names, once old enough, on a timer.

An object is written before the transaction that names it (or stops being named by a committed
transaction before it is deleted), so a crash, a refused request or a failed delete leaves one no
row names. :func:`sweep_unnamed` deletes those under a prefix that are older than a grace period
(younger ones may be another replica's, between writing and committing); :func:`run_sweeper` calls
a sweep every interval in a thread until told to stop, never raising; :func:`remove_old_scratch`
clears a process's own request scratch (spooled bodies, exports, work folders) a crash left. The labels party's
``sweep.py`` and the features party's ``sweep.py`` build their sweeps from these.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path

from labeldp.errors import NotFound
from labeldp.storage import ObjectStore


def delete_if_older(store: ObjectStore, key: str, cutoff: float) -> bool:
    """Delete ``key`` if it was last written before ``cutoff`` (POSIX seconds); False if younger or gone."""
    with contextlib.suppress(NotFound):  # another replica swept it first
        if store.modified(key) < cutoff:
            store.delete(key)
            return True
    return False


def sweep_unnamed(store: ObjectStore, prefix: str, named: Collection[str], min_age_seconds: float) -> int:
    """Delete the objects under ``prefix`` that are not in ``named`` and older than ``min_age_seconds``.

    ``named`` must be read before the listing: an object written and named after the read is young."""
    cutoff = time.time() - min_age_seconds
    return sum(delete_if_older(store, key, cutoff) for key in store.list(prefix) if key not in named)


def _newest_write(path: Path) -> float:
    """The latest mtime in ``path`` (a file, or a folder and everything under it)."""
    newest = path.lstat().st_mtime
    if path.is_dir() and not path.is_symlink():
        for sub in path.rglob("*"):
            with contextlib.suppress(FileNotFoundError):
                newest = max(newest, sub.lstat().st_mtime)
    return newest


def remove_old_scratch(folder: Path, min_age_seconds: float) -> int:
    """Remove the entries of ``folder`` (a process's own scratch) written nothing for ``min_age_seconds``.

    A folder counts as written when anything under it was: a live request's work folder stays.
    A file a response is still streaming stays readable after the unlink (POSIX). How many went."""
    if not folder.is_dir():
        return 0
    cutoff = time.time() - min_age_seconds
    removed = 0
    for entry in folder.iterdir():
        with contextlib.suppress(FileNotFoundError):  # its request finished meanwhile
            if _newest_write(entry) >= cutoff:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink()
            removed += 1
    return removed


def run_sweeper(sweep: Callable[[], int], stop: threading.Event, interval_seconds: float, log: logging.Logger) -> None:
    """Call ``sweep`` every ``interval_seconds`` until ``stop`` (a thread of an API); never raises."""
    while not stop.wait(interval_seconds):
        try:
            swept = sweep()
        except Exception as exc:  # the database or the store away: the next round tries again
            log.warning("sweep failed (%s)", type(exc).__name__)
            continue
        if swept:
            log.info("swept %d orphaned files", swept)
