"""A full disk: uploads answer 507 ``insufficient_storage`` and store nothing; /readyz says not ready.

The disk is really full where the test may mount a 1 MiB tmpfs (root); elsewhere the one fault it
cannot cause, ENOSPC, is raised by the spool's file writes once 1 MiB was written.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.local_settings import both_parties, fixed_signing_key

from labeldp.service import spool
from labels_party.app import create_app

KEY = "labels-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}
KEYS = (KEY, "features-key-0123456789abcdef", fixed_signing_key("disk full"))
TINY = 1 << 20


@pytest.fixture
def tiny_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "tiny"
    folder.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TINY}", "tmpfs", str(folder)], capture_output=True
    ).returncode == 0
    if not mounted:
        real_fdopen = os.fdopen

        class Full:
            def __init__(self, f: Any) -> None:
                self.f, self.written = f, 0

            def write(self, data: bytes) -> int:
                self.written += len(data)
                if self.written > TINY:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                return int(self.f.write(data))

            def __enter__(self) -> Full:
                return self

            def __exit__(self, *exc: object) -> None:
                self.f.close()

        monkeypatch.setattr(spool.os, "fdopen", lambda fd, mode: Full(real_fdopen(fd, mode)))
    try:
        yield folder
    finally:
        if mounted:
            subprocess.run(["umount", str(folder)], check=True)


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def test_a_full_disk_answers_507_and_stores_nothing(tmp_path: Path, tiny_disk: Path) -> None:
    settings = both_parties(tmp_path, *KEYS, min_free_disk_bytes=0).model_copy(update={"labels_data_dir": tiny_disk})
    with TestClient(create_app(settings)) as client:
        ids = [f"u{i:05d}" for i in range(20_000)]
        created = client.post(
            "/v1/label-sets", json={"name": "s", "domain": {"low": 0, "high": 1}, "ids": ids}, headers=AUTH
        )
        assert created.status_code == 201, created.text
        label_set = created.json()["id"]
        before = _files(tiny_disk)
        body = ("id,label\n" + "".join(f"{i},0.{k % 10}{'0' * 60}\n" for k, i in enumerate(ids))).encode()
        assert len(body) > TINY
        csv = {**AUTH, "content-type": "text/csv"}
        r = client.post(f"/v1/label-sets/{label_set}/labels", content=body, headers=csv)
        assert r.status_code == 507, r.text
        assert r.json()["code"] == "insufficient_storage" and r.headers["retry-after"]
        assert _files(tiny_disk) == before  # the spooled part is gone
        assert client.get(f"/v1/label-sets/{label_set}", headers=AUTH).json()["counts"]["labeled"] == 0


def test_readyz_is_not_ready_under_the_free_space_threshold(tmp_path: Path) -> None:
    roomy = both_parties(tmp_path, *KEYS, min_free_disk_bytes=1)
    with TestClient(create_app(roomy)) as client:
        assert client.get("/readyz").status_code == 200
    full = both_parties(tmp_path, *KEYS, min_free_disk_bytes=1 << 62)  # more than any disk has free
    with TestClient(create_app(full)) as client:
        r = client.get("/readyz")
        assert r.status_code == 503 and r.json()["code"] == "insufficient_storage", r.text
        assert client.get("/healthz").status_code == 200
