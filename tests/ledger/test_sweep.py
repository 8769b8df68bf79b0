"""Orphaned files (a crash between writing a file and committing its row) are swept, named ones never."""

from __future__ import annotations

import os
import time
from pathlib import Path

from labels_party.label_sets import LabelSetCreate, create_label_set, current_labels_key, load_label_set, read_labels
from labels_party.sweep import sweep_orphans
from labels_party.uploads import upload_labels

from .test_ledger import labeled_set, make_ctx, new_domain, release


def test_only_old_unreferenced_files_are_swept(tmp_path: Path) -> None:
    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    new_domain(ctx, "d", 5)
    kept = release(ctx, labeled_set(ctx, tmp_path, "d", ["a", "b"]), 1)
    messages = ctx.data_dir / "messages"  # the default object store is the data dir itself
    ctx.spool_dir.mkdir(parents=True, exist_ok=True)
    orphan = messages / "rel_orphan" / "shard-000000.parquet"  # a release refused after its shards
    orphan_manifest = messages / "rel_orphan" / "manifest.json"
    fresh = messages / "rel_being_committed" / "manifest.json"
    spool = ctx.spool_dir / "body-abandoned"
    for p in (orphan, orphan_manifest, fresh, spool):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
    old = time.time() - 7200
    for p in [orphan, orphan_manifest, spool, *messages.rglob("*.*")]:
        if p != fresh:
            os.utime(p, (old, old))
    assert sweep_orphans(ctx, min_age_seconds=3600) == 3
    assert not orphan.exists() and not orphan_manifest.exists() and not spool.exists() and fresh.exists()
    kept_files = sorted(p.name for p in (messages / kept["id"]).iterdir())
    assert kept_files == ["manifest.json", "shard-000000.parquet"]  # a named message: its shards too


def test_replaced_labels_are_swept_once_old_and_current_ones_never(tmp_path: Path) -> None:
    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    d = new_domain(ctx, "d", 5)
    ids = [f"u{i}" for i in range(4)]
    ls = create_label_set(ctx, LabelSetCreate.model_validate(
        {"name": "s", "domain": {"low": 0, "high": 10}, "privacy_domain": d, "ids": ids}), None).body["id"]
    for n, part in enumerate((ids[:2], ids[2:])):
        csv = tmp_path / f"part{n}.csv"
        csv.write_text("id,label\n" + "".join(f"{i},{n + 1}\n" for i in part))
        upload_labels(ctx, ls, csv, "text/csv", validate_only=False, claim=None)
    with ctx.sessions() as s:
        current = current_labels_key(load_label_set(s, ls))
    objects = ctx.store.list(f"label_sets/{ls}/labels")
    assert len(objects) == 2 and current in objects
    old = time.time() - 7200
    for key in objects:
        os.utime(ctx.data_dir / key, (old, old))
    assert sweep_orphans(ctx, min_age_seconds=3600) == 1
    assert ctx.store.list(f"label_sets/{ls}/labels") == [current]
    assert read_labels(ctx, load_label_set(ctx.sessions(), ls)).tolist() == [1.0, 1.0, 2.0, 2.0]


def test_a_running_api_sweeps_leftovers_once_their_lease_expired(tmp_path: Path) -> None:
    # What a kill -9 leaves: a message object no release names and a store temporary. The API
    # sweeps them once older than twice the request lease, not at its next start-up; a
    # spool (an upload may still be parsed from it) waits an hour.
    from fastapi.testclient import TestClient
    from tests.local_settings import both_parties, fixed_signing_key

    from labeldp.storage import INCOMING
    from labels_party.app import create_app

    settings = both_parties(
        tmp_path, "labels-key-0123456789abcdef", "features-key-0123456789abcdef", fixed_signing_key("sweep"),
        idempotency_lease_seconds=5, sweep_interval_seconds=0.2,
    )
    data = settings.labels_data_dir
    with TestClient(create_app(settings)):
        orphan, temporary = data / "messages" / "rel_crashed.json", data / INCOMING / "abc123"
        spool, fresh = data / "spool" / "body-still-parsing", data / "messages" / "rel_being_committed.json"
        for p in (orphan, temporary, spool, fresh):
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(b"x")
        past = time.time() - 30
        for p in (orphan, temporary, spool):
            os.utime(p, (past, past))
        deadline = time.monotonic() + 8
        while orphan.exists() or temporary.exists():
            assert time.monotonic() < deadline, "the leftovers were not swept while the API ran"
            time.sleep(0.1)
        assert spool.exists() and fresh.exists()


def test_a_crashed_ids_uploads_working_objects_are_swept_once_a_day_old(tmp_path: Path) -> None:
    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    work = ["label_sets/ls_x/upload-a/runs/run-000000-b", "label_sets/ls_x/upload-a/sorted"]
    live = "label_sets/ls_x/upload-c/runs/run-000000-d"  # two hours old: a live upload may still read it
    for key in (*work, live):
        ctx.store.put_bytes(key, b"x")
    for key, age in ((work[0], 90000), (work[1], 90000), (live, 7200)):
        os.utime(ctx.data_dir / key, (time.time() - age, time.time() - age))
    assert sweep_orphans(ctx, min_age_seconds=3600) == 2
    assert ctx.store.list("label_sets/ls_x") == [live]


def test_a_running_jobs_message_is_its_own_until_the_job_ends(tmp_path: Path) -> None:
    """A 10⁸-row job writes shards for minutes before its row names them: never swept while it runs."""
    from sqlalchemy import update

    from labels_party.store import ReleaseRow

    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    new_domain(ctx, "d", 5)
    done = release(ctx, labeled_set(ctx, tmp_path, "d", ["a", "b"]), 1)
    messages = ctx.data_dir / "messages"
    shards = [messages / "rel_live" / "shard-000000.parquet", messages / "rel_live.2" / "shard-000000.parquet"]
    for p in shards:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
        os.utime(p, (time.time() - 7200,) * 2)
    with ctx.sessions.begin() as s:  # the finished release's row, as if its job were still running
        s.execute(update(ReleaseRow).where(ReleaseRow.id == done["id"]).values(id="rel_live", status="running"))
    assert sweep_orphans(ctx, min_age_seconds=3600) == 0
    assert all(p.exists() for p in shards)
    with ctx.sessions.begin() as s:
        s.execute(update(ReleaseRow).where(ReleaseRow.id == "rel_live").values(status="failed"))
    assert sweep_orphans(ctx, min_age_seconds=3600) == 2
    assert not any(p.exists() for p in shards)
