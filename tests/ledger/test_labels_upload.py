"""A labels upload sorted externally and merge-joined with the set's stored id chunks stores and refuses
exactly what the in-memory check (``parse_label_upload`` + ``row_errors``) does.

The stored id chunks, the sort's runs and its ranges are a few dozen rows here, so a few
thousand rows span many of each. Shown red by planting bugs (see the commit message).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from tests.s3_server import S3Server

from labeldp.errors import LabelDPError
from labels_party import id_lookup
from labels_party.columnar import put_array
from labels_party.context import LabelsContext, label_set_prefix
from labels_party.label_sets import (
    current_ids_key,
    current_labels_key,
    iter_labelled_chunks,
    labels_prefix,
    load_label_set,
    read_ids,
    read_labels,
    set_ids,
)
from labels_party.store import LabelSetRow
from labels_party.uploads import LabelRules, parse_label_upload, row_errors, upload_labels

from .test_external_sort import _chunks, _empty_set, _ids
from .test_ledger import make_ctx, new_domain

SMALL = {"run_rows": 300, "batch_rows": 16}


@pytest.fixture(autouse=True)
def _small_id_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(id_lookup, "ID_CHUNK_ROWS", 97)  # the set's ids stored in chunks of 97


def _set(ctx: LabelsContext, ids: list[str]) -> str:
    label_set_id = _empty_set(ctx, "d")
    set_ids(ctx, label_set_id, _chunks(ids), None, run_rows=500)
    return label_set_id


def _row(ctx: LabelsContext, label_set_id: str) -> LabelSetRow:
    with ctx.sessions() as s:
        row = load_label_set(s, label_set_id)
        s.expunge(row)
        return row


def _csv(tmp_path: Path, rows: list[tuple[str, str]], name: str = "u.csv") -> Path:
    path = tmp_path / name
    path.write_text("id,label\n" + "".join(f"{i},{v}\n" for i, v in rows))
    return path


def _reference(ctx: LabelsContext, label_set_id: str, path: Path) -> tuple[str, object]:
    """What the in-memory check answers: ("ok", the new labels) or ("error", (message, details))."""
    row = _row(ctx, label_set_id)
    upload = parse_label_upload(path, "text/csv", LabelRules("real", 0.0, 10.0))
    labels = read_labels(ctx, row)
    positions, errors, n_bad = row_errors(upload, read_ids(ctx, row).column("id"), ~np.isnan(labels))
    if n_bad:
        return "error", (f"{n_bad} of {len(upload.ids)} rows are invalid; nothing was stored", errors)
    labels[positions] = upload.values
    return "ok", labels


def _streamed(ctx: LabelsContext, label_set_id: str, path: Path, validate_only: bool = False) -> tuple[str, object]:
    try:
        upload_labels(ctx, label_set_id, path, "text/csv", validate_only=validate_only, claim=None, **SMALL)
    except LabelDPError as exc:
        assert exc.code == "invalid_labels"
        return "error", (exc.message, exc.details)
    return "ok", read_labels(ctx, _row(ctx, label_set_id))


def _same(a: tuple[str, object], b: tuple[str, object]) -> None:
    assert a[0] == b[0]
    if a[0] == "ok":
        assert np.array_equal(a[1], b[1], equal_nan=True)  # type: ignore[arg-type]
    else:
        assert a[1] == b[1]


def _no_work_left(ctx: LabelsContext, label_set_id: str) -> None:
    assert not [k for k in ctx.store.list(label_set_prefix(label_set_id)) if "/upload-" in k]


def _multi_chunk_uploads(ctx: LabelsContext, tmp_path: Path) -> str:
    new_domain(ctx, "d", 5)
    ids = _ids(3000, seed=7)
    ls = _set(ctx, ids)
    row = _row(ctx, ls)
    assert len(read_ids(ctx, row).column("id").chunks) > 25  # the set's ids span many stored chunks
    rng = np.random.default_rng(8)
    values = rng.uniform(0, 10, len(ids))
    first = [(ids[k], repr(float(values[k]))) for k in rng.permutation(2000)]
    reference = _reference(ctx, ls, _csv(tmp_path, first))
    assert reference[0] == "ok"
    _same(_streamed(ctx, ls, _csv(tmp_path, first)), reference)
    assert _row(ctx, ls).labeled == 2000 and current_labels_key(_row(ctx, ls)).endswith(".arrow")
    # every kind of wrong row, more than 100 of them, in random order
    wrong = [(ids[k], "1") for k in range(1500, 1700)]  # already labelled
    wrong += [(ids[2500], "2"), (ids[2500], "3"), (ids[10], "4"), (ids[10], "4")]  # duplicates, one also labelled
    wrong += [("", "1"), ("!below-all", "1"), ("zzzz-after-all", "1"), (ids[2001] + "x", "1")]  # missing, unknown
    wrong += [(ids[k], v) for k, v in zip(range(2100, 2110), ["nan", "11", "-1", "inf", "x"] * 2)]
    rest = [(ids[k], repr(float(values[k]))) for k in range(2200, 3000)]
    second = [(wrong + rest)[k] for k in rng.permutation(len(wrong) + len(rest))]
    path = _csv(tmp_path, second, "second.csv")
    reference = _reference(ctx, ls, path)
    assert reference[0] == "error" and len(reference[1][1]) == 100  # type: ignore[index]
    before = ctx.store.list(labels_prefix(ls))
    _same(_streamed(ctx, ls, path), reference)
    assert ctx.store.list(labels_prefix(ls)) == before  # a refused upload leaves no labels object
    # the rest, valid: validated only first (nothing written), then stored
    path = _csv(tmp_path, [rest[k] for k in rng.permutation(len(rest))], "rest.csv")
    reference = _reference(ctx, ls, path)
    assert _streamed(ctx, ls, path, validate_only=True)[0] == "ok"
    assert ctx.store.list(labels_prefix(ls)) == before and _row(ctx, ls).labeled == 2000
    _same(_streamed(ctx, ls, path), reference)
    _no_work_left(ctx, ls)
    chunks = list(iter_labelled_chunks(ctx, _row(ctx, ls)))
    assert len(chunks) > 25
    got = {i: v for c_ids, c_labels in chunks for i, v in zip(c_ids.to_pylist(), c_labels.tolist())}
    want = {ids[k]: float(values[k]) for k in [*range(2000), *range(2200, 3000)]}
    assert {i: v for i, v in got.items() if not np.isnan(v)} == want
    return ls


def test_a_streamed_labels_upload_stores_and_refuses_what_the_in_memory_check_does(tmp_path: Path) -> None:
    _multi_chunk_uploads(make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path), tmp_path)


def test_the_streamed_labels_upload_is_the_same_on_an_s3_store(s3_server: S3Server, tmp_path: Path) -> None:
    options = {
        "storage_url": s3_server.url(), "storage_s3_endpoint": s3_server.endpoint, "storage_s3_region": "us-east-1",
        "storage_s3_access_key": s3_server.options()["access_key"],
        "storage_s3_secret_key": s3_server.options()["secret_key"],
    }
    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path, **options)
    ls = _multi_chunk_uploads(ctx, tmp_path)
    assert not (ctx.data_dir / "label_sets").exists()
    assert current_labels_key(_row(ctx, ls)) in s3_server.store(options["storage_url"]).list(labels_prefix(ls))


def test_labels_stored_as_one_npy_before_are_read_and_replaced_chunk_by_chunk(tmp_path: Path) -> None:
    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    new_domain(ctx, "d", 5)
    ids = _ids(1000, seed=9)
    ls = _set(ctx, ids)
    order = np.argsort(np.array([i.encode() for i in ids], dtype=object))
    old = np.full(len(ids), np.nan)
    old[:400] = np.arange(400) % 10  # what an upload before this layout stored: one .npy
    key = f"{labels_prefix(ls)}/{hashlib.sha256(old.data).hexdigest()}"
    put_array(ctx.store, key, old)
    with ctx.sessions.begin() as s:
        row = load_label_set(s, ls)
        row.labels_version, row.labels_object, row.labeled = 1, key, 400
    chunks = list(iter_labelled_chunks(ctx, _row(ctx, ls)))
    assert len(chunks) > 5 and np.array_equal(np.concatenate([c for _, c in chunks]), old, equal_nan=True)
    sorted_ids = [ids[k] for k in order]
    path = _csv(tmp_path, [(sorted_ids[k], "7") for k in range(399, 700)])  # one already labelled
    reference = _reference(ctx, ls, path)
    assert reference[0] == "error"
    _same(_streamed(ctx, ls, path), reference)
    path = _csv(tmp_path, [(sorted_ids[k], "7") for k in range(400, 700)], "ok.csv")
    reference = _reference(ctx, ls, path)
    _same(_streamed(ctx, ls, path), reference)
    assert current_labels_key(_row(ctx, ls)).endswith(".arrow")
    _no_work_left(ctx, ls)


def test_a_body_refused_after_some_runs_leaves_nothing_and_a_crashed_ones_work_is_swept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import time

    from labels_party import uploads
    from labels_party.sweep import sweep_orphans

    monkeypatch.setattr(uploads, "CSV_BLOCK_BYTES", 2048)  # ≈ 200 rows a batch: runs are written first

    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    new_domain(ctx, "d", 5)
    ids = _ids(1200, seed=10)
    ls = _set(ctx, ids)
    path = tmp_path / "bad.csv"
    path.write_bytes(b"id,label\n" + b"".join(f"{i},1\n".encode() for i in ids) + b"\xff\xfe,1\n")
    with pytest.raises(LabelDPError) as refused:  # found while parsing, after three runs were written
        upload_labels(ctx, ls, path, "text/csv", validate_only=False, claim=None, **SMALL)
    assert refused.value.details == [{"row": len(ids) + 1, "code": "invalid_id"}]
    with ctx.sessions() as s:
        ids_object = current_ids_key(load_label_set(s, ls))
    assert ctx.store.list(label_set_prefix(ls)) == [ids_object]
    # what a killed upload leaves: swept once a day old, never taken for the set's labels
    prefix = label_set_prefix(ls)
    work = [f"{prefix}/upload-labels-a/runs/run-000000-b", f"{prefix}/upload-labels-a/staged.arrow"]
    live = f"{prefix}/upload-labels-c/staged.arrow"
    for key, age in ((work[0], 90000), (work[1], 90000), (live, 7200)):
        ctx.store.put_bytes(key, b"x")
        os.utime(ctx.data_dir / key, (time.time() - age, time.time() - age))
    assert sweep_orphans(ctx, min_age_seconds=3600) == 2
    assert ctx.store.list(prefix) == [ids_object, live]


_CHILD = r"""
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

from labels_party import id_lookup, uploads
from labels_party.columnar import release_unused_memory
from labels_party.label_sets import set_ids
from tests.ledger.test_external_sort import _empty_set
from tests.ledger.test_ledger import make_ctx, new_domain


def kib(field):
    lines = Path("/proc/self/status").read_text().splitlines()
    return next(int(line.split()[1]) for line in lines if line.startswith(field + ":"))


n, folder = int(sys.argv[1]), Path(sys.argv[2])
id_lookup.ID_CHUNK_ROWS = 1 << 13
pa.set_cpu_count(1)  # fewer allocator arenas: steadier peaks
pa.set_io_thread_count(1)
uploads.CSV_BLOCK_BYTES = 1 << 16
ctx = make_ctx(f"sqlite:///{folder / 'db.sqlite'}", folder)
new_domain(ctx, "d", 5)
ls = _empty_set(ctx, "d")
ids = pa.array(np.char.add("id", np.random.default_rng(n).permutation(n).astype(str)))
set_ids(ctx, ls, [ids], None, run_rows=1 << 14)
labels = pa.table({"id": ids.take(pa.array(np.random.default_rng(1).permutation(n))), "label": np.arange(n) % 10})
pa_csv.write_csv(labels, folder / "labels.csv")
del ids, labels
release_unused_memory()
Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from here
before = kib("VmRSS")
uploads.upload_labels(ctx, ls, folder / "labels.csv", "text/csv", validate_only=False, claim=None,
                      run_rows=1 << 15, batch_rows=1 << 8)
print(kib("VmHWM") - before)
"""


def _upload_peak_kib(n: int, folder: Path) -> int:
    """The labels upload's peak resident memory over the process's size before it, in a fresh process."""
    import os
    import subprocess
    import sys

    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(n), str(folder)], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.split()[-1])


def test_the_labels_uploads_peak_memory_does_not_grow_with_its_rows(tmp_path: Path) -> None:
    # Runs of 2¹⁵ rows, ranges of a few 2⁸-row batches, stored id chunks of 2¹³ ids and CSV blocks
    # of 64 KiB: at 5·10⁵ rows everything spans many of each. Measured: 1–7 MB more at 5·10⁵ than
    # at 5·10⁴ (allocator noise: ± 3 MB between runs of one n); holding every row, as the upload
    # did before (≈ 63 B a row here), is ≈ 28 MB more and fails the bound.
    small = _upload_peak_kib(50_000, tmp_path / "small")
    large = _upload_peak_kib(500_000, tmp_path / "large")
    assert large - small < 12 * 1024, (small, large)
