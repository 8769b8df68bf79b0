"""A request's working files (sort runs, merged ids, bucket groups, staged labels) stay in its local
scratch folder; the shared store gets only what outlives the request.

Recorded on the S3 store (moto): every key written through ``ctx.store`` by an ids upload, a
labels upload and a release must be a set's ids or labels object, a ledger object or the message.
Shown red by planting bugs (see the commit message): sort runs written to ``ctx.store`` again
put ``runs/run-…`` keys there; a scratch folder not removed in ``finally`` is left by a refused
upload.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.s3_server import S3Server

from labeldp.errors import LabelDPError
from labeldp.storage import ObjectStore
from labels_party.context import SCRATCH_PREFIX, LabelsContext
from labels_party.label_sets import set_ids
from labels_party.sweep import sweep_scratch
from labels_party.uploads import upload_labels

from .test_external_sort import _chunks, _empty_set, _ids
from .test_ledger import make_ctx, new_domain, release

DURABLE = re.compile(r"label_sets/[^/]+/(ids-[0-9a-f]+\.arrow|labels/[^/]+)|ledger/.+|messages/.+")


class _Recording(ObjectStore):
    """The context's own store, noting every key written to it."""

    written: list[str]

    @contextmanager
    def open_output_stream(self, key: str) -> Iterator[Any]:
        self.written.append(key)
        with super().open_output_stream(key) as out:
            yield out

    def copy(self, source: str, key: str) -> str:
        self.written.append(key)
        return super().copy(source, key)


def _recording(ctx: LabelsContext) -> _Recording:
    store = _Recording.__new__(_Recording)
    store.__dict__.update(ctx.store.__dict__)
    store.written = []
    ctx.__dict__["store"] = store  # the context's cached store, now noting its writes
    return store


def _s3_ctx(s3_server: S3Server, tmp_path: Path) -> LabelsContext:
    options = s3_server.options()
    return make_ctx(
        f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path, storage_url=s3_server.url(),
        storage_s3_endpoint=s3_server.endpoint, storage_s3_region="us-east-1",
        storage_s3_access_key=options["access_key"], storage_s3_secret_key=options["secret_key"],
    )


def test_only_durable_objects_reach_the_shared_store(s3_server: S3Server, tmp_path: Path) -> None:
    ctx = _s3_ctx(s3_server, tmp_path)
    new_domain(ctx, "d", epsilon=4)
    store = _recording(ctx)
    ids = _ids(3000, seed=7)
    ls = _empty_set(ctx, "d")
    set_ids(ctx, ls, _chunks(ids), None, run_rows=300, group_ids=400)  # 10 runs, several groups
    csv = tmp_path / "labels.csv"
    csv.write_text("id,label\n" + "".join(f"{i},{k % 10}\n" for k, i in enumerate(ids)))
    upload_labels(ctx, ls, csv, "text/csv", validate_only=False, claim=None, run_rows=300, batch_rows=16)
    release(ctx, ls, 1)
    assert store.written, "nothing recorded"
    assert [k for k in store.written if not DURABLE.fullmatch(k)] == []
    assert any(k.startswith("ledger/") for k in store.written)
    assert not list(ctx.scratch_dir.iterdir())  # every request removed its folder


@pytest.mark.parametrize("fault", ["duplicate", "missing_set"])
def test_a_refused_upload_leaves_no_scratch_folder(tmp_path: Path, fault: str) -> None:
    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path, scratch_dir=str(tmp_path / "own-scratch"))
    new_domain(ctx, "d", epsilon=1)
    ids = _ids(2000, seed=8)
    ls = _empty_set(ctx, "d") if fault == "duplicate" else "ls_missing"
    if fault == "duplicate":
        ids += ids[3:40:3]
    with pytest.raises(LabelDPError) as refused:
        set_ids(ctx, ls, _chunks(ids), None, run_rows=250, group_ids=300)
    assert refused.value.code == {"duplicate": "duplicate_ids", "missing_set": "label_set_not_found"}[fault]
    assert ctx.scratch_dir == tmp_path / "own-scratch" and ctx.scratch_dir.exists()
    assert list(ctx.scratch_dir.iterdir()) == []


def test_the_sweep_removes_only_a_crashed_requests_old_scratch(tmp_path: Path) -> None:
    root = tmp_path / "scratch"
    old, live, other = root / f"{SCRATCH_PREFIX}old", root / f"{SCRATCH_PREFIX}live", root / "not-a-request"
    for folder in (old, live, other):
        (folder / "runs").mkdir(parents=True)
        (folder / "runs" / "run-0").write_bytes(b"x")
    day_ago = time.time() - 2 * 86400
    for path in (old, old / "runs", old / "runs" / "run-0", other, live):
        os.utime(path, (day_ago, day_ago))  # the live one's folder is old, but a file in it is fresh
    assert sweep_scratch(root, time.time() - 86400) == 1
    assert sorted(p.name for p in root.iterdir()) == sorted([live.name, other.name])
