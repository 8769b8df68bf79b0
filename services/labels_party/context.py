"""What every labels-party domain function needs: the catalogue, the object store, the settings."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from labeldp.service.idempotency import IdempotencyKeys
from labeldp.service.settings import Settings, open_object_store
from labeldp.storage import ObjectStore

from .store import IDEMPOTENCY_KEYS


@dataclass(frozen=True)
class LabelsContext:
    sessions: sessionmaker[Session]
    data_dir: Path
    """This process's own folder: request spools (and the files of a ledger from before buckets)."""
    settings: Settings
    jobs_queued: threading.Event = field(default_factory=threading.Event, compare=False)
    """Set when this process queues a release job: its in-process release worker looks at once."""

    @property
    def idempotency(self) -> IdempotencyKeys:
        return IdempotencyKeys(IDEMPOTENCY_KEYS, self.sessions, self.settings.idempotency_lease_seconds)

    @cached_property
    def store(self) -> ObjectStore:
        """Ids, labels and messages: ``LABELDP_STORAGE_URL``, shared by every replica and the outbox."""
        return open_object_store(self.settings, self.data_dir)

    @property
    def spool_dir(self) -> Path:
        return self.data_dir / "spool"

    @property
    def scratch_dir(self) -> Path:
        """Where requests keep their working files: ``LABELDP_SCRATCH_DIR``, or ``<data dir>/scratch``."""
        return Path(self.settings.scratch_dir) if self.settings.scratch_dir else self.data_dir / SCRATCH

    @contextlib.contextmanager
    def scratch(self) -> Iterator[ObjectStore]:
        """A local store of this request's own working objects (sort runs, bucket groups), in a fresh
        folder removed when the block ends. Nothing another process or replica reads goes there: what
        outlives the request goes to :attr:`store`. A crash's folder is swept once a day old."""
        self.scratch_dir.mkdir(parents=True, exist_ok=True)
        folder = tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=self.scratch_dir)
        try:
            yield ObjectStore.scratch(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def label_set_prefix(label_set_id: str) -> str:
    return f"{LABEL_SETS}/{label_set_id}"


def message_prefix(release_id: str) -> str:
    """Where a release's message lives: its shards and its manifest (:mod:`labeldp.message_shards`)."""
    return f"{MESSAGES}/{release_id}"


def message_key(message_file: str) -> str:
    """The stored manifest a release row names (``ReleaseRow.message_file``: ``<release id>/manifest.json``)."""
    return f"{MESSAGES}/{message_file}"


def message_file(manifest_key: str) -> str:
    """What a release row stores of its manifest's key (the inverse of :func:`message_key`)."""
    return manifest_key.removeprefix(f"{MESSAGES}/")


MESSAGES = "messages"
SCRATCH = "scratch"
SCRATCH_PREFIX = "request-"
LABEL_SETS = "label_sets"
