"""The features party's sweep reclaims what a write killed mid-stream left in the store (issue 24, item 5):
the temporary goes once it has gone unwritten for twice the longest writer's lease, never sooner,
at start-up and on the sweeper's timer, as the labels party's sweep does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fastapi.testclient import TestClient
from tests.local_settings import both_parties, fixed_signing_key

from features_party import sweep
from features_party.app import create_app
from labeldp.service.settings import Settings, open_object_store
from labeldp.storage import INCOMING

KEYS = ("labels-key-0123456789abcdef", "features-key-0123456789abcdef", fixed_signing_key("features sweep"))


KILLED_MID_WRITE = """
import os, signal, sys
from labeldp.storage import ObjectStore
with ObjectStore.from_url(sys.argv[1]).open_output_stream(sys.argv[2]) as out:
    out.write(b"x" * 4096)
    out.flush()
    os.kill(os.getpid(), signal.SIGKILL)  # a crash: no cleanup runs
"""


def _interrupted_write(settings: Settings, key: str, age_seconds: float) -> Path:
    """A real write killed mid-stream (a child process); its temporary, last written ``age_seconds`` ago."""
    folder = Path(settings.features_data_dir)
    before = set((folder / INCOMING).glob("*"))
    child = subprocess.run([sys.executable, "-c", KILLED_MID_WRITE, str(folder), key], timeout=60)
    assert child.returncode == -signal.SIGKILL
    (left,) = set((folder / INCOMING).glob("*")) - before
    assert left.stat().st_size == 4096
    written = time.time() - age_seconds
    os.utime(left, (written, written))
    return left


def test_an_old_unfinished_write_is_swept_and_a_young_one_kept(tmp_path: Path) -> None:
    settings = both_parties(tmp_path, *KEYS, sweep_interval_seconds=0.1)
    age = sweep.unfinished_age(settings)
    assert age == 2 * settings.idempotency_lease_seconds  # the request lease is the longer by default
    at_start = _interrupted_write(settings, "models/mdl_a.pt", age + 60)
    app = create_app(settings)  # the start-up sweep
    assert not at_start.exists()
    with TestClient(app):  # the sweeper's timer, while the app runs
        old = _interrupted_write(settings, "tables/t.parquet", age + 60)
        young = _interrupted_write(settings, "checkpoints/trn_b.pt", age - 60)
        deadline = time.monotonic() + 10
        while old.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not old.exists()
        time.sleep(0.3)  # a few more rounds
        assert young.exists()  # its writer may still be streaming into it
    objects = open_object_store(settings, Path(settings.features_data_dir))
    assert objects.list() == []  # no object appeared under any key


def _aged(path: Path, age_seconds: float) -> Path:
    written = time.time() - age_seconds
    os.utime(path, (written, written))
    return path


def test_abandoned_request_scratch_is_swept_and_live_scratch_kept(tmp_path: Path) -> None:
    """What a crashed request left in ``<data dir>/spool`` (a spooled body, an export, a conversion's
    folder) goes once untouched for an hour; a young file and a folder still being written stay."""
    settings = both_parties(tmp_path, *KEYS, sweep_interval_seconds=3600)
    spool = Path(settings.features_data_dir) / "spool"
    spool.mkdir(parents=True)
    old_age = sweep.SPOOL_MIN_AGE_SECONDS + 60
    body = spool / "body-0123"
    body.write_bytes(b"x")
    _aged(body, old_age)
    export = spool / "export-ab.onnx"
    export.write_bytes(b"y")
    _aged(export, old_age)
    dead = spool / "tmpdead"
    (dead / "part").mkdir(parents=True)
    _aged(dead / "part", old_age)
    _aged(dead, old_age)
    young = spool / "body-4567"
    young.write_bytes(b"z")
    live = spool / "tmplive"
    live.mkdir()
    (live / "table.parquet").write_bytes(b"w")  # being written now, in a folder made an hour ago
    _aged(live, old_age)
    create_app(settings)  # the start-up sweep
    assert sorted(p.name for p in spool.iterdir()) == ["body-4567", "tmplive"]
