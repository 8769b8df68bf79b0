"""A release worker's peak memory does not grow with the release's size (issue 22: every process ≤ 2 GB).

Each size runs in fresh processes (tests/ledger/release_memory_child.py): one sets up a set of n
labelled ids and queues its release, another runs a small warm-up job and then that release,
and reports its peak resident size (``ru_maxrss``) before and after. The job reads chunks of
4 096 rows and charges bucket groups of about 4 096 ids, so 20 000 and 200 000 rows cross many
of both. Measured: the whole-array job grew ≈ 68 bytes a row (ids, labels, privatized labels,
the charge plan of every id); the streamed one is flat within the noise. The bound allows
20 bytes a row: the labels object is still read whole under ``iter_labelled_chunks`` (8 bytes
a row) until its storage is chunked, and the ledger's decoded-bases cache, bounded by itself
(256 MiB), is capped at 1 MiB here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parents[2]
SMALL, LARGE = 20_000, 200_000


def _job_growth_kib(tmp_path: Path, n: int) -> int:
    folder = tmp_path / str(n)
    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    child = [sys.executable, "-m", "tests.ledger.release_memory_child"]
    subprocess.run([*child, "setup", str(folder), str(n)], check=True, cwd=REPO, env=env, timeout=300)
    out = subprocess.run([*child, "run", str(folder)], check=True, cwd=REPO, env=env, timeout=300,
                         capture_output=True, text=True).stdout.split()
    before, after = int(out[-2]), int(out[-1])
    return after - before


def test_the_release_workers_peak_does_not_grow_with_the_release(tmp_path: Path) -> None:
    small, large = _job_growth_kib(tmp_path, SMALL), _job_growth_kib(tmp_path, LARGE)
    per_row = (large - small) * 1024 / (LARGE - SMALL)
    assert per_row < 20, f"the job's peak grew {per_row:.0f} bytes a row ({small} KiB at {SMALL}, {large} at {LARGE})"
