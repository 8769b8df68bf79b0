"""The local stack (``make demo``, the integration tests) migrates both catalogues once, before any
process starts: the labels API, the outbox and the release workers share one SQLite file, and each
upgrading it at start made the others wait on its write lock (the demo's health wait ran out)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from labeldp.service.migrations import head_revision
from labeldp_tools.local_stack import LocalStack
from labeldp_tools.migrations import SERVICES


def _version(path: Path) -> str | None:
    if not path.exists():
        return None
    with sqlite3.connect(path) as db:
        row = db.execute("SELECT version_num FROM alembic_version").fetchone()
    return row[0] if row else None


def test_the_stack_migrates_each_catalogue_once_before_its_processes(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path)
    stack.migrate("labels")
    assert _version(tmp_path / "labels.db") == head_revision(SERVICES["labels"])
    assert _version(tmp_path / "features.db") is None  # only what was asked
    stack.migrate()
    assert _version(tmp_path / "features.db") == head_revision(SERVICES["features"])
    (tmp_path / "labels.db").unlink()
    stack.migrate()  # once per stack: a process restarted later finds its schema where it left it
    assert not (tmp_path / "labels.db").exists()
    assert stack.processes == {}  # nothing was started to do it
